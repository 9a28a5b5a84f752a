"""Keyed one-shot timers on top of an event loop's `call_later` (no polling, no task per member).

Re-scheduling a key cancels its previous handle, so a heartbeat is one cancel plus one
`call_later`. Keys are tuples whose second element is the group id, which lets a group's timers
be cancelled together when its partition is unloaded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

log = logging.getLogger(__name__)

TimerKey: TypeAlias = tuple[str, ...]
"""(kind, group id, ...): e.g. ("hb", group id, member id), ("join", group id)."""


class Handle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """What the coordinator needs of an event loop (asyncio's loop fits; tests use a fake)."""

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Handle: ...


class Timers:
    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._handles: dict[TimerKey, Handle] = {}
        self._by_group: dict[str, set[TimerKey]] = {}

    def schedule(self, key: TimerKey, delay_ms: float, fn: Callable[[], None]) -> None:
        """Run fn once after delay_ms, replacing any timer already under key."""
        self.cancel(key)
        handle = self._scheduler.call_later(max(delay_ms, 0) / 1000, self._fire, key, fn)
        self._handles[key] = handle
        self._by_group.setdefault(key[1], set()).add(key)

    def schedule_if_absent(self, key: TimerKey, delay_ms: float, fn: Callable[[], None]) -> None:
        if key not in self._handles:
            self.schedule(key, delay_ms, fn)

    def _fire(self, key: TimerKey, fn: Callable[[], None]) -> None:
        self._forget(key)
        try:
            fn()
        except Exception:  # a failed expiry must not take the other timers down with it
            log.exception("group coordinator timer %s failed", key)

    def _forget(self, key: TimerKey) -> None:
        self._handles.pop(key, None)
        keys = self._by_group.get(key[1])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_group[key[1]]

    def cancel(self, key: TimerKey) -> None:
        handle = self._handles.get(key)
        if handle is not None:
            handle.cancel()
            self._forget(key)

    def cancel_group(self, group_id: str) -> None:
        for key in list(self._by_group.get(group_id, ())):
            self.cancel(key)

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        self._by_group.clear()

    def __contains__(self, key: TimerKey) -> bool:
        return key in self._handles

    def __len__(self) -> int:
        return len(self._handles)
