"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from strom.broker.authz import Op, Res, allowed, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.fetch import check_leader_epoch
from strom.broker.request_types import (
    DeleteRecordsRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from strom.broker.router import handles
from strom.cluster.image import INTERNAL_TOPICS
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import AclOperation
from strom.storage.errors import StorageError

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = (
    -1, -2, -3, -4, -5, -6)
# the first ListOffsets version that may ask for each special timestamp (Kafka's
# timestampMinSupportedVersion); an earlier version, or an unknown negative one, is answered
# UNSUPPORTED_VERSION before the partition is even looked up
TIMESTAMP_MIN_VERSION = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8,
                         LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}
READ_COMMITTED = 1
DEBUG_REPLICA_ID = -2  # Kafka's ListOffsets from a tool that may ask any replica


def _each_partition(broker: Broker, topics: Any, name_attr: str, index_attr: str,
                    fn: Callable[[Any, Any, Any, dict[str, Any]], None], *,
                    reject_duplicates: bool = False,
                    any_replica: bool = False,
                    precheck: Callable[[Any], int] | None = None,
                    permitted: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """Resolve every (topic, partition) of a request to its log; fn fills the partition result.
    Only the leader answers, unless ``any_replica`` (Kafka's debug ListOffsets, replica id -2).
    ``precheck`` gives an error for a partition request before its partition is looked up;
    a topic ``permitted`` refuses (ACLs) is TOPIC_AUTHORIZATION_FAILED, whether it exists or
    not."""
    seen: Counter[tuple[str, int]] = Counter(
        (getattr(t, name_attr), getattr(p, index_attr)) for t in topics for p in t.partitions)
    out = []
    for t in topics:
        name = getattr(t, name_attr)
        topic = broker.image.topics.get(name)
        refused = permitted is not None and not permitted(name)
        results = []
        for p in t.partitions:
            index = getattr(p, index_attr)
            result: dict[str, Any] = {index_attr: index, "error_code": 0}
            state = topic.partitions.get(index) if topic is not None else None
            log = broker.partitions.get(name, index) if state is not None else None
            if refused:
                result["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif reject_duplicates and seen[(name, index)] > 1:
                result["error_code"] = ErrorCode.INVALID_REQUEST  # as Kafka: duplicates are ambiguous
            elif precheck is not None and (early := precheck(p)):
                result["error_code"] = early
            elif state is None or log is None:  # no replica here: NOT_LEADER (as Kafka)
                result["error_code"] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if state is None
                                        else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif state.leader != broker.broker_id and not any_replica:
                result["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif log.offline is not None:  # its log dir failed: offsets in memory may be stale
                result["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                try:
                    fn(p, state, log, result)
                except StorageError as exc:
                    result["error_code"] = exc.error_code
            results.append(result)
        out.append({name_attr: name, "partitions": results})
    return out


@handles(ApiKey.LIST_OFFSETS, 1, 11)
def list_offsets(broker: Broker, ctx: RequestContext,
                 request: ListOffsetsRequest) -> dict[str, Any]:
    committed = request.isolation_level == READ_COMMITTED
    replica_id = request.replica_id
    from_replica = replica_id >= 0
    version = ctx.api_version

    def unsupported(p: Any) -> int:
        ts = p.timestamp
        if ts >= 0 or TIMESTAMP_MIN_VERSION.get(ts, 1 << 15) <= version:
            return ErrorCode.NONE
        return ErrorCode.UNSUPPORTED_VERSION

    def lookup(p: Any, state: Any, log: Any, result: dict[str, Any]) -> None:
        result.update(timestamp=-1, offset=-1, leader_epoch=-1)
        error = check_leader_epoch(p.current_leader_epoch, state.leader_epoch)
        if error:
            result["error_code"] = error
            return
        ts = p.timestamp
        if ts == LATEST and from_replica:  # a follower resetting itself wants the log end
            result.update(offset=log.log_end_offset, leader_epoch=state.leader_epoch)
        elif ts == LATEST:
            offset = log.last_stable_offset if committed else log.high_watermark
            result.update(offset=offset, leader_epoch=state.leader_epoch)
        elif ts in (EARLIEST, EARLIEST_LOCAL):
            result.update(offset=log.log_start_offset, leader_epoch=state.leader_epoch)
        elif ts == MAX_TIMESTAMP:
            found = log.max_timestamp_offset()
            if found is not None:
                result.update(offset=found[0], timestamp=found[1], leader_epoch=state.leader_epoch)
        elif ts < 0:  # LATEST_TIERED, EARLIEST_PENDING_UPLOAD: no tiered storage, no offset
            pass
        else:
            found = log.offset_for_timestamp(
                ts, max_offset=log.last_stable_offset if committed else None)
            if found is not None:
                result.update(offset=found[0], timestamp=found[1], leader_epoch=state.leader_epoch)

    return {"throttle_time": 0,
            "topics": _each_partition(broker, request.topics, "name", "partition_index", lookup,
                                      permitted=_may(broker, ctx, Op.DESCRIBE),
                                      reject_duplicates=True,
                                      any_replica=replica_id == DEBUG_REPLICA_ID,
                                      precheck=unsupported)}


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
def offset_for_leader_epoch(broker: Broker, ctx: RequestContext,
                            request: OffsetForLeaderEpochRequest) -> dict[str, Any]:
    def lookup(p: Any, state: Any, log: Any, result: dict[str, Any]) -> None:
        result.update(leader_epoch=-1, end_offset=-1)
        error = check_leader_epoch(p.current_leader_epoch, state.leader_epoch)
        if error:
            result["error_code"] = error
            return
        epoch, end = log.end_offset_for_epoch(p.leader_epoch)
        result.update(leader_epoch=epoch, end_offset=end)

    follower = request.replica_id >= 0  # v3+: a broker asking as a follower
    permitted = (_may_cluster(broker, ctx, Op.CLUSTER_ACTION) if follower
                 else _may(broker, ctx, Op.DESCRIBE))
    return {"throttle_time": 0,
            "topics": _each_partition(broker, request.topics, "topic", "partition", lookup,
                                      permitted=permitted)}


@handles(ApiKey.DELETE_RECORDS, 0, 2)
def delete_records(broker: Broker, ctx: RequestContext,
                   request: DeleteRecordsRequest) -> dict[str, Any]:
    def delete(p: Any, state: Any, log: Any, result: dict[str, Any]) -> None:
        result["low_watermark"] = -1
        if log.topic in INTERNAL_TOPICS:  # as Kafka: committed offsets, transaction states
            result["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
            return
        target = log.high_watermark if p.offset == -1 else p.offset
        if target < 0 or target > log.high_watermark:
            result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            return
        result["low_watermark"] = log.delete_records_before(target)

    return {"throttle_time": 0,
            "topics": _each_partition(broker, request.topics, "name", "partition_index", delete,
                                      permitted=_may(broker, ctx, Op.DELETE))}


def _may(broker: Broker, ctx: RequestContext, op: AclOperation) -> Callable[[str], bool] | None:
    """The ACL check of one operation on a topic (None without an authorizer: no check)."""
    if broker.authorizer is None:
        return None
    return lambda name: allowed(broker, ctx, op, Res.TOPIC, name)


def _may_cluster(broker: Broker, ctx: RequestContext,
                 op: AclOperation) -> Callable[[str], bool] | None:
    if broker.authorizer is None:
        return None
    ok = cluster_allowed(broker, ctx, op)
    return lambda _name: ok
