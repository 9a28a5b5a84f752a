"""Initialize/Read/Write/Delete/ReadShareGroupStateSummary and FindCoordinator(SHARE) through
the router of a real single-node broker."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strom.coordinator.share.state import SharePartitionKey, StateBatch
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

pytestmark = pytest.mark.broker_config(**{
    "share.coordinator.state.topic.num.partitions": "3",
    "share.coordinator.snapshot.update.records.per.snapshot": "2"})


def _coordinator(h: Any, key: str, version: int = 6) -> Any:
    for _ in range(100):
        r = h.request(ApiKey.FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": [key]})
        c = r.coordinators[0]
        if c.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE:
            return c
        h.run(0.02)  # __share_group_state is being created and loaded
    raise AssertionError("no share coordinator")


def _setup(h: Any) -> tuple[uuid.UUID, SharePartitionKey]:
    h.create_topic("shared", 2)
    topic_id = h.topic_id("shared")
    key = SharePartitionKey("g", topic_id, 1)
    c = _coordinator(h, key.coordinator_key())
    assert (c.error_code, c.node_id) == (0, h.broker.broker_id)
    return topic_id, key


def _one(r: Any) -> Any:
    assert len(r.results) == 1 and len(r.results[0].partitions) == 1, r
    return r.results[0].partitions[0]


def _request(group: str, topic_id: uuid.UUID, **partition: Any) -> dict[str, Any]:
    return {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [partition]}]}


def test_initialize_write_read_summary_delete(broker_harness: Any) -> None:
    h = broker_harness
    topic_id, _ = _setup(h)
    p = _one(h.request(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0,
                       _request("g", topic_id, partition=1, state_epoch=1, start_offset=0)))
    assert p.error_code == 0
    for i in range(3):  # two updates, then a snapshot
        p = _one(h.request(ApiKey.WRITE_SHARE_GROUP_STATE, 1, _request(
            "g", topic_id, partition=1, state_epoch=1, leader_epoch=0, start_offset=0,
            delivery_complete_count=i + 1, state_batches=[
                {"first_offset": i, "last_offset": i, "delivery_state": 2,
                 "delivery_count": 1}])))
        assert p.error_code == 0, p.error_message
    p = _one(h.request(ApiKey.READ_SHARE_GROUP_STATE, 0,
                       _request("g", topic_id, partition=1, leader_epoch=0)))
    assert (p.error_code, p.state_epoch, p.start_offset) == (0, 1, 0)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in p.state_batches] == [(0, 2, 2, 1)]
    s = _one(h.request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1,
                       _request("g", topic_id, partition=1, leader_epoch=0)))
    assert (s.error_code, s.state_epoch, s.start_offset, s.delivery_complete_count) \
        == (0, 1, 0, 3)
    # a stale state epoch is fenced
    p = _one(h.request(ApiKey.WRITE_SHARE_GROUP_STATE, 0, _request(
        "g", topic_id, partition=1, state_epoch=0, leader_epoch=0, start_offset=-1,
        state_batches=[])))
    assert p.error_code == ErrorCode.FENCED_STATE_EPOCH
    p = _one(h.request(ApiKey.DELETE_SHARE_GROUP_STATE, 0, _request("g", topic_id, partition=1)))
    assert p.error_code == 0
    p = _one(h.request(ApiKey.READ_SHARE_GROUP_STATE, 0,
                       _request("g", topic_id, partition=1, leader_epoch=0)))
    assert p.error_code == ErrorCode.INVALID_REQUEST  # uninitialized, as Kafka answers


def test_errors_per_partition(broker_harness: Any) -> None:
    h = broker_harness
    topic_id, _ = _setup(h)
    p = _one(h.request(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, _request(
        "g", uuid.uuid4(), partition=0, state_epoch=0, start_offset=0)))
    assert p.error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_COORDINATOR)
    p = _one(h.request(ApiKey.WRITE_SHARE_GROUP_STATE, 1, _request(
        "g", topic_id, partition=1, state_epoch=0, leader_epoch=0, start_offset=0,
        state_batches=[])))
    assert p.error_code == ErrorCode.INVALID_REQUEST  # never initialized
    # no group id: no results (Kafka's answer)
    r = h.request(ApiKey.READ_SHARE_GROUP_STATE, 0, _request("", topic_id, partition=1,
                                                             leader_epoch=0))
    assert r.results == []


def test_find_coordinator_refuses_bad_share_keys(broker_harness: Any) -> None:
    h = broker_harness
    assert _coordinator(h, "no-colons").error_code == ErrorCode.INVALID_REQUEST
    assert _coordinator(h, "g:not-a-uuid:0").error_code == ErrorCode.INVALID_REQUEST
    r = h.request(ApiKey.FIND_COORDINATOR, 5, {"key_type": 2, "coordinator_keys": ["g:x:0"]})
    assert r.coordinators[0].error_code == ErrorCode.INVALID_REQUEST  # SHARE is new in v6


def test_the_persister_reaches_the_local_coordinator(broker_harness: Any) -> None:
    h = broker_harness
    _, key = _setup(h)
    persister = h.broker.share_persister
    run = h.loop.run_until_complete
    assert run(persister.read(key, 0)) is None
    run(persister.initialize(key, 0, 5))
    run(persister.write(key, 0, 3, -1, [StateBatch(5, 9, 0, 1)]))
    state = run(persister.read(key, 3))
    assert (state.start_offset, state.batches) == (5, [StateBatch(5, 9, 0, 1)])
    run(persister.delete(key))
    assert run(persister.read(key, 3)) is None
