"""A watchdog for the event loop: what was it doing when it stalled?

Every client of a broker waits whenever its event loop runs one piece of work for long. This
watchdog finds such pieces: a callback on the loop marks the time every millisecond; a thread
looks every millisecond, and while the mark is older than the threshold, samples the loop
thread's Python stack. When the loop comes back, one WARN line names the stall's length and
the frames seen most often. Off unless ``STROM_LOOP_STALL_MS`` is set (a developer's tool:
sampling costs a little CPU and the GIL).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import sys
import threading
import time
import traceback

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
    threading.Thread(
        target=_watch, args=(loop, state, loop_thread, threshold), name="stall-watch",
        daemon=True
    ).start()
    log.warning("event loop stall watchdog on: stalls over %.0f ms are logged", threshold * 1000)


def _watch(loop: asyncio.AbstractEventLoop, state: dict[str, float], loop_thread: int,
           threshold: float) -> None:
    seen: collections.Counter[str] = collections.Counter()
    since = 0.0
    while not loop.is_closed():
        time.sleep(_TICK_S)
        now = time.monotonic()
        late = now - state["mark"]
        if late > threshold:
            if not seen:
                since = state["mark"]
            frame = sys._current_frames().get(loop_thread)
            if frame is not None:
                stack = traceback.extract_stack(frame)[-_FRAMES:]
                seen[" < ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in reversed(stack))] += 1
        elif seen:
            top = "; ".join(f"{n}x {s}" for s, n in seen.most_common(3))
            log.warning("event loop stalled %.0f ms: %s", (state["mark"] - since) * 1000, top)
            seen.clear()
