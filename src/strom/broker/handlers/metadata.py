"""Metadata: brokers, controller and topics, assembled from cached per-topic bytes.

Encoded topic entries are cached per (version, topic) and dropped whenever the metadata image
changes, so a 10,000-partition Metadata request is mostly a join of cached bytes.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.topics import create_topic
from strom.broker.router import handles
from strom.cluster.image import TopicState
from strom.common.immediate import run_or_start
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataTopic,
    decode_metadata_request,
    encode_metadata_brokers,
    encode_metadata_response_from_parts,
    encode_metadata_topic,
)

log = logging.getLogger(__name__)


def _topic_entry(broker: Broker, version: int, topic: TopicState) -> bytes:
    cache = broker.metadata_cache
    if broker.metadata_cache_version != broker.image.version:
        cache.clear()
        broker.metadata_cache_version = broker.image.version
    key = (version, topic.name)
    encoded = cache.get(key)
    if encoded is None:
        live = broker.image.brokers
        partitions = [
            MetadataPartition(
                ErrorCode.NONE if p.leader in live else ErrorCode.LEADER_NOT_AVAILABLE,
                p.partition, p.leader if p.leader in live else -1, p.leader_epoch,
                list(p.replicas), list(p.isr), [r for r in p.replicas if r not in live])
            for p in sorted(topic.partitions.values(), key=lambda s: s.partition)
        ]
        entry = MetadataTopic(ErrorCode.NONE, topic.name, topic.topic_id, topic.internal,
                              partitions)
        encoded = cache[key] = encode_metadata_topic(version, entry)
    return encoded


def _error_entry(version: int, code: int, name: str | None, topic_id: Any = None) -> bytes:
    import uuid

    return encode_metadata_topic(
        version, MetadataTopic(code, name, topic_id or uuid.UUID(int=0), False, []))


@handles(ApiKey.METADATA, 0, 13, raw=True)
def metadata(broker: Broker, ctx: RequestContext, body: memoryview) -> bytes:
    version = ctx.api_version
    request = decode_metadata_request(body, version)
    image = broker.image
    parts: list[bytes] = []
    if request.topics is None:
        for topic in image.topics.values():
            parts.append(_topic_entry(broker, version, topic))
    else:
        auto_create = (broker.config.get("auto.create.topics.enable")
                       and (version < 4 or request.allow_auto_topic_creation))
        for name, topic_id in request.topics:
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
                        lambda name=name: create_topic(broker, name, -1, -1, None, {}),
                        f"auto-creating topic {name}")
                    if not done:  # a cluster: the client retries until the topic has leaders
                        parts.append(_error_entry(version, ErrorCode.LEADER_NOT_AVAILABLE, name))
                        continue
                except KafkaError as exc:
                    code = (exc.code if exc.code == ErrorCode.INVALID_TOPIC_EXCEPTION
                            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    parts.append(_error_entry(version, code, name))
                    continue
            if topic is None:
                parts.append(_error_entry(version, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name))
            else:
                parts.append(_topic_entry(broker, version, topic))
    brokers = [MetadataBroker(b.broker_id, b.host, b.port, b.rack) for b in image.brokers.values()]
    return encode_metadata_response_from_parts(
        version, encode_metadata_brokers(version, brokers), broker.cluster_id,
        image.controller_id, parts)
