"""A dynamic KRaft quorum (kraft.version 1, KIP-853) of real Strom processes, as Kafka 4.4 runs one.

The controllers name no ``controller.quorum.voters``: only ``controller.quorum.bootstrap.servers``.
The voter set lives in the metadata log (VotersRecord), each voter keyed by its node id AND the
directory id of its metadata log dir (meta.properties' ``directory.id``).

- Growing: controller 1 is formatted ``--standalone`` (a quorum of itself), 2 and 3
  ``--no-initial-controllers``; with ``controller.quorum.auto.join.enable=true`` each of them,
  once caught up as an observer, sends AddRaftVoter for itself: DescribeQuorum (Strom's codec)
  and Kafka's ``kafka-metadata-quorum describe --status`` show the three voters and their
  directory ids.
- Leaving and joining: ``kafka-metadata-quorum remove-controller`` turns a follower whose
  auto-join is off into an observer (it stays one), ``add-controller --command-config <its
  server.properties>`` makes it a voter again; a removed controller whose auto-join is on adds
  itself back (Kafka 4.4's do, ~1 s after the removal): it is removed while it is down, so
  that the removal can be seen, and rejoins once started again.
- Controller registrations (KIP-919, KIP-1312): ``kafka-cluster list-endpoints
  --bootstrap-controller`` lists every running controller, a removed one that is an observer
  too; ``remove-controller --unregister`` of a stopped one removes it from the list;
  ``kafka-cluster unregister-controller`` refuses the active controller's own id and an id no
  longer registered; started again, the controller registers again.
- A broker-only node on the bootstrap servers is an observer of the quorum, registers with the
  active controller and serves a produce/consume round trip.
- The leader answers AddRaftVoter/RemoveRaftVoter errors with Kafka's codes: DUPLICATE_VOTER,
  VOTER_NOT_FOUND, REQUEST_TIMED_OUT for a replica that has not caught up, and a follower
  NOT_LEADER_OR_FOLLOWER.
- A wiped disk: a follower voter reformatted ``--no-initial-controllers`` (a new directory id)
  and restarted with auto-join off is only an observer: the old (id, directory id) stays a
  voter, the node cannot vote for it, so with the leader killed the one remaining real voter
  cannot be elected (no leader for longer than a real majority needs), until the old leader is
  back. (With auto-join on, Kafka 4.4's node first removes its old key, then adds the new one.)

Every expectation here was checked by running this file with Kafka 4.4's own controllers and
broker (``kafka.Kafka``, formatted by ``kafka.tools.StorageTool``) in place of Strom's processes:
it passes there unchanged.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.kraft_layout import random_directory_id, read_meta
from strom.cli.storage import FormatOptions, format_storage
from strom.cluster.client import BrokerClient
from strom.protocol.api_keys import ApiKey
from strom.storage.checkpoints import topic_id_from_str, topic_id_to_str

from .. import clients as kc
from ..broker import HOST, BrokerProcess, free_port
from ..conftest import DEFAULT_OVERRIDES
from ..kafka_tools.tools import KafkaTools, rows
from .conftest import _wait_registered
from .test_kraft_quorum import (
    CLUSTER_ID,
    FAILOVER_BOUND_S,
    _tools,
    describe_quorum,
    leader_view,
    poll,
)

pytestmark = pytest.mark.timeout(180)

# Kafka's error codes (docs/design/kraft.md §1).
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
DUPLICATE_VOTER = 126
VOTER_NOT_FOUND = 127

GROW_TIMEOUT_S = 30.0  # Kafka 4.4 needed ~7 s, JVM start included, for two auto-joins
JOIN_TIMEOUT_S = 20.0  # one AddRaftVoter (Kafka: 1-3 s after the observer caught up)

Key = tuple[int, str]  # (node id, directory id as meta.properties writes it)


# --------------------------------------------------------------------------- nodes


def _controllers(factory: pytest.TempPathFactory, label: str, *,
                 auto_join: bool) -> dict[int, BrokerProcess]:
    """Controller-only nodes that find the quorum through controller.quorum.bootstrap.servers
    (no controller.quorum.voters), each with a server.properties of its own (what the storage
    format and ``kafka-metadata-quorum add-controller`` read); not formatted, not started."""
    ports = {i: free_port() for i in (1, 2, 3)}
    bootstrap = ",".join(f"{HOST}:{port}" for port in ports.values())
    nodes = {}
    for i, port in ports.items():
        node = BrokerProcess(factory.mktemp(f"{label}-c{i}"), port=port, name=f"{label}-c{i}")
        node.overrides = {
            "process.roles": "controller", "node.id": str(i),
            "controller.quorum.bootstrap.servers": bootstrap,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"CONTROLLER://{HOST}:{port}",
            "controller.quorum.auto.join.enable": str(auto_join).lower(),
        }
        _write_config(node)
        node.overrides["metrics.listener"] = ""  # Strom's own key: not in the config file
        nodes[i] = node
    return nodes


def _write_config(node: BrokerProcess) -> Path:
    """The node's settings as a server.properties file (Kafka's keys only)."""
    config = node.base_dir / "server.properties"
    settings = {k: v for k, v in node.overrides.items() if k != "metrics.listener"}
    settings["log.dirs"] = str(node.data_dir)
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return config


def _format(node: BrokerProcess, **flags: Any) -> None:
    """``strom storage format -t CLUSTER_ID -c server.properties [flags]``, in this process (a new
    interpreter per node costs a second of CPU)."""
    format_storage(FormatOptions(node.base_dir / "server.properties", CLUSTER_ID, **flags))


def _dir_id(node: BrokerProcess) -> str:
    """The directory.id of the node's metadata log dir (its only log dir here)."""
    return read_meta(node.data_dir / "meta.properties")["directory.id"]


