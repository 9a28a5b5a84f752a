"""FindCoordinator and the classic group APIs: Join/Sync/Heartbeat/Leave, offsets, admin."""

from __future__ import annotations

import uuid

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

GROUP_KEY, TRANSACTION_KEY = 0, 1


def _find(h, key: str, key_type: int = GROUP_KEY):
    r = h.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": key_type, "coordinator_keys": [key]})
    return r.coordinators[0]


def _join(h, group: str, member: str = "", *, protocol_type: str = "consumer",
          session_timeout: int = 10000, instance: str | None = None):
    return h.request(ApiKey.JOIN_GROUP, 9, {
        "group_id": group, "session_timeout": session_timeout, "rebalance_timeout": 10000,
        "member_id": member, "group_instance_id": instance, "protocol_type": protocol_type,
        "protocols": [{"name": "range", "metadata": b"\x00"}], "reason": None})


def _member(h, group: str = "g") -> tuple[str, int]:
    """A member that joined and synced a one-member group: (member id, generation)."""
    _find(h, group)
    first = _join(h, group)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = _join(h, group, first.member_id)
    assert (joined.error_code, joined.leader) == (0, first.member_id)
    synced = _sync(h, group, first.member_id, joined.generation_id,
                   {first.member_id: b"assignment"})
    assert (synced.error_code, bytes(synced.assignment)) == (0, b"assignment")
    return first.member_id, joined.generation_id


