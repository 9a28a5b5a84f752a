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
from contextvars import ContextVar
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
_background: set[asyncio.Task[Any]] = set()
_RUNNING_NOW: ContextVar[bool] = ContextVar("strom_run_now", default=False)


def must_complete_now() -> bool:
    """True while `run_now` drives a call: work the single node's controller would otherwise
    move off the loop (a very large commit) must then be done on the spot."""
    return _RUNNING_NOW.get()


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Result of a coroutine that completes without awaiting anything."""
    token = _RUNNING_NOW.set(True)
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    finally:
        _RUNNING_NOW.reset(token)
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
