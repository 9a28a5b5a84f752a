"""Consumer lag in a cluster: the group's coordinator reports every partition the group
committed, also those it holds no replica of (their high watermarks asked of their leaders)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ..metrics.test_metrics_endpoint import scrape
from .faults import wait_for
from .test_reassignment import _create

pytestmark = pytest.mark.timeout(180)


def test_lag_covers_partitions_on_other_brokers(make_cluster) -> None:
    cluster = make_cluster(3)
    topic = f"lag-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, [[1], [2], [3]])  # one partition on each broker, no replicas
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for partition in range(3):
        for _ in range(10):
            p.produce(topic, b"v", partition=partition)
    assert p.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5),
                          TopicPartition(topic, 2, 7)], asynchronous=False)
    finally:
        c.close()

    def lags() -> dict[int, float]:
        found: dict[int, float] = {}
        for broker in cluster.brokers:
            for (name, labels), value in scrape(broker.metrics_url).items():
                labels = dict(labels)
                if name == "kafka_consumergroup_lag" and labels.get("consumergroup") == group:
                    found[int(labels["partition"])] = value
        return found

    wait_for(lambda: lags() == {0: 7, 1: 5, 2: 3}, 30, "the lag of every partition")
