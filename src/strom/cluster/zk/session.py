"""Whether this broker's view of the cluster can be trusted to answer for a leadership now.

A broker cut off from ZooKeeper cannot learn that the controller moved its leaderships: once
its session expires (zookeeper.session.timeout.ms after its last heartbeat) another broker
leads them, while this one still holds the old image. Healed, it would answer clients from that
state until its ZooKeeper client reconnects and the mirror re-reads the tree — a coordinator
read from there shows state older than what the new coordinator already acknowledged (a
group's committed offsets going back, issue 28).

The ZooKeeper client notices a dead connection within about two thirds of the session timeout,
before the server can expire the session: from then on (SUSPENDED or LOST) the view is not
current, and it is current again only once the mirror has read the whole tree after the
reconnection (on the same session or a new one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class _Client(Protocol):
    @property
    def connected(self) -> bool: ...

    def add_state_listener(self, listener: Callable[[str], None]) -> None: ...


class _Mirror(Protocol):
    full_reads: int  # whole reads of the tree completed


class SessionFence:
    def __init__(self, zk: _Client, mirror: _Mirror) -> None:
        self._mirror = mirror
        # built after the mirror's first read: current, unless the connection dropped since
        self._connected = zk.connected
        self._resync_from: int | None = None  # full_reads when the connection came back
        zk.add_state_listener(self._on_state)

    def current(self) -> bool:
        """True while the session is connected and the image was read since it (re)connected."""
        if not self._connected:
            return False
        if self._resync_from is not None:
            if self._mirror.full_reads <= self._resync_from:
                return False
            self._resync_from = None
            log.info("metadata re-read after the ZooKeeper reconnection: answering for "
                     "leaderships again")
        return True

    def _on_state(self, state: str) -> None:
        if state in ("SUSPENDED", "LOST"):
            if self._connected:  # LOST is also a clean shutdown's: no warning for that
                log.log(logging.WARNING if state == "SUSPENDED" else logging.INFO,
                        "ZooKeeper connection %s: no coordinator answers until it is back "
                        "and the metadata re-read", state.lower())
            self._connected = False
            self._resync_from = None
        elif state == "CONNECTED":
            if not self._connected:
                self._resync_from = self._mirror.full_reads
            self._connected = True
