"""`__transaction_state` as the transaction coordinator reads it: the runtime's `StateStore`
with transaction records decoded on replay (Kafka writes this topic uncompressed)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from strom.coordinator.runtime.commits import Commits
from strom.coordinator.runtime.store import StateRecord, StateStore, StateTopic
from strom.coordinator.transaction import records as rec
from strom.protocol.errors import ProtocolError

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"

InternalTopic = StateTopic


class TxnStore(StateStore):
    def __init__(self, topic: InternalTopic, now_ms: Callable[[], int],
                 commits: Commits | None = None) -> None:
        super().__init__(TRANSACTION_STATE_TOPIC, topic, now_ms, commits)

    def replay(  # type: ignore[override]  # decoded chunks, not the base's raw entries
        self, partition: int
    ) -> Iterator[list[rec.TxnLogEntry]]:
        """The partition's transaction records in log order, about 1 MiB of log at a time."""
        for chunk in super().replay(partition):
            out: list[rec.TxnLogEntry] = []
            for entry in chunk:
                if not isinstance(entry, StateRecord):
                    continue
                try:
                    out.append(rec.decode(entry.key, entry.value))
                except rec.UnknownKeyVersion:
                    continue
                except (ProtocolError, ValueError) as exc:
                    log.warning("skipping unreadable record at %s-%d offset %d: %s",
                                TRANSACTION_STATE_TOPIC, partition, entry.offset, exc)
            yield out
