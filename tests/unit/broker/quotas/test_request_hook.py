"""request_percentage, measured by the request hook `strom broker` installs: a handler's time
counts against its client's quota, and an awaited reply already carries the throttle."""

from __future__ import annotations

import pytest

from strom.broker.app import request_hooks
from strom.broker.handlers import MODULES
from strom.broker.router import Router
from strom.protocol.api_keys import ApiKey


@pytest.fixture
def h(broker_harness):
    broker_harness.router = Router(broker_harness.broker, MODULES,
                                   request_hooks(broker_harness.broker))
    return broker_harness


def _request_quota(h, percent: float) -> None:
    r = h.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "unit-test"}],
        "ops": [{"key": "request_percentage", "value": percent, "remove": False}]}]})
    assert r.entries[0].error_code == 0


def test_nothing_is_measured_while_no_quota_is_set(h) -> None:
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a"))
    assert h.broker.quotas.request.rates == {}
    assert h.conn.throttle.ms == 0


def test_a_client_over_its_request_quota_is_throttled(h) -> None:
    h.create_topic("t")
    _request_quota(h, 0.0001)  # any handler's time is over it
    h.produce("t", 0, h.batch(b"a"))
    assert [tags for tags in h.broker.quotas.request.rates] == [("", "unit-test")]
    assert h.conn.throttle.ms > 0  # the connection is muted for this long once answered


def test_an_awaited_reply_carries_the_request_throttle(h) -> None:
    """The handler's time is counted as soon as it returns, so a produce answered after its
    flush (flush.messages=1) already reports the throttle in throttle_time_ms."""
    h.create_topic("t", configs={"flush.messages": "1"})
    _request_quota(h, 0.0001)
    h.conn.throttle.ms = 0  # as once the connection was muted for the requests before
    r = h.request(ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": -1, "timeout": 5000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0,
                                                         "records": h.batch(b"a")}]}]})
    assert r.responses[0].partition_responses[0].error_code == 0
    assert r.throttle_time > 0
    assert r.throttle_time <= h.conn.throttle.ms


@pytest.mark.broker_config(**{"metrics.listener": ""})
def test_with_metrics_off_the_quota_still_throttles(h) -> None:
    """Without `after` hooks the connection keeps no times; the router times the handler."""
    assert not h.router.keeps_times
    h.create_topic("t")
    _request_quota(h, 0.0001)
    h.conn.throttle.ms = 0
    h.produce("t", 0, h.batch(b"a"))
    assert h.conn.throttle.ms > 0
