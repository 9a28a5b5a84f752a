"""How a request shares the event loop: a concurrent task counts its turns while it runs.

Times are the loop thread's CPU time (time.thread_time), so a test machine busy with other
work, which delays the whole process, does not read as a request holding the loop."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct


@dataclass
class Shared:
    response: Struct
    turns: int  # times another task got the loop while the request ran
    longest_s: float  # the most CPU time the loop spent without serving that task
    total_s: float  # the request's CPU time, start to answer

    @property
    def sliced(self) -> bool:
        """Whether the request let others in between slices: its longest hold of the loop is a
        small part of its time (a request that never yields holds the loop all along)."""
        return self.turns >= 3 and self.longest_s < self.total_s / 4


def run_beside_a_ticker(h: Any, api_key: ApiKey, version: int,
                        body: Mapping[str, Any]) -> Shared:
    """Run one request through the harness while a ticker task yields in a loop."""
    state = {"turns": 0, "longest": 0.0, "running": True}

    async def ticker() -> None:
        last = time.thread_time()
        while state["running"]:
            await asyncio.sleep(0)
            now = time.thread_time()
            state["longest"] = max(state["longest"], now - last)
            state["turns"] += 1
            last = now

    tick_task = h.loop.create_task(ticker())
    h.run(0)  # the ticker is running before the request starts
    before = state["turns"]
    gc.disable()  # a full collection is one long hold that no handler can slice
    try:
        started = time.thread_time()
        task = h.start(api_key, version, body)
        response = h.finish(task, api_key, version)
        total = time.thread_time() - started
    finally:
        gc.enable()
    state["running"] = False
    h.loop.run_until_complete(tick_task)
    return Shared(response, state["turns"] - before, state["longest"], total)
