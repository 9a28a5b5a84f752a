"""Share groups and transactions (share.isolation.level), and the in-flight record cap
(share.partition.max.record.locks), with confluent-kafka's ShareConsumer and a transactional
confluent-kafka producer against a real broker.

read_committed, as Kafka applies it: an open transaction holds delivery at the partition's last
stable offset; the records of an aborted transaction never reach a consumer (they are archived:
the share-partition start offset moves past them); transaction markers are never delivered.
read_uncommitted hands out everything up to the high watermark, aborted records included.

The cap: a poll never acquires more records of a partition than the cap, even when one log
batch holds more (confluent-kafka-python's own integration test of the cap, re-created here).

Strom by default; ``STROM_SHARE_BROKER=kafka`` runs the same against Apache Kafka 4.4.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from .conftest import ShareAdmin, ShareBroker, broker_kind, strom_share_broker, unique

pytestmark = pytest.mark.timeout(240)

WAIT = 60.0


@pytest.fixture(scope="module")
def broker(request, tmp_path_factory) -> Iterator[ShareBroker]:
    if broker_kind() == "kafka":
        yield request.getfixturevalue("share_broker")
        return
    with strom_share_broker(tmp_path_factory, "share-txn") as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker: ShareBroker) -> ShareAdmin:
    return ShareAdmin(broker.bootstrap)


@pytest.fixture
def make(broker: ShareBroker) -> Iterator[Callable[..., object]]:
    """``make("consumer", group, topic, **config)`` or ``make("txn")``: closed after the test."""
    consumers: list[ShareConsumer] = []
    producers: list[Producer] = []

    def build(kind: str, *args: str, **config: object):
        if kind == "txn":
            p = Producer({"bootstrap.servers": broker.bootstrap,
                          "transactional.id": unique("txn"), "linger.ms": 5})
            p.init_transactions(30)
            producers.append(p)
            return p
        group, topic = args
        c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                           **{k.replace("_", "."): v for k, v in config.items()}})
        c.subscribe([topic])
        consumers.append(c)
        return c

    yield build
    for c in consumers:
        with contextlib.suppress(Exception):
            c.close()
    for p in producers:
        with contextlib.suppress(Exception):
            p.abort_transaction(10)


def send(producer: Producer, topic: str, values: list[str]) -> None:
    for v in values:
        producer.produce(topic, value=v.encode())
    assert producer.flush(30) == 0


def poll_values(consumer: ShareConsumer, until: Callable[[list[tuple[int, str]]], bool],
                seen: list[tuple[int, str]], timeout: float = WAIT) -> None:
    """Poll (implicit acknowledgement) into ``seen`` as (offset, value) until ``until(seen)``."""
    deadline = time.monotonic() + timeout
    while not until(seen):
        assert time.monotonic() < deadline, f"gave up after {timeout:.0f} s with {seen}"
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            seen.append((m.offset(), m.value().decode()))


def values_of(seen: list[tuple[int, str]]) -> list[str]:
    return [v for _, v in seen]


def test_read_committed_holds_at_the_lso_and_never_delivers_aborted_records(admin, make):
    topic = admin.create_topic(unique("share-txn"))
    committed_group, uncommitted_group = unique("rc"), unique("ru")
    admin.set_group_configs(committed_group, {"share.auto.offset.reset": "earliest",
                                              "share.isolation.level": "read_committed"})
    admin.set_group_configs(uncommitted_group, {"share.auto.offset.reset": "earliest"})

    admin.produce(topic, ["p1"])
    committer, aborter, holder = make("txn"), make("txn"), make("txn")
    committer.begin_transaction()
    send(committer, topic, ["c1", "c2"])
    committer.commit_transaction(30)
    aborter.begin_transaction()
    send(aborter, topic, ["a1", "a2"])
    aborter.abort_transaction(30)
    admin.produce(topic, ["p2"])
    holder.begin_transaction()  # left open: the last stable offset stays at o1
    send(holder, topic, ["o1"])
    admin.produce(topic, ["p3"])

    rc = make("consumer", committed_group, topic)
    seen: list[tuple[int, str]] = []
    poll_values(rc, lambda s: "p2" in values_of(s), seen)
    # nothing at or past the open transaction comes while it is open (a bounded look)
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        seen += [(m.offset(), m.value().decode()) for m in rc.poll(0.5) if m.error() is None]
    assert sorted(values_of(seen)) == ["c1", "c2", "p1", "p2"], seen

    holder.commit_transaction(30)
    poll_values(rc, lambda s: "p3" in values_of(s), seen)
    assert sorted(values_of(seen)) == ["c1", "c2", "o1", "p1", "p2", "p3"], seen
    offsets = [o for o, _ in seen]
    assert len(offsets) == len(set(offsets)), f"a record came twice: {seen}"
    results = rc.commit_sync(30)
    assert all(err is None for err in results.values()), results

    # read_uncommitted (the default) gets the aborted records too, as in Kafka; neither group
    # ever gets a transaction marker (the three markers' offsets are never delivered)
    ru = make("consumer", uncommitted_group, topic)
    seen_ru: list[tuple[int, str]] = []
    poll_values(ru, lambda s: len(s) >= 8, seen_ru)
    assert sorted(values_of(seen_ru)) == ["a1", "a2", "c1", "c2", "o1", "p1", "p2", "p3"]
    end_offset = admin.end_offset(topic)
    markers = set(range(end_offset)) - {o for o, _ in seen_ru}
    assert len(markers) == 3 and not markers & set(offsets), (markers, seen)

    # the aborted records were archived, not left available: a new member of the
    # read_committed group gets only what is produced next
    rc.close()
    again = make("consumer", committed_group, topic)
    (marker,) = admin.produce(topic, ["marker"])
    later: list[tuple[int, str]] = []
    poll_values(again, lambda s: "marker" in values_of(s), later)
    assert later == [(marker, "marker")]
    results = again.commit_sync(30)
    assert all(err is None for err in results.values()), results
    if broker_kind() == "strom":
        from ..test_cli import strom

        described = strom(admin.bootstrap, "groups", "describe", committed_group).stdout.decode()
        row = described.splitlines()[-1].split()
        assert row[2:] == ["0", str(marker + 1), "0"], described  # partition, start, lag


def test_a_poll_never_acquires_more_than_the_partition_lock_cap(admin, make):
    """confluent-kafka-python's test_partition_max_record_locks_caps_in_flight, re-created: with
    share.partition.max.record.locks=100 and max.poll.records=200, 200 records produced in one
    log batch come in polls of at most 100, and all of them come."""
    topic = admin.create_topic(unique("share-cap"))
    group = unique("cap")
    admin.set_group_configs(group, {"share.auto.offset.reset": "earliest",
                                    "share.partition.max.record.locks": "100"})
    consumer = make("consumer", group, topic, share_acknowledgement_mode="explicit",
                    max_poll_records=200)
    producer = Producer({"bootstrap.servers": admin.bootstrap, "linger.ms": 1000,
                         "batch.num.messages": 1000})
    for i in range(200):  # one batch: the worst case for the cap
        producer.produce(topic, value=f"msg-{i}".encode())
    assert producer.flush(30) == 0
    received, biggest = 0, 0
    deadline = time.monotonic() + WAIT
    while received < 200:
        assert time.monotonic() < deadline, f"received {received} of 200"
        batch = [m for m in consumer.poll(2.0) if m.error() is None]
        biggest = max(biggest, len(batch))
        for m in batch:
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        received += len(batch)
    assert received == 200
    assert biggest <= 100, f"a single poll acquired {biggest} records, over the cap of 100"
