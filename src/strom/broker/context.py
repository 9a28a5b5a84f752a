"""What passes between the network layer, the router and the handlers for one request.

These live apart from ``server`` (which reads frames) and ``router`` (which dispatches them) so
that both, and every handler, depend on this small module rather than on each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strom.security.principal import KafkaPrincipal
from strom.security.session import Session


class CloseConnection(Exception):
    """Raised by a handler to drop the connection without a reply (e.g. errors on acks=0)."""


class Throttle:
    """A connection's quota throttling: a handler that finds its client over a quota sets
    ``ms``; the connection answers, then reads nothing more for that long (KIP-219)."""

    __slots__ = ("ms",)

    def __init__(self) -> None:
        self.ms = 0

    def add(self, ms: int) -> None:
        if ms > self.ms:
            self.ms = ms


@dataclass(slots=True)
class RequestContext:
    """Who sent a request and how: the header's fields and the connection it came on."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    connection_id: int
    session: Session  # the connection's listener, principal and SASL state
    throttle: Throttle = field(default_factory=Throttle)  # the connection's
    # run when the connection closes (share sessions release their records, as Kafka's do)
    on_close: list[Callable[[], None]] = field(default_factory=list)

    @property
    def principal(self) -> KafkaPrincipal:
        return self.session.principal

    @property
    def listener(self) -> str:
        return self.session.listener


class RequestTimes:
    """When one request ended each of Kafka's request phases (RequestChannel's timestamps),
    for the router's request hooks: ``time.monotonic()`` seconds, 0.0 until reached.

    The router sets ``ctx`` and stamps ``dispatched`` (it took the request) and ``local_done``
    (the handler returned: its own work is done, an awaited reply may still be coming); the
    connection stamps ``arrived`` (the frame was read), ``reply_ready`` and ``sent`` (the reply
    was handed to the transport, or there was none to send) — only when a hook has `after`,
    the one point that sees them (`Router.keeps_times`). The phases: queue = dispatched -
    arrived, local = local_done - dispatched, remote (waiting: replication, a long poll) =
    reply_ready - local_done, send = sent - reply_ready.

    One per connection (or the router's own), reused for the next request (requests on a
    connection are handled one at a time): a hook keeps what it needs, not this object."""

    __slots__ = ("arrived", "ctx", "dispatched", "local_done", "reply_ready", "sent")

    def __init__(self) -> None:
        self.ctx: RequestContext | None = None  # None until the router dispatched the request
        self.arrived = self.dispatched = self.local_done = self.reply_ready = self.sent = 0.0

    @property
    def waiting(self) -> bool:
        """The handler returned an awaitable reply that has not come yet (Kafka: the request
        is in a purgatory, e.g. a produce waiting for replication, a fetch for min.bytes)."""
        return bool(self.local_done) and not self.reply_ready


@dataclass(slots=True)
class Parts:
    """A reply made of byte chunks and file slices (anything with file/position/length)."""

    parts: list[Any]
    size: int
