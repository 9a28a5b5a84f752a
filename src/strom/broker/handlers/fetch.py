"""Fetch: index lookups produce file slices that the server sends with sendfile.

read_committed (isolation level 1) stops at the last stable offset and lists the aborted
transactions overlapping the returned range (from the segments' transaction indexes); the
client drops their batches itself, as with Kafka, so the records stay zero-copy.

Long polling: when less than `min_bytes` is available, the request waits on its partitions'
waiters (woken by appends) until the data arrives or `max_wait_ms` passes; no polling loop.
"""

from __future__ import annotations

import asyncio
import time

from strom.broker.authz import Op, Res, allowed, cluster_allowed
from strom.broker.context import Parts, RequestContext
from strom.broker.core import Broker
from strom.broker.metrics.stats import BrokerStats
from strom.broker.router import handles
from strom.cluster.image import PartitionState
from strom.protocol.api_keys import ApiKey
from strom.protocol.error_versions import for_version
from strom.protocol.errors import ErrorCode
from strom.protocol.fetch import (
    FetchPartitionResponse,
    FetchRequest,
    FetchTopic,
    FetchTopicResponse,
    decode_fetch_request,
    encode_fetch_response,
)
from strom.storage.errors import StorageError

READ_COMMITTED = 1


# KIP-951: a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH answer names the current leader and
# its endpoint (Fetch v16+, Produce v10+), so the client need not refresh its metadata first
LEADER_HINT_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})
FETCH_FIRST_LEADER_HINT = 16
# Partitions read per loop turn: a follower's fetch names every partition it follows (1,000
# after a failover), about 0.1 ms each; read in one go, every other client waited 100 ms.
PARTITIONS_PER_TURN = 100

Endpoint = tuple[int, str, int, str | None]


def leader_hint(broker: Broker, ctx: RequestContext, state: PartitionState,
                endpoints: dict[int, Endpoint]) -> tuple[int, int]:
    """(leader id, leader epoch) of a partition, as Kafka's KafkaApis.getCurrentLeader; the
    leader's endpoint (on the client's listener) is added to ``endpoints`` when it is a live
    broker."""
    info = broker.image.brokers.get(state.leader)
    if info is not None:
        endpoints[info.broker_id] = (info.broker_id, *info.address(ctx.session.listener),
                                     info.rack)
    return state.leader, state.leader_epoch


def check_leader_epoch(current: int, leader_epoch: int) -> int:
    """Kafka's fencing: an older epoch is fenced, a newer one is not known yet."""
    if current == -1 or current == leader_epoch:
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if current < leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH


@handles(ApiKey.FETCH, 4, 18, raw=True)
async def fetch(broker: Broker, ctx: RequestContext, body: memoryview) -> Parts:
    version = ctx.api_version
    request = decode_fetch_request(body, version)
    if request.session_id != 0:  # we never grant sessions, so an incremental fetch is unknown
        parts, size = encode_fetch_response(version, [], error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                            session_id=0)
        return Parts(parts, size)
    max_bytes = min(request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF,
                    broker.config.get("fetch.max.bytes"))
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    keys = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    while True:
        endpoints: dict[int, Endpoint] = {}
        topics, total, errors = await _read_all(broker, ctx, request, version, max_bytes, endpoints)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or errors or remaining <= 0 or not keys:
            parts, size = encode_fetch_response(version, topics, session_id=0,
                                                node_endpoints=list(endpoints.values()))
            if request.replica_id < 0 and broker.image.client_quotas and _throttled(
                    broker, ctx, size):  # over consumer_byte_rate: answered empty
                parts, size = encode_fetch_response(version, [], session_id=0,
                                                    throttle_time_ms=ctx.throttle.ms)
                return Parts(parts, size)
            if broker.stats is not None:
                _count(broker, broker.stats, topics, follower=request.replica_id >= 0)
            return Parts(parts, size)
        names = [(_topic_name(broker, t), p.partition) for t in request.topics for p in t.partitions]
        await broker.partitions.waiters.wait_any(names, remaining)


def _throttled(broker: Broker, ctx: RequestContext, size: int) -> bool:
    """consumer_byte_rate: count the answer's bytes; a client over its quota gets an empty
    answer with the throttle time instead, and the bytes it did not get are taken back (as
    Kafka's throttled fetch response)."""
    quota = broker.quotas.fetch
    user, client_id = ctx.principal.name, ctx.client_id or ""
    throttle = quota.record(user, client_id, size)
    if not throttle:
        return False
    quota.unrecord(user, client_id, size)
    ctx.throttle.add(throttle)
    return True


def _count(broker: Broker, stats: BrokerStats, topics: list[FetchTopicResponse], *,
           follower: bool) -> None:
    """Bytes out per topic, per partition answered (consumers and followers apart, as Kafka's
    BytesOutPerSec and ReplicationBytesOutPerSec)."""
    for t in topics:
        size = sum(p.records_size for p in t.partitions if p.records_size)
        if not size:
            continue
        name = t.topic
        if name is None:  # v13+: by id
            topic = broker.image.topics_by_id.get(t.topic_id) if t.topic_id is not None else None
            if topic is None:
                continue
            name = topic.name
        if follower:
            stats.replicated_out(name, size)
        else:
            stats.fetched(name, size)


def _topic_name(broker: Broker, t: FetchTopic) -> str | None:
    if t.topic is not None:
        return t.topic
    topic = broker.image.topics_by_id.get(t.topic_id) if t.topic_id is not None else None
    return topic.name if topic else None


