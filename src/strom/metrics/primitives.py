"""Counting primitives for hot paths: plain integers and bucket arrays, no locks, no labels.

prometheus-client's own Counter and Histogram take a lock and look up a label tuple on every
update; the broker counts per request and per batch on its event loop, where one thread owns
the numbers, so a list of ints is enough. The exporter reads them when Prometheus scrapes
(`strom.metrics.exposition`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# Upper bounds in milliseconds, as Kafka's request and flush times are reported: from well under
# a millisecond (a produce answered at once) to the 30 s a fetch or a transaction may wait.
MS_BUCKETS: tuple[float, ...] = (0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500,
                                 5000, 10000, 30000)


@dataclass(frozen=True)
class HistogramSnapshot:
    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]  # observations <= each bound, then the total (+Inf)
    total: float  # the sum of the observations

    @property
    def count(self) -> int:
        return self.cumulative[-1]


class Histogram:
    """Observations counted into fixed buckets; updated from one thread at a time."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = MS_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def snapshot(self) -> HistogramSnapshot:
        cumulative, running = [], 0
        for n in list(self.counts):
            running += n
            cumulative.append(running)
        return HistogramSnapshot(self.bounds, tuple(cumulative), self.total)
