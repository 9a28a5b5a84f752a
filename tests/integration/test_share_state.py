"""The share coordinator over the wire: Initialize/Write/ReadShareGroupState against a real
broker, the state read back after a kill -9, and a snapshot record after
share.coordinator.snapshot.update.records.per.snapshot updates.

The requests go through Strom's inter-broker client (what a share-partition leader on another
broker sends); the `__share_group_state` segment files are read with the independent decoder of
``wire`` and checked for Kafka's record types (int16 key prefix 0 snapshot, 1 update).
"""

from __future__ import annotations

import asyncio
import base64
import struct
import time
import uuid
from typing import Any

import pytest

from strom.cluster.client import BrokerClient
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import KafkaError

from .broker import BrokerProcess
from .wire import parse_batches

pytestmark = pytest.mark.timeout(150)

STATE_TOPIC = "__share_group_state"
OVERRIDES = {"share.coordinator.state.topic.num.partitions": "3"}
SHARE_KEY_TYPE = 2
NOT_READY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def _client(broker: BrokerProcess) -> BrokerClient:
    host, port = broker.bootstrap.rsplit(":", 1)
    return BrokerClient(host, int(port), client_id="share-state-test", timeout_s=15)


async def _create_topic(client: BrokerClient, name: str) -> uuid.UUID:
    r = await client.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
        "name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
        "configs": []}], "timeout": 10000, "validate_only": False})
    assert r.topics[0].error_code == 0, r.topics[0].error_message
    return r.topics[0].topic_id


def _body(group: str, topic_id: uuid.UUID, **partition: Any) -> dict[str, Any]:
    return {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [partition]}]}


async def _until_ready(client: BrokerClient, api: ApiKey, version: int,
                       body: dict[str, Any]) -> Any:
    """Send until the share coordinator has its partition (created and loaded)."""
    deadline = time.monotonic() + 30
    while True:
        r = await client.request(api, version, body)
        p = r.results[0].partitions[0]
        if p.error_code not in NOT_READY or time.monotonic() > deadline:
            return p
        await asyncio.sleep(0.1)


async def _find_coordinator(client: BrokerClient, key: str) -> Any:
    deadline = time.monotonic() + 30
    while True:
        r = await client.request(ApiKey.FIND_COORDINATOR, 6,
                                 {"key_type": SHARE_KEY_TYPE, "coordinator_keys": [key]})
        c = r.coordinators[0]
        if c.error_code not in NOT_READY or time.monotonic() > deadline:
            return c
        await asyncio.sleep(0.1)


def _write(group: str, topic_id: uuid.UUID, first: int, last: int, state: int = 2,
           start: int = -1, state_epoch: int = 0) -> dict[str, Any]:
    return _body(group, topic_id, partition=0, state_epoch=state_epoch, leader_epoch=0,
                 start_offset=start,
                 delivery_complete_count=-1, state_batches=[
                     {"first_offset": first, "last_offset": last, "delivery_state": state,
                      "delivery_count": 1}])


def _state_records(broker: BrokerProcess) -> list[tuple[int, bytes]]:
    """(record type, key) of every record in every `__share_group_state` segment."""
    out = []
    for d in sorted(broker.data_dir.glob(f"{STATE_TOPIC}-*")):
        for seg in sorted(d.glob("*.log")):
            for _, records in parse_batches(seg.read_bytes()):
                for r in records or []:
                    out.append((struct.unpack(">h", r.key[:2])[0], r.key))
    return out


def test_state_survives_kill_9(make_broker) -> None:
    broker = make_broker(OVERRIDES)
    group = "share-group-a"

    async def before() -> uuid.UUID:
        client = _client(broker)
        try:
            topic_id = await _create_topic(client, "share-state-a")
            # as a share-partition leader does: FindCoordinator creates __share_group_state
            c = await _find_coordinator(client, f"{group}:{_kafka_uuid(topic_id)}:0")
            assert c.error_code == 0, c.error_message
            p = await _until_ready(client, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, _body(
                group, topic_id, partition=0, state_epoch=1, start_offset=10))
            assert p.error_code == 0, p.error_message
            for first, last, state in ((10, 14, 2), (15, 19, 4), (20, 24, 0)):
                w = await client.request(ApiKey.WRITE_SHARE_GROUP_STATE, 1, _write(
                    group, topic_id, first, last, state, state_epoch=1))
                assert w.results[0].partitions[0].error_code == 0
            w = await client.request(ApiKey.WRITE_SHARE_GROUP_STATE, 0, _body(
                group, topic_id, partition=0, state_epoch=1, leader_epoch=0, start_offset=12,
                state_batches=[]))
            assert w.results[0].partitions[0].error_code == 0
            return topic_id
        finally:
            client.close()

    topic_id = asyncio.run(before())
    broker.restart(kill=True)

    async def after() -> None:
        client = _client(broker)
        try:
            key = f"{group}:{_kafka_uuid(topic_id)}:0"
            c = await _find_coordinator(client, key)
            assert (c.error_code, c.port) == (0, broker.port)
            p = await _until_ready(client, ApiKey.READ_SHARE_GROUP_STATE, 0, _body(
                group, topic_id, partition=0, leader_epoch=1))
            assert (p.error_code, p.state_epoch, p.start_offset) == (0, 1, 12)
            assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                    for b in p.state_batches] == [(12, 14, 2, 1), (15, 19, 4, 1), (20, 24, 0, 1)]
            # the read recorded leader epoch 1: the old leader is fenced now
            w = await client.request(ApiKey.WRITE_SHARE_GROUP_STATE, 1, _write(
                group, topic_id, 25, 25, state_epoch=1))
            assert w.results[0].partitions[0].error_code == 74  # FENCED_LEADER_EPOCH
            # and a stale state epoch
            p = await _until_ready(client, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, _body(
                group, topic_id, partition=0, state_epoch=0, start_offset=0))
            assert p.error_code == 124  # FENCED_STATE_EPOCH
        finally:
            client.close()

    asyncio.run(after())


