"""A v2 consumer instance's librdkafka consumer is bounded: it fetches at most PREFETCH_KIB
ahead of its reads (librdkafka's 64 MiB default, times up to MAX_INSTANCES instances, could
hold tens of GB in the HTTP API's process)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from strom.rest.v2 import instances
from strom.rest.v2.requests import PREFETCH_KIB, InstanceConfig


class RecordingConsumer:
    made: list[dict[str, Any]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.made.append(conf)

    def close(self) -> None:
        pass


def test_an_instance_fetches_a_bounded_amount_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(instances, "Consumer", RecordingConsumer)
    ctx = SimpleNamespace(settings=SimpleNamespace(consumer_timeout_ms=300_000),
                          user=lambda request: None,
                          pool=SimpleNamespace(config_for=lambda user, **extra: dict(extra)))

    async def scenario() -> None:
        registry = instances.Instances(ctx)
        made = await registry.create(None, "g", InstanceConfig(
            "reader", "binary", None, None, 1, 1000))
        await registry.remove(made)
        if registry._sweeper is not None:
            registry._sweeper.cancel()

    asyncio.run(scenario())
    [conf] = RecordingConsumer.made
    assert conf["queued.max.messages.kbytes"] == PREFETCH_KIB == 16 * 1024
    assert conf["fetch.queue.backoff.ms"] == 10  # refetched soon once reads drain it
    assert conf["group.id"] == "g"
