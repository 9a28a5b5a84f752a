"""Produce: validate batch headers, assign offsets, one write per partition, wake fetchers.

Record bytes are never decoded here; the log validates CRC and headers and patches the base
offset in the request buffer before writing it. Idempotent producers are checked by the log's
producer state from the batch headers: a retried batch gets its original offsets back (nothing is
written), a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch INVALID_PRODUCER_EPOCH.

The first transactional batch of a transaction in a partition is verified with the transaction
coordinator first (KIP-890: the partition must have been added to the transaction), so a late
write of a fenced or aborted transaction cannot open a transaction nobody will ever close.

As Kafka, an answer carries an ``error_message`` only with ``record_errors`` (KIP-467: a batch
rejected for some of its records names them, so the client fails only those); other errors
have the code alone.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.broker.authz import Op, Res, allowed
from strom.broker.context import CloseConnection, RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.fetch import Endpoint, leader_hint
from strom.broker.router import handles
from strom.broker.schema_check import Checked, find_invalid, refusal
from strom.broker.schema_dlq import Diversion, divert, divertible
from strom.broker.txn_gate import (
    ProduceVerdicts,
    adds_partitions,
    first_writes,
    produce_codes,
)
from strom.cluster.image import INTERNAL_TOPICS, PartitionState, TopicState
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.produce import (
    ProducePartitionResponse,
    ProduceRequest,
    ProduceTopicResponse,
    decode_produce_request,
    encode_produce_response,
)
from strom.record import (
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    decode_records,
)
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog

logger = logging.getLogger(__name__)

VALID_ACKS = (0, 1, -1)
# append failures Kafka answers without the log start offset (the rest, e.g. INVALID_RECORD or
# OUT_OF_ORDER_SEQUENCE_NUMBER, carry it: an idempotent producer compares it with its last
# acknowledged offset to tell a removed producer state from a real gap, KIP-360)
_NO_LOG_START = frozenset({ErrorCode.CORRUPT_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE,
                           ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.KAFKA_STORAGE_ERROR})
_unpack_i32 = struct.Struct(">i").unpack_from


# Kafka 4 removed Produce v0-2 (KIP-896) but still advertises v0: older librdkafka reads a
# minimum above 0 as "no compression support" (KAFKA-18659). A v0-2 request itself closes the
# connection, as Kafka 4.4 does. v12 only tells the broker the client speaks transactions v2.
FIRST_SUPPORTED = 3
PRODUCE_FIRST_LEADER_HINT = 10  # KIP-951: current_leader and node_endpoints
REGISTRY_SYNC_S = 1.0  # a trailing registry copy catches up this long at most before refusing


@handles(ApiKey.PRODUCE, 0, 13, raw=True)
def produce(broker: Broker, ctx: RequestContext,
            body: memoryview) -> bytes | Awaitable[bytes | None] | None:
    version = ctx.api_version
    if version < FIRST_SUPPORTED:
        logger.info("closing connection %d: Produce v%d was removed in Kafka 4 (KIP-896)",
                    ctx.connection_id, version)
        raise CloseConnection()
    request = decode_produce_request(body, version)
    if broker.partitions.has_pending:  # logs of a large creation not made yet: not on the loop
        wanted = broker.partitions.pending_among(_named_partitions(broker, request))
        if wanted:
            return _produce_after_creating(broker, ctx, request, body, wanted)
    return _produce(broker, ctx, request, body)


def _named_partitions(broker: Broker, request: ProduceRequest) -> Iterator[tuple[str, int]]:
    image = broker.image
    for t in request.topics:
        topic = image.topics_by_id.get(t.topic_id) if t.name is None and \
            t.topic_id is not None else None  # fmt: skip
        name = t.name if t.name is not None else (topic.name if topic is not None else None)
        if name is not None:
            for p in t.partitions:
                yield name, p.index


async def _produce_after_creating(broker: Broker, ctx: RequestContext, request: ProduceRequest,
                                  body: memoryview, wanted: list[tuple[str, int]]) -> bytes | None:
    await broker.partitions.create_now(wanted)
    reply = _produce(broker, ctx, request, body)
    return await reply if isinstance(reply, Awaitable) else reply


def _produce(broker: Broker, ctx: RequestContext, request: ProduceRequest,
             body: memoryview) -> bytes | Awaitable[bytes | None] | None:
    version = ctx.api_version
    if broker.image.client_quotas:  # producer_byte_rate: the request's bytes count
        ctx.throttle.add(broker.quotas.produce.record(ctx.principal.name, ctx.client_id or "",
                                                      len(body)))
    txn = request.transactional_id
    if txn is not None and not allowed(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn):
        return _all_refused(ctx, request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if txn is None:
        return _append_all(broker, ctx, request, None)
    checked = _check_transaction(broker, request, txn, version)  # -- transactions: KIP-890 --
    if isinstance(checked, Awaitable):  # the coordinator is on another broker
        return _append_when_checked(broker, ctx, request, checked)
    return _append_all(broker, ctx, request, checked)


def _all_refused(ctx: RequestContext, request: ProduceRequest, code: ErrorCode) -> bytes | None:
    """Every partition of the request answered with ``code`` (acks=0: the connection closes,
    the only way to tell such a producer)."""
    if request.acks == 0:
        raise CloseConnection()
    out = []
    for t in request.topics:
        parts = [ProducePartitionResponse(p.index) for p in t.partitions]
        for part in parts:
            part.error_code = code
        out.append(ProduceTopicResponse(t.name, t.topic_id, parts))
    return encode_produce_response(ctx.api_version, out, throttle_time_ms=ctx.throttle.ms)


async def _append_when_checked(broker: Broker, ctx: RequestContext, request: ProduceRequest,
                               checking: Awaitable[ProduceVerdicts]) -> bytes | None:
    checked = await checking
    reply = _append_all(broker, ctx, request, checked)
    return await reply if isinstance(reply, Awaitable) else reply


def _append_all(broker: Broker, ctx: RequestContext, request: ProduceRequest,
                checked: ProduceVerdicts | None) -> bytes | Awaitable[bytes | None] | None:
    """Append each partition's batch; `checked` holds the transaction coordinator's verdict
    on partitions whose batch opens a transaction (the others are absent)."""
    version = ctx.api_version
    acks = request.acks
    image = broker.image
    partitions = broker.partitions
    now_ms = broker.now_ms()
    failed = False
    topics_out = []
    out = _Appends()
    endpoints: dict[int, Endpoint] = {}  # KIP-951: the endpoints of leaders named in answers
    authorizer = broker.authorizer
    for t in request.topics:
        topic = image.topics.get(t.name) if t.name is not None else (
            image.topics_by_id.get(t.topic_id) if t.topic_id is not None else None)
        # ACLs: WRITE on the topic, checked before whether it exists (as Kafka)
        name = t.name if t.name is not None else (topic.name if topic is not None else None)
        refused = (authorizer is not None and name is not None
                   and not allowed(broker, ctx, Op.WRITE, Res.TOPIC, name))
        results = []
        for p in t.partitions:
            result = ProducePartitionResponse(p.index)
            results.append(result)
            if acks not in VALID_ACKS:
                result.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            if refused:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if topic is None:
                result.error_code = (ErrorCode.UNKNOWN_TOPIC_ID if t.name is None
                                     else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if topic.name in INTERNAL_TOPICS:
                result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                continue
            state = topic.partitions.get(p.index)
            log = partitions.get(topic.name, p.index) if state is not None else None
            if state is None or log is None or state.leader != broker.broker_id:
                if state is None:
                    result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    if version >= PRODUCE_FIRST_LEADER_HINT:  # KIP-951
                        result.current_leader = leader_hint(broker, ctx, state, endpoints)
                continue
            if acks == -1 and len(state.isr) < log.config.min_insync_replicas:
                result.error_code = ErrorCode.NOT_ENOUGH_REPLICAS
                continue
            if p.records is None or len(p.records) == 0:
                result.error_code = ErrorCode.INVALID_RECORD  # no batch
                continue
            if len(p.records) > _first_batch_size(p.records) and _second_batch(p.records):
                result.error_code = ErrorCode.INVALID_RECORD  # only one batch per partition
                continue
            verdict = checked.get((topic.name, p.index)) if checked else None
            if verdict is not None and verdict[0]:  # -- transactions: not in the transaction --
                result.error_code, result.error_message = verdict
                continue
            _append_one(broker, topic, p.index, state, log, p.records, result, acks, now_ms,
                        out, defer=True)
        failed = failed or any(r.error_code for r in results)
        topics_out.append(ProduceTopicResponse(t.name, t.topic_id, results))
    if out.diversions or out.rechecks:
        return _await_diversions(broker, ctx, out, acks, request.timeout_ms, version,
                                 topics_out, endpoints, failed)
    if acks == 0:
        if failed:  # Kafka closes the connection: the only way to tell an acks=0 producer
            raise CloseConnection()
        return None
    if out.flushes:
        return _await_flushes(broker, ctx, out.flushes, out.pending, request.timeout_ms, version,
                              topics_out, endpoints)
    if out.pending:
        return _await_replication(broker, ctx, out.pending, request.timeout_ms, version,
                                  topics_out, endpoints)
    return encode_produce_response(version, topics_out, throttle_time_ms=ctx.throttle.ms,
                                   node_endpoints=list(endpoints.values()) if endpoints else None)


@dataclass(slots=True)
class _Appends:
    """What a request's appends leave to wait for."""

    pending: list[tuple[tuple[str, int], int, ProducePartitionResponse]] = field(
        default_factory=list)  # acks=all: (partition, offset to replicate, answer)
    flushes: list[tuple[asyncio.Future[None], ProducePartitionResponse]] = field(
        default_factory=list)
    diversions: list[Diversion] = field(default_factory=list)  # records for a dead-letter topic
    rechecks: list[_Recheck] = field(default_factory=list)  # checked again once synced


