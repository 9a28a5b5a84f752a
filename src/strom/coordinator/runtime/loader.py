"""Loading coordinator state for the internal-topic partitions this broker leads.

Both coordinators keep their state in an internal topic (`__consumer_offsets`,
`__transaction_state`) and own the partitions whose leader this broker is. When leadership
arrives, the partition's records are replayed a chunk at a time, yielding to the event loop in
between, and the partition answers COORDINATOR_LOAD_IN_PROGRESS until `loaded` runs; when
leadership leaves, `unload` drops its state.

`ShardLoader` does this by composition (the group coordinator's shared state holds one);
`ShardedCoordinator` is the same loader as a mixin, for the transaction coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from strom.coordinator.runtime.timers import Scheduler

log = logging.getLogger(__name__)

C = TypeVar("C")  # one chunk of replayed records
C_contra = TypeVar("C_contra", contravariant=True)


class LoadableShard(Protocol):
    """The state of one partition: which partition, which leader epoch, its pending replay."""

    partition: int
    epoch: int
    loader: Iterator[Any] | None


S = TypeVar("S", bound=LoadableShard)


class ShardHooks(Protocol[S, C_contra]):
    """What the owner of the shards does at each step of a load."""

    def new_shard(self, partition: int, epoch: int) -> S: ...

    def replay_chunk(self, shard: S, chunk: C_contra) -> None: ...

    def loaded(self, shard: S) -> None: ...

    def unload(self, shard: S) -> None: ...


class ShardLoader(Generic[S, C]):
    """Creates, loads and drops the shards of `shards` as leadership comes and goes."""

    def __init__(self, shards: dict[int, S], replay: Callable[[int], Iterator[C]],
                 scheduler: Scheduler, state_topic: str, hooks: ShardHooks[S, C]) -> None:
        self.shards = shards
        self._replay = replay
        self._scheduler = scheduler
        self._state_topic = state_topic
        self._hooks = hooks

    def on_leadership(self, partition: int, leader: bool, epoch: int = 0) -> None:
        """Called when this broker starts or stops leading `<state_topic>-<partition>`."""
        old = self.shards.get(partition)
        if leader:
            if old is not None and old.epoch == epoch:
                return
            if old is not None:
                self._hooks.unload(old)
            shard = self.shards[partition] = self._hooks.new_shard(partition, epoch)
            shard.loader = self._replay(partition)
            self._load_step(shard)
        elif old is not None:
            self._hooks.unload(old)
            del self.shards[partition]

    def _load_step(self, shard: S) -> None:
        """Replay one chunk, then yield to the loop; the partition answers when done."""
        if self.shards.get(shard.partition) is not shard or shard.loader is None:
            return
        try:
            chunk = next(shard.loader)
        except StopIteration:
            shard.loader = None
            self._hooks.loaded(shard)
            return
        except Exception:
            log.exception("loading %s-%d failed", self._state_topic, shard.partition)
            shard.loader = None
            self._hooks.loaded(shard)
            return
        self._hooks.replay_chunk(shard, chunk)
        self._scheduler.call_later(0, self._load_step, shard)


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
        ShardLoader(self.shards, self.store.replay, self.scheduler, self.state_topic,
                    _MixinHooks(self)).on_leadership(partition, leader, epoch)


class _MixinHooks:
    """`ShardHooks` over a `ShardedCoordinator`'s underscored methods."""

    def __init__(self, owner: ShardedCoordinator) -> None:
        self.new_shard = owner._new_shard
        self.replay_chunk = owner._replay_chunk
        self.loaded = owner._loaded
        self.unload = owner._unload