async def _read_all(broker: Broker, ctx: RequestContext, request: FetchRequest, version: int,
                    max_bytes: int, endpoints: dict[int, Endpoint],
                    ) -> tuple[list[FetchTopicResponse], int, bool]:
    """Every partition's answer: PARTITIONS_PER_TURN at a time, the loop free in between."""
    partitions = broker.partitions
    if partitions.has_pending:  # logs of a large creation not made yet: not on the loop
        named = ((_topic_name(broker, t), t.partitions) for t in request.topics)
        wanted = partitions.pending_among((name, p.partition) for name, parts in named
                                          if name is not None for p in parts)
        if wanted:
            await partitions.create_now(wanted)
    image = broker.image
    turn = 0
    total = 0
    errors = False
    topics_out = []
    # a follower's fetch (None: a consumer's)
    replicas = broker.replicas if request.replica_id >= 0 else None
    # leader.replication.throttled.rate: is it used up for out-of-sync throttled replicas?
    throttle = replicas.leader_throttle if replicas is not None else None
    held = throttle is not None and throttle.exceeded()
    # ACLs: a follower needs CLUSTER_ACTION, a consumer READ on each topic
    authorizer = broker.authorizer
    follower_refused = (authorizer is not None and request.replica_id >= 0
                        and not cluster_allowed(broker, ctx, Op.CLUSTER_ACTION))
    for t in request.topics:
        if version >= 13:
            topic = image.topics_by_id.get(t.topic_id) if t.topic_id is not None else None
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = image.topics.get(t.topic) if t.topic is not None else None
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        out = FetchTopicResponse(t.topic, t.topic_id, [])
        topics_out.append(out)
        name = topic.name if topic is not None else t.topic
        refused = authorizer is not None and (follower_refused or (
            request.replica_id < 0 and name is not None
            and not allowed(broker, ctx, Op.READ, Res.TOPIC, name)))
        for p in t.partitions:
            turn += 1
            if turn == PARTITIONS_PER_TURN:
                turn = 0
                await asyncio.sleep(0)
            r = FetchPartitionResponse(p.partition, records=b"")  # Kafka sends empty, never null
            out.partitions.append(r)
            if refused:
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                r.aborted_transactions = []
                errors = True
                continue
            state = topic.partitions.get(p.partition) if topic is not None else None
            if topic is None or state is None:
                r.error_code = missing if topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                r.aborted_transactions = []  # Kafka's partitionResponse: empty, not null
                errors = True
                continue
            log = partitions.get(topic.name, p.partition)
            if log is None:  # a partition this broker holds no replica of (as Kafka)
                r.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                r.error_code = check_leader_epoch(p.current_leader_epoch, state.leader_epoch)
                if not r.error_code and state.leader != broker.broker_id:
                    r.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            if log is None or r.error_code:
                if r.error_code in LEADER_HINT_ERRORS and version >= FETCH_FIRST_LEADER_HINT:
                    r.current_leader = leader_hint(broker, ctx, state, endpoints)
                errors = True
                continue
            if log.offline is not None:  # as Kafka: its log dir failed (even when caught up)
                r.error_code = for_version(ApiKey.FETCH, version, ErrorCode.KAFKA_STORAGE_ERROR)
                errors = True
                continue
            hw = log.high_watermark
            stable = log.last_stable_offset
            r.high_watermark, r.last_stable_offset = hw, stable
            r.log_start_offset = log.log_start_offset
            if request.isolation_level == READ_COMMITTED:
                r.aborted_transactions = []
            if version >= 12 and p.last_fetched_epoch >= 0:
                epoch, end = log.end_offset_for_epoch(p.last_fetched_epoch)
                if epoch != p.last_fetched_epoch or end < p.fetch_offset:
                    r.diverging_epoch = (epoch, end)
                    errors = True
                    continue
            throttled = False
            if replicas is not None:  # a follower: note its position, then give it everything
                code = replicas.on_replica_fetch((topic.name, p.partition), request.replica_id,
                                                 p.fetch_offset, log)
                if code:
                    r.error_code = code
                    errors = True
                    continue
                r.high_watermark = log.high_watermark
                limit = log.log_end_offset
                throttled = throttle is not None and throttle.throttled(
                    topic.name, p.partition, request.replica_id)
                if throttled and held:
                    continue  # this replica waits until the leader's rate allows more
            else:
                limit = hw if request.isolation_level != READ_COMMITTED else stable
            if p.fetch_offset == limit and p.fetch_offset <= log.log_end_offset:
                continue
            budget = min(p.partition_max_bytes, max_bytes - total)
            if budget <= 0 and total > 0:
                continue
            try:
                result = log.read(p.fetch_offset, max(budget, 0), max_offset=limit,
                                  min_one_batch=total == 0)
            except StorageError as exc:
                r.error_code = for_version(ApiKey.FETCH, version, exc.error_code)
                errors = True
                continue
            if result.slice is not None and result.slice.length > 0:
                r.records = result.slice
                r.records_size = result.slice.length
                total += result.slice.length
                if throttled and throttle is not None:  # (throttled: a follower's fetch)
                    throttle.record(result.slice.length)
                if request.isolation_level == READ_COMMITTED:
                    try:
                        r.aborted_transactions = log.aborted_transactions_in(p.fetch_offset,
                                                                             result.slice)
                    except StorageError as exc:
                        r.records, r.records_size = b"", 0
                        total -= result.slice.length
                        r.error_code = for_version(ApiKey.FETCH, version, exc.error_code)
                        errors = True
    return topics_out, total, errors
