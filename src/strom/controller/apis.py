"""The CONTROLLER listener's APIs, and its Router.

A controller-only node answers what Kafka's controllers answer on that listener so far as the
quorum goes: the Raft RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of
``__cluster_metadata``, FetchSnapshot), DescribeQuorum, and DescribeCluster with
``endpoint_type`` 2 (KIP-919: the controllers, and which one is active), which is how Kafka's
admin client finds the active controller with ``--bootstrap-controller``. The Raft RPCs go to
the node's `RaftDriver` unchanged; the Raft client validates them as Kafka does (a Fetch of
any other topic is INVALID_REQUEST).

AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter (KIP-853) go to the Raft client as well: a
dynamic quorum's leader takes them.

ApiVersions lists exactly these; its supported features add ``kraft.version`` (0, a static
voter set, to 1, a dynamic one).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

from strom.broker.authz import HandlerFn, cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.router import RequestHook, Router, handles
from strom.cluster.features import api_versions_features
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct
from strom.protocol.errors import ErrorCode
from strom.raft.messages import Message
from strom.security.acl import AclOperation as Op
from strom.security.acl import ResourceType as Res

if TYPE_CHECKING:
    from strom.broker.core import Broker
    from strom.cluster.image import MetadataImage
    from strom.security.acl import Authorizer


class ControllerNode(Protocol):
    """What the handlers ask of the node (strom.controller.node.ControllerNode)."""

    cluster_id: str
    authorizer: Authorizer | None  # the ACLs `requires` checks; None: everything allowed

    def raft_request(self, api_key: ApiKey, request: Mapping[str, Any]) -> Awaitable[Message]:
        ...

    def leader_id(self) -> int | None: ...

    def controller_endpoints(self) -> dict[int, tuple[str, int]]: ...

BROKER_ENDPOINT = 1
CONTROLLER_ENDPOINT = 2
UNKNOWN_AUTHORIZED_OPERATIONS = -(2**31)


def _raft_api(api_key: ApiKey, versions: tuple[int, int], operation: Op) -> HandlerFn:
    """The handler of a Raft RPC: the ACL check Kafka's controllers make (`operation` on the
    cluster), then the request as it is, to the node's Raft client, which validates it."""

    @handles(api_key, *versions)
    @requires(operation, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    def handler(node: ControllerNode, ctx: RequestContext,
                request: Struct) -> Awaitable[Message]:
        return node.raft_request(api_key, request.to_dict())

    handler.__name__ = handler.__qualname__ = api_key.name.lower()
    return handler


# CLUSTER_ACTION for what the nodes ask of each other, DESCRIBE or ALTER for an operator's;
# AddRaftVoter (``kafka-metadata-quorum add-controller``, auto-join) is answered by the
# leader once the new voter set commits, by any other controller NOT_LEADER_OR_FOLLOWER
vote = _raft_api(ApiKey.VOTE, (0, 2), Op.CLUSTER_ACTION)
begin_quorum_epoch = _raft_api(ApiKey.BEGIN_QUORUM_EPOCH, (0, 1), Op.CLUSTER_ACTION)
end_quorum_epoch = _raft_api(ApiKey.END_QUORUM_EPOCH, (0, 1), Op.CLUSTER_ACTION)
fetch = _raft_api(ApiKey.FETCH, (4, 18), Op.CLUSTER_ACTION)
fetch_snapshot = _raft_api(ApiKey.FETCH_SNAPSHOT, (0, 1), Op.CLUSTER_ACTION)
update_raft_voter = _raft_api(ApiKey.UPDATE_RAFT_VOTER, (0, 0), Op.CLUSTER_ACTION)
describe_quorum = _raft_api(ApiKey.DESCRIBE_QUORUM, (0, 2), Op.DESCRIBE)
add_raft_voter = _raft_api(ApiKey.ADD_RAFT_VOTER, (0, 1), Op.ALTER)
remove_raft_voter = _raft_api(ApiKey.REMOVE_RAFT_VOTER, (0, 0), Op.ALTER)


@handles(ApiKey.UPDATE_FEATURES, 0, 2)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def update_features(node: ControllerNode, ctx: RequestContext,
                          request: Struct) -> dict[str, Any]:
    """``kafka-features --bootstrap-controller upgrade``: as on a broker listener
    (strom.broker.handlers.features), answered by the active controller; another controller's
    answer is NOT_CONTROLLER (its commit cannot go through)."""
    from strom.broker.handlers.features import answer_update_features

    image = getattr(node, "image", None)
    controller = getattr(node, "feature_controller", None)
    if image is None or controller is None:
        return {"throttle_time": 0, "error_code": ErrorCode.NOT_CONTROLLER,
                "error_message": "this controller is still starting", "results": []}
    kraft = getattr(node, "kraft_version", None)
    return await answer_update_features(image, controller, request, ctx.api_version,
                                        kraft() if callable(kraft) else None,
                                        getattr(node, "upgrade_kraft_version", None))


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
def describe_cluster(node: ControllerNode, ctx: RequestContext,
                     request: Struct) -> dict[str, Any]:
    """KIP-919: on a controller listener, the registered controllers and the active one. Endpoint type checks as Kafka's (AuthHelper.computeDescribeClusterResponse)."""
    wanted = int(request.endpoint_type)  # v0: BROKER
    if wanted != CONTROLLER_ENDPOINT:
        v0 = ctx.api_version == 0
        if wanted != BROKER_ENDPOINT:
            return {"error_code": ErrorCode.INVALID_REQUEST if v0
                    else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                    "error_message": f"Unsupported endpoint type {wanted}"}
        return {"error_code": ErrorCode.INVALID_REQUEST if v0
                else ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                "error_message": "The request was sent to an endpoint of type CONTROLLER, but "
                                 "we wanted an endpoint of type BROKER"}
    controllers = _described_controllers(node, ctx.listener)
    leader = node.leader_id()
    return {
        "error_code": ErrorCode.NONE,
        "endpoint_type": CONTROLLER_ENDPOINT,
        "cluster_id": node.cluster_id,
        "controller_id": leader if leader is not None and leader in controllers else -1,
        "brokers": [{"broker_id": node_id, "host": host, "port": port, "rack": None,
                     "is_fenced": False}
                    for node_id, (host, port) in sorted(controllers.items())],
        "cluster_authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS,
    }


def _described_controllers(node: ControllerNode, listener: str) -> dict[int, tuple[str, int]]:
    """The registered controllers' addresses on `listener`, as Kafka's controllers answer
    DescribeCluster (an unregistered voter is not listed); before any has registered (a quorum
    starting, or a single node, which registers with nobody), the voters'."""
    image = getattr(node, "image", None)
    registered = image.controllers if image is not None else {}
    if not registered:
        return node.controller_endpoints()
    return {cid: reg.endpoints[listener] for cid, reg in sorted(registered.items())
            if listener in reg.endpoints}


def controller_features(version: int, image: MetadataImage | None = None,
                        kraft_version: int = 0) -> dict[str, object]:
    """ApiVersions' feature fields on a controller listener: the levels `image` finalized, and
    kraft.version (supported listed from v4 on only, as a range starting at 0, KIP-1022;
    finalized when the quorum is at level 1)."""
    if image is None:
        return api_versions_features(version, kraft_version=kraft_version)
    return api_versions_features(version, image.finalized_features, image.features_epoch,
                                 kraft_version)


class ControllerRouter(Router):
    """A Router whose handlers take the `ControllerNode` where broker handlers take the
    Broker, with the controller's ApiVersions features."""

    def __init__(self, node: ControllerNode, hooks: Sequence[RequestHook] = (),
                 extra: Sequence[ModuleType] = ()) -> None:
        # Router only hands its `broker` to the handlers registered here, which take the node.
        super().__init__(cast("Broker", node), [sys.modules[__name__], *extra], hooks)

    def api_versions_features(self, version: int) -> dict[str, object]:
        node = self.broker
        kraft = getattr(node, "kraft_version", None)
        return controller_features(version, getattr(node, "image", None),
                                   kraft() if callable(kraft) else 0)
