"""Persistence of group state: records appended to, and replayed from, `__consumer_offsets`.

The log is the source of truth: the coordinator appends a state change before it answers the
request that caused it, and a partition's groups are rebuilt by replaying its log when this
broker becomes its leader. The coordinator reaches the logs only through `OffsetsTopic`, so it
does not depend on the broker (and a replicated broker can plug in its own partition access).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

from strom.coordinator.group import records as rec
from strom.protocol.errors import ErrorCode, KafkaError, ProtocolError
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


class TxnMarkerRecord(NamedTuple):
    """A COMMIT/ABORT marker met while replaying: ends `producer_id`'s pending offsets."""

    producer_id: int
    commit: bool


class PartitionLogLike(Protocol):
    """The subset of `strom.storage.log.PartitionLog` the store uses."""

    log_start_offset: int
    log_end_offset: int

    def append(self, records: Any, *, leader_epoch: int, now_ms: int, origin: str = ...) -> Any: ...

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> Any: ...


class OffsetsTopic(Protocol):
    """Access to `__consumer_offsets` as the partition layer provides it."""

    def num_partitions(self) -> int | None:
        """Partition count, or None while the topic does not exist."""

    def create(self) -> int:
        """Create the topic (idempotent); returns its partition count or raises KafkaError."""

    def log(self, partition: int) -> PartitionLogLike | None:
        """The partition's log if this broker leads it."""

    def leader_epoch(self, partition: int) -> int: ...


def _append_error(exc: StorageError | Exception) -> KafkaError:
    """Kafka's mapping of append errors to group-coordinator errors."""
    code = getattr(exc, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.REQUEST_TIMED_OUT):
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        code = ErrorCode.NOT_COORDINATOR
    elif code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                  ErrorCode.INVALID_FETCH_SIZE):
        code = ErrorCode.UNKNOWN_SERVER_ERROR
    return KafkaError(code, str(exc))


class GroupStore:
    def __init__(self, topic: OffsetsTopic, now_ms: Callable[[], int]) -> None:
        self.topic = topic
        self._now_ms = now_ms

    def append(self, partition: int, records: list[rec.KeyValue], *, producer_id: int = -1,
               producer_epoch: int = -1) -> int:
        """Write records as one batch; returns the last offset. Raises KafkaError (coordinator
        error codes) when the partition is not ours or the write fails. With a producer id the
        batch is transactional (TxnOffsetCommit): it counts once its marker commits it."""
        if not records:
            return -1
        log_ = self.topic.log(partition)
        if log_ is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"this broker does not lead __consumer_offsets-{partition}")
        now = self._now_ms()
        txn = {} if producer_id < 0 else {"producer_id": producer_id,
                                          "producer_epoch": producer_epoch, "base_sequence": 0,
                                          "transactional": True}
        batch = build_batch((Record(i, now, k, v) for i, (k, v) in enumerate(records)), **txn)
        try:
            result = log_.append(memoryview(bytearray(batch)),
                                 leader_epoch=self.topic.leader_epoch(partition), now_ms=now,
                                 origin=ORIGIN_COORDINATOR)
        except StorageError as exc:
            raise _append_error(exc) from None
        return result.last_offset

    def replay(self, partition: int
               ) -> Iterator[list[rec.CoordinatorRecord | TxnMarkerRecord]]:
        """The partition's records in log order, a chunk (about 1 MiB of log) at a time, with
        transaction markers in between (records of transactional batches carry their producer
        id). Reads up to the log end as it moves, so a marker written during the load counts."""
        log_ = self.topic.log(partition)
        if log_ is None:
            return
        position = log_.log_start_offset
        while position < log_.log_end_offset:
            result = log_.read(position, LOAD_CHUNK_BYTES, max_offset=log_.log_end_offset)
            if result.slice is None:
                break
            data = memoryview(result.slice.read_bytes())
            chunk: list[rec.CoordinatorRecord | TxnMarkerRecord] = []
            last = position
            for pos, header in iter_batches(data):
                last = header.base_offset + header.last_offset_delta + 1
                if header.is_control:
                    try:
                        records = decode_records(bytes(data[pos:pos + header.size]))
                        kind, _ = parse_control_record(records[0].key, records[0].value) \
                            if records else (-1, -1)
                    except (CorruptRecordError, IndexError):
                        continue
                    if kind >= 0 and header.base_offset >= position:
                        chunk.append(TxnMarkerRecord(header.producer_id, kind == CONTROL_COMMIT))
                    continue
                pid = header.producer_id if header.is_transactional else -1
                for r in decode_records(bytes(data[pos:pos + header.size])):
                    if r.offset < position or r.key is None:
                        continue
                    try:
                        decoded = rec.decode(r.key, r.value)
                        if pid >= 0:
                            decoded = dataclasses.replace(decoded, producer_id=pid)
                        chunk.append(decoded)
                    except rec.UnknownRecordType:
                        continue
                    except ProtocolError as exc:
                        log.warning("skipping unreadable record at __consumer_offsets-%d "
                                    "offset %d: %s", partition, r.offset, exc)
            yield chunk
            if last <= position:
                break
            position = last
