"""Free TCP ports for brokers started by the tests and by compat/run_broker.py.

A port found with ``bind(port 0)`` is free for a moment only: once released, the kernel may hand
it out again, to this process or to any other one (the other pytest-xdist worker, a client's
outgoing connection), and a broker that binds it a moment later, or again at a restart, then
finds it taken ("Address already in use"). So ``free_port`` hands out ports

- from below the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), which
  the kernel never picks for ``bind`` to port 0 or for an outgoing connection;
- from this worker's own slice of that range under pytest-xdist (``PYTEST_XDIST_WORKER=gwN`` of
  ``PYTEST_XDIST_WORKER_COUNT``), so two workers never hand out the same port;
- never twice in one process;
- only after binding them once on ``host`` (something else on the machine may use it).

Picked at random within the slice, so two separate test sessions on one machine rarely meet.
Standard library only: loaded by path (tests/integration/broker.py, compat/run_broker.py).
"""

from __future__ import annotations

import os
import random
import socket

POOL_SIZE = 16_384  # ports just below the ephemeral range
_handed_out: set[int] = set()


def _worker() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker; (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)
    return 0, 1


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def pool() -> range:
    """This process's slice of the ports below the ephemeral range (empty if there are too few)."""
    index, count = _worker()
    high = _ephemeral_low()
    low = max(1024, high - POOL_SIZE)
    size = (high - low) // count
    if size < 1000:
        return range(0)
    return range(low + index * size, low + (index + 1) * size)


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago and that no other process of this test
    run, nor this one before, has handed out (see the module's docstring)."""
    ports = pool()
    rng = random.SystemRandom()
    for _ in range(1000):
        if ports:
            port = rng.choice(ports)
            if port in _handed_out or not _bindable(host, port):
                continue
        else:  # a machine whose ephemeral range starts low: the kernel's pick, this worker's share
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            index, count = _worker()
            if port % count != index or port in _handed_out:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port on {host} that was not handed out already ({ports})")
