"""Kafka's request metrics, counted by the request hook `strom broker` installs with metrics on:
per API and version, with each phase's time, only for requests that were answered."""

from __future__ import annotations

import pytest

from strom.broker.app import request_hooks
from strom.broker.context import CloseConnection
from strom.broker.handlers import MODULES
from strom.broker.metrics.request_hook import RequestMetrics
from strom.broker.metrics.stats import PHASES
from strom.broker.router import Router
from strom.protocol.api_keys import ApiKey


@pytest.fixture
def h(broker_harness):
    assert broker_harness.broker.stats is not None  # metrics are on by default
    hooks = request_hooks(broker_harness.broker)
    assert any(isinstance(hook, RequestMetrics) for hook in hooks)
    broker_harness.router = Router(broker_harness.broker, MODULES, hooks)
    return broker_harness


def test_an_answered_request_is_counted_with_its_phases(h) -> None:
    h.create_topic("t")  # awaited: its replication wait is the remote phase
    assert h.produce("t", 0, h.batch(b"a")).error_code == 0
    assert h.produce("t", 0, h.batch(b"b"), version=8).error_code == 0
    stats = h.broker.stats
    produce = stats.api(ApiKey.PRODUCE)
    assert produce.requests == {9: 1, 8: 1}
    phases = {name: hist.snapshot() for name, hist in zip(PHASES, produce.phases, strict=True)}
    assert all(snap.count == 2 for snap in phases.values())
    parts = sum(phases[p].total for p in PHASES[:-1])
    assert abs(phases["totaltimems"].total - parts) < 1e-6
    assert stats.api(ApiKey.CREATE_TOPICS).requests == {7: 1}


def test_a_request_that_closes_the_connection_is_not_counted(h) -> None:
    """acks=0 to a topic that does not exist: Kafka closes the connection, nothing answered."""
    with pytest.raises(CloseConnection):
        h.produce("nope", 0, h.batch(b"a"), acks=0)
    assert ApiKey.PRODUCE not in h.broker.stats.apis


@pytest.mark.broker_config(**{"metrics.listener": ""})
def test_with_metrics_off_only_the_quota_hook_is_installed(broker_harness) -> None:
    assert broker_harness.broker.stats is None
    assert not any(isinstance(hook, RequestMetrics)
                   for hook in request_hooks(broker_harness.broker))
