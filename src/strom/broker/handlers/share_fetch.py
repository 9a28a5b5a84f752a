"""ShareFetch and ShareAcknowledge (KIP-932): records acquired, acknowledged and released.

A ShareFetch works in the member's share session (`strom.broker.share.sessions`): it first
applies the acknowledgements it carries (piggy-backed), then acquires records from every
partition of the session, up to `MaxRecords` in all, starting at a different partition each
time. With nothing to hand out it waits for new records or released ones until `MaxWaitMs`.
The records go out as the log holds them (whole batches); `AcquiredRecords` says which offsets
of them this member now holds, with their delivery counts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from strom.broker.authz import Op, Res, allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import ShareAcknowledgeRequest, ShareFetchRequest
from strom.broker.router import handles
from strom.broker.share.manager import Fetched
from strom.broker.share.partition import AckType
from strom.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

RECORD_LIMIT_MODE = 1  # ShareAcquireMode: exactly MaxRecords, not whole batches
TopicPartition = tuple[uuid.UUID, int]
Acks = dict[TopicPartition, list[tuple[int, int, list[int]]]]


def _error(code: int, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": int(code), "error_message": message,
            "acquisition_lock_timeout": 0, "responses": [], "node_endpoints": []}


def _acks(topics: Iterable[Any]) -> Acks:
    out: Acks = {}
    for t in topics:
        for p in t.partitions:
            batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                       for b in p.acknowledgement_batches]
            if batches:
                out.setdefault((t.topic_id, p.partition_index), []).extend(batches)
    return out


def _refused_topics(broker: Broker, ctx: RequestContext, ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """Topics the member may not READ (or that do not exist: answered per partition)."""
    refused = set()
    for topic_id in ids:
        topic = broker.image.topics_by_id.get(topic_id)
        if topic is not None and not allowed(broker, ctx, Op.READ, Res.TOPIC, topic.name):
            refused.add(topic_id)
    return refused


class _Answer:
    """Per-partition results, in Kafka's response shape."""

    def __init__(self) -> None:
        self.parts: dict[TopicPartition, dict[str, Any]] = {}

    def part(self, tp: TopicPartition) -> dict[str, Any]:
        entry = self.parts.get(tp)
        if entry is None:
            entry = {"partition_index": tp[1], "error_code": 0, "error_message": None,
                     "acknowledge_error_code": 0, "acknowledge_error_message": None,
                     "current_leader": {"leader_id": -1, "leader_epoch": -1},
                     "records": b"", "acquired_records": []}
            self.parts[tp] = entry
        return entry

    def topics(self, fetch: bool) -> list[dict[str, Any]]:
        by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for (topic_id, _), entry in self.parts.items():
            if not fetch:
                entry = {k: entry[k] for k in ("partition_index", "error_code", "error_message",
                                               "current_leader")}
            by_topic.setdefault(topic_id, []).append(entry)
        return [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]


async def _acknowledge(broker: Broker, group_id: str, member_id: str, acks: Acks,
                       refused: set[uuid.UUID], answer: _Answer, fetch: bool) -> None:
    shares = broker.share_partitions
    for tp, batches in acks.items():
        entry = answer.part(tp)
        key = "acknowledge_error_code" if fetch else "error_code"
        message = "acknowledge_error_message" if fetch else "error_message"
        if tp[0] in refused:
            entry[key] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            continue
        try:
            held = await shares.held(group_id, tp[0], tp[1])
            entry[key] = await shares.acknowledge(held, member_id, batches)
        except KafkaError as exc:
            entry[key], entry[message] = int(exc.code), exc.message


def _release(broker: Broker, group_id: str, member_id: str) -> None:
    """The member's session here ended: its records here are released, and the group's share
    partitions forgotten when it was the group's last session here."""
    broker.share_partitions.release_member(group_id, member_id,
                                           group_left=not broker.share_sessions.has_group(group_id))


def _on_disconnect(broker: Broker, group_id: str, member_id: str,
                   connection_id: int) -> Callable[[], None]:
    """As Kafka: when the connection that opened a share session closes, the session ends and
    the records its member holds here are released at once (not after their locks expire)."""
    def closed() -> None:
        if broker.share_sessions.close_connection(group_id, member_id, connection_id):
            _release(broker, group_id, member_id)

    return closed


def _settings_lock_ms(broker: Broker, group_id: str) -> int:
    return broker.share_partitions.settings(group_id).partition.lock_duration_ms


