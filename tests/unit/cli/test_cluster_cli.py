"""`strom cluster` (strom.cli.cluster) without starting brokers: the port plan, each node's
server.properties, the storage it formats, cluster.json, telling a node's process from any
other, and the one-line refusals (a dir whose cluster runs, busy ports, settings `up` owns).
A real cluster goes up and down in tests/integration/test_cluster_cli.py."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strom.cli.cluster import (
    CLUSTER_FILE,
    START_MARK,
    ClusterRecord,
    NodeRecord,
    _write_and_format,
    busy_ports,
    check_overrides,
    is_node_process,
    log_tail,
    node_properties,
    plan_ports,
    properties_path,
    read_record,
    render_properties,
    status_rows,
    stored_cluster_id,
    write_record,
)
from strom.cli.common import CliError, UsageError
from strom.cli.main import app
from strom.config.broker import BrokerConfig, read_properties
from strom.raft.config import QuorumConfig

runner = CliRunner()
CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


# ---------------------------------------------------------------------------------- the plan


def test_plan_ports_default_layout() -> None:
    plan = plan_ports(3, 9092)
    assert [(n.node_id, n.port, n.controller_port) for n in plan.nodes] == \
        [(1, 9092, 9192), (2, 9093, 9193), (3, 9094, 9194)]
    assert plan.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert plan.voters == "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"


def test_plan_ports_controller_base_and_bad_ranges() -> None:
    plan = plan_ports(2, 20000, 30000)
    assert [(n.port, n.controller_port) for n in plan.nodes] == [(20000, 30000), (20001, 30001)]
    with pytest.raises(UsageError, match="overlap"):
        plan_ports(3, 9092, 9094)
    with pytest.raises(UsageError, match="overlap"):
        plan_ports(101, 9092)  # the default controller ports start inside the broker ports
    with pytest.raises(UsageError, match="65535"):
        plan_ports(3, 65534, 1000)
    with pytest.raises(UsageError, match="65535"):
        plan_ports(3, 1000, 65534)
    with pytest.raises(UsageError, match="at least 1"):
        plan_ports(0, 9092)


# ---------------------------------------------------------------------------- the properties


def test_node_properties_of_three_nodes(tmp_path: Path) -> None:
    plan = plan_ports(3, 9092)
    props = node_properties(plan, plan.nodes[1], tmp_path)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "2"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9193"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert props["controller.quorum.voters"] == plan.voters
    assert props["log.dirs"] == str(tmp_path / "node-2" / "data")
    assert props["metrics.listener"] == "http://127.0.0.1:0"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "default.replication.factor"):
        assert props[key] == "3"
    assert props["min.insync.replicas"] == "2"


def test_node_properties_of_one_node_and_overrides(tmp_path: Path) -> None:
    plan = plan_ports(1, 9092)
    props = node_properties(plan, plan.nodes[0], tmp_path,
                            {"num.partitions": "4", "min.insync.replicas": "1"})
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9192"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["min.insync.replicas"] == "1"
    assert props["num.partitions"] == "4"


def test_rendered_properties_load_as_a_valid_kraft_config(tmp_path: Path) -> None:
    plan = plan_ports(3, 9092)
    props = node_properties(plan, plan.nodes[2], tmp_path / "with space:colon",
                            {"num.partitions": "2"})
    path = tmp_path / "server.properties"
    path.write_text(render_properties(props, "a header\nof two lines"))
    assert read_properties(path) == props
    config = BrokerConfig.load(path)
    assert config.unknown == {}
    quorum = QuorumConfig.from_config(config.get)
    assert quorum.problems() == []
    assert quorum.node_id == 3 and quorum.is_controller
    assert [(v.node_id, v.port) for v in quorum.voters] == [(1, 9192), (2, 9193), (3, 9194)]
    assert config.log_dirs == [tmp_path / "with space:colon" / "node-3" / "data"]


def test_overrides_of_the_layout_are_refused() -> None:
    check_overrides({"num.partitions": "3", "metrics.listener": ""})
    with pytest.raises(UsageError, match=r"cannot set listeners, node\.id"):
        check_overrides({"node.id": "7", "listeners": "PLAINTEXT://:1"})
    with pytest.raises(UsageError, match="line breaks"):
        check_overrides({"a.b": "x\ny=z"})
    with pytest.raises(UsageError, match="key"):
        check_overrides({"a b": "x"})


def test_formatting_gives_every_node_the_cluster_id(tmp_path: Path) -> None:
    plan = plan_ports(3, 9092)
    _write_and_format(tmp_path, plan, CLUSTER, {})
    for node in plan.nodes:
        meta = read_properties(tmp_path / f"node-{node.node_id}" / "data" / "meta.properties")
        assert meta["cluster.id"] == CLUSTER
        assert meta["node.id"] == str(node.node_id)
        assert (tmp_path / f"node-{node.node_id}" / "data" / "__cluster_metadata-0").is_dir()
    assert stored_cluster_id(tmp_path, [1, 2, 3]) == CLUSTER
    before = (tmp_path / "node-1" / "data" / "meta.properties").read_text()
    _write_and_format(tmp_path, plan, CLUSTER, {"num.partitions": "2"})  # a restart: kept
    assert (tmp_path / "node-1" / "data" / "meta.properties").read_text() == before
    assert read_properties(properties_path(tmp_path, 1))["num.partitions"] == "2"
    with pytest.raises(CliError, match=r"node 1: Invalid cluster\.id"):
        _write_and_format(tmp_path, plan, "AnotherClusterIdxxxxxx", {})


def test_busy_ports_names_the_taken_ones() -> None:
    with socket.socket() as free:  # a port just released, for the controller: not the one
        free.bind(("127.0.0.1", 0))  # next to the taken one, which a parallel test's
        controller = free.getsockname()[1]  # connection may hold (seen once in CI)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        plan = plan_ports(1, port, controller if controller != port else port - 1)
        assert busy_ports(plan) == [(port, "node 1 PLAINTEXT")]


# -------------------------------------------------------------------------------- cluster.json


def record(pids: list[int | None]) -> ClusterRecord:
    return ClusterRecord(CLUSTER, [NodeRecord(i + 1, 9092 + i, 9192 + i, pid)
                                   for i, pid in enumerate(pids)], {"num.partitions": "2"}, 1)


def test_cluster_json_round_trip(tmp_path: Path) -> None:
    assert read_record(tmp_path) is None
    rec = record([11, None, 13])
    write_record(tmp_path, rec)
    data = json.loads((tmp_path / CLUSTER_FILE).read_text())
    assert data["bootstrap_servers"] == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert data["nodes"][0] == {"node_id": 1, "pid": 11, "port": 9092, "controller_port": 9192}
    assert read_record(tmp_path) == rec
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"version": 2}',
    '{"version": 1, "cluster_id": "x", "nodes": []}',
    '{"version": 1, "cluster_id": "x", "nodes": [{"node_id": 1, "port": "9092", '
    '"controller_port": 9192}]}',
    '{"version": 1, "cluster_id": "x", "nodes": [{"node_id": 2, "port": 9092, '
    '"controller_port": 9192}]}',
])
def test_a_damaged_cluster_json_is_one_error(tmp_path: Path, text: str) -> None:
    (tmp_path / CLUSTER_FILE).write_text(text)
    with pytest.raises(CliError, match="is damaged"):
        read_record(tmp_path)


def test_status_rows() -> None:
    rows = status_rows(record([11, 12, None]), {1, 2}, 2)
    assert rows == [
        ("1", "11", "running", "127.0.0.1:9092", "127.0.0.1:9192", "follower"),
        ("2", "12", "running", "127.0.0.1:9093", "127.0.0.1:9193", "leader"),
        ("3", "-", "stopped", "127.0.0.1:9094", "127.0.0.1:9194", "-"),
    ]


def test_log_tail_starts_at_the_last_start(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text(f"{START_MARK}1: a\nold failure\n{START_MARK}2: b\nnew failure\n")
    assert log_tail(log) == [f"{START_MARK}2: b", "new failure"]
    assert log_tail(tmp_path / "missing.log") == []


# ------------------------------------------------------------------------ processes, refusals


@pytest.fixture
def fake_node(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line looks like node 1 of a cluster in tmp_path/c."""
    root = tmp_path / "c"
    write_record(_mkdir(root), record([None]))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "broker",
                             str(properties_path(root, 1))])
    # until the child has exec'd, /proc shows the parent's command line (seen in CI)
    deadline = time.monotonic() + 10
    while b"broker" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the fake node never started"
        time.sleep(0.01)  # poll interval, not synchronisation
    rec = record([proc.pid])
    write_record(root, rec)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_is_node_process(tmp_path: Path, fake_node: subprocess.Popen[bytes]) -> None:
    root = tmp_path / "c"
    assert is_node_process(fake_node.pid, root, 1)
    assert not is_node_process(fake_node.pid, root, 2)
    assert not is_node_process(fake_node.pid, tmp_path / "other", 1)
    assert not is_node_process(os.getpid(), root, 1)
    assert not is_node_process(None, root, 1)
    fake_node.kill()
    fake_node.wait(10)
    assert not is_node_process(fake_node.pid, root, 1)