class _Recheck(NamedTuple):
    """A batch with invalid records by a registry copy that may trail its writer."""

    topic: TopicState
    partition: int
    state: PartitionState
    log: PartitionLog
    records: memoryview
    result: ProducePartitionResponse


def _append_one(broker: Broker, topic: TopicState, index: int, state: PartitionState,
                log: PartitionLog, records: memoryview, result: ProducePartitionResponse,
                acks: int, now_ms: int, out: _Appends, *, defer: bool) -> None:
    """Check one partition's batch (schemas) and append it, noting what its answer waits for.
    With `defer`, a batch refused by a registry copy that may trail the writer is checked
    again after the copy catches up (the record may name a schema registered a moment ago)."""
    stats = broker.stats
    try:
        checked_schemas = Checked.of(topic.configs)
        if checked_schemas is not None:  # only topics that ask for it are decoded
            invalid = find_invalid(broker.registry, topic.name, checked_schemas, records)
            if invalid and defer and broker.registry is not None and broker.registry.following:
                out.rechecks.append(_Recheck(topic, index, state, log, records, result))
                return
            dlq = divertible(topic.configs, records) if invalid else None
            if dlq is not None:  # Strom's own: invalid records to a dead-letter topic
                out.diversions.append(Diversion(result, topic, index, state, log, records,
                                                decode_records(records), invalid, dlq))
                return
            if invalid:
                raise refusal(invalid)
        appended = log.append(records, leader_epoch=state.leader_epoch, now_ms=now_ms)
    except StorageError as exc:
        if stats is not None:
            stats.produce_failed(topic.name)
        result.error_code = exc.error_code
        if exc.error_code not in _NO_LOG_START:  # as Kafka's appendToLocalLog
            result.log_start_offset = log.log_start_offset
        if exc.record_errors:  # KIP-467: the client fails only these records
            result.record_errors = list(exc.record_errors)
            result.error_message = str(exc)
        return
    # an idempotent retry of a batch already written answers with its original offsets
    result.base_offset = appended.first_offset
    result.log_append_time_ms = appended.log_append_time
    result.log_start_offset = appended.log_start_offset
    if not appended.duplicate:
        broker.partitions.waiters.notify((topic.name, index))
        if stats is not None:  # per batch: its header says how many records
            stats.produced(topic.name, appended.last_offset - appended.first_offset + 1,
                           len(records))
    if appended.flushed is not None:  # log.flush.interval.messages: answer once synced
        out.flushes.append((appended.flushed, result))
    if acks == -1 and broker.replicas is not None:
        out.pending.append(((topic.name, index), appended.last_offset + 1, result))