def _start(nodes: list[BrokerProcess]) -> None:
    for node in nodes:
        node.start(wait=False)
    for node in nodes:
        node.wait_ready()


def _set_auto_join(node: BrokerProcess, enabled: bool) -> None:
    node.overrides["controller.quorum.auto.join.enable"] = str(enabled).lower()
    _write_config(node)


# --------------------------------------------------------------------------- the quorum's view


def _key(replica: dict[str, Any]) -> Key:
    directory = replica["replica_directory_id"]
    if isinstance(directory, uuid.UUID):
        directory = topic_id_to_str(directory)
    return replica["replica_id"], directory


def voters(view: dict[str, Any]) -> set[Key]:
    return {_key(v) for v in view["current_voters"]}


def observers(view: dict[str, Any]) -> set[Key]:
    return {_key(o) for o in view["observers"]}


def _running(nodes: dict[int, BrokerProcess]) -> list[BrokerProcess]:
    return [n for n in nodes.values() if n.running]


def _view_where(nodes: dict[int, BrokerProcess],
                check: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The leader's DescribeQuorum answer once `check` holds for it, else None."""
    view = leader_view(_running(nodes))
    return view if view is not None and check(view) else None


def wait_voters(nodes: dict[int, BrokerProcess], wanted: set[Key], timeout: float,
                what: str) -> dict[str, Any]:
    return poll(lambda: _view_where(nodes, lambda v: voters(v) == wanted), timeout, what)


def holds(predicate: Callable[[], object], seconds: float, what: str) -> None:
    """`predicate()` stays truthy for `seconds` (checked repeatedly): an assertion over a window,
    for things that must NOT happen, not a wait for something to happen."""
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        assert predicate(), f"{what} stopped holding after {elapsed:.1f}s"
        time.sleep(0.1)  # poll interval, not synchronisation


def _grown(nodes: dict[int, BrokerProcess]) -> dict[str, Any]:
    """The leader's view once auto-join made every controller a voter with its directory id."""
    wanted = {(i, _dir_id(n)) for i, n in nodes.items()}
    return wait_voters(nodes, wanted, GROW_TIMEOUT_S, f"the voters {sorted(wanted)}")


# --------------------------------------------------------------------------- raw requests


def _request(node: BrokerProcess, api: ApiKey, version: int, body: dict[str, Any],
             timeout_s: float = 10.0) -> dict[str, Any]:
    async def ask() -> dict[str, Any]:
        client = BrokerClient(HOST, node.port, client_id="dynamic-quorum-test",
                              timeout_s=timeout_s)
        try:
            response = await client.request(api, version, body, timeout_s=timeout_s)
        finally:
            client.close()
        result: dict[str, Any] = response.to_dict()
        return result

    return asyncio.run(ask())


def add_raft_voter(node: BrokerProcess, voter: Key, port: int,
                   timeout_ms: int = 10_000) -> dict[str, Any]:
    """AddRaftVoter v1 (answered once the new voter set commits) for `voter` at
    CONTROLLER://HOST:port."""
    return _request(node, ApiKey.ADD_RAFT_VOTER, 1, {
        "cluster_id": CLUSTER_ID, "timeout": timeout_ms, "voter_id": voter[0],
        "voter_directory_id": topic_id_from_str(voter[1]),
        "listeners": [{"name": "CONTROLLER", "host": HOST, "port": port}],
        "ack_when_committed": True,
    }, timeout_s=timeout_ms / 1000 + 10)


def remove_raft_voter(node: BrokerProcess, voter: Key) -> dict[str, Any]:
    return _request(node, ApiKey.REMOVE_RAFT_VOTER, 0, {
        "cluster_id": CLUSTER_ID, "voter_id": voter[0],
        "voter_directory_id": topic_id_from_str(voter[1])})


def _leader(nodes: dict[int, BrokerProcess]) -> BrokerProcess:
    view = poll(lambda: leader_view(_running(nodes)), 15, "a leader")
    return nodes[view["leader_id"]]


def remove_controller(tools: KafkaTools | None, nodes: dict[int, BrokerProcess],
                      voter: Key, *, unregister: bool = False) -> None:
    """``kafka-metadata-quorum --bootstrap-controller <the running controllers>
    remove-controller [--unregister]`` (or, without Java, the RemoveRaftVoter and
    UnregisterController it sends, to the leader)."""
    if tools is None:
        answer = remove_raft_voter(_leader(nodes), voter)
        assert answer["error_code"] == 0, answer
        if unregister:
            answer = _request(_leader(nodes), ApiKey.UNREGISTER_CONTROLLER, 0,
                              {"controller_id": voter[0]})
            assert answer["error_code"] == 0, answer
        return
    out = tools.run("kafka-metadata-quorum", "--bootstrap-controller",
                    ",".join(n.bootstrap for n in _running(nodes)), "remove-controller",
                    "--controller-id", str(voter[0]),
                    "--controller-directory-id", voter[1],
                    *(["--unregister"] if unregister else [])).stdout
    assert f"Removed KRaft controller {voter[0]} with directory id {voter[1]}" in out, out
    if unregister:
        assert f"Unregistered KRaft controller {voter[0]}" in out, out


def listed_controllers(tools: KafkaTools | None, nodes: dict[int, BrokerProcess]) -> set[int]:
    """``kafka-cluster list-endpoints --bootstrap-controller``: the registered controllers,
    from DescribeCluster on a CONTROLLER listener (KIP-919)."""
    if tools is None:
        answer = _request(_leader(nodes), ApiKey.DESCRIBE_CLUSTER, 2, {
            "include_cluster_authorized_operations": False, "endpoint_type": 2,
            "include_fenced_brokers": False})
        return {b["broker_id"] for b in answer["brokers"]}
    out = tools.run("kafka-cluster", "list-endpoints", "--bootstrap-controller",
                    ",".join(n.bootstrap for n in _running(nodes))).stdout
    return {int(r[0]) for r in rows(out)[1:]}


def unregister_controller(tools: KafkaTools | None, nodes: dict[int, BrokerProcess],
                          controller_id: int) -> str:
    """``kafka-cluster unregister-controller`` that fails: its error (Kafka 4.4, KIP-1312)."""
    if tools is None:
        answer = _request(_leader(nodes), ApiKey.UNREGISTER_CONTROLLER, 0,
                          {"controller_id": controller_id})
        return str(answer["error_message"])
    result = tools.run("kafka-cluster", "unregister-controller", "--bootstrap-controller",
                       ",".join(n.bootstrap for n in _running(nodes)),
                       "--id", str(controller_id), code=None)
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr


def add_controller(tools: KafkaTools | None, nodes: dict[int, BrokerProcess],
                   node: BrokerProcess) -> None:
    """``kafka-metadata-quorum --command-config <node's server.properties> add-controller``:
    the tool reads the node's id, controller endpoint and metadata dir's directory.id from
    that file (or, without Java, the AddRaftVoter it sends, to the leader)."""
    node_id = int(node.overrides["node.id"])
    if tools is None:
        answer = add_raft_voter(_leader(nodes), (node_id, _dir_id(node)), node.port)
        assert answer["error_code"] == 0, answer
        return
    out = tools.run("kafka-metadata-quorum", "--bootstrap-controller",
                    ",".join(n.bootstrap for n in _running(nodes)),
                    "--command-config", str(node.base_dir / "server.properties"),
                    "add-controller").stdout
    assert (f"Added controller {node_id} with directory id {_dir_id(node)} and endpoints: "
            f"CONTROLLER://{node.bootstrap}") in out, out


# --------------------------------------------------------------------------- a grown quorum


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, BrokerProcess]]:
    """Controllers 1 (--standalone), 2 and 3 (--no-initial-controllers), auto-join on, started
    together; each test waits for the quorum it needs."""
    nodes = _controllers(tmp_path_factory, "dq-grow", auto_join=True)
    _format(nodes[1], standalone=True)
    _format(nodes[2], no_initial_controllers=True)
    _format(nodes[3], no_initial_controllers=True)
    try:
        _start(list(nodes.values()))
        yield nodes
    finally:
        for node in nodes.values():
            node.kill()


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> KafkaTools | None:
    return _tools(tmp_path_factory)


