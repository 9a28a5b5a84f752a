"""Persistence of share-partition state: records appended to, and replayed from,
`__share_group_state`.

As for groups and transactions, the log is the source of truth: the coordinator appends a
change before it answers the request that caused it, and a partition's share-partition states
are rebuilt by replaying its log when this broker becomes its leader. The store reaches the logs
only through `ShareStateTopic` (the group coordinator's `OffsetsTopic` shape, whose logs can
also drop their oldest records: Kafka prunes this topic with DeleteRecords, as its cleanup
policy is delete, not compact), so it does not depend on the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from strom.coordinator.group.store import LOAD_CHUNK_BYTES, PartitionLogLike, _append_error
from strom.coordinator.share import records as rec
from strom.protocol.errors import ErrorCode, KafkaError, ProtocolError
from strom.record import Record, build_batch, decode_records, iter_batches
from strom.storage.errors import StorageError
from strom.storage.validator import ORIGIN_COORDINATOR

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"


class ShareLogLike(PartitionLogLike, Protocol):
    """A partition log as the share store uses it: `PartitionLogLike` plus pruning."""

    high_watermark: int

    def delete_records_before(self, offset: int) -> int: ...


class ShareStateTopic(Protocol):
    """Access to `__share_group_state` as the partition layer provides it."""

    def num_partitions(self) -> int | None:
        """Partition count, or None while the topic does not exist."""

    def create(self) -> int:
        """Create the topic (idempotent); returns its partition count or raises KafkaError."""

    def log(self, partition: int) -> ShareLogLike | None:
        """The partition's log if this broker leads it."""

    def leader_epoch(self, partition: int) -> int: ...


class ShareStore:
    def __init__(self, topic: ShareStateTopic, now_ms: Callable[[], int]) -> None:
        self.topic = topic
        self._now_ms = now_ms

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        """Write records as one uncompressed batch (Kafka's default for this topic); returns
        the offset of the last one. Raises KafkaError with coordinator error codes."""
        log_ = self.topic.log(partition)
        if log_ is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"this broker does not lead {SHARE_STATE_TOPIC}-{partition}")
        now = self._now_ms()
        batch = build_batch(Record(i, now, k, v) for i, (k, v) in enumerate(records))
        try:
            result = log_.append(memoryview(bytearray(batch)),
                                 leader_epoch=self.topic.leader_epoch(partition), now_ms=now,
                                 origin=ORIGIN_COORDINATOR)
        except StorageError as exc:
            raise _append_error(exc) from None
        return result.last_offset

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

    def replay(self, partition: int) -> Iterator[list[tuple[int, rec.ShareRecord]]]:
        """The partition's records with their offsets, in log order, about 1 MiB of log at a
        time; reads up to the log end as it moves."""
        log_ = self.topic.log(partition)
        if log_ is None:
            return
        position = log_.log_start_offset
        while position < log_.log_end_offset:
            result = log_.read(position, LOAD_CHUNK_BYTES, max_offset=log_.log_end_offset)
            if result.slice is None:
                break
            data = memoryview(result.slice.read_bytes())
            chunk: list[tuple[int, rec.ShareRecord]] = []
            last = position
            for pos, header in iter_batches(data):
                last = header.base_offset + header.last_offset_delta + 1
                if header.is_control:
                    continue
                for r in decode_records(bytes(data[pos:pos + header.size])):
                    if r.offset < position or r.key is None:
                        continue
                    try:
                        chunk.append((r.offset, rec.decode(r.key, r.value)))
                    except rec.UnknownShareRecordType:
                        continue
                    except (ProtocolError, ValueError) as exc:
                        log.warning("skipping unreadable record at %s-%d offset %d: %s",
                                    SHARE_STATE_TOPIC, partition, r.offset, exc)
            yield chunk
            if last <= position:
                break
            position = last
