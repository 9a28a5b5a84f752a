"""A real KRaft controller quorum: three ``process.roles=controller`` processes with a static
voter set (issue 30, stage 3).

They elect a leader and replicate its LeaderChange record; DescribeQuorum (Strom's codec, and
Kafka's own ``kafka-metadata-quorum --bootstrap-controller``, which finds the active controller
through DescribeCluster) shows it; the leader killed with SIGKILL is replaced within the
election bounds, and back, it rejoins as a follower and catches up without disturbing the
new epoch. A controller whose voters miss its node.id, or whose controller listener is not
among its listeners, refuses to start with one line.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from strom.cluster.client import BrokerClient, BrokerConnectionError
from strom.protocol.api_keys import ApiKey
from strom.raft import messages as m

from ..broker import HOST, STOP_TIMEOUT, BrokerProcess, free_port
from ..kafka_tools import jars
from ..kafka_tools.tools import KafkaTools, rows

CLUSTER_ID = "S3RyYWZ0UXVvcnVtVGVzdA"  # what `kafka-storage format -t` takes: 22 base64url chars
# Kafka's defaults (controller.quorum.*): a voter stands after 2 s without fetches, elections
# time out in [1, 2) s.
FETCH_TIMEOUT_S = 2.0
ELECTION_TIMEOUT_S = 1.0
FAILOVER_BOUND_S = FETCH_TIMEOUT_S + 2 * ELECTION_TIMEOUT_S + 3.0


def _controllers(factory: pytest.TempPathFactory, n: int = 3,
                 overrides: dict[str, str] | None = None) -> list[BrokerProcess]:
    """n controller-only nodes of one quorum, their log dirs formatted as kafka-storage would."""
    ports = [free_port() for _ in range(n)]
    voters = ",".join(f"{i}@{HOST}:{port}" for i, port in enumerate(ports, 1))
    nodes = []
    for i, port in enumerate(ports, 1):
        node = BrokerProcess(factory.mktemp(f"kraft-c{i}"), port=port, name=f"kraft-c{i}")
        (node.data_dir / "meta.properties").write_text(
            f"version=1\ncluster.id={CLUSTER_ID}\nnode.id={i}\n")
        node.overrides = {
            "process.roles": "controller", "node.id": str(i),
            "controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
            "listeners": f"CONTROLLER://{HOST}:{port}", "metrics.listener": "",
            **(overrides or {}),
        }
        nodes.append(node)
    return nodes


def describe_quorum(node: BrokerProcess) -> dict[str, Any] | None:
    """DescribeQuorum v2 through Strom's codec: the partition's fields, or None when the node
    does not answer."""

    async def ask() -> dict[str, Any]:
        client = BrokerClient(HOST, node.port, client_id="kraft-test", timeout_s=2.0)
        try:
            response = await client.request(ApiKey.DESCRIBE_QUORUM, 2,
                                             m.describe_quorum_request())
        finally:
            client.close()
        partition: dict[str, Any] = response.to_dict()["topics"][0]["partitions"][0]
        return partition

    try:
        return asyncio.run(ask())
    except BrokerConnectionError:
        return None


def poll(predicate, timeout: float, what: str):
    """``predicate()``'s first truthy value within ``timeout`` seconds, else fail."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.05)  # poll interval, not synchronisation
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def leader_view(nodes: list[BrokerProcess]) -> dict[str, Any] | None:
    """The DescribeQuorum answer of the node that leads (the only one answering without an
    error), or None while none does."""
    for node in nodes:
        if node.running:
            answer = describe_quorum(node)
            if answer is not None and answer["error_code"] == 0:
                return answer
    return None


def caught_up(nodes: list[BrokerProcess], leader: int, epoch: int) -> dict[str, Any] | None:
    """The leader's view once every voter has fetched up to its log end in `epoch`."""
    view = leader_view(nodes)
    if view is None or (view["leader_id"], view["leader_epoch"]) != (leader, epoch):
        return None
    ends = {v["replica_id"]: v["log_end_offset"] for v in view["current_voters"]}
    if len(set(ends.values())) != 1 or view["high_watermark"] != ends[leader]:
        return None
    return view


def _tools(factory: pytest.TempPathFactory) -> KafkaTools | None:
    if shutil.which("java") is None or not jars.is_cached():
        return None  # the quorum is still tested; only Kafka's view of it is skipped
    return KafkaTools.create(jars.libs_dir(), factory.mktemp("kafka-tools"))


def _stop_together(nodes: list[BrokerProcess]) -> None:
    """SIGTERM to all at once, then each must exit 0 by itself (waited for, not signalled again:
    a second SIGTERM after a clean shutdown finds Python's default handler back and kills)."""
    for node in nodes:
        if node.running and node.proc is not None:
            os.kill(node.proc.pid, signal.SIGTERM)
    for node in nodes:
        if node.proc is not None:
            try:
                node.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                node.kill()
        assert node.stop() == 0, node.log_tail()


