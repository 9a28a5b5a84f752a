"""One kind of client quota (produce bytes, fetch bytes, request time, partition mutations):
which quota applies to a client, its measured rate, and the throttle time when it is over.

Which quota applies follows Kafka's precedence (the first entity that sets the key wins):
user and client id, the user's default client id, the user; then the same under the default
user; then the client id, the default client id. The entity that matched decides who shares a
rate: a quota set on a user alone is shared by all of that user's client ids, one set on a
(user, client id) or on a default is each client's own (Kafka's quota metric tags).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from strom.cluster.image import MetadataImage
from strom.cluster.quotas import QuotaEntity, entity
from strom.common.rates import SampledRate

# (user, client id) of a shared rate; "" where the quota does not tell them apart
Tags = tuple[str, str]

IDLE_EXPIRY_S = 3600.0  # a client's rate is forgotten after an hour without requests


def _candidates(user: str, client_id: str) -> list[tuple[QuotaEntity, Tags]]:
    return [
        (entity(user=user, client_id=client_id), (user, client_id)),
        (entity(user=user, client_id=None), (user, client_id)),
        (entity(user=user), (user, "")),
        (entity(user=None, client_id=client_id), (user, client_id)),
        (entity(user=None, client_id=None), (user, client_id)),
        (entity(user=None), (user, "")),
        (entity(client_id=client_id), ("", client_id)),
        (entity(client_id=None), ("", client_id)),
    ]


def resolve(quotas: dict[QuotaEntity, dict[str, float]], key: str, user: str,
            client_id: str) -> tuple[float, Tags] | None:
    """The quota ``key`` for this client and the tags of the rate it is measured with."""
    for candidate, tags in _candidates(user, client_id):
        values = quotas.get(candidate)
        if values is not None and key in values:
            return values[key], tags
    return None


@dataclass
class ClientRate:
    """One shared rate with its quota, and the throttling it caused (for the metrics)."""

    bound: float
    rate: SampledRate
    throttle_ms: SampledRate  # throttle time handed out
    requests: SampledRate  # requests counted

    def average_throttle_ms(self, now: float) -> float:
        n = self.requests.measure(now)
        return self.throttle_ms.measure(now) / n if n else 0.0


class QuotaManager:
    def __init__(self, key: str, image: MetadataImage, *, samples: int = 11,
                 window_s: float = 1.0, max_throttle_ms: int | None = None,
                 clock: Callable[[], float]) -> None:
        self.key = key
        self._image = image
        self._samples, self._window_s = samples, window_s
        self._max_throttle_ms = max_throttle_ms
        self._clock = clock
        self._resolved: dict[tuple[str, str], tuple[float, Tags] | None] = {}
        self._version = -1
        self.rates: dict[Tags, ClientRate] = {}

    def _lookup(self, user: str, client_id: str) -> tuple[float, Tags] | None:
        image = self._image
        if image.version != self._version:  # quotas may have changed: resolve again
            self._resolved.clear()
            self._version = image.version
        key = (user, client_id)
        if key not in self._resolved:
            self._resolved[key] = resolve(image.client_quotas, self.key, user, client_id)
        return self._resolved[key]

    def record(self, user: str, client_id: str, value: float) -> int:
        """Count ``value`` against the client's quota; the throttle time in ms (0 if within)."""
        if not self._image.client_quotas:
            return 0
        found = self._lookup(user, client_id)
        if found is None:
            return 0
        bound, tags = found
        now = self._clock()
        client = self._rate(tags, bound, now)
        client.rate.record(value, now)
        client.requests.record(1, now)
        throttle = self._throttle(client, bound, now)
        if throttle:
            client.throttle_ms.record(throttle, now)
        return throttle

    def throttle_now(self, user: str, client_id: str) -> int:
        """The throttle time the client's rate calls for now, recording nothing."""
        found = self._lookup(user, client_id) if self._image.client_quotas else None
        client = self.rates.get(found[1]) if found is not None else None
        if found is None or client is None:
            return 0
        return self._throttle(client, found[0], self._clock())

    def _throttle(self, client: ClientRate, bound: float, now: float) -> int:
        """Kafka's (O - T) / T * W: the delay that brings the observed rate back to the quota
        (bounded for request time), 0 while within it."""
        observed = client.rate.measure(now)
        if observed <= bound:
            return 0
        throttle = round((observed - bound) / bound * client.rate.span(now) * 1000)
        if self._max_throttle_ms is not None:
            throttle = min(throttle, self._max_throttle_ms)
        return throttle

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back bytes that were not sent after all (a throttled fetch answers empty)."""
        found = self._lookup(user, client_id) if self._image.client_quotas else None
        if found is not None:
            client = self.rates.get(found[1])
            if client is not None:
                client.rate.record(-value, self._clock())

    def _rate(self, tags: Tags, bound: float, now: float) -> ClientRate:
        client = self.rates.get(tags)
        if client is None:
            if len(self.rates) >= 1000:
                self._expire(now)
            client = self.rates[tags] = ClientRate(
                bound, *(SampledRate(self._samples, self._window_s) for _ in range(3)))
        client.bound = bound
        return client

    def _expire(self, now: float) -> None:
        for tags, client in list(self.rates.items()):
            if client.rate.idle_since(now) > IDLE_EXPIRY_S:
                del self.rates[tags]
