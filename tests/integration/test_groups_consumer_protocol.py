"""Consumer groups with the KIP-848 consumer protocol (confluent-kafka, group.protocol=consumer).

The broker assigns; these tests check what clients see: disjoint, complete splits at all times,
takeover after a leave or a killed process (group.consumer.session.timeout.ms), commits that
resume, a broker restart that members ride through, new partitions and regex subscriptions.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewPartitions

from . import clients as kc
from .test_groups import (
    GROUP_OVERRIDES,
    ChildConsumer,
    assert_disjoint,
    committed,
    consume_values,
    owned,
    produce_values,
    settle,
    wait_until,
)

pytestmark = pytest.mark.timeout(90)

SESSION_MS = int(GROUP_OVERRIDES["group.consumer.session.timeout.ms"])


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker(GROUP_OVERRIDES)


def new_consumer(bootstrap: str, group: str, **conf: object) -> Consumer:
    base = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(base)


def test_three_consumers_split_and_take_over(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("kip848")
    kc.create_topic(bs, topic, 6)
    group = unique_topic("g")
    consumers = [new_consumer(bs, group) for _ in range(3)]
    try:
        consumers[0].subscribe([topic])
        assert settle(consumers[:1], topic, 6) == [set(range(6))]
        consumers[1].subscribe([topic])
        settle(consumers[:2], topic, 6, sizes=[3, 3])
        consumers[2].subscribe([topic])
        settle(consumers, topic, 6, sizes=[2, 2, 2])
        consumers[2].close()
        settle(consumers[:2], topic, 6, sizes=[3, 3])
    finally:
        for c in consumers:
            c.close()


def test_killed_member_is_fenced_after_the_session_timeout(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("kill848")
    kc.create_topic(bs, topic, 4)
    group = unique_topic("g")
    child = ChildConsumer({"bootstrap.servers": bs, "group.id": group,
                           "group.protocol": "consumer"}, topic)
    survivor = new_consumer(bs, group)
    try:
        wait_until(lambda: bool(child.assignment), 30, "the child process to join")
        survivor.subscribe([topic])
        deadline = time.monotonic() + 40
        while not (owned(survivor, topic) and child.assignment
                   and owned(survivor, topic) | child.assignment == set(range(4))):
            assert time.monotonic() < deadline, (owned(survivor, topic), child.assignment)
            survivor.poll(0.05)
        killed_at = time.monotonic()
        child.kill()
        while owned(survivor, topic) != set(range(4)):
            assert time.monotonic() < killed_at + SESSION_MS / 1000 + 10
            survivor.poll(0.1)
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1
    finally:
        child.kill()
        survivor.close()


def test_commit_resume_and_broker_restart(make_broker, unique_topic):
    broker = make_broker(GROUP_OVERRIDES)
    bs = broker.bootstrap
    topic = unique_topic("durable848")
    kc.create_topic(bs, topic, 2)
    group = unique_topic("g")
    produce_values(bs, topic, [b"x%d" % i for i in range(20)], 2)
    c = new_consumer(bs, group)
    c.subscribe([topic])
    first = consume_values(c, 20)
    c.commit(asynchronous=False)
    assert committed(bs, group, topic, 2) == [10, 10]
    broker.restart(kill=True)  # the member keeps running through a broker crash
    produce_values(bs, topic, [b"y%d" % i for i in range(6)], 2)
    later = consume_values(c, 6, timeout=60)
    assert sorted(v for _, _, v in later) == sorted(b"y%d" % i for i in range(6))
    c.commit(asynchronous=False)
    c.close()
    assert committed(bs, group, topic, 2) == [13, 13]
    again = new_consumer(bs, group)
    again.subscribe([topic])
    produce_values(bs, topic, [b"z0", b"z1"], 2)
    assert sorted(v for _, _, v in consume_values(again, 2)) == [b"z0", b"z1"]
    again.close()
    assert len(first) == 20


def test_new_partitions_are_assigned(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("grow")
    kc.create_topic(bs, topic, 2)
    group = unique_topic("g")
    consumers = [new_consumer(bs, group) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])
        settle(consumers, topic, 2)
        admin = kc.admin(bs)  # keep the handle alive until the future resolves
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(20)
        shares = settle(consumers, topic, 4)
        assert sorted(len(s) for s in shares) == [2, 2]
    finally:
        for c in consumers:
            c.close()


def test_regex_subscription_follows_new_topics(broker, unique_topic):
    bs = broker.bootstrap
    prefix = unique_topic("re").replace(".", "_")
    first, second = f"{prefix}-a", f"{prefix}-b"
    kc.create_topic(bs, first, 2)
    kc.create_topic(bs, unique_topic("unrelated"), 1)
    c = new_consumer(bs, unique_topic("g"))
    try:
        c.subscribe([f"^{prefix}-.*"])
        deadline = time.monotonic() + 40
        while {(tp.topic, tp.partition) for tp in c.assignment()} != {(first, 0), (first, 1)}:
            assert time.monotonic() < deadline, c.assignment()
            c.poll(0.1)
        kc.create_topic(bs, second, 1)
        while {(tp.topic, tp.partition) for tp in c.assignment()} != {
                (first, 0), (first, 1), (second, 0)}:
            assert time.monotonic() < deadline, c.assignment()
            c.poll(0.1)
        produce_values(bs, second, [b"found"])
        assert [v for _, _, v in consume_values(c, 1)] == [b"found"]
        assert_disjoint([{p.partition for p in c.assignment() if p.topic == first}])
        assert c.committed([TopicPartition(second, 0)], timeout=10)[0].offset < 0
    finally:
        c.close()
