"""Group APIs: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup, OffsetCommit/Fetch/Delete,
ListGroups, DescribeGroups and DeleteGroups (the group coordinator is wired in `wiring.py`).

The handlers only translate between the wire (every version kio knows) and
`strom.coordinator.group.GroupCoordinator`; the group semantics live there. Topic names and
ids are resolved here against the metadata image (OffsetCommit/OffsetFetch v10 carry topic ids).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from strom.broker.authz import Op, Res, allowed, authorized_operations, cluster_allowed, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.share_offsets import delete_share_state
from strom.broker.handlers.transactions import transaction_coordinator_node
from strom.broker.markers import OFFSETS_TOPIC
from strom.broker.request_types import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from strom.broker.router import handles
from strom.broker.share_persister import RoutingPersister
from strom.coordinator.group.classic_groups import JoinRequest
from strom.coordinator.group.replies import ClassicGroupDescription, JoinReply, SyncReply
from strom.coordinator.group.share_state import ShareGroup
from strom.coordinator.group.state import UNKNOWN_AUTHORIZED_OPERATIONS
from strom.coordinator.share.coordinator import parse_coordinator_key
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

GROUP_KEY, TRANSACTION_KEY, SHARE_KEY = 0, 1, 2

_Reply = TypeVar("_Reply")


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def client_host(ctx: RequestContext) -> str:
    """Kafka shows a member's host as `/<address>`."""
    host = ctx.peer.rsplit(":", 1)[0] if ctx.peer else ""
    return "/" + host.strip("[]")


async def _wait(start: Callable[[Callable[[_Reply], None]], None]) -> _Reply:
    """Run a coordinator call that answers through a callback, and await the answer."""
    fut: asyncio.Future[_Reply] = asyncio.get_running_loop().create_future()

    def respond(result: _Reply) -> None:
        if not fut.done():
            fut.set_result(result)

    start(respond)
    return await fut


def _partition_known(broker: Broker, topic: str, partition: int) -> bool:
    t = broker.image.topics.get(topic)
    return t is not None and partition in t.partitions


# --------------------------------------------------------------------------------------------
# FindCoordinator
# --------------------------------------------------------------------------------------------


def _coordinator_for(broker: Broker, ctx: RequestContext, key_type: int,
                     key: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 0,
                           "error_message": None}
    if key_type == TRANSACTION_KEY and not allowed(broker, ctx, Op.DESCRIBE,
                                                   Res.TRANSACTIONAL_ID, key):
        out.update(error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                   error_message="Transactional Id authorization failed.")
        return out
    if key_type == GROUP_KEY and not allowed(broker, ctx, Op.DESCRIBE, Res.GROUP, key):
        out.update(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                   error_message="Group authorization failed.")
        return out
    if key_type == SHARE_KEY:
        return _share_coordinator(broker, ctx, key, out)
    try:
        if key_type == TRANSACTION_KEY:  # -- transactions --
            txn_node = transaction_coordinator_node(broker, key)
            out.update(node_id=txn_node.broker_id,
                       host=txn_node.address(ctx.session.listener)[0],
                       port=txn_node.address(ctx.session.listener)[1])
            return out
        if key_type != GROUP_KEY:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported key type {key_type}.")
        groups = broker.groups
        groups.ensure_offsets_topic()
        partition = groups.partition_for(key)
        topic = broker.image.topics.get(OFFSETS_TOPIC)
        state = topic.partitions.get(partition) if topic is not None else None
        node = broker.image.brokers.get(state.leader) if state is not None else None
        if node is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{OFFSETS_TOPIC}-{partition} has no live leader.")
        if node.broker_id == broker.broker_id and not groups.is_local(key):
            # Led here but not taken up yet (a new topic's logs are made in the background):
            # JoinGroup would answer NOT_COORDINATOR, so the client is told to retry instead,
            # as Kafka answers the FindCoordinator that creates the topic.
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{OFFSETS_TOPIC}-{partition} is not loaded yet.")
        out.update(node_id=node.broker_id, host=node.address(ctx.session.listener)[0],
                       port=node.address(ctx.session.listener)[1])
    except KafkaError as exc:
        out.update(error_code=int(exc.code), error_message=exc.message or exc.code.name)
    return out


