"""DescribeQuorum, AddRaftVoter, RemoveRaftVoter, UnregisterBroker and UnregisterController on
the broker listeners of a KRaft node.

Kafka's brokers pass DescribeQuorum (and a dynamic quorum's voter changes) on to the active
controller, which is how ``kafka-metadata-quorum --bootstrap-server`` and the Java
``Admin.describeMetadataQuorum``/``addRaftVoter``/``removeRaftVoter`` reach it. A combined node asks its own controller. Only KRaft nodes serve this module
(`strom.broker.app` adds it), so a broker without KRaft does not advertise the API, as a
ZooKeeper-mode Kafka broker did not. It needs DESCRIBE on the cluster, as Kafka's controller
checks.
"""

from __future__ import annotations

from typing import Any

from strom.broker.authz import cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.router import handles
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct
from strom.protocol.errors import ErrorCode, error_only
from strom.security.acl import AclOperation as Op
from strom.security.acl import ResourceType as Res


@handles(ApiKey.DESCRIBE_QUORUM, 0, 2)
@requires(Op.DESCRIBE, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def describe_quorum(broker: Broker, ctx: RequestContext, request: Struct) -> dict[str, Any]:
    if broker.metadata_quorum is None:  # never: the module is served by KRaft nodes only
        return {"error_code": ErrorCode.NOT_CONTROLLER}
    return dict(await broker.metadata_quorum(ApiKey.DESCRIBE_QUORUM, request.to_dict()))


@handles(ApiKey.ADD_RAFT_VOTER, 0, 1)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def add_raft_voter(broker: Broker, ctx: RequestContext, request: Struct) -> dict[str, Any]:
    if broker.metadata_quorum is None:
        return {"error_code": ErrorCode.NOT_CONTROLLER}
    return dict(await broker.metadata_quorum(ApiKey.ADD_RAFT_VOTER, request.to_dict()))


@handles(ApiKey.REMOVE_RAFT_VOTER, 0, 0)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def remove_raft_voter(broker: Broker, ctx: RequestContext,
                            request: Struct) -> dict[str, Any]:
    if broker.metadata_quorum is None:
        return {"error_code": ErrorCode.NOT_CONTROLLER}
    return dict(await broker.metadata_quorum(ApiKey.REMOVE_RAFT_VOTER, request.to_dict()))


@handles(ApiKey.UNREGISTER_BROKER, 0, 0)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def unregister_broker(broker: Broker, ctx: RequestContext,
                            request: Struct) -> dict[str, Any]:
    """Admin.unregisterBroker: a fenced broker's registration removed (a broker that is gone
    for good). Other brokers forward it here, to the active controller."""
    unregister = getattr(broker.controller, "unregister_broker", None)
    if unregister is None:  # a node that is its own quorum registers no brokers
        return {"error_code": ErrorCode.BROKER_ID_NOT_REGISTERED,
                "error_message": f"broker {request.broker_id} is not registered: this node is "
                                 "a cluster of one"}
    return await error_only(lambda: unregister(int(request.broker_id)))


@handles(ApiKey.UNREGISTER_CONTROLLER, 0, 0)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def unregister_controller(broker: Broker, ctx: RequestContext,
                                request: Struct) -> dict[str, Any]:
    """Admin.unregisterController (Kafka 4.4, KIP-1312): a controller's registration removed
    (one gone for good, removed from the voters first). Other brokers forward it here, to the
    active controller."""
    controller_id = int(request.controller_id)
    unregister = getattr(broker.controller, "unregister_controller", None)
    if unregister is None:  # a node that is its own quorum: its controller is itself
        if controller_id == broker.broker_id:
            return {"error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": "Controller cannot unregister itself while it is active."}
        return {"error_code": ErrorCode.CONTROLLER_ID_NOT_REGISTERED,
                "error_message": f"Controller ID {controller_id} is not currently registered."}
    return await error_only(lambda: unregister(controller_id))
