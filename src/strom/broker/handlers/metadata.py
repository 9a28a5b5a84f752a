"""Metadata: brokers, controller and topics, assembled from cached per-topic bytes.

Encoded topic entries are cached per (version, topic) and dropped whenever the metadata image
changes, so a 10,000-partition Metadata request is mostly a join of cached bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from functools import partial
from typing import Any

from strom.broker.authz import Op, Res, allowed, authorized_operations, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.topics import create_topic
from strom.broker.router import handles
from strom.cluster.controller import MAX_RECORDS_PER_USER_OP, too_many_records
from strom.cluster.image import PartitionState, TopicState
from strom.cluster.validation import check_topic_name
from strom.common.immediate import run_or_start
from strom.common.slices import Slicer
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataTopic,
    decode_metadata_request,
    encode_metadata_brokers,
    encode_metadata_response_from_parts,
    encode_metadata_topic,
)
from strom.security.acl import CLUSTER_NAME, AclOperation

log = logging.getLogger(__name__)


def partition_metadata(p: PartitionState, live: Mapping[int, Any],
                       in_offline_dirs: Callable[[PartitionState], set[int]] | None = None,
                       ) -> MetadataPartition:
    """A partition as Metadata and DescribeTopicPartitions show it: its leader only while that
    broker is live (LEADER_NOT_AVAILABLE otherwise), replicas on brokers not live, or kept in a
    log dir that is offline, as offline."""
    leads = p.leader in live
    lost = in_offline_dirs(p) if in_offline_dirs is not None else ()
    return MetadataPartition(
        ErrorCode.NONE if leads else ErrorCode.LEADER_NOT_AVAILABLE, p.partition,
        p.leader if leads else -1, p.leader_epoch, list(p.replicas), list(p.isr),
        [r for r in p.replicas if r not in live or r in lost])


def _topic_entry(broker: Broker, version: int, topic: TopicState) -> bytes:
    cache = broker.metadata_cache
    if broker.metadata_cache_version != broker.image.version:
        cache.clear()
        broker.metadata_cache_version = broker.image.version
    key = (version, topic.name)
    encoded = cache.get(key)
    if encoded is None:
        live = broker.image.brokers
        check = broker.image.offline_dirs_check()
        partitions = [partition_metadata(p, live, check)
                      for p in sorted(topic.partitions.values(), key=lambda s: s.partition)]
        entry = MetadataTopic(ErrorCode.NONE, topic.name, topic.topic_id, topic.internal,
                              partitions)
        encoded = cache[key] = encode_metadata_topic(version, entry)
    return encoded


def _error_entry(version: int, code: int, name: str | None, topic_id: Any = None) -> bytes:
    import uuid

    return encode_metadata_topic(
        version, MetadataTopic(code, name, topic_id or uuid.UUID(int=0), False, []))


@handles(ApiKey.METADATA, 0, 13, raw=True)
def metadata(broker: Broker, ctx: RequestContext,
             body: memoryview) -> bytes | Coroutine[Any, Any, bytes]:
    version = ctx.api_version
    request = decode_metadata_request(body, version)
    if broker.authorizer is not None:
        return _authorized(broker, ctx, request)
    if request.topics is None:
        return _answer(broker, ctx, version,
                       [_topic_entry(broker, version, t) for t in broker.image.topics.values()])
    wanted = list(dict.fromkeys(request.topics))  # as Kafka: each name and each id once
    if version < 12 and any(name is None for name, _ in wanted):
        # Kafka: "Topic name can not be null for version N" (topic ids arrive in v12), which
        # fails the request: every topic INVALID_REQUEST, a null name answered as ""
        return _answer(broker, ctx, version, [
            _error_entry(version, ErrorCode.INVALID_REQUEST, name or "", topic_id)
            for name, topic_id in wanted])
    auto_create = bool(broker.config.get("auto.create.topics.enable")
                       and (version < 4 or request.allow_auto_topic_creation))
    missing = [n for n, _ in wanted if n is not None and n not in broker.image.topics]
    if auto_create and missing and _over_the_cap(broker, ctx, missing):
        auto_create = False  # none is created, as in Kafka
    controller = broker.controller
    # On one broker the creation is at hand: answer once it is done (a single node's controller
    # is synchronous, and only several topics are worth slicing; a one-voter quorum commits in
    # a few milliseconds). A cluster answers LEADER_NOT_AVAILABLE meanwhile, as Kafka does.
    if auto_create and missing and controller.single_broker \
            and (len(missing) > 1 or not controller.immediate):
        return _create_then_answer(broker, ctx, version, wanted, missing)
    return _answer(broker, ctx, version, _entries(broker, version, wanted, auto_create, {}))


def _authorized(broker: Broker, ctx: RequestContext, request: MetadataRequest) -> bytes:
    """Metadata with ACLs, as Kafka answers it: asked for all topics, only those the principal
    may DESCRIBE; a named topic it may not describe is TOPIC_AUTHORIZATION_FAILED (existing or
    not); a missing one is auto-created only with CREATE on it or on the cluster; authorized
    operations (v8+) when asked for."""
    version, image = ctx.api_version, broker.image
    with_ops = version >= 8 and request.include_topic_authorized_operations

    def entry(topic: TopicState) -> bytes:
        if not with_ops:
            return _topic_entry(broker, version, topic)
        return _topic_entry_with_ops(broker, version, topic, authorized_operations(
            broker, ctx, Res.TOPIC, topic.name))

    def may(op: AclOperation, name: str) -> bool:
        return allowed(broker, ctx, op, Res.TOPIC, name)

    cluster_ops = (authorized_operations(broker, ctx, Res.CLUSTER, CLUSTER_NAME)
                   if 8 <= version <= 10 and request.include_cluster_authorized_operations
                   else None)
    if request.topics is None:
        return _answer(broker, ctx, version, [entry(t) for t in image.topics.values()
                                              if may(Op.DESCRIBE, t.name)], cluster_ops)
    auto_create = bool(broker.config.get("auto.create.topics.enable")
                       and (version < 4 or request.allow_auto_topic_creation))
    may_create_all = cluster_allowed(broker, ctx, Op.CREATE)
    parts = []
    for name, topic_id in dict.fromkeys(request.topics):
        topic = image.topics.get(name) if name is not None else (
            image.topics_by_id.get(topic_id) if topic_id is not None else None)
        label = name if name is not None else (topic.name if topic is not None else None)
        if topic is None and name is None:  # an unknown id names nothing to authorize
            parts.append(_error_entry(version, ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id))
        elif label is None or not may(Op.DESCRIBE, label):  # DESCRIBE first, as Kafka
            parts.append(_error_entry(version, ErrorCode.TOPIC_AUTHORIZATION_FAILED, name,
                                      None if name is not None else topic_id))
        elif topic is not None:
            parts.append(entry(topic))
        elif not auto_create:
            parts.append(_error_entry(version, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, label))
        elif may_create_all or may(Op.CREATE, label):
            parts += _entries(broker, version, [(name, topic_id)], True, {})
        else:  # may see it but not create it
            parts.append(_error_entry(version, ErrorCode.TOPIC_AUTHORIZATION_FAILED, label))
    return _answer(broker, ctx, version, parts, cluster_ops)


def _topic_entry_with_ops(broker: Broker, version: int, topic: TopicState, ops: int) -> bytes:
    """A topic entry with the principal's authorized operations (never cached: they differ
    between principals)."""
    live = broker.image.brokers
    check = broker.image.offline_dirs_check()
    partitions = [partition_metadata(p, live, check)
                  for p in sorted(topic.partitions.values(), key=lambda s: s.partition)]
    return encode_metadata_topic(version, MetadataTopic(
        ErrorCode.NONE, topic.name, topic.topic_id, topic.internal, partitions,
        topic_authorized_operations=ops))


def _over_the_cap(broker: Broker, ctx: RequestContext, missing: list[str]) -> bool:
    """Kafka sends a Metadata request's new topics to its controller as one CreateTopics, which
    refuses more than MAX_RECORDS_PER_USER_OP partitions in all (POLICY_VIOLATION; the topics
    are answered UNKNOWN_TOPIC_OR_PARTITION): 100,000 new names must not make 100,000 topics."""
    partitions = broker.config.get("num.partitions")
    if len(missing) * partitions <= MAX_RECORDS_PER_USER_OP:
        return False
    creatable = sum(1 for name in missing if _valid_name(name))  # Kafka sends only these
    error = too_many_records(creatable * partitions,
                             "Excessively large number of partitions per request.")
    if error is None:
        return False
    log.warning("not auto-creating the %d new topics of a Metadata request from %s (%s): %s",
                creatable, ctx.client_id, ctx.peer, error)
    return True


def _valid_name(name: str) -> bool:
    try:
        check_topic_name(name)
    except KafkaError:
        return False
    return True


async def _create_then_answer(broker: Broker, ctx: RequestContext, version: int,
                              wanted: list[Any],
                              missing: list[str]) -> bytes:
    """Auto-create several topics, yielding to the loop between them (each costs a metadata
    record and a log per partition), then answer from the image."""
    failed: dict[str, int] = {}
    slicer = Slicer()
    for name in missing:
        if name not in broker.image.topics:  # another request may have created it meanwhile
            try:
                await create_topic(broker, name, -1, -1, None, {})
            except KafkaError as exc:
                failed[name] = exc.code
        await slicer.tick()
    return _answer(broker, ctx, version, _entries(broker, version, wanted, False, failed))


def _entries(broker: Broker, version: int, wanted: list[Any], auto_create: bool,
             failed: dict[str, int]) -> list[bytes]:
    """The encoded topic entries; ``failed`` holds auto-creations that already failed."""
    image = broker.image
    parts: list[bytes] = []
    for name, topic_id in wanted:
        if name is None:
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                parts.append(_error_entry(version, ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id))
            else:
                parts.append(_topic_entry(broker, version, topic))
            continue
        topic = image.topics.get(name)
        if topic is None and auto_create:
            try:
                done, topic = run_or_start(
                    broker.controller.immediate,
                    partial(create_topic, broker, name, -1, -1, None, {}),
                    f"auto-creating topic {name}")
                if not done:  # a cluster: the client retries until the topic has leaders
                    parts.append(_error_entry(version, ErrorCode.LEADER_NOT_AVAILABLE, name))
                    continue
            except KafkaError as exc:
                failed[name] = exc.code
        if topic is None:
            code = failed.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if code != ErrorCode.INVALID_TOPIC_EXCEPTION:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            parts.append(_error_entry(version, code, name))
        else:
            parts.append(_topic_entry(broker, version, topic))
    return parts


def _answer(broker: Broker, ctx: RequestContext, version: int, parts: list[bytes],
            cluster_ops: int | None = None) -> bytes:
    image = broker.image
    listener = ctx.session.listener  # each client is told the addresses of its own listener
    brokers = [MetadataBroker(b.broker_id, *b.address(listener), b.rack)
               for b in image.brokers.values()]
    extra = {} if cluster_ops is None else {"cluster_authorized_operations": cluster_ops}
    return encode_metadata_response_from_parts(
        version, encode_metadata_brokers(version, brokers), broker.cluster_id,
        image.controller_for_clients(), parts, **extra)
