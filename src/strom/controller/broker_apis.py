"""What brokers (and controllers) ask of the active controller on its CONTROLLER listener.

BrokerRegistration, BrokerHeartbeat and UnregisterBroker (the broker lifecycle),
ControllerRegistration and UnregisterController (the controllers', KIP-919/KIP-1312),
AssignReplicasToDirs (which log dir keeps each replica, KIP-858), AlterPartition
(a leader changes an ISR), AllocateProducerIds (a block of producer ids) and Envelope (an admin
request a broker forwards with its client's principal). Each goes to the node's
`ClusterQuorumController`; a node that is not the active controller answers NOT_CONTROLLER,
and the broker asks again wherever the quorum's leader is now.

Registration checks follow Kafka's: the cluster id must be the controller's
(INCONSISTENT_CLUSTER_ID), a broker id may not be a voter's unless the node is combined
(Kafka's rule is the same for the node ids of combined nodes).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from strom.broker.authz import cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.router import handles
from strom.cluster.image import BrokerInfo, ControllerRegistration
from strom.controller.cluster_controller import ClusterQuorumController
from strom.controller.envelope import decode_principal
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct
from strom.protocol.errors import ErrorCode, KafkaError, error_only
from strom.security.acl import AclOperation as Op
from strom.security.acl import Authorizer
from strom.security.acl import ResourceType as Res
from strom.security.principal import KafkaPrincipal
from strom.storage.checkpoints import topic_id_to_str

Message = dict[str, Any]
# Strom's own listener entry in a registration: the broker's schema registry (http or https)
REGISTRY_LISTENER = "STROM_SCHEMA_REGISTRY"
# The inner request of an Envelope, handled as if its client had sent it here: the response,
# header and body, as bytes.
ForwardedHandler = Callable[[KafkaPrincipal, str, bytes], Awaitable[bytes]]


class BrokerFacingNode(Protocol):
    cluster_id: str
    authorizer: Authorizer | None  # the ACLs `requires` checks; None: everything allowed
    cluster: ClusterQuorumController | None
    forwarded: ForwardedHandler | None


def _controller(node: BrokerFacingNode) -> ClusterQuorumController:
    if node.cluster is None or not node.cluster.active:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node is not the active controller")
    return node.cluster


@handles(ApiKey.BROKER_REGISTRATION, 0, 4)
@requires(Op.CLUSTER_ACTION, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def broker_registration(node: BrokerFacingNode, ctx: RequestContext,
                              request: Struct) -> Message:
    if request.cluster_id != node.cluster_id:
        return {"error_code": ErrorCode.INCONSISTENT_CLUSTER_ID, "broker_epoch": -1}
    registry = next((lst for lst in request.listeners if lst.name == REGISTRY_LISTENER), None)
    listeners = [lst for lst in request.listeners if lst.name != REGISTRY_LISTENER]
    if not listeners:
        return {"error_code": ErrorCode.INVALID_REGISTRATION, "broker_epoch": -1}
    first = listeners[0]  # the broker lists its inter-broker listener first
    info = BrokerInfo(int(request.broker_id), first.host, int(first.port), request.rack,
                      {lst.name: (lst.host, int(lst.port)) for lst in listeners})
    if registry is not None:
        scheme = "https" if registry.security_protocol == 1 else "http"
        info.registry_url = f"{scheme}://{registry.host}:{registry.port}"
    features = {str(f.name): (int(f.min_supported_version), int(f.max_supported_version))
                for f in request.features}
    log_dirs = [topic_id_to_str(d) for d in request.log_dirs]
    try:
        epoch = await _controller(node).register_broker(
            info, str(request.incarnation_id or uuid.UUID(int=0)), features, log_dirs)
    except KafkaError as exc:
        return {"error_code": exc.code, "broker_epoch": -1}
    return {"error_code": ErrorCode.NONE, "broker_epoch": epoch}


@handles(ApiKey.BROKER_HEARTBEAT, 0, 2)
@requires(Op.CLUSTER_ACTION, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def broker_heartbeat(node: BrokerFacingNode, ctx: RequestContext,
                           request: Struct) -> Message:
    try:
        answer = await _controller(node).heartbeat(
            int(request.broker_id), int(request.broker_epoch),
            int(request.current_metadata_offset), want_fence=bool(request.want_fence),
            want_shut_down=bool(request.want_shut_down),
            # (v0 has no offline log dirs: Kafka 3.0's brokers)
            offline_dirs=[topic_id_to_str(d)
                          for d in getattr(request, "offline_log_dirs", None) or ()])
    except KafkaError as exc:
        return {"error_code": exc.code, "is_caught_up": False, "is_fenced": True,
                "should_shut_down": False}
    return {"error_code": ErrorCode.NONE, "is_caught_up": answer.is_caught_up,
            "is_fenced": answer.is_fenced, "should_shut_down": answer.should_shut_down}


@handles(ApiKey.UNREGISTER_BROKER, 0, 0)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def unregister_broker(node: BrokerFacingNode, ctx: RequestContext,
                            request: Struct) -> Message:
    return await error_only(lambda: _controller(node).unregister_broker(int(request.broker_id)))


@handles(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0, 0)
@requires(Op.CLUSTER_ACTION, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def assign_replicas_to_dirs(node: BrokerFacingNode, ctx: RequestContext,
                                  request: Struct) -> Message:
    """A broker with several log dirs says which one keeps each of its replicas (KIP-858;
    strom.broker.dir_assignments sends it)."""
    items = [(topic_id_to_str(d.id_), t.topic_id, int(p.partition_index))
             for d in request.directories for t in d.topics for p in t.partitions]
    try:
        errors = iter(await _controller(node).assign_replicas_to_dirs(
            int(request.broker_id), int(request.broker_epoch), items))
    except KafkaError as exc:
        return {"error_code": exc.code, "directories": []}
    return {"error_code": ErrorCode.NONE, "directories": [
        {"id_": d.id_, "topics": [
            {"topic_id": t.topic_id, "partitions": [
                {"partition_index": p.partition_index, "error_code": next(errors)}
                for p in t.partitions]}
            for t in d.topics]}
        for d in request.directories]}


@handles(ApiKey.CONTROLLER_REGISTRATION, 0, 0)
@requires(Op.CLUSTER_ACTION, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def controller_registration(node: BrokerFacingNode, ctx: RequestContext,
                                  request: Struct) -> Message:
    """A controller registers itself with the active one (strom.controller.registration)."""
    registration = ControllerRegistration(
        int(request.controller_id), str(request.incarnation_id or uuid.UUID(int=0)),
        {str(lst.name): (str(lst.host), int(lst.port)) for lst in request.listeners},
        {str(f.name): (int(f.min_supported_version), int(f.max_supported_version))
         for f in request.features})
    return await error_only(lambda: _controller(node).register_controller(registration))


@handles(ApiKey.UNREGISTER_CONTROLLER, 0, 0)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def unregister_controller(node: BrokerFacingNode, ctx: RequestContext,
                                request: Struct) -> Message:
    """``kafka-cluster unregister-controller --bootstrap-controller``, Admin.unregisterController
    (Kafka 4.4, KIP-1312)."""
    return await error_only(
        lambda: _controller(node).unregister_controller(int(request.controller_id)))


def _check_broker(controller: ClusterQuorumController, broker_id: int, epoch: int) -> None:
    reg = controller.image.registrations.get(broker_id)
    if reg is None or (epoch != -1 and reg.epoch != epoch):
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                         f"broker {broker_id} epoch {epoch} is not its current registration")


def _partition_answer(partition: int, error: int) -> Message:
    return {"partition_index": partition, "error_code": error, "leader_id": -1,
            "leader_epoch": -1, "isr": [], "leader_recovery_state": 0, "partition_epoch": -1}


@handles(ApiKey.ALTER_PARTITION, 2, 3)
@requires(Op.CLUSTER_ACTION, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def alter_partition(node: BrokerFacingNode, ctx: RequestContext,
                          request: Struct) -> Message:
    try:
        controller = _controller(node)
        _check_broker(controller, int(request.broker_id), int(request.broker_epoch))
    except KafkaError as exc:
        return {"error_code": exc.code, "topics": []}
    wanted: list[tuple[str, int, int, int, list[int]]] = []
    asked: list[tuple[Any, list[Message | int]]] = []  # per topic: its answers, or indexes
    for t in request.topics:
        topic = controller.image.topics_by_id.get(t.topic_id)
        slots: list[Message | int] = []
        for p in t.partitions:
            if topic is None:
                slots.append(_partition_answer(p.partition_index, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            isr = ([int(b.broker_id) for b in p.new_isr_with_epochs]
                   if ctx.api_version >= 3 else [int(b) for b in p.new_isr])
            slots.append(len(wanted))
            wanted.append((topic.name, int(p.partition_index), int(p.leader_epoch),
                           int(p.partition_epoch), isr))
        asked.append((t.topic_id, slots))
    try:
        results = await controller.alter_isrs(wanted) if wanted else []
    except KafkaError as exc:  # no longer the active controller
        return {"error_code": exc.code, "topics": []}
    topics = []
    for topic_id, slots in asked:
        parts: list[Message] = []
        for slot in slots:
            if not isinstance(slot, int):
                parts.append(slot)
                continue
            result, partition = results[slot], wanted[slot][1]
            if isinstance(result, KafkaError):
                parts.append(_partition_answer(partition, result.code))
            else:
                parts.append({**_partition_answer(partition, ErrorCode.NONE),
                              "leader_id": result.leader, "leader_epoch": result.leader_epoch,
                              "isr": list(result.isr),
                              "partition_epoch": result.partition_epoch})
        topics.append({"topic_id": topic_id, "partitions": parts})
    return {"error_code": ErrorCode.NONE, "topics": topics}


@handles(ApiKey.ALLOCATE_PRODUCER_IDS, 0, 0)
@requires(Op.CLUSTER_ACTION, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def allocate_producer_ids(node: BrokerFacingNode, ctx: RequestContext,
                                request: Struct) -> Message:
    try:
        controller = _controller(node)
        _check_broker(controller, int(request.broker_id), int(request.broker_epoch))
        first, count = await controller.allocate_producer_ids(int(request.broker_id))
    except KafkaError as exc:
        return {"error_code": exc.code, "producer_id_start": -1, "producer_id_len": 0}
    return {"error_code": ErrorCode.NONE, "producer_id_start": first, "producer_id_len": count}


@handles(ApiKey.ENVELOPE, 0, 0)
@requires(Op.CLUSTER_ACTION, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def envelope(node: BrokerFacingNode, ctx: RequestContext, request: Struct) -> Message:
    if node.forwarded is None or node.cluster is None or not node.cluster.active:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "response_data": None}
    try:
        principal = decode_principal(bytes(request.request_principal or b""))
    except ValueError:
        return {"error_code": ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE, "response_data": None}
    address = bytes(request.client_host_address)
    host = ".".join(str(b) for b in address) if len(address) == 4 else address.hex()
    data = await node.forwarded(principal, host, bytes(request.request_data))
    return {"error_code": ErrorCode.NONE, "response_data": data}
