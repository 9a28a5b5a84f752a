"""A private network of Linux network namespaces for partition tests.

Topology, all created by the test and deleted afterwards (nothing touches the host's own
network namespace):

    hub namespace: bridge br0 10.231.0.254/24 — ZooKeeper and the test's own clients live here
    broker namespace i: eth0 10.231.0.i/24, its veth peer `p<i>` a port of br0

`isolate(i)` takes broker i's bridge port down: its packets are dropped both ways (no reset, no
close: to everyone else it simply stops answering, as in a real partition); `heal(i)` brings it
back.

The test's thread enters the hub namespace with setns(2) (a per-thread operation for network
namespaces), so the client libraries it creates — and their threads — connect from there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
SUBNET = "10.231.0"
HUB_ADDRESS = f"{SUBNET}.254"


class NetnsUnavailable(RuntimeError):
    pass


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetnsUnavailable(f"{' '.join(cmd)}: {done.stderr.strip()}")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class NetnsLab:
    def __init__(self, brokers: int) -> None:
        if shutil.which("ip") is None:
            raise NetnsUnavailable("the `ip` command (iproute2) is missing")
        self.tag = uuid.uuid4().hex[:6]
        self.hub = f"strom-{self.tag}-hub"
        self.names = {i: f"strom-{self.tag}-b{i}" for i in range(1, brokers + 1)}
        self._created: list[str] = []

    def address(self, broker_id: int) -> str:
        return f"{SUBNET}.{broker_id}"

    def prefix(self, ns: str) -> tuple[str, ...]:
        """Run a command inside `ns` (ip execs it: the PID stays the command's own)."""
        return ("ip", "netns", "exec", ns)

    def create(self) -> None:
        try:
            for ns in (self.hub, *self.names.values()):
                _ip("netns", "add", ns)
                self._created.append(ns)
                _ip("link", "set", "lo", "up", ns=ns)
            _ip("link", "add", "br0", "type", "bridge", ns=self.hub)
            _ip("addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0", ns=self.hub)
            _ip("link", "set", "br0", "up", ns=self.hub)
            for i, ns in self.names.items():
                _ip("link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns,
                    ns=self.hub)
                _ip("link", "set", f"p{i}", "master", "br0", ns=self.hub)
                _ip("link", "set", f"p{i}", "up", ns=self.hub)
                _ip("addr", "add", f"{self.address(i)}/24", "dev", "eth0", ns=ns)
                _ip("link", "set", "eth0", "up", ns=ns)
        except NetnsUnavailable:
            self.destroy()
            raise

    def destroy(self) -> None:
        for ns in reversed(self._created):
            with contextlib.suppress(NetnsUnavailable):
                _ip("netns", "delete", ns)
        self._created = []

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the calling thread (and the threads it starts) inside the hub namespace."""
        home = os.open(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net",
                       os.O_RDONLY)
        hub = os.open(f"/run/netns/{self.hub}", os.O_RDONLY)
        try:
            _setns(hub)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(hub)
            os.close(home)

    def isolate(self, broker_id: int) -> None:
        _ip("link", "set", f"p{broker_id}", "down", ns=self.hub)

    def heal(self, broker_id: int) -> None:
        _ip("link", "set", f"p{broker_id}", "up", ns=self.hub)
