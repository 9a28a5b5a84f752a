"""An hour of throughput and lag in memory: a background thread reads the cluster every
`interval` seconds and turns consecutive readings into rates.

In-throughput is the growth of the topics' log-end offsets (records per second) and, where the
log-dir sizes can be read, of their sizes (bytes per second; retention and compaction shrink
logs, so this under-counts while they run). Kafka has no
per-consumer byte counters a client can read, so out-throughput is estimated from the growth of
each group's committed offsets. Memory is bounded: the history keeps 3600 / interval samples.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

HOUR_S = 3600.0
log = logging.getLogger("strom.console.sampler")


@dataclass(frozen=True)
class Observation:
    """One reading of the cluster: counters as they are now."""

    at: float  # seconds since the epoch
    end_offsets: dict[str, int]  # topic -> sum of its partitions' log-end offsets
    committed: dict[str, int]  # group -> sum of its committed offsets
    lag: dict[str, int]  # group -> total lag
    sizes: dict[str, int] = field(default_factory=dict)  # topic -> bytes (empty: not known)


@dataclass(frozen=True)
class Sample:
    """What the charts draw for one moment: rates since the previous reading, lag now."""

    at: float
    in_rate: dict[str, float] = field(default_factory=dict)  # topic -> records/s
    out_rate: dict[str, float] = field(default_factory=dict)  # group -> records/s (estimated)
    lag: dict[str, int] = field(default_factory=dict)
    in_bytes: dict[str, float] = field(default_factory=dict)  # topic -> bytes/s


def growth_rates(before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
    """Per-second growth of each counter present in both readings; a counter that went down (a
    topic deleted and created again, offsets reset) counts as no growth."""
    if seconds <= 0:
        return {}
    return {name: max(0, after[name] - before[name]) / seconds
            for name in after if name in before}


def sample_of(before: Observation | None, now: Observation) -> Sample:
    if before is None:
        return Sample(now.at, lag=dict(now.lag))
    seconds = now.at - before.at
    return Sample(now.at, growth_rates(before.end_offsets, now.end_offsets, seconds),
                  growth_rates(before.committed, now.committed, seconds), dict(now.lag),
                  growth_rates(before.sizes, now.sizes, seconds))


Point = tuple[float, float]  # (seconds since the epoch, value)


class History:
    """The last hour of samples (a ring buffer), safe to read while the sampler writes."""

    def __init__(self, interval: float, span: float = HOUR_S) -> None:
        if interval <= 0:
            raise ValueError("the sampling interval must be positive")
        self.interval = interval
        self.span = span
        self._samples: deque[Sample] = deque(maxlen=max(2, math.ceil(span / interval)))
        self._last: Observation | None = None
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._samples.maxlen or 0

    def add(self, observation: Observation) -> None:
        with self._lock:
            self._samples.append(sample_of(self._last, observation))
            self._last = observation

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def in_total(self) -> list[Point]:
        return [(s.at, sum(s.in_rate.values())) for s in self.samples()[1:]]

    def in_bytes_total(self) -> list[Point]:
        """Bytes/s from the growth of log sizes (readings without sizes are left out)."""
        return [(s.at, sum(s.in_bytes.values())) for s in self.samples()[1:] if s.in_bytes]

    def out_total(self) -> list[Point]:
        return [(s.at, sum(s.out_rate.values())) for s in self.samples()[1:]]

    def in_topic(self, topic: str) -> list[Point]:
        return [(s.at, s.in_rate[topic]) for s in self.samples() if topic in s.in_rate]

    def out_group(self, group: str) -> list[Point]:
        return [(s.at, s.out_rate[group]) for s in self.samples() if group in s.out_rate]

    def lag(self, group: str) -> list[Point]:
        return [(s.at, float(s.lag[group])) for s in self.samples() if group in s.lag]

    def groups(self) -> list[str]:
        """Every group seen in the last hour, the most lagging (now) first."""
        samples = self.samples()
        latest = samples[-1].lag if samples else {}
        names = {g for s in samples for g in s.lag}
        return sorted(names, key=lambda g: (-latest.get(g, 0), g))


class Sampler:
    """Calls `read` every `interval` seconds on its own thread and adds what it returns to the
    history. A failed reading is logged and skipped (the chart shows a gap in time, no zero)."""

    def __init__(self, read: Callable[[], Observation], history: History) -> None:
        self.read = read
        self.history = history
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.history.add(self.read())
                if self.last_error is not None:
                    log.warning("sampling the cluster works again")
                self.last_error = None
            except Exception as exc:  # the broker may be down for a while: keep sampling
                error = str(exc) or type(exc).__name__
                if error != self.last_error:  # once per new reason, not every interval
                    log.warning("sampling the cluster failed: %s", error)
                self.last_error = error
            next_at += self.history.interval
            now = time.monotonic()
            if next_at < now:  # a slow reading: skip the missed ticks instead of bursting
                next_at = now + self.history.interval
            self._stop.wait(next_at - now)
