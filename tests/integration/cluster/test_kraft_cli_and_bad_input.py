"""`strom quorum describe` against three real controller-only nodes, and Raft requests with bad
input sent to them over a raw socket (issue 30, items 4 and 9).

One quorum serves the whole module. Before it starts, every node's metadata log directory gets
the same snapshot, (end offset 1, epoch 0), the way a downloaded snapshot would lie there: the
logs start from it, and FetchSnapshot has a real snapshot to serve, so a position past its end
can be asked for. Each bad request gets the error code Kafka 4.4's Raft client answers (design
brief §1) and changes nothing: the leader, its epoch, the high watermark, the observers and
every node's quorum-state file are the same afterwards.
"""

from __future__ import annotations

import re
import socket
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from strom.cli.wire import Connection
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode as E
from strom.raft import messages as m
from strom.raft.snapshot import SnapshotId, write_snapshot
from strom.raft.storage import METADATA_DIR_NAME
from strom.raft.types import OffsetAndEpoch, ReplicaKey

from ..broker import HOST, STROM_BIN, BrokerProcess, free_port
from .test_kraft_quorum import (
    CLUSTER_ID,
    _controllers,
    _stop_together,
    caught_up,
    leader_view,
    poll,
)

SNAPSHOT = SnapshotId(1, 0)


class Quorum:
    def __init__(self, nodes: list[BrokerProcess]) -> None:
        self.nodes = nodes

    def view(self) -> dict[str, Any]:
        view = leader_view(self.nodes)
        assert view is not None, "no leader"
        return view

    def node(self, node_id: int) -> BrokerProcess:
        return self.nodes[node_id - 1]

    def leader(self) -> BrokerProcess:
        return self.node(self.view()["leader_id"])

    def follower(self) -> BrokerProcess:
        leader = self.view()["leader_id"]
        return next(n for i, n in enumerate(self.nodes, 1) if i != leader)

    def quorum_states(self) -> dict[str, str]:
        return {n.name: (n.data_dir / METADATA_DIR_NAME / "quorum-state").read_text()
                for n in self.nodes}

    def snapshot_size(self) -> int:
        files = list((self.nodes[0].data_dir / METADATA_DIR_NAME).glob("*.checkpoint"))
        assert len(files) == 1, files
        return files[0].stat().st_size


# No election may happen while the module runs, and nothing may be appended once the
# controllers registered (each test checks the quorum is unchanged): a fetch timeout well above
# Kafka's 2 s, so a loaded machine never looks like a dead leader, and no no-op records.
STEADY = {"controller.quorum.fetch.timeout.ms": "15000", "metadata.max.idle.interval.ms": "0"}


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    nodes = _controllers(tmp_path_factory, overrides=STEADY)
    for node in nodes:
        write_snapshot(node.data_dir / METADATA_DIR_NAME, SNAPSHOT, [b"{}"],
                       last_contained_log_timestamp=0)
    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready()
        view = poll(lambda: leader_view(nodes), 15, "a leader")
        # every controller registered (KIP-919: one record each), so that the tests see a
        # quorum to which nothing is appended any more
        poll(lambda: all(f"controller {i} is registered" in n.log_text(limit=1 << 20)
                         for i, n in enumerate(nodes, 1)), 15, "the controllers registered")
        poll(lambda: caught_up(nodes, view["leader_id"], view["leader_epoch"]), 10,
             "voters caught up")
        yield Quorum(nodes)
        _stop_together(nodes)
    finally:
        for node in nodes:
            node.kill()


@pytest.fixture
def unchanged(quorum: Quorum) -> Iterator[dict[str, Any]]:
    """The leader's view before the test; afterwards the quorum must be exactly as it was."""
    before = quorum.view()
    states = quorum.quorum_states()
    yield before
    after = quorum.view()
    keys = ("leader_id", "leader_epoch", "high_watermark", "observers")
    assert {k: after[k] for k in keys} == {k: before[k] for k in keys}
    assert quorum.quorum_states() == states


def call(node: BrokerProcess, api_key: ApiKey, version: int, body: dict[str, Any]
         ) -> dict[str, Any]:
    """One request over a fresh socket with Strom's codec; the decoded response as a dict."""
    conn = Connection(HOST, node.port, 5.0)
    try:
        response: dict[str, Any] = conn.call(api_key, version, body).to_dict()
        return response
    finally:
        conn.close()


