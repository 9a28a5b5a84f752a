"""The event-loop stall watchdog names what held the loop (a developer's tool, off by default)."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time

from strom.common import stall_watch

DEADLINE_S = 10.0


def _hold_the_loop(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # busy, as a long piece of work on the loop is
        pass


def test_off_unless_asked(monkeypatch, caplog) -> None:
    monkeypatch.delenv(stall_watch.ENV, raising=False)
    caplog.set_level(logging.WARNING, logger="strom.stall")

    async def scenario() -> None:
        stall_watch.start_from_env(asyncio.get_running_loop())

    asyncio.run(scenario())
    assert not caplog.records


def test_a_stall_is_logged_with_its_frames(monkeypatch, caplog) -> None:
    monkeypatch.setenv(stall_watch.ENV, "20")
    caplog.set_level(logging.WARNING, logger="strom.stall")

    async def scenario() -> None:
        stall_watch.start_from_env(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        _hold_the_loop(0.3)
        deadline = time.monotonic() + DEADLINE_S
        while not any("stalled" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "no stall was logged"
            await asyncio.sleep(0.005)

    asyncio.run(scenario())
    deadline = time.monotonic() + DEADLINE_S
    while any(t.name == "stall-watch" for t in threading.enumerate()):  # ends with its loop
        assert time.monotonic() < deadline, "the watchdog outlived its loop"
        time.sleep(0.005)
    [line] = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert "_hold_the_loop" in line
    ms = int(line.split("stalled ")[1].split(" ms")[0])
    assert 100 <= ms < 10_000


def test_a_long_collection_is_logged_with_its_generation(monkeypatch, caplog) -> None:
    """A stall with one sample in it may be the cyclic GC (it holds the GIL, so the sampler
    cannot look): the watchdog times collections and names the long ones."""
    monkeypatch.setenv(stall_watch.ENV, "2")
    caplog.set_level(logging.WARNING, logger="strom.stall")
    callbacks_before = list(gc.callbacks)

    async def scenario() -> None:
        stall_watch.start_from_env(asyncio.get_running_loop())
        heap = [[i] for i in range(300_000)]  # tracked objects a full collection walks
        gc.collect()
        del heap
        deadline = time.monotonic() + DEADLINE_S
        while not any("garbage collection of generation 2" in r.getMessage()
                      for r in caplog.records):  # (a young one may come first)
            assert time.monotonic() < deadline, "no full collection was logged"
            await asyncio.sleep(0.005)

    asyncio.run(scenario())
    line = next(r.getMessage() for r in caplog.records
                if "garbage collection of generation 2" in r.getMessage())
    assert "in thread MainThread" in line
    deadline = time.monotonic() + DEADLINE_S
    while gc.callbacks != callbacks_before:  # the timer leaves with the watchdog
        assert time.monotonic() < deadline, "the collection timer outlived its watchdog"
        time.sleep(0.005)