def test_auto_join_grows_a_standalone_controller_into_a_quorum_of_three(
        grown: dict[int, BrokerProcess], tools: KafkaTools | None) -> None:
    nodes = grown
    dirs = {i: _dir_id(n) for i, n in nodes.items()}
    assert len(set(dirs.values())) == 3
    view = _grown(nodes)
    leader = view["leader_id"]
    assert leader in nodes and view["leader_epoch"] >= 1
    assert not {i for i, _ in observers(view)} & set(nodes), view["observers"]
    # every voter replicates: each has fetched from the leader
    view = poll(lambda: _view_where(nodes, lambda v: all(
        r["log_end_offset"] > 0 for r in v["current_voters"])), 15, "every voter fetching")
    for node in nodes.values():
        if node is not nodes[view["leader_id"]]:
            answer = describe_quorum(node)
            assert answer is not None and answer["error_code"] == NOT_LEADER_OR_FOLLOWER

    if tools is not None:
        out = tools.run("kafka-metadata-quorum", "--bootstrap-controller", nodes[2].bootstrap,
                        "describe", "--status").stdout
        status = dict(re.findall(r"^(\w+):\s+(.*)$", out, re.M))
        assert status["ClusterId"] == CLUSTER_ID
        assert int(status["LeaderId"]) in nodes
        # kraft.version 1: each voter with its directoryId, as JSON
        assert json.loads(status["CurrentVoters"]) == [
            {"id": i, "directoryId": dirs[i], "endpoints": [f"CONTROLLER://{nodes[i].bootstrap}"]}
            for i in sorted(nodes)]
        assert not {o["id"] for o in json.loads(status["CurrentObservers"])} & set(nodes), out