def partition(response: dict[str, Any]) -> dict[str, Any]:
    topics = response.get("topics") or response.get("responses")
    assert topics and len(topics) == 1 and len(topics[0]["partitions"]) == 1, response
    result: dict[str, Any] = topics[0]["partitions"][0]
    return result


def vote(epoch: int, *, voter: int, candidate: int = 3, last: OffsetAndEpoch | None = None,
         pre_vote: bool = False, cluster: str | None = CLUSTER_ID,
         voter_dir: uuid.UUID | None = None) -> dict[str, Any]:
    return m.vote_request(cluster_id=cluster, voter=ReplicaKey(voter, voter_dir),
                          candidate=ReplicaKey(candidate), epoch=epoch,
                          last=last or OffsetAndEpoch(0, 0), pre_vote=pre_vote)


def begin(epoch: int, *, voter: int, leader_id: int, cluster: str | None = CLUSTER_ID
          ) -> dict[str, Any]:
    return m.begin_quorum_epoch_request(cluster_id=cluster, voter=ReplicaKey(voter),
                                        leader_id=leader_id, epoch=epoch, leader_endpoints=())


def fetch(epoch: int, *, offset: int, last_epoch: int, replica: int = 99,
          cluster: str | None = CLUSTER_ID) -> dict[str, Any]:
    return m.fetch_request(cluster_id=cluster, replica=ReplicaKey(replica), epoch=epoch,
                           fetch_offset=offset, last_fetched_epoch=last_epoch,
                           high_watermark=None, max_wait_ms=0, max_bytes=1 << 20)


def fetch_snapshot(epoch: int, sid: SnapshotId, position: int, *,
                   cluster: str | None = CLUSTER_ID) -> dict[str, Any]:
    return {"cluster_id": cluster, "replica_id": 99, "max_bytes": 1 << 20, "topics": [{
        "name": "__cluster_metadata", "partitions": [{
            "partition": 0, "current_leader_epoch": epoch, "position": position,
            "snapshot_id": {"end_offset": sid.end_offset, "epoch": sid.epoch}}]}]}


# ------------------------------------------------------------------------- strom quorum describe


def strom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STROM_BIN), *args], capture_output=True, text=True, timeout=30)


def test_quorum_describe_status(quorum: Quorum) -> None:
    view = quorum.view()
    # Any controller will do: a follower names the active one through DescribeCluster.
    bootstrap = f"{HOST}:{free_port()},{quorum.follower().bootstrap}"
    done = strom("quorum", "describe", "--bootstrap-controller", bootstrap)
    assert done.returncode == 0, done.stderr
    status = dict(re.findall(r"^(\w+):\s+(.*?)\s*$", done.stdout, re.M))
    assert status["ClusterId"] == CLUSTER_ID
    assert (int(status["LeaderId"]), int(status["LeaderEpoch"])) == \
        (view["leader_id"], view["leader_epoch"])
    assert int(status["HighWatermark"]) == view["high_watermark"] >= 2
    assert int(status["MaxFollowerLag"]) == 0
    for i, node in enumerate(quorum.nodes, 1):
        assert f"{i} (CONTROLLER://{node.bootstrap})" in status["CurrentVoters"]
    assert status["CurrentObservers"] == "-"


def test_quorum_describe_replication(quorum: Quorum) -> None:
    view = quorum.view()
    done = strom("quorum", "describe", "--replication",
                 "--bootstrap-controller", quorum.leader().bootstrap)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    assert lines[0] == ["NODE-ID", "DIRECTORY-ID", "LOG-END-OFFSET", "LAG", "LAST-FETCH",
                        "LAST-CAUGHT-UP", "STATUS"]
    rows = {int(r[0]): r for r in lines[1:]}
    assert sorted(rows) == [1, 2, 3]
    assert int(lines[1][0]) == view["leader_id"] and lines[1][6] == "Leader"
    assert {rows[i][6] for i in rows if i != view["leader_id"]} == {"Follower"}
    assert all(int(r[2]) == view["high_watermark"] and r[3] == "0" for r in rows.values())
    assert all(int(r[4]) > 0 for i, r in rows.items() if i != view["leader_id"])


