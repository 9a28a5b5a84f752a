"""Broker state read with the Python client, to check what a Kafka tool did (not what it printed)."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import ConfigResource

from .. import clients as kc


def configs(bootstrap: str, kind: ConfigResource.Type, name: str) -> dict[str, str | None]:
    """Every config of a topic or broker (``name`` "" for the brokers' defaults) with its value."""
    a = kc.admin(bootstrap)  # keep the handle alive until the future resolves
    res = ConfigResource(kind, name)
    entries = a.describe_configs([res], request_timeout=20)[res].result(30)
    return {k: e.value for k, e in entries.items()}


def topic_configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    return configs(bootstrap, ConfigResource.Type.TOPIC, topic)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets of partitions 0..n-1 (-1001 where none)."""
    a = kc.admin(bootstrap)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = a.list_consumer_group_offsets([req], request_timeout=20)[group].result(30)
    return [tp.offset for tp in sorted(res.topic_partitions, key=lambda tp: tp.partition)]


def group_ids(bootstrap: str) -> set[str]:
    a = kc.admin(bootstrap)
    listed = a.list_consumer_groups(request_timeout=20).result(30)
    return {g.group_id for g in listed.valid}
