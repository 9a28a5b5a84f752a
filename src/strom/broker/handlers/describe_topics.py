"""DescribeTopicPartitions (KIP-966): Kafka 4's topic description, in pages of partitions.

The Java Admin's ``describeTopics`` uses it whenever the broker advertises it. Topics are
answered in name order from the request's cursor on; a page ends after the request's partition
limit (capped by ``max.request.partition.size.limit``) and names where the next one starts. The
partitions are those Metadata shows (`metadata.partition_metadata`), with empty eligible leader
replica lists: Strom has no ELR (KIP-966's unclean-recovery part).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from strom.broker.authz import Op, Res, allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.metadata import partition_metadata
from strom.broker.request_types import DescribeTopicPartitionsRequest
from strom.broker.router import handles
from strom.cluster.image import INTERNAL_TOPICS, ZERO_UUID, MetadataImage, TopicState
from strom.cluster.validation import check_topic_name
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

# Kafka's AclOperation codes a topic supports (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE,
# DESCRIBE_CONFIGS, ALTER_CONFIGS) as a bit field: Strom has no authorizer, so every client may
# do all of them, which is what Kafka answers without an authorizer.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
def describe_topic_partitions(broker: Broker, ctx: RequestContext,
                              request: DescribeTopicPartitionsRequest) -> dict[str, Any]:
    names = [t.name for t in request.topics]
    cursor = request.cursor
    if "" in names:  # Kafka 4.4 fails such a request with an unexpected error
        return _failed(names, ErrorCode.UNKNOWN_SERVER_ERROR)
    if cursor is not None and cursor.partition_index < 0:
        return _failed(names, ErrorCode.INVALID_REQUEST)
    after = cursor.topic_name if cursor is not None else ""
    every = not names  # an empty list asks for every topic (and never for a missing one)
    if every:
        wanted = _ORDER.names_from(broker.image, after)
    else:
        wanted = [name for name in sorted(set(names)) if name >= after]
    if cursor is not None and not every and cursor.topic_name not in wanted:
        return _failed(names, ErrorCode.INVALID_REQUEST)  # the cursor's topic must be named
    cap = broker.config.get("max.request.partition.size.limit")
    remaining = max(1, min(cap, request.response_partition_limit))  # as Kafka 4.4: 0 gives 1
    topics: list[dict[str, Any]] = []
    next_cursor = None
    may = ((lambda n: allowed(broker, ctx, Op.DESCRIBE, Res.TOPIC, n))
           if broker.authorizer is not None else None)
    for name in wanted:
        if remaining <= 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if may is not None and not may(name):  # ACLs: left out, or refused when named
            if not every:
                topics.append({**_missing(name),
                               "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
            continue
        topic = broker.image.topics.get(name)
        if topic is None:
            if not every:
                topics.append(_missing(name))
            continue
        first = cursor.partition_index if cursor is not None and name == after else 0
        entry, stopped_at = _topic(broker, topic, first, remaining)
        topics.append(entry)
        if stopped_at is not None:
            next_cursor = {"topic_name": name, "partition_index": stopped_at}
            break
        remaining -= len(entry["partitions"])
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}


class _NameOrder:
    """The image's topic names in order, sorted again only after the image changed: paging
    through 100,000 topics would otherwise sort them all for every page (~70 ms each)."""

    __slots__ = ("image", "names", "version")

    def __init__(self) -> None:
        self.image: MetadataImage | None = None  # held, so identity means the same image
        self.version = -1
        self.names: list[str] = []

    def names_from(self, image: MetadataImage, first: str) -> list[str]:
        if self.image is not image or self.version != image.version:
            self.image, self.version, self.names = image, image.version, sorted(image.topics)
        return self.names[bisect_left(self.names, first):]


_ORDER = _NameOrder()


def _topic(broker: Broker, topic: TopicState, first: int,
           limit: int) -> tuple[dict[str, Any], int | None]:
    """The topic's partitions from ``first`` on, at most ``limit`` of them, and the index of the
    first one left out (None when none is)."""
    count = len(topic.partitions)
    end = min(count, first + limit)
    live = broker.image.brokers
    check = broker.image.offline_dirs_check()
    partitions = []
    for index in range(first, end):
        state = topic.partitions.get(index)
        if state is None:
            continue
        p = partition_metadata(state, live, check)
        partitions.append({
            "error_code": ErrorCode.NONE, "partition_index": p.partition_index,
            "leader_id": p.leader_id, "leader_epoch": p.leader_epoch,
            "replica_nodes": p.replica_nodes, "isr_nodes": p.isr_nodes,
            "eligible_leader_replicas": [], "last_known_elr": [],
            "offline_replicas": p.offline_replicas})
    entry = {"error_code": ErrorCode.NONE, "name": topic.name, "topic_id": topic.topic_id,
             "is_internal": topic.internal, "partitions": partitions,
             "topic_authorized_operations": TOPIC_OPERATIONS}
    return entry, (end if end < count else None)


def _missing(name: str) -> dict[str, Any]:
    try:
        check_topic_name(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except KafkaError as exc:
        code = exc.code
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID,
            "is_internal": name in INTERNAL_TOPICS, "partitions": [],
            "topic_authorized_operations": TOPIC_OPERATIONS}


def _failed(names: list[str], code: int) -> dict[str, Any]:
    """Kafka's answer to a request it refuses as a whole: each named topic with the error."""
    return {"throttle_time": 0, "next_cursor": None, "topics": [
        {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": False,
         "partitions": [], "topic_authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS}
        for name in names]}