def test_up_refuses_a_dir_whose_cluster_runs(tmp_path: Path,
                                             fake_node: subprocess.Popen[bytes]) -> None:
    result = runner.invoke(app, ["cluster", "up", "--nodes", "1", "--dir", str(tmp_path / "c")])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "already has a running cluster" in lines[0], result.output
    assert f"pid {fake_node.pid}" in lines[0]
    assert fake_node.poll() is None


def test_status_and_down_of_a_running_node(tmp_path: Path,
                                           fake_node: subprocess.Popen[bytes]) -> None:
    root = str(tmp_path / "c")
    # the quorum cannot answer (no controller listens there): status says so and goes on
    result = runner.invoke(app, ["cluster", "status", "--dir", root, "--timeout", "0.5"])
    assert result.exit_code == 0, result.output
    assert "running" in result.output and "quorum" in result.output
    assert "bootstrap servers: 127.0.0.1:9092" in result.output
    result = runner.invoke(app, ["cluster", "down", "--dir", root, "--timeout", "10"])
    assert result.exit_code == 0, result.output
    assert "node 1: stopped" in result.output
    assert fake_node.wait(10) == -15  # SIGTERM
    rec = read_record(tmp_path / "c")
    assert rec is not None and rec.nodes[0].pid is None
    result = runner.invoke(app, ["cluster", "status", "--dir", root])
    assert result.exit_code == 1
    assert "stopped" in result.output


