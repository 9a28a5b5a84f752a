"""Removing a share consumer instance over HTTP never waits on a slow librdkafka close."""

from __future__ import annotations

import asyncio
import logging

import pytest

from strom.rest import share
from strom.rest.share import ShareInstance, ShareInstances


class SlowClose(ShareInstance):
    """An instance whose consumer's close takes until `released` is set."""

    released: asyncio.Event

    async def close(self) -> None:
        self.closed = True
        await self.released.wait()
        self.executor.shutdown(wait=False)


def _instance(cls: type[ShareInstance] = ShareInstance) -> ShareInstance:
    return cls(instance_id="i-1", group="g", topics=["t"], user=None, conf={}, max_records=10,
               lock_ms=30_000)


def test_a_slow_close_goes_on_in_the_background(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(share, "CLOSE_WAIT_S", 0.05)

    async def scenario() -> None:
        registry = ShareInstances(idle_ms=60_000)
        instance = _instance(SlowClose)
        assert isinstance(instance, SlowClose)
        instance.released = asyncio.Event()
        registry.add(instance)
        with caplog.at_level(logging.WARNING, logger="strom.rest.share"):
            await registry.remove(instance)
        assert not registry.by_id and instance.closed  # gone for clients at once
        assert "still closing after 0 s; it goes on in the background" in caplog.text
        instance.released.set()
        share.REGISTRIES.remove(registry)

    asyncio.run(scenario())


def test_a_failed_close_is_logged_not_raised(monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise RuntimeError("librdkafka said no")

    async def scenario() -> None:
        registry = ShareInstances(idle_ms=60_000)
        instance = _instance()
        monkeypatch.setattr(instance, "close", broken)
        registry.add(instance)
        with caplog.at_level(logging.ERROR, logger="strom.rest.share"):
            await registry.remove(instance)
        assert "closing share consumer instance i-1 of group g failed" in caplog.text
        assert "librdkafka said no" in caplog.text
        share.REGISTRIES.remove(registry)

    asyncio.run(scenario())
