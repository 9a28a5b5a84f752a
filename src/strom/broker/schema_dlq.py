"""Diverting invalid records to a dead-letter topic instead of refusing their batch (Strom's own).

A topic that validates its records (`strom.broker.schema_check`) and names a dead-letter topic
in its own config ``errors.deadletterqueue.topic.name`` does not refuse a batch with invalid
records: the invalid ones are written to the dead-letter topic, the others to the topic, and the
producer hears success (one bad record does not block it). The dead letters are written by the
share groups' writer (`DeadLetterWriter`: acks=-1, retried, to partition `source partition %
partitions`), with its naming rule (the broker's ``errors.deadletterqueue.topic.name.prefix``)
and its headers (``__dlq.errors.topic``, ``__dlq.errors.partition``, ``__dlq.errors.message``),
plus ``__dlq.errors.schema.id`` when the record named an id; key, value and headers are copied.

The dead letters are written first; only then are the valid records appended. If the dead
letters cannot be written (no such topic, a name outside the prefix, the writer's retries
spent), the batch is refused as without a dead-letter topic (INVALID_RECORD, nothing written)
and an ERROR line says why: a record is never dropped. Batches of idempotent or transactional
producers are refused too: dropping records from them would break their sequence numbers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from strom.broker.core import Broker
from strom.broker.schema_check import refusal
from strom.cluster.image import PartitionState, TopicState
from strom.common.dead_letters import (
    DLQ_TOPIC_CONFIG,
    PREFIX_CONFIG,
    naming_refusal,
    schema_id_header,
    source_headers,
    target_partition,
)
from strom.protocol.produce import ProducePartitionResponse
from strom.record import Record, build_batch, read_header
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog

log = logging.getLogger(__name__)



@dataclass
class Diversion:
    """One partition's batch whose invalid records go to `dlq`."""

    result: ProducePartitionResponse
    topic: TopicState
    partition: int
    state: PartitionState
    log: PartitionLog
    batch: memoryview
    records: list[Record]
    errors: list[tuple[int, str]]
    dlq: str


def divertible(configs: dict[str, str], batch: memoryview) -> str | None:
    """The topic's dead-letter topic, when this batch may be split (not idempotent, not
    transactional)."""
    dlq = configs.get(DLQ_TOPIC_CONFIG)
    if not dlq:
        return None
    header = read_header(batch, 0)
    if header.producer_id >= 0 or header.is_transactional:
        return None
    return dlq


async def divert(broker: Broker, d: Diversion) -> int | None:
    """Write the dead letters, then the valid records; fills `d.result` and returns the offset
    the valid records end at (for acks=all), or None when nothing was appended."""
    what = (f"{len(d.errors)} invalid records of a batch for {d.topic.name}-{d.partition}")
    why = _refused(broker, d.dlq)
    if why is None:
        bad = {i: m for i, m in d.errors}
        now = broker.now_ms()
        letters = []
        for n, (i, message) in enumerate(sorted(bad.items())):
            r = d.records[i]
            headers = [*r.headers, *source_headers(d.topic.name, d.partition, message),
                       *schema_id_header(r.value)]
            letters.append(Record(n, r.timestamp if r.timestamp >= 0 else now, r.key, r.value,
                                  headers))
        target = target_partition(d.partition, len(broker.image.topics[d.dlq].partitions))
        why = await broker.share_partitions.dead_letters.deliver(
            d.dlq, target, build_batch(letters), what)
    if why is not None:
        log.error("%s refused: their dead-letter topic %s cannot take them: %s", what, d.dlq,
                  why)
        exc = refusal(d.errors)
        d.result.error_code = exc.error_code
        d.result.record_errors = list(exc.record_errors)
        d.result.error_message = str(exc)
        return None
    invalid = {i for i, _ in d.errors}
    good = [r for i, r in enumerate(d.records) if i not in invalid]
    if not good:
        d.result.base_offset = d.log.log_end_offset
        d.result.log_start_offset = d.log.log_start_offset
        return None
    header = read_header(d.batch, 0)
    kept = build_batch([Record(n, r.timestamp, r.key, r.value, r.headers)
                        for n, r in enumerate(good)], compression=header.compression)
    try:
        appended = d.log.append(memoryview(bytearray(kept)), leader_epoch=d.state.leader_epoch,
                                now_ms=broker.now_ms())
    except StorageError as exc:  # the dead letters are written: say so with the failure
        log.error("%s went to %s, but appending the %d valid ones failed: %s", what, d.dlq,
                  len(good), exc)
        d.result.error_code = exc.error_code
        return None
    d.result.base_offset = appended.first_offset
    d.result.log_append_time_ms = appended.log_append_time
    d.result.log_start_offset = appended.log_start_offset
    broker.partitions.waiters.notify((d.topic.name, d.partition))
    return int(appended.last_offset) + 1


def _refused(broker: Broker, dlq: str) -> str | None:
    """Why the dead-letter topic cannot take records (the share groups' naming rule)."""
    why = naming_refusal(dlq, broker.config.get(PREFIX_CONFIG) or "")
    if why is not None:
        return why
    topic = broker.image.topics.get(dlq)
    if topic is None or not topic.partitions:
        return f"the dead-letter topic {dlq!r} does not exist"
    return None
