"""A coordinator's state topic: records appended to, and replayed from, its partitions.

The log is the source of truth: a coordinator appends a change before applying and answering
it, and rebuilds a partition's state by replaying its log when this broker becomes its leader.
Every coordinator writes through one `StateStore`; it reaches the logs only through
`StateTopic`, so it does not depend on the broker.

An append is refused before anything is written when the partition could not take an acks=all
write (its ISR below min.insync.replicas), and notes the partition as touched by the current
request, whose answer then waits for the record's replication (`commits`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from strom.coordinator.runtime.commits import Commits, touch
from strom.coordinator.runtime.errors import append_error
from strom.protocol.errors import ErrorCode, KafkaError
from strom.record import (
    CONTROL_COMMIT,
    CorruptRecordError,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    parse_control_record,
)
from strom.storage.errors import StorageError
from strom.storage.validator import ORIGIN_COORDINATOR

log = logging.getLogger(__name__)

LOAD_CHUNK_BYTES = 1 << 20


class PartitionLogLike(Protocol):
    """The subset of `strom.storage.log.PartitionLog` the store uses."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int

    def append(self, records: Any, *, leader_epoch: int, now_ms: int, origin: str = ...) -> Any: ...

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> Any: ...

    def delete_records_before(self, offset: int) -> int: ...


class StateTopic(Protocol):
    """A state topic as the partition layer provides it."""

    def num_partitions(self) -> int | None:
        """Partition count, or None while the topic does not exist."""

    def create(self) -> int:
        """Create the topic (idempotent); returns its partition count or raises KafkaError."""

    def log(self, partition: int) -> PartitionLogLike | None:
        """The partition's log if this broker leads it."""

    def leader_epoch(self, partition: int) -> int: ...


@dataclass(frozen=True, slots=True)
class StateRecord:
    """One replayed record; `producer_id` is set when its batch was transactional."""

    offset: int
    key: bytes
    value: bytes | None
    producer_id: int = -1


class TxnMarkerRecord(NamedTuple):
    """A COMMIT/ABORT marker met while replaying: ends `producer_id`'s pending records."""

    producer_id: int
    commit: bool


Entry = StateRecord | TxnMarkerRecord


class StateStore:
    """Appends to and replays the partitions of one state topic."""

    def __init__(self, name: str, topic: StateTopic, now_ms: Callable[[], int],
                 commits: Commits | None = None) -> None:
        self.name = name
        self.topic = topic
        self.commits = commits or Commits()
        self._now_ms = now_ms

    def _led_log(self, partition: int) -> PartitionLogLike:
        log_ = self.topic.log(partition)
        if log_ is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"this broker does not lead {self.name}-{partition}")
        return log_

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]], *,
               producer_id: int = -1, producer_epoch: int = -1) -> int:
        """Write records as one uncompressed batch; returns the last offset (-1: nothing to
        write). With a producer id the batch is transactional: it counts once its marker
        commits it. Raises KafkaError with the coordinator's error codes."""
        if not records:
            return -1
        log_ = self._led_log(partition)
        self.commits.check(self.name, partition)
        now = self._now_ms()
        recs = (Record(i, now, k, v) for i, (k, v) in enumerate(records))
        if producer_id < 0:
            batch = build_batch(recs)
        else:
            batch = build_batch(recs, producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=0, transactional=True)
        try:
            result = log_.append(memoryview(bytearray(batch)),
                                 leader_epoch=self.topic.leader_epoch(partition), now_ms=now,
                                 origin=ORIGIN_COORDINATOR)
        except StorageError as exc:
            raise append_error(exc) from None
        touch(self.name, partition)
        return int(result.last_offset)

    def touch(self, partition: int) -> None:
        """The current request read this partition's state: its answer waits for it too."""
        touch(self.name, partition)

    def log_end_offset(self, partition: int) -> int:
        log_ = self.topic.log(partition)
        return log_.log_end_offset if log_ is not None else -1

    def prune(self, partition: int, before: int) -> int | None:
        """Drop the records below `before` (never past the high watermark); returns the new log
        start offset, or None when this broker does not lead the partition."""
        log_ = self.topic.log(partition)
        if log_ is None:
            return None
        target = min(before, log_.high_watermark)
        if target <= log_.log_start_offset:
            return log_.log_start_offset
        return log_.delete_records_before(target)

    def replay(self, partition: int) -> Iterator[list[Entry]]:
        """The partition's records and transaction markers in log order, about 1 MiB of log at
        a time (records without a key are skipped). Reads up to the log end as it moves, so a
        record written during the load counts."""
        log_ = self.topic.log(partition)
        if log_ is None:
            return
        position = log_.log_start_offset
        while position < log_.log_end_offset:
            result = log_.read(position, LOAD_CHUNK_BYTES, max_offset=log_.log_end_offset)
            if result.slice is None:
                break
            data = memoryview(result.slice.read_bytes())
            chunk: list[Entry] = []
            last = position
            for pos, header in iter_batches(data):
                last = header.base_offset + header.last_offset_delta + 1
                raw = bytes(data[pos:pos + header.size])
                if header.is_control:
                    marker = self._marker(raw, header.producer_id)
                    if marker is not None and header.base_offset >= position:
                        chunk.append(marker)
                    continue
                pid = header.producer_id if header.is_transactional else -1
                try:
                    records = decode_records(raw)
                except CorruptRecordError as exc:
                    log.error("skipping an unreadable batch at %s-%d offset %d: %s", self.name,
                              partition, header.base_offset, exc)
                    continue
                chunk.extend(StateRecord(r.offset, r.key, r.value, pid) for r in records
                             if r.offset >= position and r.key is not None)
            yield chunk
            if last <= position:
                break
            position = last

    @staticmethod
    def _marker(raw: bytes, producer_id: int) -> TxnMarkerRecord | None:
        try:
            records = decode_records(raw)
            kind, _ = parse_control_record(records[0].key, records[0].value) \
                if records else (-1, -1)
        except (CorruptRecordError, IndexError):
            return None
        return TxnMarkerRecord(producer_id, kind == CONTROL_COMMIT) if kind >= 0 else None
