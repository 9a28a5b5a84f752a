"""Offset commits/fetches, durability through the log, expiration, list/describe/delete."""

from __future__ import annotations

import pytest

from strom.coordinator.group import records as rec
from strom.coordinator.group.state import ClassicState
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError
from strom.storage.errors import KafkaStorageError


def commit(c, group, offsets, *, generation=-1, member="", version=8, instance=None,
           retention=-1):
    """offsets: {(topic, partition): offset} -> {(topic, partition): error code}."""
    by_topic: dict[str, list] = {}
    for (t, p), o in offsets.items():
        meta = o[1] if isinstance(o, tuple) else None
        by_topic.setdefault(t, []).append((p, o[0] if isinstance(o, tuple) else o, 3, meta))
    result = c.commit_offsets(group, generation, member, instance, retention,
                              list(by_topic.items()), version)
    return {(t, p): code for t, rows in result for p, code in rows}


def fetched(c, group, topics=None, **kw):
    return {(t, p): off for t, rows in c.fetch_offsets(group, topics, **kw) for p, off, _, _ in rows}


def one_member(env, h, group):
    c = env.coordinator
    first = h.Reply()
    c.join_group(h.join_req(group), first)
    mid = first.value["member_id"]
    join = h.Reply()
    c.join_group(h.join_req(group, mid), join)
    env.loop.advance(0)
    s = h.Reply()
    c.sync_group(group, 1, mid, None, None, None, [(mid, b"a")], s)
    assert s.value["error_code"] == 0
    return mid


def test_simple_commit_into_new_group_and_fetch(env):
    c = env.coordinator
    assert commit(c, "simple", {("t", 0): 10, ("t", 1): 20}) == {("t", 0): 0, ("t", 1): 0}
    assert fetched(c, "simple", [("t", [0, 1, 2])]) == {("t", 0): 10, ("t", 1): 20, ("t", 2): -1}
    assert fetched(c, "simple") == {("t", 0): 10, ("t", 1): 20}
    assert c.group("simple").state == ClassicState.EMPTY and c.group("simple").protocol_type \
        is None
    assert fetched(c, "never-seen", [("t", [0])]) == {("t", 0): -1}
    assert c.fetch_offsets("never-seen", None) == []
    rows = c.fetch_offsets("simple", [("t", [0])])
    assert rows == [("t", [(0, 10, 3, "")])]  # leader epoch and (empty) metadata kept


def test_commit_validation_against_the_group(env, h):
    c = env.coordinator
    mid = one_member(env, h, "g")
    assert commit(c, "g", {("t", 0): 5}, generation=1, member=mid) == {("t", 0): 0}
    with pytest.raises(KafkaError) as exc:
        commit(c, "g", {("t", 0): 6}, generation=2, member=mid)
    assert exc.value.code == E.ILLEGAL_GENERATION
    with pytest.raises(KafkaError) as exc:
        commit(c, "g", {("t", 0): 6}, generation=1, member="stranger")
    assert exc.value.code == E.UNKNOWN_MEMBER_ID
    with pytest.raises(KafkaError) as exc:  # an admin/assign() commit into an active group
        commit(c, "g", {("t", 0): 6})
    assert exc.value.code == E.UNKNOWN_MEMBER_ID
    for version, code in ((8, E.ILLEGAL_GENERATION), (9, E.GROUP_ID_NOT_FOUND)):
        with pytest.raises(KafkaError) as exc:
            commit(c, "no-group", {("t", 0): 1}, generation=3, member="m", version=version)
        assert exc.value.code == code
    with pytest.raises(KafkaError) as exc:
        commit(c, "", {("t", 0): 1})
    assert exc.value.code == E.INVALID_GROUP_ID
    assert fetched(c, "g", [("t", [0])]) == {("t", 0): 5}


