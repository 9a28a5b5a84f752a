"""Stopping asyncio tasks for sure.

On Python 3.11 a cancellation can be lost: when `asyncio.wait_for`'s inner operation finishes at
the moment its caller is cancelled, it returns the result and the `CancelledError` is gone. A
background loop hit that way runs on, and whoever awaits it after one `cancel()` waits forever
(a broker that never exits after SIGTERM). These helpers cancel again until the task is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

_RECANCEL_EVERY_S = 0.2


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel `task` and wait until it has finished, whatever it raises."""
    if task is None:
        return
    await cancel_all((task,))


async def cancel_all(tasks: Iterable[asyncio.Task]) -> None:
    """Cancel every task and wait for all of them, cancelling again any that swallowed it."""
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_RECANCEL_EVERY_S)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log "never retrieved"