def test_quorum_describe_unreachable_is_one_line() -> None:
    done = strom("quorum", "describe", "--bootstrap-controller", f"{HOST}:{free_port()}",
                 "--timeout", "2")
    assert done.returncode == 3
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("Error: cannot reach controller")


# ------------------------------------------------------------------------------- bad Raft input


def test_unknown_cluster_id_is_refused(quorum: Quorum, unchanged: dict[str, Any]) -> None:
    epoch, leader = unchanged["leader_epoch"], quorum.leader()
    follower = quorum.follower()
    resp = call(follower, ApiKey.VOTE, 2, vote(epoch + 5, voter=2, cluster="another"))
    assert resp["error_code"] == E.INCONSISTENT_CLUSTER_ID and resp["topics"] == []
    resp = call(follower, ApiKey.BEGIN_QUORUM_EPOCH, 1,
                begin(epoch + 5, voter=2, leader_id=3, cluster="another"))
    assert resp["error_code"] == E.INCONSISTENT_CLUSTER_ID and resp["topics"] == []
    resp = call(leader, ApiKey.FETCH, 17,
                fetch(epoch, offset=0, last_epoch=0, cluster="another"))
    assert resp["error_code"] == E.INCONSISTENT_CLUSTER_ID
    resp = call(leader, ApiKey.FETCH_SNAPSHOT, 1,
                fetch_snapshot(epoch, SNAPSHOT, 0, cluster="another"))
    assert resp["error_code"] == E.INCONSISTENT_CLUSTER_ID


def test_a_stale_epoch_is_fenced(quorum: Quorum, unchanged: dict[str, Any]) -> None:
    epoch, leader_id = unchanged["leader_epoch"], unchanged["leader_id"]
    for node_id in (1, 2, 3):
        node = quorum.node(node_id)
        # A pre-vote carries its current epoch, so epoch - 1 with a last epoch of 0 is well
        # formed even in epoch 1 (a real vote there would need a last epoch below 0).
        p = partition(call(node, ApiKey.VOTE, 2,
                           vote(epoch - 1, voter=node_id, pre_vote=True)))
        assert (p["error_code"], p["vote_granted"], p["leader_epoch"], p["leader_id"]) == \
            (E.FENCED_LEADER_EPOCH, False, epoch, leader_id)
        if epoch >= 2:
            p = partition(call(node, ApiKey.VOTE, 2, vote(epoch - 1, voter=node_id)))
            assert p["error_code"] == E.FENCED_LEADER_EPOCH
        other = next(i for i in (1, 2, 3) if i != node_id)
        p = partition(call(node, ApiKey.BEGIN_QUORUM_EPOCH, 1,
                           begin(epoch - 1, voter=node_id, leader_id=other)))
        assert (p["error_code"], p["leader_epoch"], p["leader_id"]) == \
            (E.FENCED_LEADER_EPOCH, epoch, leader_id)
    p = partition(call(quorum.leader(), ApiKey.FETCH, 17,
                       fetch(epoch - 1, offset=1, last_epoch=0)))
    assert p["error_code"] == E.FENCED_LEADER_EPOCH


def test_a_fetch_in_an_epoch_that_does_not_exist_yet(quorum: Quorum,
                                                     unchanged: dict[str, Any]) -> None:
    epoch, leader_id = unchanged["leader_epoch"], unchanged["leader_id"]
    resp = call(quorum.leader(), ApiKey.FETCH, 17, fetch(epoch + 1, offset=1, last_epoch=0))
    p = partition(resp)
    assert p["error_code"] == E.UNKNOWN_LEADER_EPOCH
    assert p["current_leader"] == {"leader_id": leader_id, "leader_epoch": epoch}
    # Claiming to be a voter changes nothing either.
    p = partition(call(quorum.leader(), ApiKey.FETCH, 17,
                       fetch(epoch + 1, offset=1, last_epoch=0, replica=2)))
    assert p["error_code"] == E.UNKNOWN_LEADER_EPOCH


