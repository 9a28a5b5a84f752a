"""The Jepsen workload's transactional client settings against a known librdkafka hang.

librdkafka (2.16, confluentinc/librdkafka#5511 with #5456) can block
`send_offsets_to_transaction` far past its timeout: when the group coordinator it cached is a
broker that has since left the cluster's metadata, the client drops that broker's handle but
keeps it cached as coordinator and waits for a broker state change that never comes, so it
never asks FindCoordinator again. Every broker answers all the while; only a state change of
one of the client's own connections wakes it. The workload's producers close idle connections
(`connections.max.idle.ms`), which makes such a change happen within seconds.

This test builds that situation on purpose and checks the call returns in time.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.coordinator.partitioning import partition_for

from ...jepsen.workload import OP_TIMEOUT, producer_config
from .faults import wait_for
from .test_reassignment import _create

pytestmark = pytest.mark.timeout(150)


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: s.leader for p, s in md.topics[topic].partitions.items()}


def _pick(prefix: str, leaders: dict[int, int], want) -> str:
    for _ in range(10_000):
        key = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if want(leaders[partition_for(key, len(leaders))]):
            return key
    raise AssertionError(f"no key for {prefix}")


def _transaction(p: Producer, topic: str, group_md=None, offsets=None) -> None:
    p.begin_transaction()
    for partition in range(3):
        p.produce(topic, b"v", partition=partition)
    if offsets is not None:
        p.send_offsets_to_transaction(offsets, group_md, OP_TIMEOUT)
    p.commit_transaction(OP_TIMEOUT)


def test_send_offsets_returns_after_the_cached_group_coordinator_left(make_cluster) -> None:
    cluster = make_cluster(3, {"zookeeper.session.timeout.ms": 2000})
    out = f"out-{uuid.uuid4().hex[:6]}"
    _create(cluster, out, [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    # both state topics exist, fully replicated
    probe = Producer(producer_config(cluster.bootstrap, "probe"))
    probe.init_transactions(30)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe"})
    _transaction(probe, out, c.consumer_group_metadata(), [TopicPartition(out, 0, 1)])
    offsets_leaders = _leaders(cluster.bootstrap, "__consumer_offsets")
    txn_leaders = _leaders(cluster.bootstrap, "__transaction_state")
    group = _pick("g", offsets_leaders, lambda leader: leader == 1)  # coordinator: broker 1
    tid = _pick("t", txn_leaders, lambda leader: leader != 1)
    c.close()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    group_md = consumer.consumer_group_metadata()

    p = Producer(producer_config(cluster.bootstrap, tid))
    p.init_transactions(30)
    _transaction(p, out, group_md, [TopicPartition(out, 0, 1)])  # caches broker 1 as coordinator

    cluster.broker(1).kill()
    # broker 1 leaves the metadata: the client drops its handle (the cache keeps it)
    wait_for(lambda: 1 not in p.list_topics(timeout=5).brokers, 30, "broker 1 gone")
    wait_for(lambda: 1 not in _leaders(cluster.bootstrap, out).values(), 30, "leaders moved")
    _transaction(p, out)  # connections to the new leaders made: nothing left to change state

    done = threading.Event()
    failed: list[KafkaException] = []

    def send_offsets() -> None:
        try:
            _transaction(p, out, group_md, [TopicPartition(out, 0, 2)])
        except KafkaException as e:  # judged below
            failed.append(e)
        finally:
            done.set()

    threading.Thread(target=send_offsets, daemon=True).start()
    # the workload's stuck-client limit is 60 s; the idle close comes within 10 s
    assert done.wait(30), "send_offsets_to_transaction still blocked after 30 s"
    if failed:  # the connection it was woken by may fail the attempt: abort and go again
        error = failed[0].args[0]
        assert not error.fatal(), error
        if error.txn_requires_abort():
            p.abort_transaction(OP_TIMEOUT)
        _transaction(p, out, group_md, [TopicPartition(out, 0, 2)])
    committed = consumer.committed([TopicPartition(out, 0)], timeout=10)
    assert committed[0].offset == 2
    consumer.close()
