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


@dataclass(slots=True)
class Parts:
    """A reply made of byte chunks and file slices (anything with file/position/length)."""

    parts: list[Any]
    size: int