def test_down_leaves_a_process_that_is_not_the_node_alone(tmp_path: Path) -> None:
    root = _mkdir(tmp_path / "c")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_record(root, record([other.pid]))
        result = runner.invoke(app, ["cluster", "down", "--dir", str(root), "--purge"])
        assert result.exit_code == 0, result.output
        assert "node 1: was not running" in result.output
        assert other.poll() is None
        assert not root.exists()  # --purge: nothing else was in it
    finally:
        other.kill()
        other.wait(10)


def test_purge_keeps_files_it_did_not_make(tmp_path: Path) -> None:
    root = _mkdir(tmp_path / "c")
    write_record(root, record([None]))
    _mkdir(root / "node-1" / "data")
    (root / "mine.txt").write_text("keep")
    result = runner.invoke(app, ["cluster", "down", "--dir", str(root), "--purge"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in root.iterdir()) == ["mine.txt"]


def test_one_line_errors(tmp_path: Path) -> None:
    for command in ("down", "status"):
        result = runner.invoke(app, ["cluster", command, "--dir", str(tmp_path / "none")])
        assert result.exit_code == 1
        assert result.output.strip().splitlines() == [
            f"Error: no cluster in {tmp_path / 'none'} (no cluster.json): strom cluster up "
            f"--dir {tmp_path / 'none'} starts one"]
    result = runner.invoke(app, ["cluster", "up", "--dir", str(tmp_path / "x"),
                                 "--override", "node.id=4"])
    assert result.exit_code == 2
    assert "cannot set node.id" in result.output
    assert not (tmp_path / "x").exists()


def test_up_refuses_busy_ports_and_leaves_no_dir(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = runner.invoke(app, ["cluster", "up", "--nodes", "1", "--dir",
                                     str(tmp_path / "c"), "--base-port", str(port),
                                     "--controller-base-port", str(port - 1)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    # (the controller port below it may be someone else's just now: then both are named)
    assert len(lines) == 1 and re.search(
        rf"ports? in use on 127\.0\.0\.1: (.*, )?{port} \(node 1 PLAINTEXT\)", lines[0]), lines
    assert not (tmp_path / "c").exists()


def test_up_of_a_stopped_cluster_keeps_its_node_count(tmp_path: Path) -> None:
    root = _mkdir(tmp_path / "c")
    write_record(root, record([None, None, None]))
    result = runner.invoke(app, ["cluster", "up", "--nodes", "1", "--dir", str(root)])
    assert result.exit_code == 1
    assert "holds a cluster of 3 nodes" in result.output
