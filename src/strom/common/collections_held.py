"""Holding CPython's automatic garbage collections off while large work runs.

A full collection walks every tracked object while holding the GIL, in whichever thread
happens to allocate: with tens of thousands of partition logs in memory it takes 20-200 ms,
and the event loop waits for all of it even when the allocating thread is a worker preparing
a large metadata commit. Large creations therefore hold collections off from their first step
(the controller's planning) to their last (the background creation of the logs), and the
objects they made, which live as long as their topic, are then frozen out of later
collections (`gc.freeze`). Holds nest: collections resume when the last one ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0
_was_enabled = False
_freeze = False


def hold() -> None:
    """Stop automatic collections until the matching `release`."""
    global _depth, _was_enabled, _freeze
    if _depth == 0:
        _was_enabled = gc.isenabled()
        _freeze = False
        gc.disable()
    _depth += 1


def release(*, freeze: bool = False) -> None:
    """End one hold; the last resumes collections (after freezing what exists, when any hold
    asked for it: objects that stay are not walked again by every full collection)."""
    global _depth, _freeze
    _freeze = _freeze or freeze
    _depth -= 1
    if _depth == 0 and _was_enabled:
        if _freeze:
            gc.freeze()
        gc.enable()


@contextmanager
def collections_held(*, freeze: bool = False) -> Iterator[None]:
    hold()
    try:
        yield
    finally:
        release(freeze=freeze)