def test_commit_during_completing_rebalance_is_refused(env, h):
    c = env.coordinator
    first = h.Reply()
    c.join_group(h.join_req("g"), first)
    mid = first.value["member_id"]
    c.join_group(h.join_req("g", mid), h.Reply())
    env.loop.advance(0)
    assert c.group("g").state == ClassicState.COMPLETING_REBALANCE
    with pytest.raises(KafkaError) as exc:
        commit(c, "g", {("t", 0): 1}, generation=1, member=mid)
    assert exc.value.code == E.REBALANCE_IN_PROGRESS


def test_oversized_metadata_is_refused_per_partition(env):
    c = env.coordinator
    limit = env.config.offset_metadata_max_bytes
    result = commit(c, "g", {("t", 0): (1, "x" * (limit + 1)), ("t", 1): (2, "x" * limit)})
    assert result == {("t", 0): E.OFFSET_METADATA_TOO_LARGE, ("t", 1): E.NONE}
    assert fetched(c, "g", [("t", [0, 1])]) == {("t", 0): -1, ("t", 1): 2}


def test_offsets_and_groups_survive_a_restart(env, h):
    c = env.coordinator
    mid = one_member(env, h, "g")
    commit(c, "g", {("t", 0): (7, "m")}, generation=1, member=mid)
    commit(c, "simple", {("u", 3): 99})
    commit(c, "simple", {("u", 3): 100})  # the latest commit wins on replay
    c2 = env.restart()
    assert c2.fetch_offsets("g", [("t", [0])]) == [("t", [(0, 7, 3, "m")])]
    assert fetched(c2, "simple") == {("u", 3): 100}
    group = c2.group("g")
    assert group.state == ClassicState.STABLE and group.generation == 1
    assert group.members[mid].assignment == b"a"
    assert c2.heartbeat("g", 1, mid, None) == E.NONE  # members carry on, no rebalance
    env.loop.advance(env.config.min_session_timeout * 2)  # ...unless they stop heartbeating
    assert c2.group("g").members == {}


def test_the_log_holds_kafka_records(env, h):
    c = env.coordinator
    commit(c, "g", {("t", 0): 7})
    log = env.offsets.logs[c.partition_for("g")]
    records = [r for chunk in c.store.replay(c.partition_for("g")) for r in chunk]
    assert log.log_end_offset == 1
    assert [(r.type, r.key, r.value["offset"]) for r in records] == [
        (rec.OFFSET_COMMIT, {"group": "g", "topic": "t", "partition": 0}, 7)]


def test_append_failure_is_reported_and_changes_nothing(env):
    c = env.coordinator
    env.offsets.fail_appends = KafkaStorageError("disk on fire")
    with pytest.raises(KafkaError) as exc:
        commit(c, "g", {("t", 0): 1})
    assert exc.value.code == E.NOT_COORDINATOR
    assert c.group("g") is None
    env.offsets.fail_appends = None
    assert fetched(c, "g", [("t", [0])]) == {("t", 0): -1}


def test_delete_groups(env, h):
    c = env.coordinator
    mid = one_member(env, h, "g")
    commit(c, "g", {("t", 0): 3}, generation=1, member=mid)
    assert c.delete_groups(["g", "missing"]) == [("g", E.NON_EMPTY_GROUP),
                                                 ("missing", E.GROUP_ID_NOT_FOUND)]
    c.leave_group("g", [(mid, None, None)])
    assert c.group("g").state == ClassicState.EMPTY
    assert c.delete_groups(["g"]) == [("g", E.NONE)]
    assert c.group("g") is None
    assert fetched(c, "g", [("t", [0])]) == {("t", 0): -1}
    c2 = env.restart()  # the tombstones are in the log
    assert c2.group("g") is None and fetched(c2, "g") == {}


def test_delete_offsets(env, h):
    c = env.coordinator
    commit(c, "s", {("t", 0): 3, ("t", 1): 4, ("u", 0): 5})
    assert c.delete_offsets("s", [("t", [0])]) == [("t", [(0, E.NONE)])]
    assert fetched(c, "s") == {("t", 1): 4, ("u", 0): 5}
    with pytest.raises(KafkaError) as exc:
        c.delete_offsets("nope", [("t", [0])])
    assert exc.value.code == E.GROUP_ID_NOT_FOUND
    one_member(env, h, "g")  # active, subscription not parseable: counts as subscribed
    assert c.delete_offsets("g", [("t", [0])]) == [("t", [(0, E.GROUP_SUBSCRIBED_TO_TOPIC)])]


