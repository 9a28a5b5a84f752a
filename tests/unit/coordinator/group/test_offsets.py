"""The offsets manager: OffsetCommit/OffsetFetch validation, OffsetDelete, append failures,
expiration, deleted topics, and that it works as a part built around the shared state."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strom.coordinator.group.classic_groups import ClassicGroupManager
from strom.coordinator.group.offsets import OffsetManager
from strom.coordinator.group.shards import GroupShards
from strom.coordinator.group.state import ClassicState
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError
from strom.storage.errors import KafkaStorageError


def test_simple_commit_into_new_group_and_fetch(env, h):
    c = env.coordinator
    assert h.commit(c, "simple", {("t", 0): 10, ("t", 1): 20}) == {("t", 0): 0, ("t", 1): 0}
    assert h.fetched(c, "simple", [("t", [0, 1, 2])]) == {("t", 0): 10, ("t", 1): 20, ("t", 2): -1}
    assert h.fetched(c, "simple") == {("t", 0): 10, ("t", 1): 20}
    assert c.group("simple").state == ClassicState.EMPTY and c.group("simple").protocol_type \
        is None
    assert h.fetched(c, "never-seen", [("t", [0])]) == {("t", 0): -1}
    assert c.offsets.fetch_offsets("never-seen", None) == []
    rows = c.offsets.fetch_offsets("simple", [("t", [0])])
    assert rows == [("t", [(0, 10, 3, "")])]  # leader epoch and (empty) metadata kept


def test_commit_validation_against_the_group(env, h):
    c = env.coordinator
    mid = h.one_member(env, h, "g")
    assert h.commit(c, "g", {("t", 0): 5}, generation=1, member=mid) == {("t", 0): 0}
    with pytest.raises(KafkaError) as exc:
        h.commit(c, "g", {("t", 0): 6}, generation=2, member=mid)
    assert exc.value.code == E.ILLEGAL_GENERATION
    with pytest.raises(KafkaError) as exc:
        h.commit(c, "g", {("t", 0): 6}, generation=1, member="stranger")
    assert exc.value.code == E.UNKNOWN_MEMBER_ID
    with pytest.raises(KafkaError) as exc:  # an admin/assign() commit into an active group
        h.commit(c, "g", {("t", 0): 6})
    assert exc.value.code == E.UNKNOWN_MEMBER_ID
    for version, code in ((8, E.ILLEGAL_GENERATION), (9, E.GROUP_ID_NOT_FOUND)):
        with pytest.raises(KafkaError) as exc:
            h.commit(c, "no-group", {("t", 0): 1}, generation=3, member="m", version=version)
        assert exc.value.code == code
    with pytest.raises(KafkaError) as exc:
        h.commit(c, "", {("t", 0): 1})
    assert exc.value.code == E.INVALID_GROUP_ID
    assert h.fetched(c, "g", [("t", [0])]) == {("t", 0): 5}


def test_commit_during_completing_rebalance_is_refused(env, h):
    c = env.coordinator
    first = h.Reply()
    c.classic.join_group(h.join_req("g"), first)
    mid = first.value.member_id
    c.classic.join_group(h.join_req("g", mid), h.Reply())
    env.loop.advance(0)
    assert c.group("g").state == ClassicState.COMPLETING_REBALANCE
    with pytest.raises(KafkaError) as exc:
        h.commit(c, "g", {("t", 0): 1}, generation=1, member=mid)
    assert exc.value.code == E.REBALANCE_IN_PROGRESS


def test_oversized_metadata_is_refused_per_partition(env, h):
    c = env.coordinator
    limit = env.config.offset_metadata_max_bytes
    result = h.commit(c, "g", {("t", 0): (1, "x" * (limit + 1)), ("t", 1): (2, "x" * limit)})
    assert result == {("t", 0): E.OFFSET_METADATA_TOO_LARGE, ("t", 1): E.NONE}
    assert h.fetched(c, "g", [("t", [0, 1])]) == {("t", 0): -1, ("t", 1): 2}


def test_append_failure_is_reported_and_changes_nothing(env, h):
    c = env.coordinator
    env.offsets.fail_appends = KafkaStorageError("disk on fire")
    with pytest.raises(KafkaError) as exc:
        h.commit(c, "g", {("t", 0): 1})
    assert exc.value.code == E.NOT_COORDINATOR
    assert c.group("g") is None
    env.offsets.fail_appends = None
    assert h.fetched(c, "g", [("t", [0])]) == {("t", 0): -1}


def test_delete_offsets(env, h):
    c = env.coordinator
    h.commit(c, "s", {("t", 0): 3, ("t", 1): 4, ("u", 0): 5})
    assert c.offsets.delete_offsets("s", [("t", [0])]) == [("t", [(0, E.NONE)])]
    assert h.fetched(c, "s") == {("t", 1): 4, ("u", 0): 5}
    with pytest.raises(KafkaError) as exc:
        c.offsets.delete_offsets("nope", [("t", [0])])
    assert exc.value.code == E.GROUP_ID_NOT_FOUND
    h.one_member(env, h, "g")  # active, subscription not parseable: counts as subscribed
    assert c.offsets.delete_offsets("g", [("t", [0])]) == [
        ("t", [(0, E.GROUP_SUBSCRIBED_TO_TOPIC)])]


def test_expiration_of_simple_and_empty_groups(env, h):
    c = env.coordinator
    env.config.offsets_retention_ms = 60_000
    h.commit(c, "simple", {("t", 0): 1})
    mid = h.one_member(env, h, "g")
    h.commit(c, "g", {("t", 0): 2}, generation=1, member=mid)

    def live(ms):  # let time pass while the member keeps heartbeating
        for _ in range(ms // 5000):
            env.loop.advance(5000)
            assert c.classic.heartbeat("g", 1, mid, None) == E.NONE
        env.loop.advance(ms % 5000)

    live(30_000)
    h.commit(c, "simple", {("t", 1): 3})
    live(30_001)
    assert c.offsets.expire_offsets() == 1  # simple group: offsets age from their commit
    assert h.fetched(c, "simple") == {("t", 1): 3}
    assert h.fetched(c, "g") == {("t", 0): 2}  # an active group keeps its offsets
    c.classic.leave_group("g", [(mid, None, None)])  # empty from now: its offsets start ageing
    env.loop.advance(59_000)
    c.offsets.expire_offsets()
    assert h.fetched(c, "g") == {("t", 0): 2}  # committed 119 s ago, but empty for only 59 s
    assert c.group("simple") is None  # its last offset aged out: the empty group goes too
    env.loop.advance(1_001)
    assert c.offsets.expire_offsets() == 1
    assert c.group("g") is None
    c2 = env.restart()
    assert c2.group("g") is None and c2.group("simple") is None


def test_expiration_runs_periodically(env, h):
    c = env.coordinator
    env.config.offsets_retention_ms = 1000
    env.config.offsets_retention_check_interval = 500
    c.start()
    h.commit(c, "s", {("t", 0): 1})
    env.loop.advance(1600)
    assert c.group("s") is None


def test_retention_time_from_old_commit_versions(env, h):
    c = env.coordinator
    h.commit(c, "s", {("t", 0): 1}, retention=5000, version=2)
    env.loop.advance(5000)
    assert c.offsets.expire_offsets() == 1


def test_offsets_of_deleted_topics_are_dropped(env, h):
    c = env.coordinator
    h.commit(c, "s", {("gone", 0): 4, ("kept", 0): 5})
    c.on_topics_deleted({"gone"})
    assert h.fetched(c, "s") == {("kept", 0): 5}
    assert h.fetched(env.restart(), "s") == {("kept", 0): 5}


def test_the_offsets_manager_is_a_part_built_around_the_shared_state(env, h):
    """No facade: the shared state, the classic manager it consults, and the offsets manager."""
    listener = SimpleNamespace(replay=lambda shard, r: None, loaded=lambda shard: None,
                               unloading=lambda shard: None)
    state = GroupShards(env.config, env.offsets, env.topics, env.loop, env.loop.now_ms, listener)
    offsets = OffsetManager(state, ClassicGroupManager(state))
    state.on_leadership(state.partition_for("s"), True, 0)
    assert h.commit(offsets, "s", {("t", 0): 9}) == {("t", 0): E.NONE}
    assert h.fetched(offsets, "s") == {("t", 0): 9}
    assert state.group("s").protocol_type is None  # a "simple" group, made by the commit
    assert h.fetched(env.restart(), "s") == {("t", 0): 9}  # and the log has it
