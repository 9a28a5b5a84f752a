"""Router request hooks: the one place per request where what applies to every request alike
plugs in (`strom broker` installs the request quota and the request metrics there)."""

from __future__ import annotations

import pytest

from strom.broker.context import CloseConnection, RequestContext, RequestTimes
from strom.broker.handlers import MODULES
from strom.broker.router import RequestHook, Router
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


class Recorder(RequestHook):
    """Sees every request at each point; refuses the APIs in `refuse` with `error`."""

    def __init__(self, refuse: tuple[int, ...] = (), error: ErrorCode | None = None,
                 close: bool = False) -> None:
        self.events: list[tuple[str, int, int]] = []
        self.times: list[tuple[float, ...]] = []
        self.refuse, self.error, self.close = refuse, error, close

    def before(self, ctx: RequestContext, times: RequestTimes) -> ErrorCode | None:
        self.events.append(("before", ctx.api_key, ctx.api_version))
        if ctx.api_key in self.refuse:
            if self.close:
                raise CloseConnection()
            return self.error
        return None

    def local_done(self, ctx: RequestContext, times: RequestTimes) -> None:
        assert times.local_done >= times.dispatched > 0
        self.events.append(("local_done", ctx.api_key, ctx.api_version))

    def after(self, ctx: RequestContext, times: RequestTimes) -> None:
        self.events.append(("after", ctx.api_key, ctx.api_version))
        self.times.append((times.arrived, times.dispatched, times.local_done,
                           times.reply_ready, times.sent))


class AfterOnly(RequestHook):
    def __init__(self) -> None:
        self.seen: list[int] = []

    def after(self, ctx: RequestContext, times: RequestTimes) -> None:
        self.seen.append(ctx.api_key)


def _hooked(harness, *hooks) -> None:
    harness.router = Router(harness.broker, MODULES, hooks)


def test_a_hook_sees_every_request_at_each_point_with_its_key_and_version(broker_harness) -> None:
    h = broker_harness
    first, second = Recorder(), Recorder()
    _hooked(h, first, second)
    h.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    h.request(ApiKey.METADATA, 12, {"topics": None})  # a raw handler
    h.create_topic("t")  # an async generic handler: `after` runs once it has answered
    h.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
    expected = [(ApiKey.API_VERSIONS, 3), (ApiKey.METADATA, 12), (ApiKey.CREATE_TOPICS, 7),
                (ApiKey.DESCRIBE_CLUSTER, 0)]
    assert first.events == [(step, k, v) for k, v in expected
                            for step in ("before", "local_done", "after")]
    assert second.events == first.events
    for times in first.times:  # the phases end in order, each request answered
        assert 0 < times[0] <= times[1] <= times[2] <= times[3] <= times[4]


def test_hooks_run_only_at_the_points_they_override(broker_harness) -> None:
    h = broker_harness
    hook = AfterOnly()
    _hooked(h, hook)
    assert (h.router._before, h.router._local_done) == ((), ())
    h.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
    assert hook.seen == [ApiKey.DESCRIBE_CLUSTER]


def test_an_api_versions_version_not_served_is_seen_like_any_request(broker_harness) -> None:
    """Answered in v0 with UNSUPPORTED_VERSION (clients then retry lower): the request metrics
    count it, as they did before they were a hook."""
    h = broker_harness
    hook = Recorder()
    _hooked(h, hook)
    reply = h.send_frame(ApiKey.API_VERSIONS, 0, b"")  # v0 has an empty body
    assert reply is not None
    too_new = h.router.api_versions_reply(0, ErrorCode.UNSUPPORTED_VERSION)
    assert h.send_frame(ApiKey.API_VERSIONS, 99, b"") == too_new
    assert [e[0] for e in hook.events] == ["before", "local_done", "after"] * 2
    assert hook.events[-1] == ("after", ApiKey.API_VERSIONS, 99)
    assert hook.times[-1][4] > 0  # answered


def test_a_refusal_is_answered_in_the_top_level_error_code(broker_harness) -> None:
    h = broker_harness
    hook = Recorder(refuse=(ApiKey.DESCRIBE_CLUSTER,), error=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    _hooked(h, hook)
    r = h.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
    assert r.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert r.brokers == []  # the handler did not run
    assert hook.events == [("before", ApiKey.DESCRIBE_CLUSTER, 0),
                           ("local_done", ApiKey.DESCRIBE_CLUSTER, 0),
                           ("after", ApiKey.DESCRIBE_CLUSTER, 0)]


def test_a_refusal_without_a_top_level_error_code_closes_the_connection(broker_harness) -> None:
    h = broker_harness
    hook = Recorder(refuse=(ApiKey.CREATE_TOPICS,), error=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    _hooked(h, hook)
    with pytest.raises(CloseConnection):
        h.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": "t", "num_partitions": 1, "replication_factor": 1}], "timeout": 5000})
    assert "t" not in h.broker.image.topics
    assert hook.times[-1][2:] == (0.0, 0.0, 0.0)  # not handled, nothing sent


def test_a_hook_may_close_the_connection_and_later_hooks_are_not_asked(broker_harness) -> None:
    h = broker_harness
    closer, later = Recorder(refuse=(ApiKey.DESCRIBE_CLUSTER,), close=True), Recorder()
    _hooked(h, closer, later)
    with pytest.raises(CloseConnection):
        h.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
    assert closer.events == [("before", ApiKey.DESCRIBE_CLUSTER, 0),
                             ("after", ApiKey.DESCRIBE_CLUSTER, 0)]
    assert later.events == [("after", ApiKey.DESCRIBE_CLUSTER, 0)]  # told it ended unsent
    assert later.times[-1][4] == 0.0


def test_a_failing_hook_is_logged_and_the_request_goes_on(broker_harness, caplog) -> None:
    class Broken(RequestHook):
        def local_done(self, ctx: RequestContext, times: RequestTimes) -> None:
            raise RuntimeError("bug")

        def after(self, ctx: RequestContext, times: RequestTimes) -> None:
            raise RuntimeError("bug")

    h = broker_harness
    _hooked(h, Broken())
    assert h.request(ApiKey.DESCRIBE_CLUSTER, 0, {}).error_code == ErrorCode.NONE
    assert sum("request hook" in r.getMessage() for r in caplog.records) == 2


def test_without_hooks_the_router_takes_the_plain_path(broker_harness, monkeypatch) -> None:
    h = broker_harness
    assert h.router.hooks == ()

    def hooked(*args: object) -> None:
        raise AssertionError("the hook path ran without hooks")

    monkeypatch.setattr(h.router, "_hooked", hooked)
    assert h.request(ApiKey.DESCRIBE_CLUSTER, 0, {}).error_code == ErrorCode.NONE
    too_new = h.router.api_versions_reply(0, ErrorCode.UNSUPPORTED_VERSION)
    assert h.send_frame(ApiKey.API_VERSIONS, 99, b"") == too_new
