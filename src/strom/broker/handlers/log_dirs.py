"""DescribeLogDirs, AlterReplicaLogDirs and DescribeProducers: what this broker's local logs
hold, and in which of its log dirs.

They concern replicas on this broker only (an admin client asks each broker, or a partition's
leader), from the partition logs themselves: sizes, the high watermark and the producer state
kept for idempotence and transactions (`strom.storage.producer_state`). A partition moving to
another log dir (`LogManager.alter_log_dir`) shows its copy there as Kafka's future replica.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from strom.broker.authz import Op, Res, allowed, cluster_allowed, cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import (
    AlterReplicaLogDirsRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
)
from strom.broker.router import handles
from strom.cluster.image import METADATA_TOPIC
from strom.cluster.validation import check_topic_name
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.errors import StorageError

# Kafka's message for UNKNOWN_TOPIC_OR_PARTITION, which it sends with a topic it does not know
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


# -- DescribeProducers ----------------------------------------------------------------------


@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
def describe_producers(broker: Broker, ctx: RequestContext,
                       request: DescribeProducersRequest) -> dict[str, Any]:
    """As Kafka, any replica answers (its own log's state), each topic and partition as often as
    the request names it; a broker holding no replica says NOT_LEADER_OR_FOLLOWER."""
    topics = []
    for t in request.topics:
        error = _topic_error(broker, t.name)
        if broker.authorizer is not None and not allowed(broker, ctx, Op.READ, Res.TOPIC,
                                                          t.name):
            error = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
        partitions = [
            _partition_error(index, *error) if error is not None
            else _producers(broker, t.name, index)
            for index in t.partition_indexes]
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


def _topic_error(broker: Broker, name: str) -> tuple[int, str | None] | None:
    try:
        check_topic_name(name)
    except KafkaError as exc:
        return exc.code, exc.message
    if name not in broker.image.topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_MESSAGE
    return None


def _partition_error(index: int, code: int, message: str | None = None) -> dict[str, Any]:
    return {"partition_index": index, "error_code": code, "error_message": message,
            "active_producers": []}


def _producers(broker: Broker, topic: str, index: int) -> dict[str, Any]:
    state = broker.image.topics[topic].partitions.get(index)
    if state is None:
        return _partition_error(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    log = broker.partitions.get(topic, index)
    if log is not None and log.offline is not None:  # its log dir failed (as Kafka answers)
        return _partition_error(index, ErrorCode.KAFKA_STORAGE_ERROR)
    if log is None or log.closed:
        return _partition_error(index, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    producers = log.producer_state.producers
    return {"partition_index": index, "error_code": ErrorCode.NONE, "error_message": None,
            "active_producers": [
                {"producer_id": pid, "producer_epoch": e.epoch, "last_sequence": e.last_seq,
                 "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                 "current_txn_start_offset": e.txn_first_offset}
                for pid, e in sorted(producers.items())]}


# -- DescribeLogDirs --------------------------------------------------------------------------


@handles(ApiKey.DESCRIBE_LOG_DIRS, 1, 5)
@requires(Op.DESCRIBE, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
def describe_log_dirs(broker: Broker, ctx: RequestContext,
                      request: DescribeLogDirsRequest) -> dict[str, Any]:
    """Every configured log dir, with the partitions it holds that the request names (null
    topics: all of them; an empty list: none). Internal topics are included, the metadata log
    is not (Kafka keeps it outside its log manager)."""
    wanted = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {}
    moves = broker.logs.moves()
    for log in broker.logs.logs():
        key = (log.topic, log.partition)
        if log.closed or log.topic == METADATA_TOPIC or (wanted is not None and key not in wanted):
            continue
        d = broker.logs.dir_of(*key)
        if d is None:
            continue
        by_dir.setdefault(d, {}).setdefault(log.topic, []).append({
            "partition_index": log.partition, "partition_size": log.size_bytes(),
            "offset_lag": max(log.high_watermark - log.log_end_offset, 0),
            "is_future_key": False})
        move = moves.get(key)
        if move is not None:  # its copy in the target log dir, as Kafka's future replica
            by_dir.setdefault(move.target, {}).setdefault(log.topic, []).append({
                "partition_index": log.partition, "partition_size": move.copy.size,
                "offset_lag": move.lag(log), "is_future_key": True})
    offline = broker.logs.offline_dirs
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "results": [
        _dir_result(d, by_dir.get(d, {}), d in offline) for d in broker.logs.log_dirs]}


def _dir_result(d: Path, topics: dict[str, list[dict[str, Any]]],
                offline: bool) -> dict[str, Any]:
    path = str(d.absolute())
    if offline:
        return {"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": [],
                "total_bytes": -1, "usable_bytes": -1, "is_cordoned": False}
    try:
        fs = os.statvfs(d)
    except OSError:
        return {"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": [],
                "total_bytes": -1, "usable_bytes": -1, "is_cordoned": False}
    return {
        "error_code": ErrorCode.NONE, "log_dir": path,
        "topics": [{"name": name, "partitions": sorted(parts, key=lambda p: p["partition_index"])}
                   for name, parts in sorted(topics.items())],
        # as Java's FileStore: total and usable (unprivileged free) space of the volume
        "total_bytes": fs.f_blocks * fs.f_frsize, "usable_bytes": fs.f_bavail * fs.f_frsize,
        "is_cordoned": False}


# -- AlterReplicaLogDirs ----------------------------------------------------------------------


@handles(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2)
def alter_replica_log_dirs(broker: Broker, ctx: RequestContext,
                           request: AlterReplicaLogDirsRequest) -> dict[str, Any]:
    """Move each named partition's log to the named log dir, as Kafka's
    ReplicaManager.alterReplicaLogDirs: NONE once the move has begun (it runs in the
    background; DescribeLogDirs shows its progress) or when the log is there already. A
    partition named under several dirs goes to the last one. Refused (ALTER on the cluster),
    every partition answers CLUSTER_AUTHORIZATION_FAILED."""
    wanted: dict[tuple[str, int], str] = {}
    for d in request.dirs:
        for t in d.topics:
            for index in t.partitions:
                wanted[(t.name, index)] = d.path
    permitted = cluster_allowed(broker, ctx, Op.ALTER)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), path in wanted.items():
        code = _alter_log_dir(broker, topic, index, path) if permitted else \
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"throttle_time": 0, "results": [{"topic_name": topic, "partitions": partitions}
                                            for topic, partitions in by_topic.items()]}


def _alter_log_dir(broker: Broker, topic: str, index: int, path: str) -> int:
    """One partition's error code; a broker holding no replica of a known partition answers
    REPLICA_NOT_AVAILABLE (Kafka keeps that code for this API), an unknown one
    UNKNOWN_TOPIC_OR_PARTITION. The metadata log is no partition to move (Kafka keeps it
    outside its log manager)."""
    if topic == METADATA_TOPIC:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        if broker.logs.alter_log_dir(topic, index, path):
            return ErrorCode.NONE
    except StorageError as exc:
        return exc.error_code
    known = broker.image.topics.get(topic)
    if known is not None and index in known.partitions:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
