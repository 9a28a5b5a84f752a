"""CreateTopics, DeleteTopics and CreatePartitions."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from strom.broker.authz import Op, Res, allowed, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.quotas.clients import MutationQuota
from strom.broker.request_types import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from strom.broker.router import handles
from strom.cluster.controller import MAX_RECORDS_PER_USER_OP, too_many_records
from strom.cluster.image import TopicState
from strom.common.slices import Slicer
from strom.config.defs import ConfigError
from strom.config.topic import TOPIC_CONFIGS, validate_topic_configs
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.primitives import ZERO_UUID


async def create_topic(broker: Broker, name: str, num_partitions: int, replication_factor: int,
                       assignments: dict[int, list[int]] | None,
                       configs: Mapping[str, str | None], *,
                       validate_only: bool = False) -> TopicState:
    """Shared by CreateTopics and auto-creation: defaults, config validation, then the controller."""
    if num_partitions == -1 and not assignments:
        num_partitions = broker.config.get("num.partitions")
    if replication_factor == -1 and not assignments:
        replication_factor = broker.config.get("default.replication.factor")
    try:
        validate_topic_configs(configs)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    valid = {k: v for k, v in configs.items() if v is not None}  # (validation refuses nulls)
    return await broker.controller.create_topic(name, num_partitions, replication_factor,
                                                assignments, valid, validate_only=validate_only)


def _has_leaders(name: str, topic_id: Any) -> Any:
    """Predicate: the topic is in the image with a leader for every partition."""
    def ready(image: Any) -> bool:
        t = image.topics.get(name)
        return (t is not None and t.topic_id == topic_id and bool(t.partitions)
                and all(p.leader >= 0 for p in t.partitions.values()))

    return ready


def describe_topic_configs(broker: Broker, topic: TopicState) -> list[dict[str, Any]]:
    out = []
    for name in TOPIC_CONFIGS.names():
        d = TOPIC_CONFIGS[name]
        resolved = broker.partitions.resolve(topic, name)
        out.append({"name": name, "value": d.render(resolved.value), "read_only": False,
                    "config_source": int(resolved.source), "is_sensitive": d.sensitive})
    return out


def _requested_partitions(topics: Any, default_partitions: int) -> int:
    """Partitions a CreateTopics request would create, counted as Kafka's controller counts
    them: the default for -1, explicit counts, or the number of explicit assignments."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += default_partitions
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(broker: Broker, ctx: RequestContext,
                        request: CreateTopicsRequest) -> dict[str, Any]:
    counts = Counter(t.name for t in request.topics)
    # a request over the cap fails as a whole, as in Kafka
    too_large = too_many_records(
        _requested_partitions(request.topics, broker.config.get("num.partitions")),
        "Excessively large number of partitions per request.")
    quota = _mutation_quota(broker, ctx, strict=ctx.api_version >= 6)
    default_partitions = broker.config.get("num.partitions")
    results = []
    for t in request.topics:
        result: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None,
                                  "num_partitions": -1, "replication_factor": -1}
        try:
            if too_large is not None:
                raise too_large
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Create topics request from client {ctx.client_id} contains "
                                 f"multiple entries for the topic {t.name}")
            if not (cluster_allowed(broker, ctx, Op.CREATE)
                    or allowed(broker, ctx, Op.CREATE, Res.TOPIC, t.name)):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
            configs = {c.name: c.value for c in t.configs}
            if not request.validate_only:
                quota.take(len(assignments) if assignments else
                           t.num_partitions if t.num_partitions > 0 else default_partitions)
            topic = await create_topic(broker, t.name, t.num_partitions, t.replication_factor,
                                       assignments, configs, validate_only=request.validate_only)
            if not request.validate_only and not broker.controller.immediate:
                # as Kafka: answer once the topic has its leaders (or at the request's timeout)
                await broker.controller.wait_until(_has_leaders(t.name, topic.topic_id),
                                                   max(request.timeout, 0) / 1000)
            if not request.validate_only:  # answer once the local logs exist (made in slices)
                await broker.partitions.settled()
            first = next(iter(topic.partitions.values()))
            result.update(topic_id=topic.topic_id, num_partitions=len(topic.partitions),
                          replication_factor=len(first.replicas))
            if allowed(broker, ctx, Op.DESCRIBE_CONFIGS, Res.TOPIC, t.name):
                result.update(configs=describe_topic_configs(broker, topic))
            else:
                result.update(topic_config_error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        except KafkaError as exc:
            result.update(error_code=int(exc.code), error_message=exc.message)
        results.append(result)
    ctx.throttle.add(quota.throttle_ms)
    return {"throttle_time": quota.throttle_ms, "topics": results}


def _mutation_quota(broker: Broker, ctx: RequestContext, *, strict: bool) -> MutationQuota:
    return broker.quotas.mutation(ctx.principal.name, ctx.client_id or "", strict=strict)


_Entry = tuple[str | None, uuid.UUID]  # a DeleteTopics entry: (name, id), the zero id if none


@handles(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(broker: Broker, ctx: RequestContext,
                        request: DeleteTopicsRequest) -> dict[str, Any]:
    image = broker.image
    responses = []
    # v6 names each topic by name or id; v1-5 by name
    entries: list[_Entry] = ([(t.name, t.topic_id) for t in request.topics]
                             if ctx.api_version >= 6
                             else [(n, ZERO_UUID) for n in request.topic_names])
    duplicates = _duplicate_keys(entries)
    quota = _mutation_quota(broker, ctx, strict=ctx.api_version >= 5)
    deleted = 0
    slicer = Slicer()
    for entry in entries:
        name, topic_id = entry
        response: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0,
                                    "error_message": None}
        key = _delete_key(entry)
        if key in duplicates:  # as Kafka: one INVALID_REQUEST per duplicated name or id
            if duplicates[key]:
                duplicates[key] = False
                response.update(error_code=ErrorCode.INVALID_REQUEST, error_message=(
                    "Duplicate topic id." if key[0] == "id" else "Duplicate topic name."))
                responses.append(response)
            continue
        if topic_id.int != 0:
            topic = image.topics_by_id.get(topic_id)
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = image.topics.get(name) if name else None
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not broker.config.get("delete.topic.enable"):
            response.update(error_code=ErrorCode.TOPIC_DELETION_DISABLED,
                            error_message="Topic deletion is disabled.")
        elif topic is not None and not (
                allowed(broker, ctx, Op.DELETE, Res.TOPIC, topic.name)
                or cluster_allowed(broker, ctx, Op.DELETE)):
            may_see = allowed(broker, ctx, Op.DESCRIBE, Res.TOPIC, topic.name)
            response.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            error_message="Authorization failed.",
                            name=topic.name if may_see or topic_id.int == 0 else None)
        elif topic is None and name and not allowed(broker, ctx, Op.DESCRIBE, Res.TOPIC, name):
            response.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            error_message="Authorization failed.")
        elif topic is None:
            response.update(error_code=missing,
                            error_message="This server does not host this topic.")
        elif deleted >= MAX_RECORDS_PER_USER_OP:  # as Kafka's controller: the rest fail
            response.update(name=topic.name, topic_id=topic.topic_id,
                            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                            error_message="Unable to delete more than "
                                          f"{MAX_RECORDS_PER_USER_OP} topics in one request.")
        else:
            response.update(name=topic.name, topic_id=topic.topic_id)
            try:
                quota.take(len(topic.partitions))
            except KafkaError as exc:
                response.update(error_code=int(exc.code), error_message=exc.message)
                responses.append(response)
                continue
            await broker.controller.delete_topic(topic)
            deleted += 1
            await slicer.tick()  # a deletion costs a metadata record and the logs' removal
        responses.append(response)
    ctx.throttle.add(quota.throttle_ms)
    return {"throttle_time": quota.throttle_ms, "responses": responses}


