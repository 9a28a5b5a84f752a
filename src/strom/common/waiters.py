"""Delayed operations without polling: waiters keyed by anything hashable, woken by events.

Long-poll Fetch waits on the partitions it reads; an append to one of them wakes it. acks=all
produce and group joins use the same mechanism later. Lives in `common` so coordinators can wait
without importing the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class WaiterRegistry:
    def __init__(self) -> None:
        self._waiters: dict[Hashable, set[asyncio.Future[None]]] = {}

    def notify(self, key: Hashable) -> None:
        """Wake everyone waiting on key (cheap when nobody is: one dict lookup)."""
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_any(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """Wait until any key is notified or timeout seconds pass; True if woken by an event."""
        if timeout <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[key]

    def __len__(self) -> int:
        return sum(len(w) for w in self._waiters.values())
