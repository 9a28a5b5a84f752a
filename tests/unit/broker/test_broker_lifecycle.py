"""A KRaft broker's registration: initial.broker.registration.timeout.ms bounds how long a
starting broker keeps trying; then it gives up (and `strom broker` exits, as Kafka's does).
Until first unfenced it heartbeats every 10 ms, as Kafka's broker, then every
broker.heartbeat.interval.ms."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from types import SimpleNamespace
from typing import Any

from strom.broker.kraft_cluster import BrokerLifecycle
from strom.cluster.image import BrokerInfo, MetadataImage
from strom.controller.loader import MetadataLoader
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

DEADLINE_S = 10.0


class Controller:
    """A controller channel: refuses every registration, or accepts it."""

    def __init__(self, accept: bool, fenced_answers: int = 0) -> None:
        self.accept = accept
        self.asked: list[ApiKey] = []
        self.fenced_answers = fenced_answers  # heartbeats answered "fenced" before unfencing

    async def request(self, api_key: ApiKey, version: int, body: Mapping[str, Any], *,
                      timeout_s: float | None = None) -> Any:
        self.asked.append(api_key)
        if api_key == ApiKey.BROKER_REGISTRATION:
            if not self.accept:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "no controller answers")
            return SimpleNamespace(error_code=0, broker_epoch=7)
        fenced = self.fenced_answers > 0
        self.fenced_answers -= 1
        return SimpleNamespace(error_code=0, is_fenced=fenced, should_shut_down=False)

    def close(self) -> None:
        pass


@contextlib.asynccontextmanager
async def running(controller: Controller, register_by: float,
                  interval_ms: int = 20) -> AsyncIterator[BrokerLifecycle]:
    """A started lifecycle with heartbeats every `interval_ms`, stopped afterwards."""
    loader = MetadataLoader(MetadataImage(cluster_id="c"), asyncio.get_running_loop())
    life = BrokerLifecycle(controller, BrokerInfo(1, "127.0.0.1", 9092), "c", {}, loader,  # type: ignore[arg-type]
                           interval_ms=interval_ms, session_timeout_ms=9000,
                           register_by=register_by)
    life.start()
    try:
        yield life
    finally:
        await life.stop()


def test_a_broker_that_cannot_register_in_time_gives_up() -> None:
    async def scenario() -> None:
        controller = Controller(accept=False)
        async with running(controller, time.monotonic() + 0.2) as life:
            await asyncio.wait_for(life.gave_up.wait(), DEADLINE_S)
        assert not life.registered and life.epoch == -1
        assert "initial.broker.registration.timeout.ms" in life.gave_up_reason
        assert controller.asked.count(ApiKey.BROKER_REGISTRATION) >= 2  # it kept trying

    asyncio.run(scenario())


def test_a_registered_broker_keeps_going_past_the_deadline() -> None:
    async def scenario() -> None:
        controller = Controller(accept=True)
        async with running(controller, time.monotonic() + 0.05) as life:
            assert await life.wait_unfenced(DEADLINE_S)
            # heartbeats continue well past the deadline: it does not give up once registered
            beats = controller.asked.count(ApiKey.BROKER_HEARTBEAT)
            while controller.asked.count(ApiKey.BROKER_HEARTBEAT) < beats + 10:
                await asyncio.sleep(0.02)  # poll interval
            assert not life.gave_up.is_set()
        assert life.registered and life.epoch == 7

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S))


def test_a_starting_broker_heartbeats_every_10_ms_until_unfenced_then_at_its_interval() -> None:
    """Five "fenced" answers take about 50 ms, not five heartbeat intervals of 60 s; once
    unfenced the broker waits its interval (nothing more within a second)."""
    async def scenario() -> None:
        controller = Controller(accept=True, fenced_answers=5)
        async with running(controller, float("inf"), interval_ms=60_000) as life:
            assert await life.wait_unfenced(DEADLINE_S)
            beats = controller.asked.count(ApiKey.BROKER_HEARTBEAT)
            assert beats == 6
            await asyncio.sleep(1.0)  # the time in which no heartbeat may come: the check
            assert controller.asked.count(ApiKey.BROKER_HEARTBEAT) == beats

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S))
