"""Strom's redelivery delay travels with the share state between brokers: the end of a delay
(`not_before_ms`, a Strom tagged field) written with WriteShareGroupState is stored and read
back by ReadShareGroupState, through the wire codecs and the handlers of a real broker."""

from __future__ import annotations

from typing import Any

import pytest

from strom.protocol.api_keys import ApiKey

from .test_share_state import _one, _request, _setup

pytestmark = pytest.mark.broker_config(**{
    "share.coordinator.state.topic.num.partitions": "3",
    "share.coordinator.snapshot.update.records.per.snapshot": "2"})


def test_the_end_of_a_redelivery_delay_is_stored_and_read_back(broker_harness: Any) -> None:
    h = broker_harness
    topic_id, _ = _setup(h)
    p = _one(h.request(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0,
                       _request("g", topic_id, partition=1, state_epoch=1, start_offset=0)))
    assert p.error_code == 0
    for version, i in ((0, 0), (1, 1), (1, 2)):  # updates, then a snapshot
        p = _one(h.request(ApiKey.WRITE_SHARE_GROUP_STATE, version, _request(
            "g", topic_id, partition=1, state_epoch=1, leader_epoch=0, start_offset=0,
            state_batches=[{"first_offset": i, "last_offset": i, "delivery_state": 0,
                            "delivery_count": 1, "not_before_ms": 1000 * (i + 1)}])))
        assert p.error_code == 0, p.error_message
    p = _one(h.request(ApiKey.READ_SHARE_GROUP_STATE, 0,
                       _request("g", topic_id, partition=1, leader_epoch=0)))
    assert [(b.first_offset, b.last_offset, b.delivery_count, b.not_before_ms)
            for b in p.state_batches] == [(0, 0, 1, 1000), (1, 1, 1, 2000), (2, 2, 1, 3000)]
