"""The coordinator facade: records replayed on load reach every manager (groups and offsets
survive a restart), and the requests spanning both protocols and the offsets (ListGroups,
DeleteGroups) plus DescribeGroups."""

from __future__ import annotations

from strom.coordinator.group import records as rec
from strom.coordinator.group.replies import ListedGroup
from strom.coordinator.group.state import ClassicState
from strom.protocol.errors import ErrorCode as E


def test_offsets_and_groups_survive_a_restart(env, h):
    c = env.coordinator
    mid = h.one_member(env, h, "g")
    h.commit(c, "g", {("t", 0): (7, "m")}, generation=1, member=mid)
    h.commit(c, "simple", {("u", 3): 99})
    h.commit(c, "simple", {("u", 3): 100})  # the latest commit wins on replay
    c2 = env.restart()
    assert c2.offsets.fetch_offsets("g", [("t", [0])]) == [("t", [(0, 7, 3, "m")])]
    assert h.fetched(c2, "simple") == {("u", 3): 100}
    group = c2.group("g")
    assert group.state == ClassicState.STABLE and group.generation == 1
    assert group.members[mid].assignment == b"a"
    assert c2.classic.heartbeat("g", 1, mid, None) == E.NONE  # members carry on, no rebalance
    env.loop.advance(env.config.min_session_timeout * 2)  # ...unless they stop heartbeating
    assert c2.group("g").members == {}


def test_the_log_holds_kafka_records(env, h):
    c = env.coordinator
    h.commit(c, "g", {("t", 0): 7})
    log = env.offsets.logs[c.partition_for("g")]
    records = [r for chunk in c.store.replay(c.partition_for("g")) for r in chunk]
    assert log.log_end_offset == 1
    assert [(r.type, r.key, r.value["offset"]) for r in records] == [
        (rec.OFFSET_COMMIT, {"group": "g", "topic": "t", "partition": 0}, 7)]


def test_delete_groups(env, h):
    c = env.coordinator
    mid = h.one_member(env, h, "g")
    h.commit(c, "g", {("t", 0): 3}, generation=1, member=mid)
    assert c.delete_groups(["g", "missing"]) == [("g", E.NON_EMPTY_GROUP),
                                                 ("missing", E.GROUP_ID_NOT_FOUND)]
    c.classic.leave_group("g", [(mid, None, None)])
    assert c.group("g").state == ClassicState.EMPTY
    assert c.delete_groups(["g"]) == [("g", E.NONE)]
    assert c.group("g") is None
    assert h.fetched(c, "g", [("t", [0])]) == {("t", 0): -1}
    c2 = env.restart()  # the tombstones are in the log
    assert c2.group("g") is None and h.fetched(c2, "g") == {}


def test_list_and_describe_groups(env, h):
    c = env.coordinator
    mid = h.one_member(env, h, "active")
    h.commit(c, "simple", {("t", 0): 1})
    error, groups = c.list_groups()
    assert error == 0
    by_id = {g.group_id: g for g in groups}
    assert by_id["active"] == ListedGroup("active", protocol_type="consumer",
                                          group_state="Stable", group_type="classic")
    assert by_id["simple"].protocol_type == "" and by_id["simple"].group_state == "Empty"
    assert [g.group_id for g in c.list_groups(["stable"])[1]] == ["active"]
    assert [g.group_id for g in c.list_groups(["Empty"], ["classic"])[1]] == ["simple"]
    assert c.list_groups([], ["consumer"])[1] == []
    (d, missing) = c.classic.describe_groups(["active", "missing"],
                                             include_authorized_operations=True, version=6)
    assert d.group_state == "Stable" and d.protocol_data == "range"
    assert d.members[0].member_id == mid
    assert d.members[0].assignment == b"a"
    assert d.members[0].client_host == "/127.0.0.1"
    assert d.authorized_operations > 0
    assert missing.error_code == E.GROUP_ID_NOT_FOUND
    (old,) = c.classic.describe_groups(["missing"], include_authorized_operations=False, version=5)
    assert old.error_code == 0 and old.group_state == "Dead"
