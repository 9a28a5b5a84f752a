"""Yielding to the event loop inside a handler whose work grows with the request's entries.

Every request runs on the one event loop: a handler that spends 1 ms per entry of a
10,000-entry request would hold every other client for 10 s. Handlers whose entries each cost
real work (creating or deleting a topic, writing a config record, describing a resource's
configs) tick a `Slicer` after each entry, which yields once a slice's time is used up.
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
