"""ShareGroupHeartbeat and ShareGroupDescribe (KIP-932) through the broker: joining, several
members on one partition, epochs and fencing, leaving, and the group-type checks."""

from __future__ import annotations

import uuid

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

GROUP = "queue"


def _hb(h, member: str, epoch: int, topics: list[str] | None = None, group: str = GROUP):
    return h.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
        "subscribed_topic_names": topics})


def _assigned(r) -> set[int]:
    return {p for t in (r.assignment.topic_partitions if r.assignment else []) for p in t.partitions}


def _describe(h, *groups: str):
    return h.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, {
        "group_ids": list(groups) or [GROUP], "include_authorized_operations": False}).groups


def _setup(h, partitions: int = 1) -> None:
    h.create_topic("jobs", partitions=partitions)
    r = h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [GROUP]})
    assert r.coordinators[0].error_code == 0


def test_members_share_a_single_partition(broker_harness) -> None:
    h = broker_harness
    _setup(h, partitions=1)
    members = [str(uuid.uuid4()) for _ in range(3)]
    first = _hb(h, members[0], 0, ["jobs"])
    assert (first.error_code, first.member_epoch) == (0, 1)
    assert first.heartbeat_interval == 5000
    assert _assigned(first) == {0}
    for m in members[1:]:
        r = _hb(h, m, 0, ["jobs"])
        assert r.error_code == 0 and _assigned(r) == {0}
    [g] = _describe(h)
    assert (g.error_code, g.group_state, g.group_epoch, g.assignor_name) == (
        0, "Stable", 3, "simple")
    assert sorted(m.member_id for m in g.members) == sorted(members)
    assert all(m.assignment.topic_partitions[0].topic_name == "jobs" for m in g.members)


def test_partitions_spread_over_members(broker_harness) -> None:
    h = broker_harness
    _setup(h, partitions=4)
    a, b = "a" * 22, "b" * 22
    assert _assigned(_hb(h, a, 0, ["jobs"])) == {0, 1, 2, 3}
    rb = _hb(h, b, 0, ["jobs"])
    ra = _hb(h, a, 1, None)  # the group epoch moved on: a gets its new target
    assert ra.error_code == 0 and ra.member_epoch == rb.member_epoch == 2
    assert _assigned(ra) | _assigned(rb) == {0, 1, 2, 3}
    assert len(_assigned(ra)) == len(_assigned(rb)) == 2


def test_wrong_epochs_and_unknown_members_are_refused(broker_harness) -> None:
    h = broker_harness
    _setup(h)
    m = str(uuid.uuid4())
    assert _hb(h, m, 0, ["jobs"]).member_epoch == 1
    assert _hb(h, m, 5, None).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert _hb(h, str(uuid.uuid4()), 1, None).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert _hb(h, m, 0, None).error_code == ErrorCode.INVALID_REQUEST  # no topics on join
    assert _hb(h, "", 0, ["jobs"]).error_code == ErrorCode.INVALID_REQUEST
    assert _hb(h, m, -2, None).error_code == ErrorCode.INVALID_REQUEST
    assert _hb(h, m, 1, None).error_code == ErrorCode.NONE


def test_leaving_empties_the_group(broker_harness) -> None:
    h = broker_harness
    _setup(h)
    m = str(uuid.uuid4())
    _hb(h, m, 0, ["jobs"])
    r = _hb(h, m, -1, None)
    assert (r.error_code, r.member_epoch) == (0, -1)
    [g] = _describe(h)
    assert (g.group_state, g.members) == ("Empty", [])
    listed = h.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
    assert [(x.group_id, x.group_type, x.group_state) for x in listed.groups] == [
        (GROUP, "share", "Empty")]
    assert _hb(h, m, 1, None).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_share_and_consumer_groups_do_not_mix(broker_harness) -> None:
    h = broker_harness
    _setup(h)
    _hb(h, str(uuid.uuid4()), 0, ["jobs"])
    r = h.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
        "group_id": GROUP, "member_id": str(uuid.uuid4()), "member_epoch": 0,
        "instance_id": None, "rack_id": None, "rebalance_timeout": 30000,
        "subscribed_topic_names": ["jobs"], "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": []})
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    commit = h.request(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "jobs", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": None}]}]})
    assert commit.topics[0].partitions[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    [g] = _describe(h, "nope")
    assert g.error_code == ErrorCode.GROUP_ID_NOT_FOUND
