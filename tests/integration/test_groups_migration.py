"""KIP-848 online migration with real clients: a live group rolled from the classic protocol to
`group.protocol=consumer` member by member, and back (confluent-kafka, kafka-python).

While a producer keeps writing, members are replaced one at a time (a rolling restart): every
record is consumed at least once, no partition is ever owned by two members, the committed
offsets never go back (nobody restarts from the beginning), and the group's type follows:
classic, then consumer once the first consumer-protocol member joins, classic again when the
last one leaves.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from . import clients as kc
from .test_groups import GROUP_OVERRIDES, SESSION_MS, wait_until

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker(GROUP_OVERRIDES)


class Member:
    """A consumer of the group that records what it reads and commits after each poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str,
                 seen: set[bytes]) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000}
        if protocol == "classic":
            conf.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
                         "partition.assignment.strategy": "range"})
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.topic, self.protocol, self.seen = topic, protocol, seen

    def poll(self) -> None:
        msgs = self.consumer.consume(100, 0.05)
        for m in msgs:
            if m.error() is None:
                self.seen.add(m.value())
        if msgs:
            # a refused commit (a rebalance moved on) only means the next owner re-reads
            with contextlib.suppress(KafkaException):
                self.consumer.commit(asynchronous=False)

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment() if tp.topic == self.topic}

    def close(self) -> None:
        self.consumer.close()


class Producing:
    """A background producer writing distinct values round-robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = kc.producer(bootstrap)
        self.topic = topic
        self.sent: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            value = b"v%06d" % i
            self.producer.produce(self.topic, value=value, partition=i % PARTITIONS)
            self.sent.append(value)
            i += 1
            self.producer.poll(0)
            self.stop.wait(0.01)  # about 100 records a second

    def finish(self) -> list[bytes]:
        self.stop.set()
        self.thread.join(10)
        assert self.producer.flush(30) == 0
        return self.sent


def group_type(admin: AdminClient, group: str) -> ConsumerGroupType:
    listed = admin.list_consumer_groups().result(10).valid
    return next(g.type for g in listed if g.group_id == group)


def committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p)
                                               for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([req])[group].result(10)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


class Group:
    """The live members; every step polls them all and checks that no partition is owned
    twice at any moment."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.members: list[Member] = []
        self.seen: set[bytes] = set()

    def add(self, protocol: str) -> None:
        self.members.append(Member(self.bootstrap, self.group, self.topic, protocol, self.seen))

    def remove(self, protocol: str) -> None:
        member = next(m for m in self.members if m.protocol == protocol)
        self.members.remove(member)
        member.close()

    def poll_all(self) -> list[set[int]]:
        shares = []
        for m in self.members:
            m.poll()
            shares.append(m.owned())
        owned: set[int] = set()
        for s in shares:
            assert not (s & owned), f"a partition is owned twice: {shares}"
            owned |= s
        return shares

    def settle(self, timeout: float = 60.0) -> list[set[int]]:
        """Poll until every member owns a share and all partitions are owned once."""
        deadline = time.monotonic() + timeout
        while True:
            shares = self.poll_all()
            if all(shares) and sum(len(s) for s in shares) == PARTITIONS:
                return shares
            assert time.monotonic() < deadline, f"the group did not settle: {shares}"

    def close(self) -> None:
        for m in self.members:
            m.close()


def test_rolling_upgrade_to_the_consumer_protocol_and_back(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("migrate")
    kc.create_topic(bs, topic, PARTITIONS)
    group_id = unique_topic("g")
    admin = AdminClient({"bootstrap.servers": bs})
    group = Group(bs, group_id, topic)
    producing = Producing(bs, topic)
    offsets: dict[int, int] = {}

    def offsets_kept() -> None:
        now = committed(admin, group_id, topic)
        for p, off in offsets.items():
            assert now.get(p, -1) >= off, f"committed offsets went back: {offsets} -> {now}"
        offsets.update(now)

    try:
        for _ in range(3):
            group.add("classic")
        group.settle()
        assert group_type(admin, group_id) == ConsumerGroupType.CLASSIC
        offsets_kept()
        # roll forward: each classic member is replaced by a consumer-protocol member
        for step in range(3):
            group.remove("classic")
            group.add("consumer")
            group.settle()
            assert group_type(admin, group_id) == ConsumerGroupType.CONSUMER, step
            offsets_kept()
        described = admin.describe_consumer_groups([group_id])[group_id].result(10)
        assert described.type == ConsumerGroupType.CONSUMER and len(described.members) == 3
        # and back: the group becomes classic when the last consumer-protocol member leaves
        for step in range(3):
            group.remove("consumer")
            group.add("classic")
            group.settle()
            expected = ConsumerGroupType.CLASSIC if step == 2 else ConsumerGroupType.CONSUMER
            assert group_type(admin, group_id) == expected, step
            offsets_kept()
        sent = set(producing.finish())
        wait_until(lambda: (group.poll_all(), sent <= group.seen)[1], 60,
                   "every produced record to be consumed")
    finally:
        producing.stop.set()
        group.close()


def test_kafka_python_classic_members_ride_through_the_upgrade(broker, unique_topic):
    """kafka-python (classic only) keeps consuming while a confluent-kafka consumer-protocol
    member joins its group and leaves again."""
    from kafka import KafkaConsumer

    bs = broker.bootstrap
    topic = unique_topic("kpmigrate")
    kc.create_topic(bs, topic, 4)
    group_id = unique_topic("g")
    admin = AdminClient({"bootstrap.servers": bs})
    old = KafkaConsumer(bootstrap_servers=bs, group_id=group_id,
                        auto_offset_reset="earliest", enable_auto_commit=False,
                        session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                        consumer_timeout_ms=100)
    new: Consumer | None = None
    try:
        # Subscribe once kafka-python knows the topic: a leader without its metadata assigns
        # nothing and rejoins at once, and kafka-python 3.0.12 then sometimes never restarts
        # its heartbeat thread (the member times out and is never replaced; seen against
        # Kafka 4.4 too).
        wait_until(lambda: old.partitions_for_topic(topic), 30, "kafka-python to see the topic")
        old.subscribe([topic])
        wait_until(lambda: (old.poll(50), len(old.assignment()) == 4)[1], 60,
                   "the kafka-python member to own every partition")
        new = Consumer({"bootstrap.servers": bs, "group.id": group_id,
                        "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        new.subscribe([topic])

        def split() -> bool:
            old.poll(50)
            new.poll(0.05)
            a = {tp.partition for tp in old.assignment()}
            b = {tp.partition for tp in new.assignment()}
            assert not (a & b), f"a partition is owned twice: {a} {b}"
            return len(a) == 2 and len(b) == 2

        wait_until(split, 60, "the two members to split the partitions")
        assert group_type(admin, group_id) == ConsumerGroupType.CONSUMER
        new.close()
        new = None
        wait_until(lambda: (old.poll(50), len(old.assignment()) == 4)[1], 60,
                   "the kafka-python member to take everything back")
        assert group_type(admin, group_id) == ConsumerGroupType.CLASSIC
    finally:
        if new is not None:
            new.close()
        old.close()
