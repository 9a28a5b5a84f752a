"""Yielding to the event loop inside work that grows with a request's entries or with the
number of partitions.

Everything runs on the one event loop: a handler that spends 1 ms per entry of a 10,000-entry
request would hold every other client for 10 s, and a background pass over 10,000 logs that
spends 5 µs on each holds them for 50 ms. Such loops tick a `Slicer` after each entry, which
yields once a slice's time is used up.
"""

from __future__ import annotations

import asyncio
import time

SLICE_S = 0.005  # the longest a request holds the loop between two yields (about)


class Slicer:
    """``await slicer.tick()`` after each entry: yields to the loop once SLICE_S has passed
    since the last yield (a clock read per entry otherwise)."""

    __slots__ = ("_until",)

    def __init__(self) -> None:
        self._until = time.monotonic() + SLICE_S

    async def tick(self) -> None:
        if time.monotonic() >= self._until:
            await asyncio.sleep(0)
            self._until = time.monotonic() + SLICE_S
