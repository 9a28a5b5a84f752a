"""The admin side of share groups: DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets (what `kafka-share-groups --describe/--reset-offsets/--delete-offsets`
send), and the share-partition state behind DeleteGroups.

A share group's "offset" on a partition is its share-partition start offset: every record
before it is acknowledged or archived. The group coordinator knows which partitions a group has
state for (`ShareGroup.initialized`); the state itself is read, replaced and deleted through the
share coordinator (`Persister`), and a share partition this broker holds in memory is dropped so
its next fetch reads the new state.
"""

from __future__ import annotations

import uuid
from typing import Any

from strom.broker.authz import Op, Res, allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
)
from strom.broker.router import handles
from strom.coordinator.group.share_state import ShareGroup
from strom.coordinator.share.state import SharePartitionKey
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError


def _topic_id(broker: Broker, name: str) -> uuid.UUID | None:
    topic = broker.image.topics.get(name)
    return topic.topic_id if topic is not None else None


async def _describe_partition(broker: Broker, group: ShareGroup, topic_id: uuid.UUID,
                              partition: int) -> dict[str, Any]:
    out: dict[str, Any] = {"partition_index": partition, "start_offset": -1,
                           "leader_epoch": -1, "lag": -1, "error_code": 0, "error_message": None}
    known = group.initialized.get(topic_id)
    if known is None or partition not in known[1]:
        return out
    try:
        state = await broker.share_persister.read_summary(
            SharePartitionKey(group.group_id, topic_id, partition))
    except KafkaError as exc:
        out.update(error_code=int(exc.code), error_message=exc.message)
        return out
    if state.start_offset < 0:
        return out
    out.update(start_offset=state.start_offset, leader_epoch=state.leader_epoch)
    topic = broker.image.topics_by_id.get(topic_id)
    end = await _latest_offset(broker, topic.name, partition) if topic is not None else None
    if end is not None:  # Kafka's lag: what lies between the start offset and the log end,
        # less the in-flight records already done
        done = max(state.delivery_complete_count, 0)
        out["lag"] = max(0, end - state.start_offset - done)
    return out


async def _latest_offset(broker: Broker, topic: str, partition: int) -> int | None:
    """The partition's high watermark as its leader has it (Kafka's group coordinator asks the
    leaders with ListOffsets): this broker's own when it leads, else the leader's answer."""
    t = broker.image.topics.get(topic)
    state = t.partitions.get(partition) if t is not None else None
    plog = broker.partitions.get(topic, partition)
    if broker.leader_ends is None or (state is not None and state.leader == broker.broker_id):
        return plog.high_watermark if plog is not None else None
    ends = await broker.leader_ends.high_watermarks({(topic, partition)})
    return ends.get((topic, partition))


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def describe_share_group_offsets(broker: Broker, ctx: RequestContext,
                                       request: DescribeShareGroupOffsetsRequest
                                       ) -> dict[str, Any]:
    groups = []
    for g in request.groups:
        entry: dict[str, Any] = {"group_id": g.group_id, "topics": [], "error_code": 0,
                                 "error_message": None}
        groups.append(entry)
        if not allowed(broker, ctx, Op.DESCRIBE, Res.GROUP, g.group_id):
            entry["error_code"] = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            continue
        try:
            group = broker.groups.share.share_group(g.group_id)
        except KafkaError as exc:
            entry.update(error_code=int(exc.code), error_message=exc.message)
            continue
        wanted: list[tuple[str, uuid.UUID | None, list[int]]]
        if g.topics is None:
            wanted = [(name, tid, sorted(ps)) for tid, (name, ps) in group.initialized.items()]
        else:
            wanted = [(t.topic_name, _topic_id(broker, t.topic_name), list(t.partitions))
                      for t in g.topics]
        for name, topic_id, partitions in sorted(wanted, key=lambda w: w[0]):
            if not allowed(broker, ctx, Op.DESCRIBE, Res.TOPIC, name):
                continue  # as Kafka: topics the caller may not see are left out
            if topic_id is None:
                entry["topics"].append({"topic_name": name, "topic_id": uuid.UUID(int=0),
                                        "partitions": [
                    {"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                     "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                     "error_message": None} for p in partitions]})
                continue
            entry["topics"].append({"topic_name": name, "topic_id": topic_id, "partitions": [
                await _describe_partition(broker, group, topic_id, p) for p in partitions]})
    return {"throttle_time": 0, "groups": groups}


