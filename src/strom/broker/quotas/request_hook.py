"""The request_percentage quota as a request hook (`strom.broker.router.RequestHook`): the
time a request's handler took (its local phase, in percent of one second: Kafka's unit) counts
against the client's quota, and a client over it is throttled (KIP-124). Installed by
`strom.broker.app.request_hooks`; measures nothing while no client quota is set."""

from __future__ import annotations

from strom.broker.context import RequestContext, RequestTimes
from strom.broker.quotas.clients import ClientQuotas
from strom.broker.router import RequestHook


class RequestQuota(RequestHook):
    """Records the handler's time as soon as it returned, so that a reply still to come (a
    produce waiting for replication) carries the throttle time in ``throttle_time_ms``."""

    __slots__ = ("_quotas",)

    def __init__(self, quotas: ClientQuotas) -> None:
        self._quotas = quotas

    def local_done(self, ctx: RequestContext, times: RequestTimes) -> None:
        quotas = self._quotas
        if quotas.active:
            ctx.throttle.add(quotas.request.record(
                ctx.principal.name, ctx.client_id or "",
                (times.local_done - times.dispatched) * 100))