async def _await_diversions(broker: Broker, ctx: RequestContext, out: _Appends, acks: int,
                            timeout_ms: int, version: int,
                            topics_out: list[ProduceTopicResponse],
                            endpoints: dict[int, Endpoint], failed: bool) -> bytes | None:
    """The batches left for later: those a trailing registry copy refused, checked again once
    it caught up; those with records for a dead-letter topic, written first, then their valid
    records (strom.broker.schema_dlq); then the answer as for every other batch."""
    if out.rechecks:
        assert broker.registry is not None
        await broker.registry.sync(REGISTRY_SYNC_S)
        now_ms = broker.now_ms()
        for r in out.rechecks:
            topic = broker.image.topics.get(r.topic.name)
            state = topic.partitions.get(r.partition) if topic is not None else None
            if topic is None or state is None or state.leader != broker.broker_id \
                    or state.leader_epoch != r.state.leader_epoch \
                    or broker.partitions.get(topic.name, r.partition) is not r.log:
                r.result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER  # moved meanwhile
                continue
            _append_one(broker, topic, r.partition, state, r.log, r.records, r.result, acks,
                        now_ms, out, defer=False)
            failed = failed or bool(r.result.error_code)
    flushes, pending = out.flushes, out.pending
    for d in out.diversions:
        end = await divert(broker, d)
        failed = failed or bool(d.result.error_code)
        if end is not None and acks == -1 and broker.replicas is not None:
            pending.append(((d.topic.name, d.partition), end, d.result))
    if acks == 0:
        if failed:
            raise CloseConnection()
        return None
    if flushes:
        return await _await_flushes(broker, ctx, flushes, pending, timeout_ms, version,
                                    topics_out, endpoints)
    if pending:
        return await _await_replication(broker, ctx, pending, timeout_ms, version, topics_out,
                                        endpoints)
    return encode_produce_response(version, topics_out, throttle_time_ms=ctx.throttle.ms,
                                   node_endpoints=list(endpoints.values()) if endpoints else None)