def test_a_snapshot_follows_500_updates(make_broker) -> None:
    broker = make_broker(OVERRIDES)
    group = "share-group-b"

    async def run() -> None:
        client = _client(broker)
        try:
            topic_id = await _create_topic(client, "share-state-b")
            c = await _find_coordinator(client, f"{group}:{_kafka_uuid(topic_id)}:0")
            assert c.error_code == 0, c.error_message
            p = await _until_ready(client, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, _body(
                group, topic_id, partition=0, state_epoch=0, start_offset=0))
            assert p.error_code == 0, p.error_message
            for i in range(501):  # 500 updates, then the 501st write is a snapshot
                w = await client.request(ApiKey.WRITE_SHARE_GROUP_STATE, 1,
                                         _write(group, topic_id, i, i))
                assert w.results[0].partitions[0].error_code == 0
            p = await _until_ready(client, ApiKey.READ_SHARE_GROUP_STATE, 0, _body(
                group, topic_id, partition=0, leader_epoch=0))
            assert [(b.first_offset, b.last_offset) for b in p.state_batches] == [(0, 500)]
        finally:
            client.close()

    asyncio.run(run())
    types = [t for t, _ in _state_records(broker)]
    assert types == [0] + [1] * 500 + [0], (types.count(0), types.count(1))


def _kafka_uuid(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def test_routing_persister_reaches_a_remote_coordinator(make_broker) -> None:
    """A broker whose metadata says another broker leads the key's __share_group_state
    partition sends the share-state requests there (the real broker plays that coordinator)."""
    from types import SimpleNamespace

    from strom.broker.share_persister import RoutingPersister
    from strom.cluster.image import BrokerInfo, PartitionState
    from strom.coordinator.share.config import ShareCoordinatorConfig
    from strom.coordinator.share.coordinator import ShareCoordinator
    from strom.coordinator.share.state import SharePartitionKey, StateBatch
    from strom.security.client import PLAINTEXT

    broker = make_broker(OVERRIDES)
    group = "share-group-c"

    async def run() -> None:
        client = _client(broker)
        try:
            topic_id = await _create_topic(client, "share-state-c")
            c = await _find_coordinator(client, f"{group}:{_kafka_uuid(topic_id)}:0")
            assert c.error_code == 0, c.error_message
        finally:
            client.close()
        host, port = broker.bootstrap.rsplit(":", 1)
        # this "broker" (id 7) leads nothing: broker 0 at the real address leads every partition
        image = SimpleNamespace(
            topics={STATE_TOPIC: SimpleNamespace(partitions={
                p: PartitionState(p, [0], [0], 0) for p in range(3)})},
            brokers={0: BrokerInfo(0, host, int(port))})
        node = SimpleNamespace(broker_id=7, image=image, inter_broker=PLAINTEXT,
                               config=SimpleNamespace(get=lambda name: 30000))
        topic = SimpleNamespace(num_partitions=lambda: 3)
        local = ShareCoordinator(ShareCoordinatorConfig(write_timeout_ms=2000), topic,
                                 None, None, lambda: 0)  # type: ignore[arg-type]
        persister = RoutingPersister(node, local)  # type: ignore[arg-type]
        key = SharePartitionKey(group, topic_id, 0)
        try:
            assert await persister.read(key, 0) is None
            await persister.initialize(key, 2, 100)
            await persister.write(key, 2, 0, -1, [StateBatch(100, 104, 2, 1)],
                                  delivery_complete_count=5)
            state = await persister.read(key, 1)
            assert state is not None
            assert (state.state_epoch, state.start_offset, state.batches) == (
                2, 100, [StateBatch(100, 104, 2, 1)])
            summary = await persister.read_summary(key)
            assert (summary.start_offset, summary.leader_epoch) == (100, 1)
            try:
                await persister.write(key, 1, 1, -1, [])
            except KafkaError as exc:
                assert exc.code == 124  # FENCED_STATE_EPOCH, raised as the remote said
            else:
                raise AssertionError("a stale state epoch was accepted")
            await persister.delete(key)
            assert await persister.read(key, 1) is None
        finally:
            persister.close()

    asyncio.run(run())
