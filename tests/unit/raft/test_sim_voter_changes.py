"""A dynamic quorum (KIP-853, kraft.version 1) in the simulation: voters added and removed
through AddRaftVoter/RemoveRaftVoter, auto-join, a leader that removes itself, a voter back on a
wiped disk that never votes with its empty log, and Kafka's error codes for refused changes --
with the simulation's safety checks (one leader per epoch, committed entries never lost)
running throughout."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from tests.unit.raft.sim import SimNetwork, random_faults, sim_endpoints

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.raft import messages as m
from strom.raft.types import ReplicaKey

E = ErrorCode


def _elect(net: SimNetwork) -> int:
    assert net.run_for(10_000, lambda: net.leader() is not None), net.states()
    leader = net.leader()
    assert leader is not None
    return leader


def _voters(net: SimNetwork, node_id: int) -> dict[int, Any]:
    client = net.nodes[node_id].client
    assert client is not None
    return {n.key.id: n.key.directory_id for n in client.quorum.voters}


def _key(net: SimNetwork, node_id: int) -> ReplicaKey:
    return ReplicaKey(node_id, net.nodes[node_id].directory_id)


def _ask(net: SimNetwork, node_id: int, api_key: ApiKey, message: dict[str, Any],
         within_ms: int = 10_000) -> dict[str, Any]:
    cid = net.admin(node_id, api_key, message)
    assert net.run_for(within_ms, lambda: cid in net.admin_responses), net.states()
    response: dict[str, Any] = net.admin_responses.pop(cid)
    return response


def _add(net: SimNetwork, leader: int, node_id: int, **kw: Any) -> dict[str, Any]:
    return _ask(net, leader, ApiKey.ADD_RAFT_VOTER, m.add_raft_voter_request(
        cluster_id=net.cluster_id, voter=_key(net, node_id), timeout_ms=5000,
        endpoints=sim_endpoints(node_id), ack_when_committed=True, **kw))


def _remove(net: SimNetwork, at: int, key: ReplicaKey) -> dict[str, Any]:
    return _ask(net, at, ApiKey.REMOVE_RAFT_VOTER, m.remove_raft_voter_request(
        cluster_id=net.cluster_id, voter=key))


def _all_agree(net: SimNetwork, ids: set[int]) -> bool:
    return all(set(_voters(net, n)) == ids for n in net.alive())


@pytest.mark.parametrize("seed", range(4))
def test_a_standalone_controller_grows_to_three_by_auto_join(seed: int) -> None:
    net = SimNetwork(seed, [1], observers=[2, 3], dynamic=True, auto_join=[2, 3],
                     wire=seed % 2 == 1).start()
    _elect(net)
    written = net.schedule_appends(net.clock.now + 8000)
    assert net.run_for(10_000, lambda: _all_agree(net, {1, 2, 3})), net.states()
    for n in (1, 2, 3):
        assert _voters(net, n) == {i: net.nodes[i].directory_id for i in (1, 2, 3)}
    # the three now make the majority: the leader's death is survived
    old = net.leader()
    assert old is not None
    net.crash(old)
    assert net.run_for(10_000, lambda: net.leader() not in (None, old)), net.states()
    net.run_for(3000)
    net.check_logs_agree()
    assert written and net.history.committed_end() > 0


def test_added_then_the_leader_removes_itself_and_a_successor_leads() -> None:
    net = SimNetwork(7, [1, 2, 3], observers=[4], dynamic=True).start()
    leader = _elect(net)
    net.schedule_appends(net.clock.now + 15_000)
    net.run_for(1000)  # the observer catches up
    assert _add(net, leader, 4)["error_code"] == E.NONE
    assert set(_voters(net, leader)) == {1, 2, 3, 4}
    assert _remove(net, leader, _key(net, leader))["error_code"] == E.NONE
    assert net.run_for(10_000, lambda: net.leader() not in (None, leader)), net.states()
    new = net.leader()
    assert new is not None and set(_voters(net, new)) == {1, 2, 3, 4} - {leader}
    old = net.nodes[leader].client
    assert old is not None and not old.quorum.is_voter()
    # the removed one follows as an observer, and the quorum goes on committing
    committed = net.history.committed_end()
    net.run_for(3000)
    assert net.history.committed_end() > committed
    assert old.leader_and_epoch().leader_id == new
    net.check_logs_agree()


def test_refused_voter_changes_get_kafkas_error_codes() -> None:
    net = SimNetwork(3, [1, 2, 3], observers=[4], dynamic=True).start()
    leader = _elect(net)
    net.run_for(500)
    follower = next(i for i in (1, 2, 3) if i != leader)
    assert _add(net, follower, 4)["error_code"] == E.NOT_LEADER_OR_FOLLOWER
    assert _add(net, leader, 2)["error_code"] == E.DUPLICATE_VOTER
    missing_dir = m.add_raft_voter_request(cluster_id=net.cluster_id, voter=ReplicaKey(4),
                                           timeout_ms=100, endpoints=sim_endpoints(4),
                                           ack_when_committed=True)
    assert _ask(net, leader, ApiKey.ADD_RAFT_VOTER, missing_dir)["error_code"] == \
        E.INVALID_REQUEST
    no_listener = m.add_raft_voter_request(cluster_id=net.cluster_id, voter=_key(net, 4),
                                           timeout_ms=100, endpoints=(),
                                           ack_when_committed=True)
    assert _ask(net, leader, ApiKey.ADD_RAFT_VOTER, no_listener)["error_code"] == \
        E.INVALID_REQUEST
    wrong_cluster = m.remove_raft_voter_request(cluster_id="other", voter=_key(net, 2))
    assert _ask(net, leader, ApiKey.REMOVE_RAFT_VOTER, wrong_cluster)["error_code"] == \
        E.INCONSISTENT_CLUSTER_ID
    stranger = ReplicaKey(9, net.nodes[4].directory_id)
    assert _remove(net, leader, stranger)["error_code"] == E.VOTER_NOT_FOUND
    assert _remove(net, leader, ReplicaKey(2, net.nodes[4].directory_id))["error_code"] == \
        E.VOTER_NOT_FOUND  # voter 2, but another directory
    # an observer nobody has heard of is not caught up
    net.add_observer(5)
    net.crash(5)
    assert _add(net, leader, 5)["error_code"] == E.REQUEST_TIMED_OUT
    assert set(_voters(net, leader)) == {1, 2, 3}  # nothing changed


def test_a_static_quorum_refuses_voter_changes() -> None:
    net = SimNetwork(5, [1, 2, 3], observers=[4]).start()
    leader = _elect(net)
    net.run_for(500)
    response = _ask(net, leader, ApiKey.ADD_RAFT_VOTER, m.add_raft_voter_request(
        cluster_id=net.cluster_id, voter=ReplicaKey(4, ReplicaKey(4).wire_directory_id()),
        timeout_ms=100, endpoints=sim_endpoints(4), ack_when_committed=True))
    # no directory id (static replicas have none): refused before the version check
    assert response["error_code"] == E.INVALID_REQUEST
    response = _ask(net, leader, ApiKey.REMOVE_RAFT_VOTER, m.remove_raft_voter_request(
        cluster_id=net.cluster_id, voter=ReplicaKey(2, uuid.uuid4())))
    assert response["error_code"] == E.UNSUPPORTED_VERSION


def test_a_voter_back_on_a_wiped_disk_never_votes_with_its_empty_log() -> None:
    net = SimNetwork(11, [1, 2, 3], dynamic=True).start()
    leader = _elect(net)
    net.schedule_appends(net.clock.now + 30_000)
    net.run_for(2000)
    wiped = next(i for i in (1, 2, 3) if i != leader)
    old_key = _key(net, wiped)
    net.wipe(wiped)
    assert net.run_for(5000, lambda: net.nodes[wiped].client is not None
                       and net.nodes[wiped].client.log.end_offset() > 0)
    client = net.nodes[wiped].client
    assert client is not None and not client.quorum.is_voter()
    assert _voters(net, wiped)[wiped] == old_key.directory_id  # the old replica is the voter
    # with the last real voter besides the leader gone, the wiped one cannot make a majority
    net.crash(leader)
    other = next(i for i in (1, 2, 3) if i not in (leader, wiped))
    assert not net.run_for(8000, lambda: net.leader() is not None), net.states()
    net.restart(leader)
    assert net.run_for(10_000, lambda: net.leader() in (leader, other)), net.states()
    net.check_logs_agree()


def test_a_wiped_voter_with_auto_join_replaces_its_old_self() -> None:
    net = SimNetwork(13, [1, 2, 3], dynamic=True).start()
    leader = _elect(net)
    net.schedule_appends(net.clock.now + 30_000)
    net.run_for(2000)
    wiped = next(i for i in (1, 2, 3) if i != leader)
    net.wipe(wiped, auto_join=True)
    new_dir = net.nodes[wiped].directory_id
    assert net.run_for(15_000, lambda: _voters(net, net.leader() or leader).get(wiped) == new_dir
                       and net.nodes[wiped].client is not None
                       and net.nodes[wiped].client.quorum.is_voter()), net.states()
    net.run_for(2000)
    net.check_logs_agree()


def _remove_some_voter(net: SimNetwork, rng: random.Random) -> None:
    leader = net.leader()
    if leader is None:
        return
    client = net.nodes[leader].client
    assert client is not None
    voters = list(client.quorum.voters)
    # down to two voters at most: removing one of two, the leader, then losing it before the
    # removal commits leaves the other waiting for its vote (a known gap, docs/design/kraft.md)
    if len(voters) > 2:
        victim = rng.choice(voters).key
        net.admin(leader, ApiKey.REMOVE_RAFT_VOTER, m.remove_raft_voter_request(
            cluster_id=net.cluster_id, voter=victim))


@pytest.mark.parametrize("seed", range(8))
def test_safety_while_voters_come_and_go_under_random_faults(seed: int) -> None:
    """Crashes, partitions and message loss while an admin removes random voters and every
    replica auto-joins back: one leader per epoch, committed entries never lost (checked on
    every step); afterwards a leader, and every live replica agrees on the committed log."""
    rng = random.Random(seed * 31 + 7)
    net = SimNetwork(seed, [1, 2, 3], observers=[4, 5], dynamic=True,
                     auto_join=[1, 2, 3, 4, 5], drop_rate=rng.choice([0.0, 0.05]),
                     wire=seed % 4 == 0).start()
    duration = 20_000
    net.schedule_appends(duration)
    for t in range(1500, duration, 2500):
        net.at(t, lambda: _remove_some_voter(net, rng))
    random_faults(net, rng, [1, 2, 3], duration)
    net.heal()
    net.drop_rate = 0.0
    for i in list(net.nodes):
        if net.nodes[i].client is None:
            net.restart(i)
    net.schedule_appends(net.clock.now + 3000)
    assert net.run_for(20_000, lambda: net.leader() is not None
                       and len(_voters(net, net.leader() or 1)) >= 3), net.states()
    net.run_for(5000)
    net.check_logs_agree()
    leader = net.leader()
    assert leader is not None
    assert net.history.committed_end() > 0


@pytest.mark.parametrize("moved", ["leader", "follower"])
def test_a_voter_at_a_new_address_corrects_its_entry(moved: str) -> None:
    """A voter that listens somewhere else now (restarted on another port) puts its new address
    in the voter set: a follower with UpdateRaftVoter, a leader by appending the set itself."""
    from strom.raft.types import Endpoint

    net = SimNetwork(17, [1, 2, 3], dynamic=True).start()
    leader = _elect(net)
    net.run_for(1000)
    node = leader if moved == "leader" else next(i for i in (1, 2, 3) if i != leader)
    client = net.nodes[node].client
    assert client is not None
    new = (Endpoint("CONTROLLER", f"node-{node}-moved", 9095),)
    client.quorum.local_endpoints = new

    def everywhere() -> bool:
        return all(c is not None and c.quorum.voters.endpoints(node) == new
                   for c in (net.nodes[i].client for i in (1, 2, 3)))

    assert net.run_for(10_000, everywhere), net.states()
    assert net.leader() == leader  # no election needed
    net.check_logs_agree()


def test_a_static_quorum_upgrades_to_kraft_version_1_and_then_changes_voters() -> None:
    """``kafka-features upgrade --feature kraft.version=1``: the static voters, keyed with the
    directory ids they fetch with, become the voter set in the log; then a voter can be added."""
    from strom.raft.types import KRaftVersion, RaftError

    net = SimNetwork(23, [1, 2, 3], observers=[4], directories=True).start()
    leader = _elect(net)
    net.schedule_appends(net.clock.now + 8000)
    net.run_for(1000)
    client = net.nodes[leader].client
    assert client is not None
    with pytest.raises(RaftError, match="from 0 to 1 only"):
        client.upgrade_kraft_version(2)
    offset = client.upgrade_kraft_version(1)
    assert offset is not None
    net.run_for(2000)
    for i in (1, 2, 3, 4):
        c = net.nodes[i].client
        assert c is not None and c.quorum.kraft_version == KRaftVersion.DYNAMIC
        assert _voters(net, i) == {n: net.nodes[n].directory_id for n in (1, 2, 3)}
    assert client.upgrade_kraft_version(1) is None  # at that level already
    # dynamic now: the observer becomes a voter
    leader = net.leader() or leader
    assert _add(net, leader, 4)["error_code"] == E.NONE
    assert set(_voters(net, leader)) == {1, 2, 3, 4}
    net.check_logs_agree()


def test_the_upgrade_needs_every_voters_directory_id() -> None:
    from strom.raft.types import RaftError

    net = SimNetwork(29, [1, 2, 3]).start()  # replicas without directory ids
    leader = _elect(net)
    net.run_for(1000)
    client = net.nodes[leader].client
    assert client is not None
    with pytest.raises(RaftError, match="have not fetched with a directory id"):
        client.upgrade_kraft_version(1)


@pytest.mark.parametrize("wire", [False, True])
def test_the_leader_asks_the_new_voter_s_api_versions_first(wire: bool) -> None:
    """Kafka's AddVoterHandler: the new voter's ApiVersions must list a kraft.version range
    that holds the finalized level (else INVALID_REQUEST); no answer is REQUEST_TIMED_OUT;
    either way nothing changes, and the next add goes through."""
    net = SimNetwork(21, [1, 2, 3], observers=[4, 5], dynamic=True, wire=wire).start()
    leader = _elect(net)
    net.run_for(1000)  # the observers catch up
    asked: list[int] = []
    net.watchers.append(lambda env: asked.append(env.dst) if env.is_request and
                        env.api_key == ApiKey.API_VERSIONS else None)
    net.nodes[4].kraft_versions = (0, 0)  # software without KIP-853
    refused = _add(net, leader, 4)
    assert refused["error_code"] == E.INVALID_REQUEST, refused
    assert "kraft.version 0 to 0, not the finalized 1" in refused["error_message"]
    assert asked == [4]
    net.partition([1, 2, 3, 4], [5])  # 5 fetched a moment ago: it passes as caught up
    mute = _ask(net, leader, ApiKey.ADD_RAFT_VOTER, m.add_raft_voter_request(
        cluster_id=net.cluster_id, voter=_key(net, 5), timeout_ms=300,
        endpoints=sim_endpoints(5), ack_when_committed=True))
    assert mute["error_code"] == E.REQUEST_TIMED_OUT, mute
    assert "ApiVersions" in mute["error_message"]
    net.heal()
    assert set(_voters(net, leader)) == {1, 2, 3}
    net.nodes[4].kraft_versions = (0, 1)
    net.run_for(500)
    assert _add(net, leader, 4)["error_code"] == E.NONE
    assert net.run_for(5000, lambda: _all_agree(net, {1, 2, 3, 4})), net.states()