def test_expiration_of_simple_and_empty_groups(env, h):
    c = env.coordinator
    env.config.offsets_retention_ms = 60_000
    commit(c, "simple", {("t", 0): 1})
    mid = one_member(env, h, "g")
    commit(c, "g", {("t", 0): 2}, generation=1, member=mid)

    def live(ms):  # let time pass while the member keeps heartbeating
        for _ in range(ms // 5000):
            env.loop.advance(5000)
            assert c.heartbeat("g", 1, mid, None) == E.NONE
        env.loop.advance(ms % 5000)

    live(30_000)
    commit(c, "simple", {("t", 1): 3})
    live(30_001)
    assert c.expire_offsets() == 1  # simple group: offsets age from their commit
    assert fetched(c, "simple") == {("t", 1): 3}
    assert fetched(c, "g") == {("t", 0): 2}  # an active group keeps its offsets
    c.leave_group("g", [(mid, None, None)])  # empty from now: its offsets start ageing
    env.loop.advance(59_000)
    c.expire_offsets()
    assert fetched(c, "g") == {("t", 0): 2}  # committed 119 s ago, but empty for only 59 s
    assert c.group("simple") is None  # its last offset aged out: the empty group goes too
    env.loop.advance(1_001)
    assert c.expire_offsets() == 1
    assert c.group("g") is None
    c2 = env.restart()
    assert c2.group("g") is None and c2.group("simple") is None


def test_expiration_runs_periodically(env):
    c = env.coordinator
    env.config.offsets_retention_ms = 1000
    env.config.offsets_retention_check_interval = 500
    c.start()
    commit(c, "s", {("t", 0): 1})
    env.loop.advance(1600)
    assert c.group("s") is None


def test_retention_time_from_old_commit_versions(env):
    c = env.coordinator
    commit(c, "s", {("t", 0): 1}, retention=5000, version=2)
    env.loop.advance(5000)
    assert c.expire_offsets() == 1


def test_list_and_describe_groups(env, h):
    c = env.coordinator
    mid = one_member(env, h, "active")
    commit(c, "simple", {("t", 0): 1})
    error, groups = c.list_groups()
    assert error == 0
    by_id = {g["group_id"]: g for g in groups}
    assert by_id["active"] == {"group_id": "active", "protocol_type": "consumer",
                               "group_state": "Stable", "group_type": "classic"}
    assert by_id["simple"]["protocol_type"] == "" and by_id["simple"]["group_state"] == "Empty"
    assert [g["group_id"] for g in c.list_groups(["stable"])[1]] == ["active"]
    assert [g["group_id"] for g in c.list_groups(["Empty"], ["classic"])[1]] == ["simple"]
    assert c.list_groups([], ["consumer"])[1] == []
    (d, missing) = c.describe_groups(["active", "missing"], include_authorized_operations=True,
                                     version=6)
    assert d["group_state"] == "Stable" and d["protocol_data"] == "range"
    assert d["members"][0]["member_id"] == mid
    assert d["members"][0]["member_assignment"] == b"a"
    assert d["members"][0]["client_host"] == "/127.0.0.1"
    assert d["authorized_operations"] > 0
    assert missing["error_code"] == E.GROUP_ID_NOT_FOUND
    (old,) = c.describe_groups(["missing"], include_authorized_operations=False, version=5)
    assert old["error_code"] == 0 and old["group_state"] == "Dead"


def test_offsets_of_deleted_topics_are_dropped(env):
    c = env.coordinator
    commit(c, "s", {("gone", 0): 4, ("kept", 0): 5})
    c.on_topics_deleted({"gone"})
    assert fetched(c, "s") == {("kept", 0): 5}
    assert fetched(env.restart(), "s") == {("kept", 0): 5}