@handles(ApiKey.SHARE_FETCH, 1, 2)
async def share_fetch(broker: Broker, ctx: RequestContext,
                      request: ShareFetchRequest) -> dict[str, Any]:
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not allowed(broker, ctx, Op.READ, Res.GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not member_id:
        return _error(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    named = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    forget = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    epoch = request.share_session_epoch
    try:
        session = broker.share_sessions.for_fetch(group_id, member_id, epoch, named, forget,
                                                  ctx.connection_id)
    except KafkaError as exc:
        return _error(exc.code, exc.message)
    if epoch == INITIAL_EPOCH:
        ctx.on_close.append(_on_disconnect(broker, group_id, member_id, ctx.connection_id))
    acks = _acks(request.topics)
    refused = _refused_topics(broker, ctx, {tp[0] for tp in (*session.partitions, *acks)})
    answer = _Answer()
    await _acknowledge(broker, group_id, member_id, acks, refused, answer, fetch=True)
    if epoch == FINAL_EPOCH:
        broker.share_sessions.close(group_id, member_id)
        _release(broker, group_id, member_id)
    else:
        await _fetch(broker, session, request, refused, answer)
    return {"throttle_time": _fetch_throttle(broker, ctx, answer), "error_code": 0,
            "error_message": None, "acquisition_lock_timeout": _settings_lock_ms(broker, group_id),
            "responses": answer.topics(fetch=True), "node_endpoints": []}


def _fetch_throttle(broker: Broker, ctx: RequestContext, answer: _Answer) -> int:
    """consumer_byte_rate counts ShareFetch's records as Fetch's (as in Kafka): a client over
    its quota is told the throttle time, and its connection reads nothing more for that long.
    Kafka answers a throttled ShareFetch empty, leaving what it acquired locked until the lock
    expires; Strom hands those records out with the throttle time instead."""
    if not broker.image.client_quotas:
        return 0
    size = sum(len(entry["records"]) for entry in answer.parts.values())
    throttle = broker.quotas.fetch.record(ctx.principal.name, ctx.client_id or "", size)
    ctx.throttle.add(throttle)
    return throttle


async def _fetch(broker: Broker, session: ShareSession, request: ShareFetchRequest,
                 refused: set[uuid.UUID], answer: _Answer) -> None:
    shares = broker.share_partitions
    deadline = time.monotonic() + max(request.max_wait, 0) / 1000
    max_records = request.max_records if request.max_records > 0 else 500
    max_bytes = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    record_limit = request.share_acquire_mode == RECORD_LIMIT_MODE
    while True:
        got = 0
        total_bytes = 0
        waiting_on = []
        for tp in session.ordered():
            if got >= max_records or total_bytes >= max_bytes:
                break
            if tp[0] in refused:
                answer.part(tp)["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            try:
                held = await shares.held(session.group_id, tp[0], tp[1])
            except KafkaError as exc:
                entry = answer.part(tp)
                entry["error_code"], entry["error_message"] = int(exc.code), exc.message
                continue
            fetched: Fetched = shares.acquire(held, session.member_id, max_records - got,
                                              max_bytes - total_bytes, record_limit)
            waiting_on.append((held.topic, tp[1]))
            if fetched.error:
                entry = answer.part(tp)
                entry["error_code"], entry["error_message"] = fetched.error, fetched.error_message
                continue
            if fetched.acquired:
                try:
                    await shares.write_start(held)
                except KafkaError as exc:  # not handed out: the records go back
                    held.partition.acknowledge(session.member_id, [
                        (r.first_offset, r.last_offset, [AckType.RELEASE])
                        for r in fetched.acquired], shares.now_ms())
                    entry = answer.part(tp)
                    entry["error_code"], entry["error_message"] = int(exc.code), exc.message
                    continue
                entry = answer.part(tp)
                entry["records"] = fetched.records
                entry["acquired_records"] = [
                    {"first_offset": a.first_offset, "last_offset": a.last_offset,
                     "delivery_count": a.delivery_count} for a in fetched.acquired]
                got += sum(a.last_offset - a.first_offset + 1 for a in fetched.acquired)
                total_bytes += len(fetched.records)
        remaining = deadline - time.monotonic()
        errors = any(e["error_code"] for e in answer.parts.values())
        if got or errors or remaining <= 0 or not waiting_on:
            return
        await broker.partitions.waiters.wait_any(waiting_on, remaining)


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def share_acknowledge(broker: Broker, ctx: RequestContext,
                            request: ShareAcknowledgeRequest) -> dict[str, Any]:
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not allowed(broker, ctx, Op.READ, Res.GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    epoch = request.share_session_epoch
    try:
        broker.share_sessions.for_acknowledge(group_id, member_id, epoch)
    except KafkaError as exc:
        return _error(exc.code, exc.message)
    acks = _acks(request.topics)
    refused = _refused_topics(broker, ctx, {tp[0] for tp in acks})
    answer = _Answer()
    await _acknowledge(broker, group_id, member_id, acks, refused, answer, fetch=False)
    if epoch == FINAL_EPOCH:
        broker.share_sessions.close(group_id, member_id)
        _release(broker, group_id, member_id)
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout": _settings_lock_ms(broker, group_id),
            "responses": answer.topics(fetch=False), "node_endpoints": []}
