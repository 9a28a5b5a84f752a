"""A follower that stops fetching while it stays registered (frozen with SIGSTOP, its
ZooKeeper session still alive) leaves the ISR after replica.lag.time.max.ms, by its leader's
own ISR shrink, not the controller's: acks=all produce requests and coordinator replies, which
wait for the in-sync replicas, go on being answered."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.coordinator.partitioning import partition_for

from .faults import wait_for
from .test_reassignment import _create

pytestmark = pytest.mark.timeout(120)

LAG_MS = 2000
OVERRIDES = {
    # long enough that the frozen broker stays registered: only its leader can notice it
    "zookeeper.session.timeout.ms": 60_000,
    "replica.lag.time.max.ms": LAG_MS,
}


def _isr(bootstrap: str, topic: str, partition: int) -> list[int]:
    t = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    return sorted(t.partitions[partition].isrs)


def _group_led_by(bootstrap: str, broker_id: int) -> str:
    """A group id whose coordinator partition is led by `broker_id`."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(
        "__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    for _ in range(1000):
        group = f"g-{uuid.uuid4().hex[:8]}"
        if md.partitions[partition_for(group, len(md.partitions))].leader == broker_id:
            return group
    raise AssertionError(f"no group led by broker {broker_id}")


def test_frozen_follower_leaves_the_isr_and_writes_go_on(make_cluster) -> None:
    cluster = make_cluster(3, OVERRIDES)
    bootstrap = cluster.bootstrap
    topic = f"lag-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, [[1, 2, 3]])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # the group coordinator on broker 1 too, and its partition fully replicated
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:  # creates __consumer_offsets
        probe.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        probe.close()

    def offsets_whole() -> bool:
        t = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
        return len(t.partitions) > 0 and all(len(p.isrs) == 3 for p in t.partitions.values())

    wait_for(offsets_whole, 30, "full ISRs of __consumer_offsets")
    group = _group_led_by(bootstrap, 1)
    producer = Producer({"bootstrap.servers": cluster.broker(1).bootstrap, "acks": "all",
                         "message.timeout.ms": 30_000})
    delivered: list[object] = []

    def write(value: bytes) -> None:
        delivered.clear()
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0
        assert delivered == [None], delivered

    write(b"before")

    frozen = cluster.broker(3)
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        write(b"while frozen")
        took = time.monotonic() - started
        assert _isr(cluster.broker(1).bootstrap, topic, 0) == [1, 2]
        # answered once broker 3 left the ISR: after the lag window, well before any timeout
        assert took < LAG_MS / 1000 * 3 + 5, took
        c = Consumer({"bootstrap.servers": cluster.broker(1).bootstrap, "group.id": group})
        try:
            c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
            assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 1
        finally:
            c.close()
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    wait_for(lambda: _isr(bootstrap, topic, 0) == [1, 2, 3], 30, "broker 3 back in the ISR")
