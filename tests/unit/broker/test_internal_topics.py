"""An internal topic that cannot be created yet says why: too few live brokers for its
replication factor (a group's FindCoordinator said only "being created" for as long as a
broker of three was down), and no creation is started meanwhile."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from strom.broker.internal_topics import InternalTopic
from strom.protocol.errors import ErrorCode, KafkaError


class Offsets(InternalTopic):
    name = "__consumer_offsets"

    def settings(self) -> tuple[int, int, dict[str, str]]:
        return 50, 3, {}


def node(live: int) -> Any:
    created: list[str] = []

    async def create_topic(name: str, *args: Any) -> None:
        created.append(name)

    controller = SimpleNamespace(single_broker=False, immediate=False,
                                 create_topic=create_topic, created=created)
    return SimpleNamespace(image=SimpleNamespace(topics={}, brokers=dict.fromkeys(range(live))),
                           controller=controller)


def test_too_few_live_brokers_is_the_answer_and_logged_once(caplog) -> None:
    n = node(live=2)
    topic = Offsets(n)
    with caplog.at_level(logging.INFO, logger="strom.broker.internal_topics"):
        for _ in range(3):
            with pytest.raises(KafkaError) as raised:
                topic.create()
            assert raised.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert str(raised.value.message) == (
                "__consumer_offsets needs 3 live brokers for its replication factor and 2 are "
                "live: it is created once enough are")
    assert not n.controller.created  # no creation bound to fail was started
    assert len([r for r in caplog.records if "needs 3 live brokers" in r.getMessage()]) == 1
