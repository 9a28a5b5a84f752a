"""GroupShards, the state the group managers share: which partitions this broker serves, their
loading from `__consumer_offsets`, and the changes every manager makes through it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from strom.coordinator.group import records as rec
from strom.coordinator.group.shards import GroupShards, LogEntry, Shard, group_tombstones
from strom.coordinator.group.state import ClassicGroup, ConsumerGroup
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError


class Listener:
    """Records what a load hands to the coordinator."""

    def __init__(self) -> None:
        self.replayed: list[tuple[int, LogEntry]] = []
        self.events: list[tuple[str, int]] = []

    def replay(self, shard: Shard, record: LogEntry) -> None:
        self.replayed.append((shard.partition, record))

    def loaded(self, shard: Shard) -> None:
        self.events.append(("loaded", shard.partition))

    def unloading(self, shard: Shard) -> None:
        self.events.append(("unloading", shard.partition))


@pytest.fixture
def shared(env: Any) -> SimpleNamespace:
    listener = Listener()
    state = GroupShards(env.config, env.offsets, env.topics, env.loop, env.loop.now_ms, listener)
    return SimpleNamespace(state=state, listener=listener, loop=env.loop)


def test_serving_answers_the_errors_kafka_gives(shared: SimpleNamespace) -> None:
    state = shared.state
    with pytest.raises(KafkaError) as exc:
        state.serving("")
    assert exc.value.code == E.INVALID_GROUP_ID
    with pytest.raises(KafkaError) as exc:
        state.serving("g")
    assert exc.value.code == E.NOT_COORDINATOR
    state.on_leadership(state.partition_for("g"), True, 0)  # empty log: loaded at once
    assert state.serving("g").partition == state.partition_for("g")
    assert state.group("g") is None


def test_a_load_hands_every_record_to_the_listener_in_log_order(
        shared: SimpleNamespace) -> None:
    state, listener = shared.state, shared.listener
    p = state.partition_for("g")
    state.store.append(p, [rec.offset_commit("g", "t", 0, 5, -1, "", 1),
                           rec.group_tombstone("g")])
    state.on_leadership(p, True, 0)
    assert state.is_loading(p)
    with pytest.raises(KafkaError) as exc:
        state.serving("g")
    assert exc.value.code == E.COORDINATOR_LOAD_IN_PROGRESS
    shared.loop.advance(0)
    assert not state.is_loading(p)
    assert [(part, r.type, r.value is None) for part, r in listener.replayed] == [
        (p, rec.OFFSET_COMMIT, False), (p, rec.GROUP_METADATA, True)]
    assert listener.events == [("loaded", p)]


def test_losing_leadership_drops_the_shard_and_its_timers(shared: SimpleNamespace) -> None:
    state, listener = shared.state, shared.listener
    p = state.partition_for("g")
    state.on_leadership(p, True, 0)
    shard = state.serving("g")
    state.new_classic_group(shard, "g")
    shard.offsets["g"] = {}
    fired: list[str] = []
    state.timers.schedule(("hb", "g", "m"), 1000, lambda: fired.append("hb"))
    state.on_leadership(p, False)
    shared.loop.advance(2000)
    assert fired == [] and len(state.timers) == 0
    assert listener.events == [("loaded", p), ("unloading", p)]
    assert shard.groups == {} and shard.offsets == {} and state.group("g") is None


def test_delete_group_state_writes_tombstones_and_forgets_the_group(
        shared: SimpleNamespace, env: Any) -> None:
    state = shared.state
    p = state.partition_for("g")
    state.on_leadership(p, True, 0)
    shard = state.serving("g")
    group = state.new_classic_group(shard, "g")
    shard.offsets["g"] = {}
    state.timers.schedule(("join", "g"), 1000, lambda: None)
    before = env.offsets.logs[p].log_end_offset
    state.delete_group_state(shard, group)
    assert env.offsets.logs[p].log_end_offset == before + 1
    assert "g" not in shard.groups and "g" in shard.offsets  # offsets are not its business
    assert ("join", "g") not in state.timers


def test_group_tombstones_cover_members_and_targets() -> None:
    assert group_tombstones(ClassicGroup("g", 0)) == [rec.group_tombstone("g")]
    group = ConsumerGroup("c", 0)
    group.target["gone"] = {}
    records = group_tombstones(group)
    assert len(records) == 3 + 3  # the target's member records, then the group's three
    assert all(value is None for _, value in records)


def test_not_coordinator_and_loading_through_the_coordinator(env, h):
    c = env.coordinator
    gid = "somegroup"
    p = c.partition_for(gid)
    c.on_leadership(p, False)
    assert c.classic.heartbeat(gid, 1, "m", None) == E.NOT_COORDINATOR
    r = h.Reply()
    c.classic.join_group(h.join_req(gid), r)
    assert r.value.error_code == E.NOT_COORDINATOR
    c.on_leadership(p, True, 1)  # the log is empty: loads at once
    assert c.classic.heartbeat(gid, 1, "m", None) == E.UNKNOWN_MEMBER_ID
    # with records in the log, the partition answers LOAD_IN_PROGRESS until replay is done
    c.offsets.commit_offsets(gid, -1, "", None, -1, [("t", [(0, 5, -1, None)])], 8)
    c.on_leadership(p, False)
    c.on_leadership(p, True, 2)
    assert c.classic.heartbeat(gid, 1, "m", None) == E.COORDINATOR_LOAD_IN_PROGRESS
    env.loop.advance(0)
    assert c.offsets.fetch_offsets(gid, [("t", [0])]) == [("t", [(0, 5, -1, "")])]