async def _await_flushes(broker: Broker, ctx: RequestContext, flushes: list, pending: list, timeout_ms: int,
                         version: int, topics_out: list[ProduceTopicResponse],
                         endpoints: dict[int, Endpoint]) -> bytes:
    """Kafka flushes in the request thread when log.flush.interval.messages is reached and
    answers after; the flush runs in a worker thread here, so the answer waits for it."""
    for done, result in flushes:
        try:
            await done
        except StorageError as exc:
            result.error_code = exc.error_code
            result.base_offset = -1
    if pending:
        return await _await_replication(broker, ctx, pending, timeout_ms, version, topics_out,
                                        endpoints)
    return encode_produce_response(version, topics_out, throttle_time_ms=ctx.throttle.ms,
                                   node_endpoints=list(endpoints.values()) if endpoints else None)


async def _await_replication(broker: Broker, ctx: RequestContext, pending: list, timeout_ms: int, version: int,
                             topics_out: list[ProduceTopicResponse],
                             endpoints: dict[int, Endpoint]) -> bytes:
    """Kafka's delayed produce: answer once the high watermark passes every appended batch
    (or the request's timeout passes); woken by high watermark moves, never polling. A
    partition whose leadership moved meanwhile names its new leader (KIP-951)."""
    timeout_s = max(timeout_ms, 0) / 1000
    replicas = broker.replicas
    assert replicas is not None  # only a cluster's appends wait for the ISR
    codes = await asyncio.gather(*(replicas.wait_for_replication(key, required, timeout_s)
                                   for key, required, _ in pending))
    for (key, _, result), code in zip(pending, codes, strict=True):
        if code:
            result.error_code = code
            result.base_offset = -1
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and version >= PRODUCE_FIRST_LEADER_HINT:
                topic = broker.image.topics.get(key[0])
                state = topic.partitions.get(key[1]) if topic is not None else None
                if state is not None:
                    result.current_leader = leader_hint(broker, ctx, state, endpoints)
    return encode_produce_response(version, topics_out, throttle_time_ms=ctx.throttle.ms,
                                   node_endpoints=list(endpoints.values()) if endpoints else None)


def _first_batch_size(records: memoryview) -> int:
    """The first batch's size from its length field (the whole records if too short to say)."""
    if len(records) < LOG_OVERHEAD:
        return len(records)
    return _unpack_i32(records, LENGTH_OFFSET)[0] + LOG_OVERHEAD


def _second_batch(records: memoryview) -> bool:
    """Whether a second batch follows the first, as Kafka's batch iterator in
    ProduceRequest.validateRecords sees it: a length field that fits in the bytes after the
    first batch. Shorter or nonsensical trailing bytes are left to the log (CORRUPT_MESSAGE)."""
    first = _first_batch_size(records)
    rest = len(records) - first
    if first < RECORD_BATCH_OVERHEAD or rest < LOG_OVERHEAD:
        return False
    return MIN_BATCH_LENGTH <= _unpack_i32(records, first + LENGTH_OFFSET)[0] <= rest - LOG_OVERHEAD


# -- transactions: KIP-890 verification of a transaction's first write to a partition --------


def _check_transaction(broker: Broker, request: ProduceRequest, transactional_id: str,
                       version: int) -> ProduceVerdicts | Awaitable[ProduceVerdicts]:
    """The coordinator's verdict on the partitions whose batch would open the producer's
    transaction there: verified on transaction version 1, added on version 2 (Produce v12+).
    Empty when no batch opens a transaction."""
    image = broker.image
    batches = []
    for t in request.topics:
        topic = image.topics.get(t.name) if t.name is not None else (
            image.topics_by_id.get(t.topic_id) if t.topic_id is not None else None)
        if topic is None:
            continue
        for p in t.partitions:
            log = broker.partitions.get(topic.name, p.index)
            if log is not None and p.records is not None:
                batches.append(((topic.name, p.index), log.producer_state, p.records))
    first = first_writes(batches)
    if first is None:
        return {}
    pid, epoch, wanted = first
    checked = broker.txn_gate.check(transactional_id, pid, epoch, wanted,
                                    add=adds_partitions(version, broker.image.finalized_features))
    if isinstance(checked, Awaitable):
        async def mapped() -> ProduceVerdicts:
            return produce_codes(await checked, version)
        return mapped()
    return produce_codes(checked, version)
