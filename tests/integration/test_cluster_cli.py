"""`strom cluster up|status|down` as a user runs them (the `strom` console script): a cluster of
three combined KRaft nodes in a temporary directory serves a record through confluent-kafka,
gets a node killed with -9 back from `up`, shows one quorum leader, and is gone after `down`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from . import clients as kc
from .broker import STROM_BIN, free_port, running_peer

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(running_peer() is not None, reason="strom's own command"),
]


def strom(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STROM_BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def alive(pid: int) -> bool:
    """Whether the PID is a live process (a zombie, waiting for init to reap it, is not)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() != b""
    except OSError:
        return False


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1 (`strom cluster up` numbers
    its nodes' ports from a base)."""
    for _ in range(50):
        base = free_port()
        if base + count > 65535:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError(f"no {count} consecutive free ports")


def test_three_node_cluster_up_status_down(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    port, controller_port = free_ports(3), free_ports(3)
    bootstrap = ",".join(f"127.0.0.1:{port + i}" for i in range(3))
    try:
        started = time.monotonic()
        out = ok(strom("cluster", "up", "--nodes", "3", "--dir", root, "--base-port", port,
                       "--controller-base-port", controller_port, "--timeout", "60",
                       timeout=90))
        assert f"bootstrap servers: {bootstrap}\n" in out
        assert time.monotonic() - started < 60
        record = json.loads((root / "cluster.json").read_text())
        assert record["bootstrap_servers"] == bootstrap
        pids = [n["pid"] for n in record["nodes"]]
        assert all(alive(pid) for pid in pids)
        assert (root / "node-3" / "data" / "meta.properties").is_file()

        again = strom("cluster", "up", "--nodes", "3", "--dir", root)
        assert again.returncode == 1
        assert again.stderr.strip().splitlines() == [
            f"Error: {root} already has a running cluster (node 1 pid {pids[0]}, node 2 pid "
            f"{pids[1]}, node 3 pid {pids[2]}): strom cluster status --dir {root} shows it, "
            f"strom cluster down --dir {root} stops it"]

        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until its future resolves
        admin.create_topics([NewTopic("first-look", 1, 3)])["first-look"].result(30)
        kc.wait_for_topic(bootstrap, "first-look", 1)
        kc.produce(bootstrap, "first-look", [kc.Msg(b"k", b"hello cluster")])
        assert kc.contents(kc.read_partition(bootstrap, "first-look")) == \
            kc.contents([kc.Msg(b"k", b"hello cluster")])

        # a node that died comes back with `up`; the running ones are left alone
        subprocess.run(["kill", "-9", str(pids[1])], check=True)
        deadline = time.monotonic() + 30
        while alive(pids[1]):
            assert time.monotonic() < deadline, "node 2 outlived kill -9"
            time.sleep(0.05)
        refused = strom("cluster", "up", "--dir", root, "--override", "num.io.threads=4")
        assert refused.returncode == 1
        assert "has nodes running: `up` starts the stopped ones as they were" in refused.stderr
        out = ok(strom("cluster", "up", "--dir", root, "--timeout", "60", timeout=90))
        assert "started node 2 again" in out and "(2 kept running)" in out, out
        record = json.loads((root / "cluster.json").read_text())
        restarted = [n["pid"] for n in record["nodes"]]
        assert restarted[0] == pids[0] and restarted[2] == pids[2] and restarted[1] != pids[1]
        pids = restarted
        assert all(alive(pid) for pid in pids)
        assert kc.contents(kc.read_partition(bootstrap, "first-look")) == \
            kc.contents([kc.Msg(b"k", b"hello cluster")])

        out = ok(strom("cluster", "status", "--dir", root))
        rows = [line.split() for line in out.splitlines()
                if line.strip()[:2] in ("1 ", "2 ", "3 ")]
        assert [r[:5] for r in rows] == [
            [str(i + 1), str(pids[i]), "running", f"127.0.0.1:{port + i}",
             f"127.0.0.1:{controller_port + i}"] for i in range(3)], out
        assert sorted(r[5] for r in rows) == ["follower", "follower", "leader"], out
        assert f"bootstrap servers: {bootstrap}" in out

        out = ok(strom("cluster", "down", "--dir", root))
        assert all(f"node {i}: stopped" in out for i in (1, 2, 3)), out
        assert not any(alive(pid) for pid in pids)
        assert all(n["pid"] is None
                   for n in json.loads((root / "cluster.json").read_text())["nodes"])
        assert (root / "node-1" / "data" / "meta.properties").is_file()  # the data stays
        status = strom("cluster", "status", "--dir", root)
        assert status.returncode == 1 and "stopped" in status.stdout
    finally:
        if (root / "cluster.json").exists():
            strom("cluster", "down", "--dir", root, "--kill", timeout=30)
