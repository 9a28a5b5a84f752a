"""Persistence of transaction state: records appended to, and replayed from,
`__transaction_state`.

As for groups, the log is the source of truth: a transition is appended before the request that
caused it is answered (or before markers are written), and a partition's transactional ids are
rebuilt by replaying its log when this broker becomes its leader. The store reaches the logs
only through `InternalTopic` (the group coordinator's `OffsetsTopic` protocol), so it does not
depend on the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from strom.coordinator.group.store import LOAD_CHUNK_BYTES, OffsetsTopic, _append_error
from strom.coordinator.transaction import records as rec
from strom.protocol.errors import ErrorCode, KafkaError, ProtocolError
from strom.record import Record, build_batch, decode_records, iter_batches
from strom.storage.errors import StorageError
from strom.storage.validator import ORIGIN_COORDINATOR

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"

InternalTopic = OffsetsTopic  # same shape: partition count, creation, local logs, leader epochs


class TxnStore:
    def __init__(self, topic: InternalTopic, now_ms: Callable[[], int]) -> None:
        self.topic = topic
        self._now_ms = now_ms

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        """Write records as one uncompressed batch (Kafka enforces no compression here);
        returns the last offset. Raises KafkaError with coordinator error codes."""
        if not records:
            return -1
        log_ = self.topic.log(partition)
        if log_ is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"this broker does not lead {TRANSACTION_STATE_TOPIC}-{partition}")
        now = self._now_ms()
        batch = build_batch(Record(i, now, k, v) for i, (k, v) in enumerate(records))
        try:
            result = log_.append(memoryview(bytearray(batch)),
                                 leader_epoch=self.topic.leader_epoch(partition), now_ms=now,
                                 origin=ORIGIN_COORDINATOR)
        except StorageError as exc:
            raise _append_error(exc) from None
        return result.last_offset

    def replay(self, partition: int) -> Iterator[list[rec.TxnLogEntry]]:
        """The partition's records in log order, about 1 MiB of log at a time."""
        log_ = self.topic.log(partition)
        if log_ is None:
            return
        position = log_.log_start_offset
        while position < log_.log_end_offset:
            result = log_.read(position, LOAD_CHUNK_BYTES, max_offset=log_.log_end_offset)
            if result.slice is None:
                break
            data = memoryview(result.slice.read_bytes())
            chunk: list[rec.TxnLogEntry] = []
            last = position
            for pos, header in iter_batches(data):
                last = header.base_offset + header.last_offset_delta + 1
                if header.is_control:
                    continue
                for r in decode_records(bytes(data[pos:pos + header.size])):
                    if r.offset < position or r.key is None:
                        continue
                    try:
                        chunk.append(rec.decode(r.key, r.value))
                    except rec.UnknownKeyVersion:
                        continue
                    except (ProtocolError, ValueError) as exc:
                        log.warning("skipping unreadable record at %s-%d offset %d: %s",
                                    TRANSACTION_STATE_TOPIC, partition, r.offset, exc)
            yield chunk
            if last <= position:
                break
            position = last