def _sync(h, group: str, member: str, generation: int, assignments: dict[str, bytes]):
    return h.request(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": generation, "member_id": member,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]})


def _heartbeat(h, group: str, member: str, generation: int) -> int:
    return h.request(ApiKey.HEARTBEAT, 4, {"group_id": group, "generation_id": generation,
                                           "member_id": member}).error_code


def _commit(h, group: str, offsets: dict[tuple[str, int], int], *, generation: int = -1,
            member: str = "", metadata: str | None = None, version: int = 9):
    topics: dict[str, list] = {}
    for (topic, p), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": p, "committed_offset": offset,
                                             "committed_metadata": metadata})
    r = h.request(ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def _fetch_offsets(h, group: str, topics: dict[str, list[int]] | None):
    r = h.request(ApiKey.OFFSET_FETCH, 9, {"groups": [{
        "group_id": group, "topics": None if topics is None else [
            {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]})
    g = r.groups[0]
    return g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                          for t in g.topics for p in t.partitions}


# -- FindCoordinator ---------------------------------------------------------------------------


def test_find_the_group_coordinator_creates_the_offsets_topic(broker_harness) -> None:
    c = _find(broker_harness, "g")
    assert (c.error_code, c.node_id, c.host) == (0, 1, "127.0.0.1")
    assert len(broker_harness.broker.image.topics["__consumer_offsets"].partitions) == 3


def test_find_coordinator_v3_one_key(broker_harness) -> None:
    r = broker_harness.request(ApiKey.FIND_COORDINATOR, 3, {"key_type": 0, "key": "g"})
    assert (r.error_code, r.node_id) == (0, 1)


def test_find_a_transaction_coordinator(broker_harness) -> None:
    c = _find(broker_harness, "tx", TRANSACTION_KEY)
    assert (c.error_code, c.node_id) == (0, 1)
    assert "__transaction_state" in broker_harness.broker.image.topics


def test_an_empty_transactional_id_is_invalid_request(broker_harness) -> None:
    assert _find(broker_harness, "", TRANSACTION_KEY).error_code == ErrorCode.INVALID_REQUEST


def test_an_unknown_key_type_is_invalid_request(broker_harness) -> None:
    # Kafka: InvalidRequestException "Unsupported key type"
    assert _find(broker_harness, "g", key_type=7).error_code == ErrorCode.INVALID_REQUEST


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------


def test_a_member_joins_syncs_heartbeats_and_leaves(broker_harness) -> None:
    h = broker_harness
    member, generation = _member(h)
    assert generation == 1
    assert _heartbeat(h, "g", member, generation) == 0
    r = h.request(ApiKey.LEAVE_GROUP, 5, {"group_id": "g", "members": [
        {"member_id": member, "group_instance_id": None, "reason": "done"}]})
    assert (r.error_code, [(m.member_id, m.error_code) for m in r.members]) == (
        0, [(member, 0)])
    assert _heartbeat(h, "g", member, generation) == ErrorCode.UNKNOWN_MEMBER_ID


def test_an_empty_group_id_is_invalid_group_id(broker_harness) -> None:
    _find(broker_harness, "g")
    assert _join(broker_harness, "").error_code == ErrorCode.INVALID_GROUP_ID


def test_join_before_the_offsets_topic_exists_is_not_coordinator(broker_harness) -> None:
    # the client looks up the coordinator first; FindCoordinator creates __consumer_offsets
    assert _join(broker_harness, "g").error_code == ErrorCode.NOT_COORDINATOR


@pytest.mark.parametrize("timeout", [5999, 1_800_001])  # group.min/max.session.timeout.ms
def test_a_session_timeout_out_of_bounds_is_invalid_session_timeout(broker_harness,
                                                                      timeout: int) -> None:
    _find(broker_harness, "g")
    r = _join(broker_harness, "g", session_timeout=timeout)
    assert r.error_code == ErrorCode.INVALID_SESSION_TIMEOUT


def test_another_protocol_type_is_inconsistent_group_protocol(broker_harness) -> None:
    h = broker_harness
    _member(h)
    r = _join(h, "g", protocol_type="connect")
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_an_unknown_member_rejoining_is_unknown_member_id(broker_harness) -> None:
    h = broker_harness
    _member(h)
    assert _join(h, "g", "stranger").error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_with_an_old_generation_is_illegal_generation(broker_harness) -> None:
    h = broker_harness
    member, generation = _member(h)
    assert _heartbeat(h, "g", member, generation + 5) == ErrorCode.ILLEGAL_GENERATION


def test_heartbeat_of_an_unknown_member_is_unknown_member_id(broker_harness) -> None:
    h = broker_harness
    _, generation = _member(h)
    assert _heartbeat(h, "g", "stranger", generation) == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_to_an_unknown_group_is_unknown_member_id(broker_harness) -> None:
    # Kafka 4 (GroupMetadataManager.getOrMaybeCreateClassicGroup): UnknownMemberIdException
    # "Classic group nope not found."
    _find(broker_harness, "nope")
    assert _heartbeat(broker_harness, "nope", "m", 1) == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_while_another_member_joins_is_rebalance_in_progress(broker_harness) -> None:
    h = broker_harness
    member, generation = _member(h)
    second = _join(h, "g")
    assert second.error_code == ErrorCode.MEMBER_ID_REQUIRED
    pending = h.start(ApiKey.JOIN_GROUP, 9, {  # waits for the first member to rejoin
        "group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000,
        "member_id": second.member_id, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00"}]})
    assert not pending.done()
    assert _heartbeat(h, "g", member, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = _join(h, "g", member)  # the rebalance completes: both get generation 2
    assert (rejoined.error_code, rejoined.generation_id) == (0, generation + 1)
    joined = h.finish(pending, ApiKey.JOIN_GROUP, 9)
    assert (joined.error_code, joined.generation_id) == (0, generation + 1)


def test_sync_of_an_unknown_member_is_unknown_member_id(broker_harness) -> None:
    h = broker_harness
    _, generation = _member(h)
    assert _sync(h, "g", "stranger", generation, {}).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_with_an_old_generation_is_illegal_generation(broker_harness) -> None:
    h = broker_harness
    member, generation = _member(h)
    assert _sync(h, "g", member, generation + 1, {}).error_code == ErrorCode.ILLEGAL_GENERATION


def test_leave_of_an_unknown_member_is_unknown_member_id(broker_harness) -> None:
    h = broker_harness
    _member(h)
    r = h.request(ApiKey.LEAVE_GROUP, 5, {"group_id": "g", "members": [
        {"member_id": "stranger", "group_instance_id": None}]})
    assert [m.error_code for m in r.members] == [ErrorCode.UNKNOWN_MEMBER_ID]


def test_leave_v0_reports_the_members_error_at_the_top(broker_harness) -> None:
    h = broker_harness
    _member(h)
    r = h.request(ApiKey.LEAVE_GROUP, 0, {"group_id": "g", "member_id": "stranger"})
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID


# -- OffsetCommit, OffsetFetch, OffsetDelete ---------------------------------------------------


def test_a_standalone_commit_is_fetched_back(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", partitions=2)
    _find(h, "g")
    assert _commit(h, "g", {("t", 0): 5, ("t", 1): 7}) == {("t", 0): 0, ("t", 1): 0}
    assert _fetch_offsets(h, "g", {"t": [0, 1]}) == (0, {("t", 0): (5, 0), ("t", 1): (7, 0)})
    assert _fetch_offsets(h, "g", None) == (0, {("t", 0): (5, 0), ("t", 1): (7, 0)})


def test_offset_fetch_v7_one_group(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _find(h, "g")
    _commit(h, "g", {("t", 0): 3})
    r = h.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": [
        {"name": "t", "partition_indexes": [0]}]})
    assert (r.error_code, r.topics[0].partitions[0].committed_offset) == (0, 3)


def test_a_commit_by_a_member_of_the_current_generation(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    member, generation = _member(h)
    assert _commit(h, "g", {("t", 0): 1}, generation=generation, member=member) == {("t", 0): 0}


def test_a_commit_by_an_unknown_member_is_unknown_member_id(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _, generation = _member(h)
    assert _commit(h, "g", {("t", 0): 1}, generation=generation, member="stranger") == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_a_commit_with_an_old_generation_is_illegal_generation(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    member, generation = _member(h)
    assert _commit(h, "g", {("t", 0): 1}, generation=generation + 3, member=member) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION}


def test_a_commit_for_an_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _find(h, "g")
    assert _commit(h, "g", {("t", 0): 1, ("t", 4): 1, ("nope", 0): 1}) == {
        ("t", 0): 0, ("t", 4): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_commit_by_topic_id_v10(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _find(h, "g")
    r = h.request(ApiKey.OFFSET_COMMIT, 10, {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"topic_id": h.topic_id("t"), "partitions": [
                       {"partition_index": 0, "committed_offset": 4}]},
                   {"topic_id": uuid.uuid4(), "partitions": [
                       {"partition_index": 0, "committed_offset": 4}]}]})
    assert [p.error_code for t in r.topics for p in t.partitions] == [
        0, ErrorCode.UNKNOWN_TOPIC_ID]
    assert _fetch_offsets(h, "g", {"t": [0]})[1] == {("t", 0): (4, 0)}


def test_a_commit_with_an_empty_group_id_is_invalid_group_id(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _find(h, "g")
    assert _commit(h, "", {("t", 0): 1}) == {("t", 0): ErrorCode.INVALID_GROUP_ID}


@pytest.mark.broker_config(**{"offset.metadata.max.bytes": "10"})
def test_commit_metadata_over_the_limit_is_offset_metadata_too_large(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _find(h, "g")
    assert _commit(h, "g", {("t", 0): 1}, metadata="x" * 11) == {
        ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE}


def test_fetch_for_a_group_without_offsets_is_minus_one(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _find(h, "g")
    assert _fetch_offsets(h, "none", {"t": [0]}) == (0, {("t", 0): (-1, 0)})


def test_fetch_by_an_unknown_topic_id_v10_is_unknown_topic_id(broker_harness) -> None:
    h = broker_harness
    _find(h, "g")
    r = h.request(ApiKey.OFFSET_FETCH, 10, {"groups": [{"group_id": "g", "topics": [
        {"topic_id": uuid.uuid4(), "partition_indexes": [0]}]}]})
    assert r.groups[0].topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_delete_offsets_of_an_empty_group(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _find(h, "g")
    _commit(h, "g", {("t", 0): 5})
    r = h.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 9}]}]})
    assert r.error_code == 0
    assert [p.error_code for p in r.topics[0].partitions] == [
        0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert _fetch_offsets(h, "g", {"t": [0]})[1] == {("t", 0): (-1, 0)}


def test_delete_offsets_of_an_unknown_group_is_group_id_not_found(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _find(h, "g")
    r = h.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "nope", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]}]})
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND


# -- ListGroups, DescribeGroups, DeleteGroups --------------------------------------------------


def test_list_groups_with_their_state(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _member(h, "live")
    _commit(h, "idle", {("t", 0): 1})
    r = h.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    assert r.error_code == 0
    assert sorted((g.group_id, g.group_state, g.group_type) for g in r.groups) == [
        ("idle", "Empty", "classic"), ("live", "Stable", "classic")]
    r = h.request(ApiKey.LIST_GROUPS, 5, {"states_filter": ["Stable"], "types_filter": []})
    assert [g.group_id for g in r.groups] == ["live"]


def test_describe_a_group(broker_harness) -> None:
    h = broker_harness
    member, _ = _member(h)
    r = h.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"]})
    (g,) = r.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        0, "Stable", "consumer", "range")
    assert [(m.member_id, bytes(m.member_assignment)) for m in g.members] == [
        (member, b"assignment")]


def test_describe_an_unknown_group_v6_is_group_id_not_found(broker_harness) -> None:
    # Kafka (v6, KIP-1043): GROUP_ID_NOT_FOUND with state Dead; earlier versions: no error
    h = broker_harness
    _find(h, "g")
    (g,) = h.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["nope"]}).groups
    assert (g.error_code, g.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
    (g,) = h.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["nope"]}).groups
    assert (g.error_code, g.group_state) == (0, "Dead")


def test_delete_groups(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _member(h, "live")
    _commit(h, "idle", {("t", 0): 1})
    r = h.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["idle", "live", "nope"]})
    assert sorted((x.group_id, x.error_code) for x in r.results) == [
        ("idle", 0), ("live", ErrorCode.NON_EMPTY_GROUP), ("nope", ErrorCode.GROUP_ID_NOT_FOUND)]
    assert _fetch_offsets(h, "idle", {"t": [0]})[1] == {("t", 0): (-1, 0)}
