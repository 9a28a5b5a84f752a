"""`__consumer_offsets` as the group coordinator reads it: the runtime's `StateStore` with the
group records decoded on replay (records of transactional batches carry their producer id, so
TxnOffsetCommit offsets wait for their marker)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator

from strom.coordinator.group import records as rec
from strom.coordinator.runtime.commits import Commits
from strom.coordinator.runtime.store import StateRecord, StateStore, StateTopic, TxnMarkerRecord
from strom.protocol.errors import ProtocolError

log = logging.getLogger(__name__)

STATE_TOPIC = "__consumer_offsets"

OffsetsTopic = StateTopic  # partition count, creation, local logs, leader epochs


class GroupStore(StateStore):
    def __init__(self, topic: OffsetsTopic, now_ms: Callable[[], int],
                 commits: Commits | None = None) -> None:
        super().__init__(STATE_TOPIC, topic, now_ms, commits)

    def replay(self, partition: int  # type: ignore[override]  # decoded chunks, not raw entries
               ) -> Iterator[list[rec.CoordinatorRecord | TxnMarkerRecord]]:
        """The partition's group records and transaction markers in log order, a chunk at a
        time (unknown record types are skipped, unreadable ones logged)."""
        for chunk in super().replay(partition):
            yield [d for d in (self._decode(partition, e) for e in chunk) if d is not None]

    @staticmethod
    def _decode(partition: int, entry: StateRecord | TxnMarkerRecord
                ) -> rec.CoordinatorRecord | TxnMarkerRecord | None:
        if isinstance(entry, TxnMarkerRecord):
            return entry
        try:
            decoded = rec.decode(entry.key, entry.value)
        except rec.UnknownRecordType:
            return None
        except ProtocolError as exc:
            log.warning("skipping unreadable record at %s-%d offset %d: %s", STATE_TOPIC,
                        partition, entry.offset, exc)
            return None
        if entry.producer_id >= 0:
            decoded = dataclasses.replace(decoded, producer_id=entry.producer_id)
        return decoded
