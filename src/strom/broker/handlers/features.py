"""UpdateFeatures (``kafka-features upgrade|downgrade``, ``Admin.updateFeatures``): a KRaft
cluster's finalized feature levels change by FeatureLevelRecords in its metadata log.

Kafka's rules: a feature Strom does not have, or a level outside what it supports, is
INVALID_UPDATE_VERSION; a lower level needs a downgrade upgrade type (v0: allow_downgrade);
metadata.version never goes down; ``validate_only`` checks and changes nothing. All updates of
a request commit together, or none does. Brokers forward the request to the active controller
(strom.broker.kraft_cluster), which appends the records and answers once they are committed;
ApiVersions then lists the new levels. kraft.version (the quorum's own, not a metadata record)
goes from 0 to 1 only (a static quorum becomes dynamic: the Raft leader writes the voters with
their directory ids), never down. The levels of a node without a KRaft metadata log (ZooKeeper
mode, a single node without process.roles) cannot change. It needs ALTER on the cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from strom.broker.authz import cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.router import handles
from strom.cluster.features import (
    SAFE_DOWNGRADE,
    UPGRADE,
    feature_update_refused,
    finalized_levels,
)
from strom.cluster.image import MetadataImage
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct
from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.acl import AclOperation as Op
from strom.security.acl import ResourceType as Res

KRAFT_VERSION = "kraft.version"


def _answer(request: Struct, error: ErrorCode, message: str | None) -> dict[str, Any]:
    """One error for the whole request (v2 has nothing else; v0-1 repeat it per feature)."""
    return {"throttle_time": 0, "error_code": error, "error_message": message,
            "results": [{"feature": u.feature, "error_code": error,
                         "error_message": message if error != ErrorCode.NONE else None}
                        for u in request.feature_updates]}


@handles(ApiKey.UPDATE_FEATURES, 0, 2)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def update_features(broker: Broker, ctx: RequestContext, request: Struct) -> dict[str, Any]:
    kraft = broker.kraft_version() if broker.kraft_version is not None else None
    return await answer_update_features(broker.image, broker.controller, request,
                                        ctx.api_version, kraft, broker.kraft_upgrade)


def registered_support(image: MetadataImage) -> dict[str, dict[str, tuple[int, int]]]:
    """The feature ranges of every registered broker (that sent them) and controller."""
    out = {f"Broker {b}": reg.features for b, reg in sorted(image.registrations.items())
           if reg.features}
    out.update((f"Controller {c}", reg.features) for c, reg in sorted(image.controllers.items()))
    return out


async def answer_update_features(image: MetadataImage, controller: object, request: Struct,
                                 api_version: int, kraft_version: int | None,
                                 kraft_upgrade: Callable[[int], Awaitable[None]] | None = None,
                                 ) -> dict[str, Any]:
    """The UpdateFeatures answer of a node with `image` whose `controller` commits the levels
    (a broker's, or a controller's on its CONTROLLER listener, KIP-919)."""
    update = getattr(controller, "update_features", None)
    if update is None:
        return _answer(request, ErrorCode.FEATURE_UPDATE_FAILED, "this node keeps no KRaft "
                       "metadata log (a ZooKeeper cluster, or a single node without "
                       "process.roles): its feature levels are Strom's own and cannot change")
    current = finalized_levels(image.finalized_features)
    wanted: dict[str, int] = {}
    kraft_wanted: int | None = None
    for u in request.feature_updates:
        name, level = str(u.feature), int(u.max_version_level)
        if name in wanted:
            return _answer(request, ErrorCode.INVALID_REQUEST,
                           f"Feature {name} appears more than once in the request.")
        if api_version == 0:
            kind = SAFE_DOWNGRADE if getattr(u, "allow_downgrade", False) else UPGRADE
        else:
            kind = int(getattr(u, "upgrade_type", UPGRADE))
        if name == KRAFT_VERSION:
            if level == kraft_version:
                continue  # already so
            if kraft_upgrade is None or kraft_version is None or level < kraft_version:
                return _answer(request, ErrorCode.INVALID_UPDATE_VERSION,
                               f"Invalid update version {level} for feature kraft.version: "
                               "Strom upgrades kraft.version from 0 to 1 only (a static quorum "
                               "becomes dynamic), never down")
            kraft_wanted = level
            continue
        why = feature_update_refused(name, level, kind, current, registered_support(image))
        if why is not None:
            return _answer(request, ErrorCode.INVALID_UPDATE_VERSION, why)
        wanted[name] = level
    changes = {n: lv for n, lv in wanted.items() if current.get(n, 0) != lv}
    validate_only = bool(getattr(request, "validate_only", False))
    try:
        await update(changes, validate_only=validate_only)
        if kraft_wanted is not None and kraft_upgrade is not None and not validate_only:
            await kraft_upgrade(kraft_wanted)  # the quorum's own change, after the others
    except KafkaError as exc:
        return _answer(request, exc.code, exc.message)
    return _answer(request, ErrorCode.NONE, None)
