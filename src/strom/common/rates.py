"""Kafka's sampled rate (``org.apache.kafka.common.metrics.stats.Rate``): the values recorded in
the last ``samples`` windows of ``window_s`` seconds, divided by the time they span. The span
is never taken as shorter than ``samples - 1`` windows, so a client's first burst is spread
over that much time instead of counting as an enormous rate."""

from __future__ import annotations


class SampledRate:
    __slots__ = ("_starts", "_values", "samples", "window_s")

    def __init__(self, samples: int = 11, window_s: float = 1.0) -> None:
        self.samples = samples
        self.window_s = window_s
        self._starts: list[float] = []  # oldest first
        self._values: list[float] = []

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._starts or now >= self._starts[-1] + self.window_s:
            self._starts.append(now)
            self._values.append(0.0)
            if len(self._starts) > self.samples:
                del self._starts[0], self._values[0]
        self._values[-1] += value

    def measure(self, now: float) -> float:
        """The rate per second."""
        self._purge(now)
        return sum(self._values) / self.span(now)

    def span(self, now: float) -> float:
        """Seconds the samples cover, padded up to ``samples - 1`` whole windows."""
        self._purge(now)
        elapsed = now - self._starts[0] if self._starts else 0.0
        full = int(elapsed / self.window_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_s
        return max(elapsed, 0.001)

    def idle_since(self, now: float) -> float:
        return now - self._starts[-1] if self._starts else float("inf")

    def _purge(self, now: float) -> None:
        """Samples older than the whole window count no more."""
        oldest = now - self.samples * self.window_s
        while self._starts and self._starts[0] + self.window_s <= oldest:
            del self._starts[0], self._values[0]