def test_votes_for_a_voter_key_that_is_not_the_receiver(quorum: Quorum,
                                                        unchanged: dict[str, Any]) -> None:
    epoch, leader_id = unchanged["leader_epoch"], unchanged["leader_id"]
    leader = quorum.leader()
    # The sender thinks it talks to voter 7: not this node.
    p = partition(call(leader, ApiKey.VOTE, 2, vote(epoch, voter=7, candidate=99)))
    assert (p["error_code"], p["vote_granted"], p["leader_id"]) == \
        (E.INVALID_VOTER_KEY, False, leader_id)
    # A candidate outside the voter set with the right voter key: no error (voter sets may
    # differ for a while), and no vote from a leader in its own epoch.
    p = partition(call(leader, ApiKey.VOTE, 2, vote(epoch, voter=leader_id, candidate=99)))
    assert (p["error_code"], p["vote_granted"]) == (E.NONE, False)
    # The right id with another directory id is not this replica either (a node has no
    # directory id in a static quorum, so any set one differs; Kafka's always has one).
    p = partition(call(leader, ApiKey.VOTE, 2,
                       vote(epoch, voter=leader_id, voter_dir=uuid.uuid4())))
    assert (p["error_code"], p["vote_granted"]) == (E.INVALID_VOTER_KEY, False)
    # BeginQuorumEpoch from the current leader, addressed to the wrong voter.
    follower_id = next(i for i in (1, 2, 3) if i != leader_id)
    p = partition(call(quorum.node(follower_id), ApiKey.BEGIN_QUORUM_EPOCH, 1,
                       begin(epoch, voter=7, leader_id=leader_id)))
    assert (p["error_code"], p["leader_id"], p["leader_epoch"]) == \
        (E.INVALID_VOTER_KEY, leader_id, epoch)


def test_fetch_snapshot_of_a_missing_snapshot_or_past_its_end(
        quorum: Quorum, unchanged: dict[str, Any]) -> None:
    epoch = unchanged["leader_epoch"]
    leader = quorum.leader()
    for sid in (SnapshotId(5, 1), SnapshotId(0, 0)):  # unknown; the bootstrap id is never served
        p = partition(call(leader, ApiKey.FETCH_SNAPSHOT, 1, fetch_snapshot(epoch, sid, 0)))
        assert p["error_code"] == E.SNAPSHOT_NOT_FOUND
    size = quorum.snapshot_size()
    for position in (size, size + 1000, -1):
        p = partition(call(leader, ApiKey.FETCH_SNAPSHOT, 1,
                           fetch_snapshot(epoch, SNAPSHOT, position)))
        assert p["error_code"] == E.POSITION_OUT_OF_RANGE, position
    p = partition(call(leader, ApiKey.FETCH_SNAPSHOT, 1, fetch_snapshot(epoch, SNAPSHOT, 0)))
    assert (p["error_code"], p["size"], len(p["unaligned_records"])) == (E.NONE, size, size)


def _closed(sock: socket.socket) -> bool:
    """True once the peer has closed `sock` (it reads EOF), within the socket's timeout."""
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("frame", [
    # a Vote v2 header whose body stops after the cluster id's length
    b"\x00\x34\x00\x02\x00\x00\x00\x07\x00\x04test\x00\x09",
    # a size that is not a size
    None,
], ids=["truncated-vote", "negative-size"])
def test_a_malformed_frame_closes_only_its_connection(quorum: Quorum, unchanged: dict[str, Any],
                                                      frame: bytes | None) -> None:
    leader = quorum.leader()
    bystander = Connection(HOST, leader.port, 5.0)
    try:
        bad = socket.create_connection((HOST, leader.port), timeout=5.0)
        with bad:
            if frame is None:
                bad.sendall((-5).to_bytes(4, "big", signed=True))
            else:
                bad.sendall(len(frame).to_bytes(4, "big") + frame)
            assert _closed(bad)
        answer = partition(bystander.call(ApiKey.DESCRIBE_QUORUM, 2,
                                          m.describe_quorum_request()).to_dict())
        assert (answer["error_code"], answer["leader_epoch"]) == (E.NONE,
                                                                   unchanged["leader_epoch"])
    finally:
        bystander.close()


def test_snapshot_is_where_the_logs_start(quorum: Quorum) -> None:
    """The seeded snapshot really is each log's start (what the FetchSnapshot cases rely on)."""
    for node in quorum.nodes:
        names = sorted(p.name for p in (node.data_dir / METADATA_DIR_NAME).iterdir())
        assert f"{SNAPSHOT.end_offset:020d}-{SNAPSHOT.epoch:010d}.checkpoint" in names, names
