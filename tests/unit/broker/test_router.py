"""Router request hooks: the one place per request where authorization, quotas and metrics
plug in."""

from __future__ import annotations

import pytest

from strom.broker.context import CloseConnection, RequestContext
from strom.broker.handlers import MODULES
from strom.broker.router import Router
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


class Recorder:
    """Sees every request; refuses the APIs in `refuse` with `error`."""

    def __init__(self, refuse: tuple[int, ...] = (), error: ErrorCode | None = None,
                 close: bool = False) -> None:
        self.events: list[tuple[str, int, int]] = []
        self.refuse, self.error, self.close = refuse, error, close

    def before(self, ctx: RequestContext) -> ErrorCode | None:
        self.events.append(("before", ctx.api_key, ctx.api_version))
        if ctx.api_key in self.refuse:
            if self.close:
                raise CloseConnection()
            return self.error
        return None

    def after(self, ctx: RequestContext, elapsed_s: float) -> None:
        assert elapsed_s >= 0
        self.events.append(("after", ctx.api_key, ctx.api_version))


def _hooked(harness, *hooks) -> None:
    harness.router = Router(harness.broker, MODULES, hooks)


def test_a_hook_sees_every_request_once_with_its_key_and_version(broker_harness) -> None:
    h = broker_harness
    first, second = Recorder(), Recorder()
    _hooked(h, first, second)
    h.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    h.request(ApiKey.METADATA, 12, {"topics": None})  # a raw handler
    h.create_topic("t")  # an async generic handler: `after` runs once it has answered
    h.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
    expected = [(ApiKey.API_VERSIONS, 3), (ApiKey.METADATA, 12), (ApiKey.CREATE_TOPICS, 7),
                (ApiKey.DESCRIBE_CLUSTER, 0)]
    assert first.events == [(step, k, v) for k, v in expected for step in ("before", "after")]
    assert second.events == first.events


def test_a_refusal_is_answered_in_the_top_level_error_code(broker_harness) -> None:
    h = broker_harness
    hook = Recorder(refuse=(ApiKey.DESCRIBE_CLUSTER,), error=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    _hooked(h, hook)
    r = h.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
    assert r.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert r.brokers == []  # the handler did not run
    assert hook.events == [("before", ApiKey.DESCRIBE_CLUSTER, 0),
                           ("after", ApiKey.DESCRIBE_CLUSTER, 0)]


def test_a_refusal_without_a_top_level_error_code_closes_the_connection(broker_harness) -> None:
    h = broker_harness
    _hooked(h, Recorder(refuse=(ApiKey.CREATE_TOPICS,), error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(CloseConnection):
        h.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": "t", "num_partitions": 1, "replication_factor": 1}], "timeout": 5000})
    assert "t" not in h.broker.image.topics


def test_a_hook_may_close_the_connection_and_later_hooks_do_not_run(broker_harness) -> None:
    h = broker_harness
    closer, later = Recorder(refuse=(ApiKey.DESCRIBE_CLUSTER,), close=True), Recorder()
    _hooked(h, closer, later)
    with pytest.raises(CloseConnection):
        h.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
    assert closer.events == [("before", ApiKey.DESCRIBE_CLUSTER, 0),
                             ("after", ApiKey.DESCRIBE_CLUSTER, 0)]
    assert later.events == []


def test_without_hooks_the_router_takes_the_plain_path(broker_harness, monkeypatch) -> None:
    h = broker_harness
    assert h.router.hooks == ()

    def hooked(*args: object) -> None:
        raise AssertionError("the hook path ran without hooks")

    monkeypatch.setattr(h.router, "_hooked", hooked)
    assert h.request(ApiKey.DESCRIBE_CLUSTER, 0, {}).error_code == ErrorCode.NONE
