"""Kafka's request metrics as a request hook (`strom.broker.router.RequestHook`): each request
answered is counted per API and version, with the time of each of its phases
(RequestMetrics' RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs, ResponseSendTimeMs,
TotalTimeMs). Installed with metrics on (`strom.broker.app.request_hooks`)."""

from __future__ import annotations

from strom.broker.context import RequestContext, RequestTimes
from strom.broker.metrics.stats import BrokerStats
from strom.broker.router import RequestHook


class RequestMetrics(RequestHook):
    """Counts a request once the connection is through with it. One that failed, closed the
    connection or lost it (``times.sent`` 0.0) is not counted: it was never answered."""

    __slots__ = ("_stats",)

    def __init__(self, stats: BrokerStats) -> None:
        self._stats = stats

    def after(self, ctx: RequestContext, times: RequestTimes) -> None:
        sent = times.sent
        if not sent:
            return
        dispatched, local_done, ready = times.dispatched, times.local_done, times.reply_ready
        self._stats.request_done(ctx.api_key, ctx.api_version, dispatched - times.arrived,
                                 local_done - dispatched, ready - local_done, sent - ready)