def _share_coordinator(broker: Broker, ctx: RequestContext, key: str,
                       out: dict[str, Any]) -> dict[str, Any]:
    """FindCoordinator(key_type SHARE, v6+), which share-partition leaders send: the leader of
    the `__share_group_state` partition of "group:topicId:partition" (CLUSTER_ACTION, as in
    Kafka; a malformed key is INVALID_REQUEST)."""
    try:
        if ctx.api_version < 6:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "FindCoordinator knows the share key type from version 6.")
        if not cluster_allowed(broker, ctx, Op.CLUSTER_ACTION):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             "Cluster authorization failed.")
        try:
            spk = parse_coordinator_key(key)
        except ValueError as exc:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        coordinator = broker.share_coordinator
        node = RoutingPersister.coordinator_node(broker, coordinator, spk)
        if node.broker_id == broker.broker_id and not coordinator.is_local(spk):
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             "The share coordinator's partition is not loaded yet.")
        host, port = node.address(ctx.session.listener)
        out.update(node_id=node.broker_id, host=host, port=port)
    except KafkaError as exc:
        out.update(error_code=int(exc.code), error_message=exc.message or exc.code.name)
    return out


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
def find_coordinator(broker: Broker, ctx: RequestContext,
                     request: FindCoordinatorRequest) -> dict[str, Any]:
    key_type = request.key_type  # v0: groups only (GROUP_KEY)
    if ctx.api_version >= 4:
        return {"throttle_time": 0,
                "coordinators": [_coordinator_for(broker, ctx, key_type, k)
                                 for k in request.coordinator_keys]}
    one = _coordinator_for(broker, ctx, key_type, request.key)
    return {"throttle_time": 0, **one}


# --------------------------------------------------------------------------------------------
# JoinGroup, SyncGroup, Heartbeat, LeaveGroup
# --------------------------------------------------------------------------------------------


