"""Background disk-work threads run at a lower priority than the thread that made them."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from strom.common.background import BACKGROUND_NICE, background_executor


def _nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_its_threads_are_niced_and_the_caller_is_not() -> None:
    before = _nice_of_this_thread()
    pool = background_executor(2, "test-background")
    try:
        niced = {pool.submit(_nice_of_this_thread).result(10) for _ in range(4)}
    finally:
        pool.shutdown(wait=True)
    assert niced == {min(19, before + BACKGROUND_NICE)}
    assert _nice_of_this_thread() == before
