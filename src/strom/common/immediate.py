"""Running controller calls from synchronous code paths.

Controller methods are coroutines because a cluster's controller writes to ZooKeeper. The
single node's controller never awaits anything, so synchronous callers (auto-creation inside a
Metadata request, a coordinator creating its internal topic) can run its calls on the spot; with
a cluster's controller they start the call in the background and answer "not yet", as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
_background: set[asyncio.Task[Any]] = set()


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Result of a coroutine that completes without awaiting anything."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a call expected to complete at once awaited something")


def run_or_start(immediate: bool, factory: Callable[[], Coroutine[Any, Any, T]],
                 what: str) -> tuple[bool, T | None]:
    """(True, result) when ``immediate``; else (False, None) with the call running as a task
    (its failure is logged, not raised)."""
    if immediate:
        return True, run_now(factory())

    async def guarded() -> None:
        try:
            await factory()
        except Exception as exc:
            log.info("%s failed: %s", what, exc)

    task = asyncio.get_running_loop().create_task(guarded())
    _background.add(task)
    task.add_done_callback(_background.discard)
    return False, None
