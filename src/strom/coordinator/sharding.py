"""Loading coordinator state for the internal-topic partitions this broker leads.

Both coordinators keep their state in an internal topic (`__consumer_offsets`,
`__transaction_state`) and own the partitions whose leader this broker is. When leadership
arrives, the partition's records are replayed a chunk at a time, yielding to the event loop in
between, and the partition answers COORDINATOR_LOAD_IN_PROGRESS until `_loaded` runs; when
leadership leaves, `_unload` drops its state.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class ShardedCoordinator:
    """Mixin: subclasses set `shards`, `store` (with `replay(partition)`), `scheduler` and
    `state_topic`, and implement `_new_shard`, `_replay_chunk`, `_loaded` and `_unload`."""

    shards: dict[int, Any]
    store: Any
    scheduler: Any
    state_topic: str

    def _new_shard(self, partition: int, epoch: int) -> Any:
        raise NotImplementedError

    def _replay_chunk(self, shard: Any, chunk: Any) -> None:
        raise NotImplementedError

    def _loaded(self, shard: Any) -> None:
        raise NotImplementedError

    def _unload(self, shard: Any) -> None:
        raise NotImplementedError

    def on_leadership(self, partition: int, leader: bool, epoch: int = 0) -> None:
        """Called when this broker starts or stops leading `<state_topic>-<partition>`."""
        old = self.shards.get(partition)
        if leader:
            if old is not None and old.epoch == epoch:
                return
            if old is not None:
                self._unload(old)
            shard = self.shards[partition] = self._new_shard(partition, epoch)
            shard.loader = self.store.replay(partition)
            self._load_step(shard)
        elif old is not None:
            self._unload(old)
            del self.shards[partition]

    def _load_step(self, shard: Any) -> None:
        """Replay one chunk, then yield to the loop; the partition answers when done."""
        if self.shards.get(shard.partition) is not shard or shard.loader is None:
            return
        try:
            chunk = next(shard.loader)
        except StopIteration:
            shard.loader = None
            self._loaded(shard)
            return
        except Exception:
            log.exception("loading %s-%d failed", self.state_topic, shard.partition)
            shard.loader = None
            self._loaded(shard)
            return
        self._replay_chunk(shard, chunk)
        self.scheduler.call_later(0, self._load_step, shard)
