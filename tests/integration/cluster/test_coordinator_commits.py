"""Coordinators answer only once their state is replicated (issue 28): below min ISR a write is
refused with Kafka's coordinator error, never acknowledged, and the client's retry succeeds once
the replicas are back."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from strom.cluster.client import BrokerClient
from strom.protocol.api_keys import ApiKey

from .faults import wait_for

pytestmark = pytest.mark.timeout(180)

TXN_KEY_TYPE = 1
COORDINATOR_NOT_AVAILABLE = 15
NOT_READY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
OVERRIDES = {"transaction.state.log.num.partitions": "1", "replica.lag.time.max.ms": "2000",
             "request.timeout.ms": "3000"}


def _client(bootstrap: str) -> BrokerClient:
    host, port = bootstrap.rsplit(":", 1)
    return BrokerClient(host, int(port), client_id="coordinator-commits-test", timeout_s=15)


async def _coordinator(cluster: Any, tid: str) -> int:
    deadline = time.monotonic() + 60
    while True:
        client = _client(cluster.bootstrap.split(",")[0])
        try:
            r = await client.request(ApiKey.FIND_COORDINATOR, 4,
                                     {"key_type": TXN_KEY_TYPE, "coordinator_keys": [tid]})
        finally:
            client.close()
        c = r.coordinators[0]
        if c.error_code == 0:
            return int(c.node_id)
        assert c.error_code in NOT_READY and time.monotonic() < deadline, c
        await asyncio.sleep(0.2)


async def _init(bootstrap: str, tid: str) -> Any:
    client = _client(bootstrap)
    try:
        return await client.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1,
            "producer_epoch": -1})
    finally:
        client.close()


def test_a_coordinator_below_min_isr_refuses_then_recovers(make_cluster):
    cluster = make_cluster(3, OVERRIDES)
    tid = "below-min-isr"
    leader = asyncio.run(_coordinator(cluster, tid))
    coordinator = cluster.broker(leader)
    # the coordinator may still be loading its partition (LOAD_IN_PROGRESS): a client retries
    first = wait_for(lambda: (r := asyncio.run(_init(coordinator.bootstrap, tid))).error_code
                     not in NOT_READY and r, 30, "the coordinator loaded")
    assert first.error_code == 0, first
    epoch = first.producer_epoch
    others = [b for b in cluster.brokers if b is not coordinator]
    for b in others:
        b.kill()

    # the followers leave the ISR after replica.lag.time.max.ms: from then on (and before: the
    # wait times out) InitProducerId is answered COORDINATOR_NOT_AVAILABLE, never success
    deadline = time.monotonic() + 60
    refused = 0
    while refused < 3:
        r = asyncio.run(_init(coordinator.bootstrap, tid))
        assert r.error_code != 0, f"acknowledged with the ISR gone: {r}"
        if r.error_code == COORDINATOR_NOT_AVAILABLE:
            refused += 1
        assert time.monotonic() < deadline, r

    for b in others:
        b.start()
    for b in others:
        b.wait_ready()

    def init_succeeds() -> bool:
        node = asyncio.run(_coordinator(cluster, tid))
        r = asyncio.run(_init(cluster.broker(node).bootstrap, tid))
        return r.error_code == 0 and r.producer_epoch > epoch

    wait_for(init_succeeds, 90, "InitProducerId to succeed once the replicas are back")
