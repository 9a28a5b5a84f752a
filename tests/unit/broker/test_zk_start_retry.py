"""A ZooKeeper connection lost just after a broker connected (a missed ping on a loaded
machine) is retried while kazoo reconnects, within zookeeper.connection.timeout.ms; past it,
the broker refuses to start with one line. (CI: a Jepsen broker exited on ConnectionLoss.)"""

from __future__ import annotations

import asyncio

import pytest
from kazoo.exceptions import ConnectionLoss

from strom.broker.wiring import StartupError
from strom.broker.zk_mode import _retried_while_reconnecting


def test_a_lost_connection_is_retried_then_refused_past_the_timeout() -> None:
    calls = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionLoss()
        return "cluster"

    assert asyncio.run(_retried_while_reconnecting(flaky, 5.0, "zk:2181")) == "cluster"
    assert len(calls) == 3

    async def lost() -> str:
        raise ConnectionLoss()

    with pytest.raises(StartupError, match="lost the connection to ZooKeeper at zk:2181"):
        asyncio.run(_retried_while_reconnecting(lost, 0.3, "zk:2181"))
