"""ShardLoader: a partition's log is replayed a chunk per loop turn, and leadership can move
while it loads."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from strom.coordinator.runtime.loader import ShardLoader


@dataclass
class FakeShard:
    partition: int
    epoch: int
    loader: Iterator[list[str]] | None = None
    replayed: list[str] = field(default_factory=list)
    loading: bool = True


class Hooks:
    """Records what the loader asked for."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def new_shard(self, partition: int, epoch: int) -> FakeShard:
        self.events.append(("new", partition, epoch))
        return FakeShard(partition, epoch)

    def replay_chunk(self, shard: FakeShard, chunk: list[str]) -> None:
        shard.replayed += chunk

    def loaded(self, shard: FakeShard) -> None:
        shard.loading = False
        self.events.append(("loaded", shard.partition, shard.epoch))

    def unload(self, shard: FakeShard) -> None:
        self.events.append(("unload", shard.partition, shard.epoch))


def make(h: SimpleNamespace, logs: dict[int, list[list[str]]]
         ) -> tuple[ShardLoader[FakeShard, list[str]], dict[int, FakeShard], Hooks, Any]:
    loop = h.FakeLoop()
    shards: dict[int, FakeShard] = {}
    hooks = Hooks()
    loader = ShardLoader(shards, lambda p: iter(logs.get(p, [])), loop, "__state", hooks)
    return loader, shards, hooks, loop


def test_one_chunk_per_loop_turn_then_loaded(h: SimpleNamespace) -> None:
    loader, shards, hooks, loop = make(h, {0: [["a", "b"], ["c"]]})
    loader.on_leadership(0, True, 5)
    shard = shards[0]
    assert shard.replayed == ["a", "b"] and shard.loading  # the first chunk at once...
    assert loop.pending() == 1  # ...and the next one after the loop has run other work
    loop.advance(0)
    assert shard.replayed == ["a", "b", "c"]
    assert not shard.loading and shard.loader is None and loop.pending() == 0
    assert hooks.events == [("new", 0, 5), ("loaded", 0, 5)]


def test_same_epoch_is_not_reloaded_a_new_one_is(h: SimpleNamespace) -> None:
    loader, shards, hooks, _ = make(h, {})
    loader.on_leadership(0, True, 1)
    first = shards[0]
    loader.on_leadership(0, True, 1)
    assert shards[0] is first
    loader.on_leadership(0, True, 2)
    assert shards[0] is not first and shards[0].epoch == 2
    assert hooks.events == [("new", 0, 1), ("loaded", 0, 1), ("unload", 0, 1), ("new", 0, 2),
                            ("loaded", 0, 2)]


def test_leadership_lost_while_loading_stops_the_load(h: SimpleNamespace) -> None:
    loader, shards, hooks, loop = make(h, {3: [["a"], ["b"], ["c"]]})
    loader.on_leadership(3, True, 0)
    shard = shards[3]
    loader.on_leadership(3, False)
    loop.advance(0)
    assert 3 not in shards
    assert shard.replayed == ["a"]
    assert hooks.events == [("new", 3, 0), ("unload", 3, 0)]
    loader.on_leadership(3, False)  # not leading: nothing to unload
    assert hooks.events[-1] == ("unload", 3, 0)


def test_an_unreadable_log_is_logged_and_the_partition_serves_what_was_read(
        h: SimpleNamespace, caplog: pytest.LogCaptureFixture) -> None:
    def broken(partition: int) -> Iterator[list[str]]:
        yield ["a"]
        raise OSError("bad sector")

    loop = h.FakeLoop()
    shards: dict[int, FakeShard] = {}
    hooks = Hooks()
    loader = ShardLoader(shards, broken, loop, "__state", hooks)
    with caplog.at_level(logging.ERROR, logger="strom.coordinator.runtime.loader"):
        loader.on_leadership(1, True, 0)
        loop.advance(0)
    assert not shards[1].loading and shards[1].replayed == ["a"]
    assert "loading __state-1 failed" in caplog.text