def _failed(code: int, message: str | None) -> dict[str, Any]:
    """An Alter/DeleteShareGroupOffsets answer refused as a whole."""
    return {"throttle_time": 0, "error_code": int(code), "error_message": message,
            "responses": []}


def _empty_group(broker: Broker, group_id: str) -> ShareGroup:
    group = broker.groups.share.share_group(group_id)
    if not group.is_empty:
        raise KafkaError(ErrorCode.NON_EMPTY_GROUP,
                         f"The group {group_id} has active members; the offsets of a share "
                         "group can only be changed while it is empty.")
    return group


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def alter_share_group_offsets(broker: Broker, ctx: RequestContext,
                                    request: AlterShareGroupOffsetsRequest) -> dict[str, Any]:
    if not allowed(broker, ctx, Op.READ, Res.GROUP, request.group_id):
        return _failed(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    try:
        group = _empty_group(broker, request.group_id)
    except KafkaError as exc:
        return _failed(exc.code, exc.message)
    responses = []
    for t in request.topics:
        topic = broker.image.topics.get(t.topic_name)
        parts: list[dict[str, Any]] = []
        responses.append({"topic_name": t.topic_name,
                          "topic_id": topic.topic_id if topic else uuid.UUID(int=0),
                          "partitions": parts})
        for p in t.partitions:
            code, message = 0, None
            if topic is None or p.partition_index not in topic.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not allowed(broker, ctx, Op.READ, Res.TOPIC, t.topic_name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif p.start_offset < 0:
                code, message = ErrorCode.INVALID_REQUEST, "The start offset must be >= 0."
            else:
                try:
                    await _reset(broker, group, topic.topic_id, t.topic_name, p.partition_index,
                                 p.start_offset)
                except KafkaError as exc:
                    code, message = exc.code, exc.message
            parts.append({"partition_index": p.partition_index, "error_code": int(code),
                          "error_message": message})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}


async def _reset(broker: Broker, group: ShareGroup, topic_id: uuid.UUID, name: str,
                 partition: int, start_offset: int) -> None:
    key = SharePartitionKey(group.group_id, topic_id, partition)
    current = await broker.share_persister.read_summary(key)
    state_epoch = current.state_epoch + 1 if current.start_offset >= 0 else 0
    await broker.share_persister.initialize(key, state_epoch, start_offset)
    broker.share_partitions.drop(key)
    broker.groups.share.mark_initialized(group.group_id, topic_id, name, {partition})


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def delete_share_group_offsets(broker: Broker, ctx: RequestContext,
                                     request: DeleteShareGroupOffsetsRequest) -> dict[str, Any]:
    if not allowed(broker, ctx, Op.DELETE, Res.GROUP, request.group_id):
        return _failed(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    try:
        group = _empty_group(broker, request.group_id)
    except KafkaError as exc:
        return _failed(exc.code, exc.message)
    responses = []
    for t in request.topics:
        topic_id = _topic_id(broker, t.topic_name)
        entry = {"topic_name": t.topic_name, "topic_id": topic_id or uuid.UUID(int=0),
                 "error_code": 0, "error_message": None}
        responses.append(entry)
        if topic_id is None:
            entry["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        if not allowed(broker, ctx, Op.READ, Res.TOPIC, t.topic_name):
            entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            continue
        try:
            await delete_share_state(broker, group, topic_id)
        except KafkaError as exc:
            entry.update(error_code=int(exc.code), error_message=exc.message)
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}


async def delete_share_state(broker: Broker, group: ShareGroup,
                             topic_id: uuid.UUID | None = None) -> None:
    """Delete the share-partition state of a topic (None: of every topic) of the group."""
    topics = [topic_id] if topic_id is not None else list(group.initialized)
    for tid in topics:
        _, partitions = group.initialized.get(tid, ("", frozenset()))
        for p in sorted(partitions):
            key = SharePartitionKey(group.group_id, tid, p)
            await broker.share_persister.delete(key)
            broker.share_partitions.drop(key)
        broker.groups.share.forget_partitions(group.group_id, tid, None)
