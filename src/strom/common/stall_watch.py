"""A watchdog for the event loop: what was it doing when it stalled?

Every client of a broker waits whenever its event loop runs one piece of work for long. This
watchdog finds such pieces: a callback on the loop marks the time every millisecond; a thread
looks every millisecond, and while the mark is older than the threshold, samples the loop
thread's Python stack. When the loop comes back, one WARN line names the stall's length and
the frames seen most often. Off unless ``STROM_LOOP_STALL_MS`` is set (a developer's tool:
sampling costs a little CPU and the GIL).

A stall with one or two samples in it was not the loop's own Python: the sampler could not
look because something held the GIL (a long garbage collection, another thread), or the
process was not running at all (waiting for a core, or blocked in the kernel). So the watchdog
also times every garbage collection, logging those over half the threshold, and names the
other threads that were busy during a stall.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

log = logging.getLogger("strom.stall")

ENV = "STROM_LOOP_STALL_MS"
_TICK_S = 0.001
_FRAMES = 8  # innermost frames of each sample that name a stall's cause


def start_from_env(loop: asyncio.AbstractEventLoop) -> None:
    """Start the watchdog on ``loop`` (the running loop's thread) if ``STROM_LOOP_STALL_MS``
    asks for it."""
    value = os.environ.get(ENV, "")
    if not value:
        return
    threshold = float(value) / 1000
    state = {"mark": time.monotonic()}
    loop_thread = threading.get_ident()

    def tick() -> None:
        state["mark"] = time.monotonic()
        loop.call_later(_TICK_S, tick)

    loop.call_soon(tick)
    pauses, timer = _time_collections(threshold / 2)
    threading.Thread(
        target=_watch, args=(loop, state, loop_thread, threshold, pauses, timer),
        name="stall-watch", daemon=True
    ).start()
    log.warning("event loop stall watchdog on: stalls over %.0f ms are logged", threshold * 1000)


Pause = tuple[int, float, int, str]
GcCallback = Callable[[str, dict[str, int]], None]


def _time_collections(over: float) -> tuple[collections.deque[Pause], GcCallback]:
    """Time every collection (``gc.callbacks``); those longer than ``over`` seconds are queued
    as (generation, seconds, objects collected, thread name) for the watch thread to log (the
    callback itself only appends: it runs inside the collection)."""
    pauses: collections.deque[Pause] = collections.deque(maxlen=1000)
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        took = time.perf_counter() - started[0]
        if took > over:
            pauses.append((info["generation"], took, info["collected"],
                           threading.current_thread().name))

    gc.callbacks.append(timed)
    return pauses, timed


# innermost frames of a thread that waits (on a lock, a queue, a socket): not running Python
_IDLE = frozenset({"wait", "_wait_for_tstate_lock", "get", "select", "poll", "sleep", "_worker",
                   "accept", "recv", "recv_into", "readinto", "join", "_watch"})


def _busy_threads(frames: dict[int, Any], loop_thread: int,
                  into: collections.Counter[str]) -> None:
    """Count the innermost frame of each other thread that is not waiting. The loop thread
    waits for the GIL while another thread runs Python (each holds it up to
    ``sys.getswitchinterval()``, 5 ms, at a time): a stall with few samples of the loop's own
    stack and a busy thread here was that thread's work, not the loop's."""
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in frames.items():
        if ident in (loop_thread, threading.get_ident()) or frame.f_code.co_name in _IDLE:
            continue
        into[f"{names.get(ident, ident)} {os.path.basename(frame.f_code.co_filename)}:"
             f"{frame.f_lineno}:{frame.f_code.co_name}"] += 1


def _watch(loop: asyncio.AbstractEventLoop, state: dict[str, float], loop_thread: int,
           threshold: float, pauses: collections.deque[Pause], timer: GcCallback) -> None:
    seen: collections.Counter[str] = collections.Counter()
    others: collections.Counter[str] = collections.Counter()
    since = 0.0
    while not loop.is_closed():
        time.sleep(_TICK_S)
        while pauses:
            gen, took, collected, thread = pauses.popleft()
            log.warning("garbage collection of generation %d took %.0f ms in thread %s "
                        "(%d objects freed, %d frozen)", gen, took * 1000, thread, collected,
                        gc.get_freeze_count())
        now = time.monotonic()
        late = now - state["mark"]
        if late > threshold:
            if not seen:
                since = state["mark"]
            frames = sys._current_frames()
            frame = frames.get(loop_thread)
            if frame is not None:
                stack = traceback.extract_stack(frame)[-_FRAMES:]
                seen[" < ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in reversed(stack))] += 1
            _busy_threads(frames, loop_thread, others)
        elif seen:
            top = "; ".join(f"{n}x {s}" for s, n in seen.most_common(3))
            busy = "; ".join(f"{n}x {s}" for s, n in others.most_common(2))
            log.warning("event loop stalled %.0f ms: %s%s", (state["mark"] - since) * 1000, top,
                        f" | other threads busy (in Python or in I/O): {busy}" if busy else "")
            seen.clear()
            others.clear()
    gc.callbacks.remove(timer)
