"""Dead-letter topics for share groups (KIP-1191, in Kafka 4.4).

A record that a consumer rejects, or whose delivery count reaches the limit, is written to the
group's `errors.deadletterqueue.topic.name` before it is archived: to partition
`source partition % DLQ partitions`, with Kafka's `__dlq.errors.*` headers naming the source
topic, partition, offset, group, delivery count and reason, and with the record's key and value
only when `errors.deadletterqueue.copy.record.enable` is true (Kafka's default copies nothing).
As in Kafka, the topic must exist, start with the broker's
`errors.deadletterqueue.topic.name.prefix` and have `errors.deadletterqueue.group.enable=true`;
otherwise the records are archived without a dead letter (and an ERROR line says so).

The dead letters are written as a producer with acks=-1 would: appended here when this broker
leads the dead-letter partition, else sent to its leader in a Produce request over the
inter-broker client, and in a cluster acknowledged once the partition's in-sync replicas have
them. Leader changes, missing leaders, too few in-sync replicas, timeouts and unreachable
brokers are retried with a short backoff for at most `deadline_s`; then the records are
archived without their dead letters, with an ERROR line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from strom.broker.share.partition import DeadLetter
from strom.broker.share.settings import ShareSettings
from strom.cluster.client import BrokerClients, BrokerConnectionError
from strom.cluster.image import MetadataImage, TopicState
from strom.common.dead_letters import (
    GROUP_ENABLE,
    HEADER_DELIVERY_COUNT,
    HEADER_GROUP,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_TOPIC,
    naming_refusal,
    target_partition,
)
from strom.common.waiters import WaiterRegistry
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, ProtocolError
from strom.record import CorruptRecordError, Record, build_batch, decode_records, iter_batches
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog
from strom.storage.validator import ORIGIN_COORDINATOR

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20  # as Kafka: dead letters are usually single records
PRODUCE_VERSION = 9  # topics by name, flexible
BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
# What a producer retries: the leader moved or is not known yet, too few in-sync replicas, a
# timeout (a broker that cannot be reached is retried too).
RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                       ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                       ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR})

# Waits until a partition's in-sync replicas have `offset` (a cluster's acks=all); an error code.
Replication = Callable[[str, int, int, float], Awaitable[int]]


class Logs(Protocol):
    waiters: WaiterRegistry

    def get(self, topic: str, partition: int) -> PartitionLog | None: ...


def _absent_or_closed(name: str, dlq: TopicState | None) -> str | None:
    if dlq is None or not dlq.partitions:
        return f"the dead-letter topic {name!r} does not exist"
    if str(dlq.configs.get(GROUP_ENABLE, "false")).lower() != "true":
        return f"the topic {name!r} does not allow it ({GROUP_ENABLE} is not true)"
    return None


class DeadLetterWriter:
    """`clients` reach the other brokers (None: a single node) and `replication` waits for the
    in-sync replicas of a partition this broker leads (None: nothing to wait for)."""

    def __init__(self, broker_id: int, image: MetadataImage, logs: Logs,
                 now_ms: Callable[[], int], *, clients: BrokerClients | None = None,
                 replication: Replication | None = None, deadline_s: float = 10.0,
                 request_timeout_ms: int = 30000) -> None:
        self.broker_id = broker_id
        self.image = image
        self.logs = logs
        self.now_ms = now_ms
        self.clients = clients
        self.replication = replication
        self.deadline_s = deadline_s
        self.request_timeout_ms = request_timeout_ms

    def close(self) -> None:
        if self.clients is not None:
            self.clients.close()

    async def write(self, group_id: str, topic: str, partition: int, dead: DeadLetter,
                    settings: ShareSettings) -> None:
        """Write the dead letters of offsets first..last; a failure is logged at ERROR (the
        records are archived all the same, as Kafka does once its retries are spent)."""
        what = (f"share group {group_id}: records {dead.first_offset}-{dead.last_offset} of "
                f"{topic}-{partition} ({dead.reason})")
        name = settings.dlq_topic
        dlq = self.image.topics.get(name) if name else None
        refused = naming_refusal(name, settings.dlq_prefix) or _absent_or_closed(name, dlq)
        if refused is not None or dlq is None:
            log.error("%s archived without a dead letter: %s", what, refused)
            return
        target = target_partition(partition, len(dlq.partitions))
        now = self.now_ms()
        copies = self._source_records(topic, partition, dead) if settings.dlq_copy_record else {}
        records = []
        for i, offset in enumerate(range(dead.first_offset, dead.last_offset + 1)):
            source = copies.get(offset)
            headers = [(HEADER_TOPIC, topic.encode()), (HEADER_PARTITION, str(partition).encode()),
                       (HEADER_OFFSET, str(offset).encode()), (HEADER_GROUP, group_id.encode()),
                       (HEADER_DELIVERY_COUNT, str(dead.delivery_count).encode()),
                       (HEADER_MESSAGE, dead.reason.encode())]
            records.append(Record(i, now, None if source is None else source.key,
                                  None if source is None else source.value, headers))
        why = await self.deliver(name, target, build_batch(records), what)
        if why is not None:
            log.error("%s archived without a dead letter: %s", what, why)

    async def deliver(self, name: str, target: int, batch: bytes, what: str) -> str | None:
        """Write a batch of dead letters to `name`-`target` as an acks=-1 producer would,
        retrying what a producer retries for at most `deadline_s`: None once written, else
        why not (the caller says at ERROR what that means for its records)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline_s
        backoff = BACKOFF_S
        while True:
            code, reason, where = await self._write_once(name, target, batch, deadline)
            if code == ErrorCode.NONE:
                log.info("%s written to the dead-letter topic %s-%d%s", what, name, target,
                         where)
                return None
            if code not in RETRIABLE or loop.time() + backoff > deadline:
                return f"writing to {name}-{target} failed{where}: {reason}"
            log.debug("%s: writing to %s-%d failed%s, retrying: %s", what, name, target, where,
                      reason)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _write_once(self, name: str, target: int, batch: bytes,
                          deadline: float) -> tuple[int, str, str]:
        """One attempt, where the image says the leader is: (error code, reason, where)."""
        topic = self.image.topics.get(name)
        state = topic.partitions.get(target) if topic is not None else None
        if state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the partition is gone", ""
        if state.leader == self.broker_id:
            return await self._append_here(name, target, batch, deadline)
        leader = self.image.brokers.get(state.leader)
        where = f" (on broker {state.leader})"
        if leader is None or self.clients is None:
            return ErrorCode.LEADER_NOT_AVAILABLE, "it has no live leader", where
        remaining_ms = max(1, int((deadline - asyncio.get_running_loop().time()) * 1000))
        timeout_ms = min(self.request_timeout_ms, remaining_ms)
        client = self.clients.get(leader.broker_id, leader.host, leader.port)
        try:
            response = await client.request(ApiKey.PRODUCE, PRODUCE_VERSION, {
                "transactional_id": None, "acks": -1, "timeout": timeout_ms,
                "topic_data": [{"name": name, "partition_data": [
                    {"index": target, "records": batch}]}]},
                timeout_s=timeout_ms / 1000 + 5)
        except (BrokerConnectionError, ProtocolError) as exc:
            return ErrorCode.REQUEST_TIMED_OUT, str(exc), where
        for t in response.responses:
            for p in t.partition_responses:
                return int(p.error_code), p.error_message or ErrorCode(p.error_code).name, where
        return ErrorCode.UNKNOWN_SERVER_ERROR, "Produce answered without the partition", where

    async def _append_here(self, name: str, target: int, batch: bytes,
                           deadline: float) -> tuple[int, str, str]:
        """Append to the partition this broker leads, as Produce with acks=-1 would."""
        topic = self.image.topics.get(name)
        state = topic.partitions.get(target) if topic is not None else None
        plog = self.logs.get(name, target)
        if state is None or plog is None or state.leader != self.broker_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, "this broker no longer leads it", ""
        if self.replication is not None and len(state.isr) < plog.config.min_insync_replicas:
            return (ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"{len(state.isr)} in-sync replicas, fewer than min.insync.replicas", "")
        try:
            result = plog.append(memoryview(bytearray(batch)), leader_epoch=state.leader_epoch,
                                 now_ms=self.now_ms(), origin=ORIGIN_COORDINATOR)
        except StorageError as exc:
            return exc.error_code, str(exc), ""
        self.logs.waiters.notify((name, target))
        if self.replication is None:
            return ErrorCode.NONE, "", ""
        remaining = max(0.0, deadline - asyncio.get_running_loop().time())
        code = await self.replication(name, target, result.last_offset + 1, remaining)
        return code, "" if code == ErrorCode.NONE else ErrorCode(code).name, ""

    def _source_records(self, topic: str, partition: int, dead: DeadLetter) -> dict[int, Record]:
        plog = self.logs.get(topic, partition)
        if plog is None:
            return {}
        out: dict[int, Record] = {}
        offset = dead.first_offset
        while offset <= dead.last_offset:
            try:
                result = plog.read(offset, READ_BYTES)  # whole batches, up to the high watermark
            except StorageError:
                break
            if result.slice is None or result.slice.length == 0:
                break
            data = result.slice.read_bytes()
            moved = False
            try:
                for pos, header in iter_batches(data):
                    if header.is_control:
                        continue
                    for r in decode_records(data[pos:pos + header.size]):
                        if dead.first_offset <= r.offset <= dead.last_offset:
                            out[r.offset] = r
                    if header.next_offset > offset:
                        offset, moved = header.next_offset, True
            except CorruptRecordError as exc:
                log.error("cannot copy records of %s-%d to the dead-letter topic: %s", topic,
                          partition, exc)
                break
            if not moved:
                break
        return out