def test_three_controllers_elect_fail_over_and_rejoin(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # no no-op records: the Kafka tools' answers are checked for a follower lag of exactly 0,
    # which a no-op appended meanwhile would make 1 for a moment
    nodes = _controllers(tmp_path_factory, overrides={"metadata.max.idle.interval.ms": "0"})
    tools = _tools(tmp_path_factory)
    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready()
        poll(lambda: leader_view(nodes), 15, "a leader")
        # the leader whose voters have all caught up (on a loaded machine a follower may time
        # out once more and elect another before that: the quorum settles on its latest leader)
        view = poll(lambda: (v := leader_view(nodes)) is not None
                    and caught_up(nodes, v["leader_id"], v["leader_epoch"]), 20,
                    "a leader with every voter caught up")
        leader, epoch = view["leader_id"], view["leader_epoch"]
        assert leader in (1, 2, 3) and epoch >= 1
        assert sorted(v["replica_id"] for v in view["current_voters"]) == [1, 2, 3]
        assert view["high_watermark"] >= 1  # the leader's LeaderChange record is committed
        assert view["observers"] == []
        # Each follower says who leads (its DescribeQuorum answer is NOT_LEADER_OR_FOLLOWER).
        for node in nodes:
            if node.name != f"kraft-c{leader}":
                answer = describe_quorum(node)
                assert answer is not None and answer["error_code"] == 6

        if tools is not None:
            follower = next(n for n in nodes if n.name != f"kraft-c{leader}")
            out = tools.run("kafka-metadata-quorum", "--bootstrap-controller",
                            follower.bootstrap, "describe", "--status").stdout
            status = dict(re.findall(r"^(\w+):\s+(.*)$", out, re.M))
            assert status["ClusterId"] == CLUSTER_ID
            assert (int(status["LeaderId"]), int(status["LeaderEpoch"])) == (leader, epoch)
            assert int(status["HighWatermark"]) >= 1
            assert int(status["MaxFollowerLag"]) == 0
            for i, node in enumerate(nodes, 1):
                assert f'{{"id": {i}, "endpoints": ["CONTROLLER://{node.bootstrap}"]}}' \
                    in status["CurrentVoters"]
            assert status["CurrentObservers"] == "[]"

        # SIGKILL the leader: the others elect a new one within the election bounds.
        old = nodes[leader - 1]
        old.kill()
        killed = time.monotonic()
        view = poll(lambda: (v := leader_view(nodes)) is not None
                    and v["leader_epoch"] > epoch and v, FAILOVER_BOUND_S + 5, "a new leader")
        elapsed = time.monotonic() - killed
        new_leader, new_epoch = view["leader_id"], view["leader_epoch"]
        assert new_leader != leader
        assert elapsed < FAILOVER_BOUND_S, f"a new leader after {elapsed:.1f}s"

        # Back, the old leader follows the new one and catches up; the epoch stays.
        old.start()
        view = poll(lambda: caught_up(nodes, new_leader, new_epoch), 15,
                    "the restarted node to catch up")
        back = next(v for v in view["current_voters"] if v["replica_id"] == leader)
        assert back["log_end_offset"] == view["high_watermark"] >= 2
        assert back["last_fetch_timestamp"] > 0
        answer = describe_quorum(old)
        assert answer is not None and answer["error_code"] == 6  # a follower now

        if tools is not None:
            out = tools.run("kafka-metadata-quorum", "--bootstrap-controller", old.bootstrap,
                            "describe", "--replication").stdout
            table = rows(out)
            assert table[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                                "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
            by_id = {int(r[0]): r for r in table[1:]}
            assert sorted(by_id) == [1, 2, 3]
            assert by_id[new_leader][6] == "Leader"
            assert {by_id[i][6] for i in by_id if i != new_leader} == {"Follower"}
            end = int(by_id[new_leader][2])
            assert all(int(r[2]) == end and int(r[3]) == 0 for r in by_id.values()), out
        assert leader_view(nodes)["leader_epoch"] == new_epoch  # type: ignore[index]

        # A graceful stop of all three: each exits 0 (a leader hands over, bounded).
        started = time.monotonic()
        _stop_together(nodes)
        assert time.monotonic() - started < 10
    finally:
        for node in nodes:
            node.kill()


@pytest.mark.parametrize("problem", ["voters", "listener"])
def test_a_misconfigured_controller_refuses_to_start_with_one_line(
        tmp_path_factory: pytest.TempPathFactory, problem: str) -> None:
    node = _controllers(tmp_path_factory, 1)[0]
    if problem == "voters":
        node.overrides["controller.quorum.voters"] = f"2@{HOST}:{free_port()}"
        expected = "node.id 1 of a controller must be one of the voters"
    else:
        node.overrides["controller.listener.names"] = "RAFT"
        node.overrides["listener.security.protocol.map"] = "CONTROLLER:PLAINTEXT,RAFT:PLAINTEXT"
        expected = "controller.listener.names must only name listeners"
    node.start(wait=False)
    assert node.proc is not None
    assert node.proc.wait(30) == 1
    errors = [line for line in node.log_text().splitlines()
              if line.startswith("strom broker:")]
    assert len(errors) == 1 and expected in errors[0], node.log_tail()


def test_an_unformatted_controller_refuses_to_start(tmp_path_factory: pytest.TempPathFactory,
                                                    ) -> None:
    node = _controllers(tmp_path_factory, 1)[0]
    (node.data_dir / "meta.properties").unlink()
    node.start(wait=False)
    assert node.proc is not None and node.proc.wait(30) == 1
    assert "must be formatted" in node.log_text(), node.log_tail()
    assert not Path(node.data_dir / "meta.properties").exists()
