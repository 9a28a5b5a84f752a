"""Automatic collections are held off while any hold lasts, and resume (freezing what exists,
when asked) when the last ends; nested holds from the controller and the log creation."""

from __future__ import annotations

import gc

import pytest

from strom.common import collections_held as held


@pytest.fixture(autouse=True)
def _restore_gc():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_nested_holds_resume_only_at_the_last_release() -> None:
    gc.enable()
    held.hold()
    held.hold()
    assert not gc.isenabled()
    held.release()
    assert not gc.isenabled()  # the outer hold still runs
    held.release()
    assert gc.isenabled()


def test_freeze_asked_by_any_hold_happens_at_the_end() -> None:
    gc.enable()
    gc.unfreeze()
    with held.collections_held():
        with held.collections_held(freeze=True):
            kept = [object() for _ in range(10)]  # noqa: F841
        assert gc.get_freeze_count() == 0  # not yet: the outer hold is still on
    assert gc.get_freeze_count() > 0
    assert gc.isenabled()


def test_collections_stay_off_if_they_were_off() -> None:
    gc.disable()
    with held.collections_held(freeze=True):
        pass
    assert not gc.isenabled()