def _delete_key(entry: _Entry) -> tuple[str, str | uuid.UUID | None]:
    """How a DeleteTopics entry names its topic: by id when it gives one, else by name."""
    name, topic_id = entry
    if topic_id.int != 0:
        return ("id", topic_id)
    return ("name", name)


def _duplicate_keys(entries: list[_Entry]) -> dict[tuple[str, Any], bool]:
    """Names and ids given more than once (Kafka deletes none of them), each mapped to
    whether its one answer is still to be sent."""
    counts = Counter(_delete_key(e) for e in entries)
    return {key: True for key, n in counts.items() if n > 1 and key[1] is not None}


def _added_partitions(image: Any, topics: Any) -> int:
    """Partitions a CreatePartitions request would add (one metadata record each)."""
    added = 0
    for t in topics:
        topic = image.topics.get(t.name)
        if topic is not None:
            added += max(0, t.count - len(topic.partitions))
    return added


def _check_increase(name: str, count: int, total: int) -> None:
    """Kafka 4.4's controller texts, which kafka-topics --alter prints as they come."""
    if total < count:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {count} "
                                                       f"partition(s); {total} would not be an increase.")
    if total == count:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {count} partition(s).")


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(broker: Broker, ctx: RequestContext,
                            request: CreatePartitionsRequest) -> dict[str, Any]:
    counts = Counter(t.name for t in request.topics)
    # a request over the cap fails as a whole, as in Kafka
    too_large = too_many_records(_added_partitions(broker.image, request.topics),
                                 "Unable to perform excessively large batch operation.")
    quota = _mutation_quota(broker, ctx, strict=ctx.api_version >= 3)
    results = []
    for t in request.topics:
        result: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            if too_large is not None:
                raise too_large
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate topic {t.name}")
            if not allowed(broker, ctx, Op.ALTER, Res.TOPIC, t.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            topic = broker.image.topics.get(t.name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{t.name}' does not exist.")
            _check_increase(t.name, len(topic.partitions), t.count)
            if not request.validate_only:
                quota.take(t.count - len(topic.partitions))
            assignments = ([list(a.broker_ids) for a in t.assignments]
                           if t.assignments is not None else None)
            await broker.controller.create_partitions(topic, t.count, assignments,
                                                validate_only=request.validate_only)
            if not request.validate_only:  # answer once the local logs exist (made in slices)
                await broker.partitions.settled()
        except KafkaError as exc:
            result.update(error_code=int(exc.code), error_message=exc.message)
        results.append(result)
    ctx.throttle.add(quota.throttle_ms)
    return {"throttle_time": quota.throttle_ms, "results": results}
