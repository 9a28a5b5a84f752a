"""A real broker's memory under many or greedy connections, and its connection limits."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from . import wire

pytestmark = pytest.mark.timeout(120)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def served(bootstrap: str) -> bool:
    """A fresh connection gets its ApiVersions answered."""
    try:
        with wire.Conn(bootstrap, timeout=5) as c:
            return c.api_versions_v0()[0] == wire.NONE
    except (OSError, EOFError):
        return False


def test_clients_announcing_huge_requests_and_stalling_cost_little_memory(make_broker) -> None:
    broker = make_broker()
    host, port = wire.split_bootstrap(broker.bootstrap)
    base = rss_mb(broker.pid)
    greedy = []
    for i in range(20):  # each announces a 100 MiB request, sends 1 KB of it and stalls
        s = socket.create_connection((host, port))
        s.sendall(struct.pack(">ihhi", 100 << 20, 0, 9, i) + b"x" * 1000)
        greedy.append(s)
    try:
        assert served(broker.bootstrap)  # others are still served
        grown = rss_mb(broker.pid) - base
        # allocating what they announced cost 2 GB; now about 1 MiB each at most
        assert grown < 100, f"RSS grew by {grown:.0f} MB"
    finally:
        for s in greedy:
            s.close()


def test_two_thousand_connections_are_cheap_and_give_their_memory_back(make_broker) -> None:
    broker = make_broker()
    host, port = wire.split_bootstrap(broker.bootstrap)
    assert served(broker.bootstrap)
    base = rss_mb(broker.pid)
    socks = []
    try:
        for i in range(2000):
            s = socket.create_connection((host, port))
            socks.append(s)
            if i % 200 == 0:  # the broker has really taken them in
                s.sendall(wire.frame(wire.request_header_v1(wire.API_VERSIONS, 0, i, "t")))
                wire_reply = s.recv(4)
                assert len(wire_reply) == 4
        deadline = time.monotonic() + 30
        while not served(broker.bootstrap) and time.monotonic() < deadline:
            pass
        held = rss_mb(broker.pid) - base
        # each held a 256 KiB buffer before (+520 MB for 2,000)
        assert held < 100, f"2,000 connections cost {held:.0f} MB"
    finally:
        for s in socks:
            s.close()
    assert served(broker.bootstrap)


def connect_served(bootstrap: str, timeout: float = 10.0) -> wire.Conn:
    """A connection whose ApiVersions was answered (a slot may take a moment to free: the broker
    counts a closed connection until it has seen it close)."""
    deadline = time.monotonic() + timeout
    while True:
        conn = wire.Conn(bootstrap, timeout=5)
        try:
            if conn.api_versions_v0()[0] == wire.NONE:
                return conn
        except (OSError, EOFError):
            pass
        conn.close()
        assert time.monotonic() < deadline, "no connection was served"


def test_max_connections_per_ip_closes_the_extra_connection(make_broker) -> None:
    broker = make_broker({"max.connections.per.ip": 2})
    with connect_served(broker.bootstrap), connect_served(broker.bootstrap):
        assert not served(broker.bootstrap)  # a third from 127.0.0.1 is closed
        assert "max.connections.per.ip=2" in broker.log_text()
    connect_served(broker.bootstrap).close()  # their slots are free again once they closed


def test_the_listen_backlog_is_the_configured_one(make_broker) -> None:
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    broker = make_broker({"socket.listen.backlog.size": 60})
    _, port = wire.split_bootstrap(broker.bootstrap)
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout.split()
    # a listening socket's Send-Q is its backlog
    assert out[2] == "60", out
