"""Broker-wide limits on connections and on the memory that requests being read may hold.

Kafka's ``ConnectionQuotas`` and ``MemoryPool`` in miniature, shared by every listener:

- ``max.connections``: at the limit, new connections wait, unread, until one closes (Kafka
  blocks its acceptor, and the kernel's backlog holds them). Strom holds at most
  ``socket.listen.backlog.size`` such waiting connections and closes any beyond them.
- ``max.connections.per.ip`` (and ``max.connections.per.ip.overrides``): a connection over its
  address's limit is closed at once, as Kafka does.
- ``queued.max.request.bytes``: request buffers come from a pool of this many bytes; when it is
  used up, connections stop reading until a handled request gives its buffer back. As Kafka's
  non-strict pool, a request is served while any memory is left, even if it is larger (-1: no
  pool).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from strom.config.defs import INT_MAX, ConfigError
from strom.storage.health import RateLimitedLog

log = logging.getLogger(__name__)


def parse_ip_overrides(raw: str | None) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: 'host:limit,host:limit' (Kafka's format)."""
    out: dict[str, int] = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, limit = item.rpartition(":")
        if not sep or not host or not limit.strip().isdigit():
            raise ConfigError(f"Invalid max.connections.per.ip.overrides entry {item!r}: "
                              "expected host:limit")
        out[host.strip()] = int(limit)
    return out


class Waiting(Protocol):
    """A connection as the limits see it: it starts serving when admitted."""

    def admit(self) -> None: ...


@dataclass
class ConnectionLimits:
    max_connections: int = INT_MAX
    max_per_ip: int = INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_waiting: int = 50  # socket.listen.backlog.size
    count: int = 0
    _per_ip: Counter[str] = field(default_factory=Counter)
    _waiting: deque[Waiting] = field(default_factory=deque)
    _warn: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))

    @property
    def tracks_addresses(self) -> bool:
        """Per-address counting costs a peer-name lookup per connection: only when limited."""
        return self.max_per_ip < INT_MAX or bool(self.per_ip_overrides)

    def limit_for(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_per_ip)

    def open(self, conn: Waiting, address: str | None) -> bool:
        """Count a new connection. False: it was refused (closed). A connection over the total
        limit waits (True is returned, ``admit`` is called later) or, with the waiting room
        full, is refused."""
        if address is not None:
            limit = self.limit_for(address)
            if self._per_ip[address] >= limit:
                self._warn.warning("ip", "closing a connection from %s: the address already "
                                   "has max.connections.per.ip=%d connections", address, limit)
                return False
            self._per_ip[address] += 1
        if self.count >= self.max_connections:
            if len(self._waiting) >= self.max_waiting:
                self._warn.warning("total", "closing a new connection: %d connections are "
                                   "open (max.connections) and %d more wait for a slot "
                                   "(socket.listen.backlog.size)", self.count,
                                   len(self._waiting))
                if address is not None:
                    self._forget_address(address)
                return False
            self._warn.warning("total", "max.connections=%d reached: new connections wait "
                               "for a slot", self.max_connections)
            self._waiting.append(conn)
            return True
        self.count += 1
        conn.admit()
        return True

    def close(self, conn: Waiting, address: str | None, *, admitted: bool) -> None:
        """A connection ended; its slot goes to the longest-waiting connection."""
        if address is not None:
            self._forget_address(address)
        if not admitted:
            with contextlib.suppress(ValueError):  # gone already: it was refused
                self._waiting.remove(conn)
            return
        self.count -= 1
        while self._waiting and self.count < self.max_connections:
            self.count += 1
            self._waiting.popleft().admit()

    def _forget_address(self, address: str) -> None:
        left = self._per_ip[address] - 1
        if left > 0:
            self._per_ip[address] = left
        else:
            del self._per_ip[address]


@dataclass
class MemoryPool:
    """Bytes that buffers of requests being read or queued may hold (``queued.max.request.bytes``).

    Non-strict as Kafka's SimpleMemoryPool: an allocation succeeds while any memory is left,
    so one request larger than the pool is still served (alone)."""

    capacity: int = -1  # -1: unbounded
    available: int = 0
    _blocked: list[Callable[[], None]] = field(default_factory=list)
    _warn: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))

    def __post_init__(self) -> None:
        self.available = self.capacity

    @property
    def bounded(self) -> bool:
        return self.capacity > 0

    def take(self, size: int) -> None:
        """Charge an allocation (already made: bytes the kernel gave us must be kept)."""
        if self.capacity > 0:
            self.available -= size

    def exhausted(self) -> bool:
        return self.capacity > 0 and self.available <= 0

    def wait(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once memory is given back."""
        self._warn.warning("memory", "queued.max.request.bytes=%d in use: connections stop "
                           "reading until requests are handled", self.capacity)
        self._blocked.append(resume)

    def give_back(self, size: int) -> None:
        if self.capacity <= 0:
            return
        self.available += size
        if self.available > 0 and self._blocked:
            blocked, self._blocked = self._blocked, []
            for resume in blocked:
                resume()