@handles(ApiKey.JOIN_GROUP, 0, 9)
@requires(Op.READ, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
async def join_group(broker: Broker, ctx: RequestContext,
                     request: JoinGroupRequest) -> dict[str, Any]:
    version = ctx.api_version
    groups = broker.groups
    req = JoinRequest(
        group_id=request.group_id, member_id=request.member_id,
        instance_id=request.group_instance_id,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        session_timeout=request.session_timeout,
        rebalance_timeout=request.rebalance_timeout,  # v0: -1, the session timeout
        client_id=ctx.client_id or "", client_host=client_host(ctx),
        require_known_member_id=version >= 4, supports_skip_assignment=version >= 9,
        reason=request.reason)
    result: JoinReply = await _wait(lambda respond: groups.classic.join_group(req, respond))
    out = {"throttle_time": 0, **result.fields()}
    if version < 7 and out["protocol_name"] is None:  # not nullable before v7
        out["protocol_name"] = ""
    return out


@handles(ApiKey.SYNC_GROUP, 0, 5)
@requires(Op.READ, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
async def sync_group(broker: Broker, ctx: RequestContext,
                     request: SyncGroupRequest) -> dict[str, Any]:
    groups = broker.groups
    assignments = [(a.member_id, bytes(a.assignment)) for a in request.assignments]
    result: SyncReply = await _wait(lambda respond: groups.classic.sync_group(
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id, request.protocol_type, request.protocol_name, assignments,
        respond))
    return {"throttle_time": 0, **result.fields()}


@handles(ApiKey.HEARTBEAT, 0, 4)
@requires(Op.READ, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
def heartbeat(broker: Broker, ctx: RequestContext, request: HeartbeatRequest) -> dict[str, Any]:
    try:
        code = broker.groups.classic.heartbeat(request.group_id, request.generation_id,
                                               request.member_id, request.group_instance_id)
    except KafkaError as exc:
        code = exc.code
    return {"throttle_time": 0, "error_code": int(code)}


@handles(ApiKey.LEAVE_GROUP, 0, 5)
@requires(Op.READ, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
def leave_group(broker: Broker, ctx: RequestContext, request: LeaveGroupRequest) -> dict[str, Any]:
    version = ctx.api_version
    members: list[tuple[str, str | None, str | None]]
    if version < 3:
        members = [(request.member_id, None, None)]
    else:
        members = [(m.member_id, m.group_instance_id, m.reason)
                   for m in request.members]
    try:
        error, results = broker.groups.classic.leave_group(request.group_id, members)
    except KafkaError as exc:
        error, results = exc.code, []
    if version < 3 and not error and results:
        error = results[0].error_code
    return {"throttle_time": 0, "error_code": int(error),
            "members": [r.fields() for r in results]}


# --------------------------------------------------------------------------------------------
# OffsetCommit, OffsetFetch, OffsetDelete
# --------------------------------------------------------------------------------------------


def _topic_of(broker: Broker, t: Any, version: int, min_ids: int) -> tuple[str | None, int]:
    """(name, error) of a request topic given by name, or by id from version `min_ids`."""
    if version >= min_ids:
        topic = broker.image.topics_by_id.get(t.topic_id)
        return (topic.name, 0) if topic is not None else (None, ErrorCode.UNKNOWN_TOPIC_ID)
    return t.name, 0


@handles(ApiKey.OFFSET_COMMIT, 2, 10)
def offset_commit(broker: Broker, ctx: RequestContext,
                  request: OffsetCommitRequest) -> dict[str, Any]:
    version = ctx.api_version
    out_topics: list[dict[str, Any]] = []
    commit: list[tuple[str, list[tuple[int, int, int, str | None]]]] = []
    slots: dict[tuple[str, int], dict[str, Any]] = {}
    group_ok = allowed(broker, ctx, Op.READ, Res.GROUP, request.group_id)
    for t in request.topics:
        name, error = _topic_of(broker, t, version, 10)
        if not group_ok:
            error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif name is not None and not allowed(broker, ctx, Op.READ, Res.TOPIC, name):
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        parts: list[dict[str, Any]] = []
        out_topics.append({"name": t.name if version < 10 else name or "",
                           "topic_id": t.topic_id, "partitions": parts})
        wanted = []
        for p in t.partitions:
            slot = {"partition_index": p.partition_index, "error_code": int(error)}
            parts.append(slot)
            if error:
                continue
            assert name is not None
            if not _partition_known(broker, name, p.partition_index):
                slot["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            slots[(name, p.partition_index)] = slot
            wanted.append((p.partition_index, p.committed_offset, p.committed_leader_epoch,
                           p.committed_metadata))
        if wanted:
            assert name is not None
            commit.append((name, wanted))
    if commit:
        try:
            results = broker.groups.offsets.commit_offsets(
                request.group_id, request.generation_id_or_member_epoch, request.member_id,
                request.group_instance_id, request.retention_time, commit, version)
            for name, rows in results:
                for partition, code in rows:
                    slots[(name, partition)]["error_code"] = int(code)
        except KafkaError as exc:
            for slot in slots.values():
                slot["error_code"] = int(exc.code)
    return {"throttle_time": 0, "topics": out_topics}


def _fetch_group(broker: Broker, ctx: RequestContext, version: int, group_id: str, topics: Any,
                 member_id: str | None, member_epoch: int,
                 require_stable: bool = False) -> dict[str, Any]:
    """One group of an OffsetFetch: {group_id, topics, error_code}."""
    if not allowed(broker, ctx, Op.DESCRIBE, Res.GROUP, group_id):
        return {"group_id": group_id, "topics": [],
                "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    requested: list[tuple[str, list[int]]] | None = None
    denied: list[dict[str, Any]] = []
    unknown_ids: list[dict[str, Any]] = []
    id_of: dict[str, uuid.UUID] = {}
    if topics is not None:
        requested = []
        for t in topics:
            name, error = _topic_of(broker, t, version, 10)
            if error:
                unknown_ids.append({"name": "", "topic_id": t.topic_id, "partitions": [
                    {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                     "metadata": "", "error_code": int(error)} for p in t.partition_indexes]})
                continue
            assert name is not None
            if not allowed(broker, ctx, Op.DESCRIBE, Res.TOPIC, name):
                denied.append({"name": t.name if version < 10 else "", "topic_id": t.topic_id,
                               "partitions": [
                    {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                     "metadata": "", "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)}
                    for p in t.partition_indexes]})
                continue
            requested.append((name, list(t.partition_indexes)))
            if version >= 10:
                id_of[name] = t.topic_id
    try:
        rows = broker.groups.offsets.fetch_offsets(group_id, requested, member_id, member_epoch)
        error = 0
    except KafkaError as exc:
        error = int(exc.code)
        rows = [(name, [(p, -1, -1, "") for p in parts]) for name, parts in requested or []]
    # -- transactions: offsets of an open transaction are unstable for require_stable --
    unstable = broker.groups.offsets.unstable_offsets(group_id) \
        if require_stable and not error else set()
    # -- end transactions --
    out_topics = []
    for name, parts in rows:
        if requested is None and not allowed(broker, ctx, Op.DESCRIBE, Res.TOPIC, name):
            continue  # all of a group's offsets: the topics it may not see are left out
        topic_id = id_of.get(name)
        if version >= 10 and topic_id is None:
            info = broker.image.topics.get(name)
            if info is None:
                continue  # the topic is gone: no id to report it under
            topic_id = info.topic_id
        out_topics.append({"name": name, "topic_id": topic_id, "partitions": [
            {"partition_index": p, "committed_offset": off, "committed_leader_epoch": epoch,
             "metadata": meta, "error_code": error if version < 2 else 0}
            if (name, p) not in unstable else  # transactions: a commit is pending
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": int(ErrorCode.UNSTABLE_OFFSET_COMMIT)}
            for p, off, epoch, meta in parts]})
    return {"group_id": group_id, "topics": out_topics + unknown_ids + denied,
            "error_code": error}


@handles(ApiKey.OFFSET_FETCH, 1, 10)
def offset_fetch(broker: Broker, ctx: RequestContext,
                 request: OffsetFetchRequest) -> dict[str, Any]:
    version = ctx.api_version
    if version >= 8:
        groups = [_fetch_group(broker, ctx, version, g.group_id, g.topics, g.member_id,
                               g.member_epoch, request.require_stable)
                  for g in request.groups]
        return {"throttle_time": 0, "groups": groups}
    one = _fetch_group(broker, ctx, version, request.group_id, request.topics, None, -1,
                       request.require_stable)
    return {"throttle_time": 0, "topics": one["topics"], "error_code": one["error_code"]}


@handles(ApiKey.OFFSET_DELETE, 0, 0)
@requires(Op.DELETE, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
def offset_delete(broker: Broker, ctx: RequestContext,
                  request: OffsetDeleteRequest) -> dict[str, Any]:
    """DELETE on the group decides the request; as in Kafka, each topic also needs READ (its
    partitions answer TOPIC_AUTHORIZATION_FAILED before any existence check, which would
    reveal the topic)."""
    out_topics = []
    wanted = []
    slots: dict[tuple[str, int], dict[str, Any]] = {}
    for t in request.topics:
        parts: list[dict[str, Any]] = []
        out_topics.append({"name": t.name, "partitions": parts})
        keep = []
        readable = allowed(broker, ctx, Op.READ, Res.TOPIC, t.name)
        for p in t.partitions:
            slot = {"partition_index": p.partition_index, "error_code": 0}
            parts.append(slot)
            if not readable:
                slot["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            if not _partition_known(broker, t.name, p.partition_index):
                slot["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            slots[(t.name, p.partition_index)] = slot
            keep.append(p.partition_index)
        if keep:
            wanted.append((t.name, keep))
    try:
        results = broker.groups.offsets.delete_offsets(request.group_id, wanted)
    except KafkaError as exc:
        return {"throttle_time": 0, "error_code": int(exc.code), "topics": []}
    for name, rows in results:
        for partition, code in rows:
            slots[(name, partition)]["error_code"] = int(code)
    return {"throttle_time": 0, "error_code": 0, "topics": out_topics}


# --------------------------------------------------------------------------------------------
# ListGroups, DescribeGroups, DeleteGroups
# --------------------------------------------------------------------------------------------


@handles(ApiKey.LIST_GROUPS, 0, 5)
def list_groups(broker: Broker, ctx: RequestContext, request: ListGroupsRequest) -> dict[str, Any]:
    try:
        error, groups = broker.groups.list_groups(request.states_filter, request.types_filter)
    except KafkaError as exc:
        error, groups = exc.code, []
    if broker.authorizer is not None and not cluster_allowed(broker, ctx, Op.DESCRIBE):
        groups = [g for g in groups if allowed(broker, ctx, Op.DESCRIBE, Res.GROUP, g.group_id)]
    return {"throttle_time": 0, "error_code": int(error), "groups": [g.fields() for g in groups]}


@handles(ApiKey.DESCRIBE_GROUPS, 0, 6)
def describe_groups(broker: Broker, ctx: RequestContext,
                    request: DescribeGroupsRequest) -> dict[str, Any]:
    include = request.include_authorized_operations
    names = list(request.groups)
    visible = [g for g in names if allowed(broker, ctx, Op.DESCRIBE, Res.GROUP, g)]
    try:
        described = broker.groups.classic.describe_groups(
            visible, include_authorized_operations=include, version=ctx.api_version)
    except KafkaError as exc:
        described = [_undescribed(g, exc.code) for g in visible]
    by_name = {g.group_id: g for g in described}
    groups = []
    for g in names:
        found = by_name.get(g)
        if found is None:
            groups.append(_undescribed(g, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if include and broker.authorizer is not None:
            found = found.with_operations(authorized_operations(broker, ctx, Res.GROUP, g))
        groups.append(found)
    return {"throttle_time": 0, "groups": [g.fields() for g in groups]}


def _undescribed(group_id: str, code: int) -> ClassicGroupDescription:
    """A group the handler answers for: no state (not even "Dead"), no message."""
    return ClassicGroupDescription(group_id, UNKNOWN_AUTHORIZED_OPERATIONS, error_code=int(code),
                                   group_state="")


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(broker: Broker, ctx: RequestContext,
                        request: DeleteGroupsRequest) -> dict[str, Any]:
    names = list(request.groups_names)
    refused = [g for g in names if not allowed(broker, ctx, Op.DELETE, Res.GROUP, g)]
    names = [g for g in names if g not in refused]
    failed: list[tuple[str, int]] = []
    for g in list(names):  # an empty share group's share-partition state goes first
        group = broker.groups.group(g)
        if isinstance(group, ShareGroup) and group.is_empty:
            try:
                await delete_share_state(broker, group)
            except KafkaError as exc:
                names.remove(g)
                failed.append((g, exc.code))
    try:
        results = broker.groups.delete_groups(names) if names else []
    except KafkaError as exc:
        results = [(g, exc.code) for g in names]
    results = list(results) + failed + [
        (g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in refused]
    return {"throttle_time": 0,
            "results": [{"group_id": g, "error_code": int(code)} for g, code in results]}
