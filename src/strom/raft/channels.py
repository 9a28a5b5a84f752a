"""Per-peer request bookkeeping (Kafka's RequestManager): at most one request in flight to each
peer, a request timeout, a retry backoff after a failure, and which response is still wanted.

A response is handled only if it answers the request in flight to that peer, by correlation
id; anything else (an answer to a request made before a state change, or from before a crash)
is dropped. State changes reset every peer, so stale answers cannot leak into a new state.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .types import RaftSettings


@dataclass
class _Peer:
    inflight: int | None = None  # correlation id
    inflight_deadline: int = 0
    backoff_until: int = 0


class RequestManager:
    def __init__(self, settings: RaftSettings, bootstrap: list[int], rng: random.Random) -> None:
        self.settings = settings
        self.bootstrap = list(bootstrap)
        self.rng = rng
        self.peers: dict[int, _Peer] = {}

    def _peer(self, node: int) -> _Peer:
        peer = self.peers.get(node)
        if peer is None:
            peer = self.peers[node] = _Peer()
        return peer

    def expire(self, now_ms: int) -> None:
        """A request unanswered past the request timeout fails: the peer backs off."""
        for peer in self.peers.values():
            if peer.inflight is not None and now_ms >= peer.inflight_deadline:
                peer.inflight = None
                peer.backoff_until = now_ms + self.settings.retry_backoff_ms

    def is_ready(self, node: int, now_ms: int) -> bool:
        peer = self.peers.get(node)
        return peer is None or (peer.inflight is None and now_ms >= peer.backoff_until)

    def is_backing_off(self, node: int, now_ms: int) -> bool:
        peer = self.peers.get(node)
        return peer is not None and peer.inflight is None and now_ms < peer.backoff_until

    def has_any_inflight(self) -> bool:
        return any(p.inflight is not None for p in self.peers.values())

    def on_sent(self, node: int, correlation_id: int, now_ms: int) -> None:
        peer = self._peer(node)
        peer.inflight = correlation_id
        peer.inflight_deadline = now_ms + self.settings.request_timeout_ms

    def is_expected(self, node: int, correlation_id: int) -> bool:
        peer = self.peers.get(node)
        return peer is not None and peer.inflight == correlation_id

    def on_result(self, node: int, correlation_id: int, success: bool, now_ms: int) -> None:
        peer = self.peers.get(node)
        if peer is None or peer.inflight != correlation_id:
            return
        peer.inflight = None
        peer.backoff_until = now_ms if success else now_ms + self.settings.retry_backoff_ms

    def reset(self, node: int) -> None:
        self.peers.pop(node, None)

    def reset_all(self) -> None:
        self.peers.clear()

    def ready_bootstrap(self, now_ms: int, exclude: set[int]) -> int | None:
        """A random bootstrap server (the voters, under a static quorum) that can take a request."""
        ready = [n for n in self.bootstrap if n not in exclude and self.is_ready(n, now_ms)]
        return self.rng.choice(ready) if ready else None

    def next_deadline(self, now_ms: int) -> int | None:
        """When, after now, some peer's request times out or its backoff ends."""
        times = [t for t in (p.inflight_deadline if p.inflight is not None else p.backoff_until
                             for p in self.peers.values()) if t > now_ms]
        return min(times) if times else None