def test_a_removed_controller_is_an_observer_until_added_back(
        grown: dict[int, BrokerProcess], tools: KafkaTools | None) -> None:
    nodes = grown
    everyone = {(i, _dir_id(n)) for i, n in nodes.items()}
    view = _grown(nodes)
    leader = view["leader_id"]
    follower = next(i for i in sorted(nodes) if i != leader)
    node = nodes[follower]
    key = (follower, _dir_id(node))

    # Auto-join off, or the removed controller would add itself back at once (Kafka does). A
    # restart keeps it a voter.
    node.stop()
    _set_auto_join(node, False)
    node.start()
    wait_voters(nodes, everyone, 15, "the restarted follower still a voter")

    remove_controller(tools, nodes, key)
    rest = everyone - {key}
    view = poll(lambda: _view_where(nodes, lambda v: voters(v) == rest and key in observers(v)),
                15, f"{key} removed and fetching as an observer")
    assert view["leader_id"] != follower
    answer = describe_quorum(node)
    assert answer is not None and answer["error_code"] == NOT_LEADER_OR_FOLLOWER
    # it stays out (auto-join is off) and keeps replicating as an observer
    holds(lambda: _view_where(nodes, lambda v: voters(v) == rest and key in observers(v)), 2.0,
          f"{key} an observer, not a voter")
    # still registered (KIP-919): an observer that is a controller is listed with them
    assert listed_controllers(tools, nodes) == set(nodes)
    if tools is not None:
        out = tools.run("kafka-metadata-quorum", "--bootstrap-controller",
                        ",".join(n.bootstrap for n in _running(nodes)), "describe",
                        "--replication").stdout
        table = rows(out)
        assert table[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                            "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
        status = {(int(r[0]), r[1]): r[6] for r in table[1:]}
        assert status[key] == "Observer", out
        assert sorted(status[k] for k in rest) == ["Follower", "Leader"], out

    add_controller(tools, nodes, node)
    wait_voters(nodes, everyone, JOIN_TIMEOUT_S, f"{key} a voter again")

    # A removed controller with auto-join on adds itself back (Kafka 4.4's do, ~1 s after the
    # removal). Removed while it is down, so that the removal is seen before it can undo it;
    # back up, it learns from the leader that it is no longer a voter, and joins again.
    view = poll(lambda: leader_view(_running(nodes)), 15, "a leader")
    other = next(i for i in sorted(nodes) if i not in (view["leader_id"], follower))
    returning = nodes[other]
    returning_key = (other, _dir_id(returning))
    # polled with the request itself (a JVM per poll costs a second), the tool once after
    poll(lambda: listed_controllers(None, nodes) == set(nodes), 15,
         "every controller registered (KIP-919)")
    returning.stop()
    # --unregister (KIP-1312): its registration goes too, so list-endpoints no longer shows it
    remove_controller(tools, nodes, returning_key, unregister=True)
    wait_voters(nodes, everyone - {returning_key}, 15, f"{returning_key} removed")
    assert listed_controllers(tools, nodes) == set(nodes) - {other}
    leader = _view_where(nodes, lambda v: True)
    assert leader is not None
    assert "cannot unregister itself" in unregister_controller(tools, nodes, leader["leader_id"])
    assert "is not currently registered" in unregister_controller(tools, nodes, other)
    returning.start()
    view = wait_voters(nodes, everyone, JOIN_TIMEOUT_S, f"{returning_key} back by auto-join")
    assert returning_key not in observers(view)
    # a running controller registers again, as Kafka's does
    poll(lambda: listed_controllers(None, nodes) == set(nodes), 15,
         f"controller {other} registered again")
    assert listed_controllers(tools, nodes) == set(nodes)


def test_a_broker_only_node_registers_with_the_dynamic_quorum_and_serves(
        grown: dict[int, BrokerProcess], tmp_path_factory: pytest.TempPathFactory,
        tools: KafkaTools | None) -> None:
    nodes = grown
    _grown(nodes)
    broker = BrokerProcess(tmp_path_factory.mktemp("dq-broker"), name="dq-broker")
    broker.overrides = {
        "process.roles": "broker", "node.id": "4",
        "controller.quorum.bootstrap.servers":
            nodes[1].overrides["controller.quorum.bootstrap.servers"],
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "listeners": f"PLAINTEXT://{HOST}:{broker.port}",
        "broker.heartbeat.interval.ms": "500",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        **DEFAULT_OVERRIDES,
    }
    _write_config(broker)
    _format(broker)  # a broker takes none of the controller flags (as Kafka's tool)
    try:
        broker.start()
        _wait_registered([broker])
        # an observer of the metadata log, under the directory id of its metadata log dir
        view = poll(lambda: _view_where(nodes, lambda v: (4, _dir_id(broker)) in observers(v)),
                    15, "the broker among the observers")
        assert 4 not in {i for i, _ in voters(view)}

        topic = f"dq-roundtrip-{uuid.uuid4().hex[:6]}"
        kc.create_topic(broker.bootstrap, topic)
        sent = kc.sample_messages("dq")
        kc.produce(broker.bootstrap, topic, sent, partition=0, acks="all")
        got = kc.consume(broker.bootstrap, topic, len(sent))
        assert kc.contents(got) == kc.contents(sent)

        # gone for good: unregistered (``kafka-cluster unregister``, Admin.unregisterBroker),
        # through the controllers; a second time it is not registered any more
        broker.kill()
        assert "is no longer registered" in unregister_broker(tools, nodes, 4, fails=False)
        assert "is not currently registered" in unregister_broker(tools, nodes, 4, fails=True)
    finally:
        broker.kill()


def unregister_broker(tools: KafkaTools | None, nodes: dict[int, BrokerProcess],
                      broker_id: int, *, fails: bool) -> str:
    """``kafka-cluster unregister --bootstrap-controller --id``: its output (or, without Java,
    the UnregisterBroker answer's error message, "... is no longer registered" when none)."""
    if tools is None:
        answer = _request(_leader(nodes), ApiKey.UNREGISTER_BROKER, 0, {"broker_id": broker_id})
        assert (answer["error_code"] != 0) == fails, answer
        return answer["error_message"] or f"Broker {broker_id} is no longer registered."
    result = tools.run("kafka-cluster", "unregister", "--bootstrap-controller",
                       ",".join(n.bootstrap for n in _running(nodes)), "--id", str(broker_id),
                       code=None)
    assert (result.returncode != 0) == fails, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_the_leader_answers_voter_changes_it_refuses_with_kafkas_errors(
        grown: dict[int, BrokerProcess]) -> None:
    """Last on the grown quorum: a wrong answer here could leave it with a phantom voter."""
    nodes = grown
    view = _grown(nodes)
    leader = nodes[view["leader_id"]]
    follower_id = next(i for i in sorted(nodes) if i != view["leader_id"])
    follower = nodes[follower_id]
    key = (follower_id, _dir_id(follower))
    unknown = (9, random_directory_id())

    answer = add_raft_voter(leader, key, follower.port)
    assert answer["error_code"] == DUPLICATE_VOTER, answer
    answer = remove_raft_voter(leader, unknown)
    assert answer["error_code"] == VOTER_NOT_FOUND, answer
    answer = remove_raft_voter(leader, (follower_id, random_directory_id()))  # wrong directory
    assert answer["error_code"] == VOTER_NOT_FOUND, answer
    # a replica the leader has never seen fetch is not caught up (Kafka answers at once; at the
    # latest when the request's timeout ends)
    started = time.monotonic()
    answer = add_raft_voter(leader, unknown, follower.port, timeout_ms=5_000)
    assert answer["error_code"] == REQUEST_TIMED_OUT, answer
    assert time.monotonic() - started < 10
    for request in (lambda: add_raft_voter(follower, unknown, follower.port),
                    lambda: remove_raft_voter(follower, key)):
        answer = request()
        assert answer["error_code"] == NOT_LEADER_OR_FOLLOWER, answer
    # nothing changed
    wanted = {(i, _dir_id(n)) for i, n in nodes.items()}
    view = poll(lambda: leader_view(_running(nodes)), 15, "a leader")
    assert voters(view) == wanted


# --------------------------------------------------------------------------- a wiped disk


def test_a_voter_on_a_wiped_disk_is_an_observer_and_cannot_vote(
        tmp_path_factory: pytest.TempPathFactory, tools: KafkaTools | None) -> None:
    nodes = _controllers(tmp_path_factory, "dq-wiped", auto_join=False)
    dirs = {i: random_directory_id() for i in nodes}
    initial = ",".join(f"{i}@{HOST}:{n.port}:{dirs[i]}" for i, n in nodes.items())
    for node in nodes.values():
        _format(node, initial_controllers=initial)
    assert {i: _dir_id(n) for i, n in nodes.items()} == dirs
    everyone = {(i, dirs[i]) for i in nodes}
    try:
        _start(list(nodes.values()))
        view = poll(lambda: _view_where(nodes, lambda v: voters(v) == everyone and all(
            r["log_end_offset"] > 0 for r in v["current_voters"])), 20,
            "a leader with every voter fetching")
        leader = view["leader_id"]
        wiped_id, other_id = (i for i in sorted(nodes) if i != leader)
        wiped = nodes[wiped_id]

        # The disk is lost: wiped and formatted again, the node gets a new directory id.
        wiped.stop()
        shutil.rmtree(wiped.data_dir)
        wiped.data_dir.mkdir()
        _format(wiped, no_initial_controllers=True)
        new_key = (wiped_id, _dir_id(wiped))
        assert new_key[1] != dirs[wiped_id]
        wiped.start()
        view = poll(lambda: _view_where(nodes, lambda v: new_key in observers(v)), 20,
                    f"{new_key} fetching as an observer")
        assert voters(view) == everyone  # the old key is still the voter
        epoch = view["leader_epoch"]
        if tools is not None:
            out = tools.run("kafka-metadata-quorum", "--bootstrap-controller",
                            nodes[leader].bootstrap, "describe", "--replication").stdout
            status = {(int(r[0]), r[1]): r[6] for r in rows(out)[1:]}
            assert status[(wiped_id, dirs[wiped_id])] == "Follower", out  # Kafka's word
            assert status[new_key] == "Observer", out

        # Leader gone: of the voters {leader, other, (wiped, old dir)} one is alive. The node on
        # the wiped disk must not vote for the old key, nor stand itself: no leader, for longer
        # than a majority would need to elect one.
        nodes[leader].kill()
        survivors = {other_id: nodes[other_id], wiped_id: wiped}
        holds(lambda: leader_view(_running(survivors)) is None, FAILOVER_BOUND_S,
              "no leader without a real majority")
        assert wiped.running and nodes[other_id].running

        # The old leader back: a majority of real voters again.
        nodes[leader].start()
        view = poll(lambda: _view_where(nodes, lambda v: v["leader_epoch"] > epoch
                                        and new_key in observers(v)), 20, "a new leader")
        assert view["leader_id"] in (leader, other_id)
        assert voters(view) == everyone
        answer = describe_quorum(wiped)
        assert answer is not None and answer["error_code"] == NOT_LEADER_OR_FOLLOWER
    finally:
        for node in nodes.values():
            node.kill()
