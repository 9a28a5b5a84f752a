"""`__share_group_state` as the share coordinator reads it: the runtime's `StateStore` with
share records decoded on replay, each with its offset (the coordinator prunes records no key
needs any more: Kafka's cleanup policy for this topic is delete, not compact)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from strom.coordinator.runtime.commits import Commits
from strom.coordinator.runtime.store import StateRecord, StateStore, StateTopic
from strom.coordinator.share import records as rec
from strom.protocol.errors import ProtocolError

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"

ShareStateTopic = StateTopic


class ShareStore(StateStore):
    def __init__(self, topic: ShareStateTopic, now_ms: Callable[[], int],
                 commits: Commits | None = None) -> None:
        super().__init__(SHARE_STATE_TOPIC, topic, now_ms, commits)

    def replay(self, partition: int  # type: ignore[override]  # decoded chunks, not raw entries
               ) -> Iterator[list[tuple[int, rec.ShareRecord]]]:
        """The partition's share records with their offsets, in log order, a chunk at a time."""
        for chunk in super().replay(partition):
            out: list[tuple[int, rec.ShareRecord]] = []
            for entry in chunk:
                if not isinstance(entry, StateRecord):
                    continue
                try:
                    out.append((entry.offset, rec.decode(entry.key, entry.value)))
                except rec.UnknownShareRecordType:
                    continue
                except (ProtocolError, ValueError) as exc:
                    log.warning("skipping unreadable record at %s-%d offset %d: %s",
                                SHARE_STATE_TOPIC, partition, entry.offset, exc)
            yield out
