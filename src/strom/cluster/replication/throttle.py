"""Replication throttles (Kafka's ReplicationQuotaManager): the bytes a broker sends to
followers of throttled replicas, or fetches for them as a follower, are limited to
``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` per second.

Which replicas are throttled is a topic config, ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas``: ``*`` (every replica) or a list of
``partition:broker``; a broker throttles the partitions listed with its own id. Only replicas
out of the ISR are held back, so a reassignment moves data at the set rate while the
partition's in-sync followers (and so ``acks=all`` producers) are never slowed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from strom.cluster.image import MetadataImage
from strom.common.rates import SampledRate

LEADER = "leader"
FOLLOWER = "follower"
UNLIMITED = 2**63 - 1  # the rates' default, Long.MAX_VALUE: nothing is throttled

Partitions = frozenset[int] | None  # None: every partition


def parse_throttled_replicas(value: str, broker_id: int) -> Partitions:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on ``broker_id``;
    an empty frozenset when none, None for ``*``."""
    value = value.strip()
    if value == "*":
        return None
    mine = set()
    for entry in value.split(","):
        entry = entry.strip()
        if not entry:
            continue
        partition, _, broker = entry.partition(":")
        if broker.strip() == str(broker_id):
            mine.add(int(partition))
    return frozenset(mine)


class ReplicationThrottle:
    """One side of one broker: which replicas are throttled and whether the rate is used up."""

    def __init__(self, side: str, broker_id: int, image: MetadataImage,
                 rate_limit: Callable[[], int], *, samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.side = side
        self._config = f"{side}.replication.throttled.replicas"
        self._broker_id = broker_id
        self._image = image
        self._rate_limit = rate_limit
        self._clock = clock
        self.rate = SampledRate(samples, window_s)
        self._version = -1
        self._limit = UNLIMITED
        self._partitions: dict[str, Partitions] = {}

    def _refresh(self) -> None:
        image = self._image
        if image.version == self._version:
            return
        self._version = image.version
        self._limit = self._rate_limit()
        self._partitions = {}
        for topic in image.topics.values():
            value = topic.configs.get(self._config)
            if value:
                partitions = parse_throttled_replicas(value, self._broker_id)
                if partitions is None or partitions:
                    self._partitions[topic.name] = partitions

    @property
    def limit(self) -> int:
        self._refresh()
        return self._limit

    def throttled(self, topic: str, partition: int, replica_id: int) -> bool:
        """Whether ``replica_id``'s copy of the partition counts against this throttle: the
        replica is throttled here and out of the ISR."""
        self._refresh()
        if self._limit >= UNLIMITED or topic not in self._partitions:
            return False
        partitions = self._partitions[topic]
        if partitions is not None and partition not in partitions:
            return False
        state = self._image.topics[topic].partitions.get(partition)
        return state is not None and replica_id not in state.isr

    def exceeded(self) -> bool:
        return self.rate.measure(self._clock()) > self._limit

    def record(self, size: int) -> None:
        self.rate.record(size, self._clock())

    def byte_rate(self) -> float:
        return self.rate.measure(self._clock())
