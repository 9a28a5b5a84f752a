"""DescribeCluster and InitProducerId."""

from __future__ import annotations

from typing import Any

from strom.broker.authz import (
    Op,
    Res,
    allowed,
    authorized_operations,
    client_host,
    cluster_allowed,
)
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import (
    DescribeClusterRequest,
    ElectLeadersRequest,
    InitProducerIdRequest,
)
from strom.broker.router import handles
from strom.cluster.controller import too_many_records
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.acl import CLUSTER_NAME

UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648
BROKER_ENDPOINT = 1
ENDPOINT_TYPES = {BROKER_ENDPOINT: "BROKER", 2: "CONTROLLER"}  # Kafka's EndpointType


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
def describe_cluster(broker: Broker, ctx: RequestContext,
                     request: DescribeClusterRequest) -> dict[str, Any]:
    wanted = request.endpoint_type  # v0: BROKER
    if wanted != BROKER_ENDPOINT:  # as Kafka (AuthHelper.computeDescribeClusterResponse)
        if wanted not in ENDPOINT_TYPES:
            return {"error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                    "error_message": f"Unsupported endpoint type {wanted}"}
        return {"error_code": ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                "error_message": "The request was sent to an endpoint of type BROKER, but we "
                                 f"wanted an endpoint of type {ENDPOINT_TYPES[wanted]}"}
    image = broker.image
    return {
        "error_code": ErrorCode.NONE,
        "endpoint_type": 1,
        "cluster_id": broker.cluster_id,
        "controller_id": image.controller_for_clients(),
        "brokers": [
            {"broker_id": b.broker_id, "host": address[0], "port": address[1], "rack": b.rack,
             "is_fenced": False}
            for b in image.brokers.values()
            for address in (b.address(ctx.session.listener),)
        ],
        "cluster_authorized_operations": (
            authorized_operations(broker, ctx, Res.CLUSTER, CLUSTER_NAME)
            if request.include_cluster_authorized_operations and broker.authorizer is not None
            else UNKNOWN_AUTHORIZED_OPERATIONS),
    }


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
def init_producer_id(broker: Broker, ctx: RequestContext,
                     request: InitProducerIdRequest) -> dict[str, Any]:
    """Kafka's rules: a non-transactional producer always gets a fresh id with epoch 0 (an
    idempotent producer bumps its epoch itself, KIP-360); a given id/epoch must come as a pair.
    Transactional ids go to the transaction coordinator (v6's two-phase commit, KIP-939, is
    not offered)."""
    pid, epoch = request.producer_id, request.producer_epoch  # v0-2: -1, -1
    if (pid == -1) != (epoch == -1):
        return _init_pid_error(ErrorCode.INVALID_REQUEST)
    tid = request.transactional_id
    if tid is not None and not allowed(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, tid):
        return _init_pid_error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if tid is None and not _may_write_idempotently(broker, ctx):
        return _init_pid_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if tid is not None:
        if tid == "":
            return _init_pid_error(ErrorCode.INVALID_REQUEST)
        return broker.transactions.init_producer_id(tid, request.transaction_timeout,
                                                    pid if pid != -1 else None, epoch)
    try:
        producer_id = broker.next_producer_id()
    except KafkaError as exc:  # no block of ids at hand yet (COORDINATOR_LOAD_IN_PROGRESS)
        return _init_pid_error(exc.code)
    return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}


def _init_pid_error(code: int) -> dict[str, Any]:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


# Kafka's message for a BoundedListTooLongException from its controller (POLICY_VIOLATION)
_EXCESSIVE_BATCH = "Unable to perform excessively large batch operation."


def _may_write_idempotently(broker: Broker, ctx: RequestContext) -> bool:
    """Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (any producer allowed to
    write somewhere may be idempotent)."""
    authorizer = broker.authorizer
    if authorizer is None or cluster_allowed(broker, ctx, Op.IDEMPOTENT_WRITE):
        return True
    return authorizer.allows_some(ctx.session.principal, client_host(ctx), Op.WRITE, Res.TOPIC)


@handles(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(broker: Broker, ctx: RequestContext,
                        request: ElectLeadersRequest) -> dict[str, Any]:
    """Preferred (0) or unclean (1) leader election; v0 has no election type (preferred)."""
    if not cluster_allowed(broker, ctx, Op.ALTER):  # each partition says so (v0: no top level)
        named = [(t.topic, p) for t in request.topic_partitions or () for p in t.partitions]
        return _elect_leaders_reply(dict.fromkeys(named, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    election_type = request.election_type  # v0: preferred (0)
    if election_type not in (0, 1):
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_REQUEST,
                "replica_election_results": []}
    wanted = None
    if request.topic_partitions is not None:
        wanted = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    too_large = too_many_records(len(wanted or ()), _EXCESSIVE_BATCH)
    if too_large is not None:  # as Kafka: the whole request fails, each partition says so
        return _elect_leaders_reply(dict.fromkeys(wanted or (), too_large.code), too_large.code)
    results = await broker.controller.elect_leaders(election_type, wanted)
    if wanted is None:  # Kafka reports only the partitions it elected a leader for
        results = {k: v for k, v in results.items() if v == ErrorCode.NONE}
    else:
        partitions = {(t, p) for t, p in wanted}

        def applied(image: Any) -> bool:  # answer once our image shows the new leaders
            return all(_leader_is_preferred(image, t, p, election_type)
                       for t, p in partitions if results.get((t, p)) == ErrorCode.NONE)

        await broker.controller.wait_until(applied, max(request.timeout, 0) / 1000)
    return _elect_leaders_reply(results, ErrorCode.NONE)


def _elect_leaders_reply(results: dict[tuple[str, int], int], error: int) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in sorted(results.items()):
        by_topic.setdefault(topic, []).append({
            "partition_id": partition, "error_code": int(code),
            "error_message": None if code == ErrorCode.NONE else ErrorCode(code).name})
    return {"throttle_time": 0, "error_code": int(error),
            "replica_election_results": [{"topic": t, "partition_result": r}
                                         for t, r in by_topic.items()]}


def _leader_is_preferred(image: Any, topic: str, partition: int, election_type: int) -> bool:
    t = image.topics.get(topic)
    state = t.partitions.get(partition) if t is not None else None
    if state is None:
        return True
    if election_type == 0:
        return bool(state.replicas) and state.leader == state.replicas[0]
    return state.leader >= 0
