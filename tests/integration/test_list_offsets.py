"""ListOffsets: earliest, latest, by timestamp and max timestamp (-3), through several clients."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from . import clients as kc
from .clients import Msg
from .wire import EARLIEST, LATEST, NONE, Conn, parse_batches

pytestmark = pytest.mark.timeout(90)

LAYOUTS = {
    # how the records are grouped into batches: one per record, or all in one batch
    "batch-per-record": {"flush_each": True},
    "one-batch": {"linger.ms": 2000, "batch.num.messages": 10_000},
    "one-gzip-batch": {"linger.ms": 2000, "batch.num.messages": 10_000, "compression.type": "gzip"},
}


ATTEMPTS = 3


def produce_with_timestamps(bootstrap: str, topic: str, stamps: list[int], layout: str,
                            new_topic: Callable[[], str]) -> str:
    """Produce the records in the layout's batches; returns the topic that holds them. The
    client decides the batching: when it did not make the wanted one (seen once in CI: five
    single-record batches despite linger.ms), the records go again into a fresh topic."""
    conf = dict(LAYOUTS[layout])
    flush_each = conf.pop("flush_each", False)
    msgs = [Msg(b"k", f"v{i}".encode(), timestamp=ts) for i, ts in enumerate(stamps)]
    expected = len(stamps) if flush_each else 1
    held = []
    for attempt in range(ATTEMPTS):
        if attempt:
            topic = new_topic()
            kc.create_topic(bootstrap, topic)
        kc.produce(bootstrap, topic, msgs, partition=0, flush_each=flush_each, **conf)
        with Conn(bootstrap) as conn:
            batches = parse_batches(conn.fetch(topic, 0, 0).records)
        if len(batches) == expected:
            return topic
        held.append(len(batches))
    pytest.fail(f"precondition: wanted {expected} batches, the broker held {held} in "
                f"{ATTEMPTS} attempts")


def test_earliest_and_latest(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    assert (kc.earliest(bs, topic), kc.latest(bs, topic)) == (0, 0)

    for n in (3, 4, 3):  # three batches, 10 records
        kc.produce(bs, topic, [Msg(None, b"x")] * n, partition=0)
    assert (kc.earliest(bs, topic), kc.latest(bs, topic)) == (0, 10)

    c = kc.consumer(bs)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
    finally:
        c.close()

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kp = KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False)
    try:
        tp = KTP(topic, 0)
        assert kp.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert kp.end_offsets([tp], timeout_ms=10_000) == {tp: 10}
    finally:
        kp.close(autocommit=False)

    async def aio():
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as ATP

        ac = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False)
        await ac.start()
        try:
            tp = ATP(topic, 0)
            return await ac.beginning_offsets([tp]), await ac.end_offsets([tp])
        finally:
            await ac.stop()

    begin, end = asyncio.run(aio())
    assert list(begin.values()) == [0] and list(end.values()) == [10]

    with Conn(bs) as conn:
        assert conn.list_offset(topic, 0, EARLIEST)[::2] == (NONE, 0)
        assert conn.list_offset(topic, 0, LATEST)[::2] == (NONE, 10)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_offsets_for_times(strom_broker, unique_topic, layout):
    """The first offset whose timestamp is >= the target, also inside a (compressed) batch."""
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    base = int(time.time() * 1000) - 3_600_000
    stamps = [base + 1000 * i for i in range(10)]
    topic = produce_with_timestamps(bs, topic, stamps, layout, unique_topic)

    # target -> (offset, timestamp of that record); -1 when no record is that new.
    cases = {
        base - 5: (0, base),
        base: (0, base),
        base + 1: (1, base + 1000),
        base + 4500: (5, base + 5000),
        base + 9000: (9, base + 9000),
        base + 9001: (-1, -1),
    }
    for target, (offset, ts) in cases.items():
        info = kc.list_offset(bs, topic, 0, OffsetSpec.for_timestamp(target))
        assert (target, info.offset) == (target, offset)
        if offset >= 0:
            assert info.timestamp == ts

    c = kc.consumer(bs)
    try:
        for target, (offset, _) in cases.items():
            # one partition per request: Kafka rejects a partition listed twice
            [tp] = c.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
            assert (target, tp.offset) == (target, offset)
    finally:
        c.close()

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kp = KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False)
    try:
        tp = KTP(topic, 0)
        for target, (offset, ts) in cases.items():
            found = kp.offsets_for_times({tp: target}, timeout_ms=10_000)[tp]
            if offset < 0:
                assert found is None
            else:
                assert (found.offset, found.timestamp) == (offset, ts)
    finally:
        kp.close(autocommit=False)

    with Conn(bs) as conn:
        for target, (offset, ts) in cases.items():
            err, got_ts, got_offset = conn.list_offset(topic, 0, target)
            assert (err, got_offset) == (NONE, offset)
            if offset >= 0:
                assert got_ts == ts


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_max_timestamp(strom_broker, unique_topic, layout):
    """OffsetSpec.max_timestamp (-3): the offset of the record with the largest timestamp."""
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    assert kc.list_offset(bs, topic, 0, OffsetSpec.max_timestamp()).offset == -1

    base = int(time.time() * 1000) - 3_600_000
    stamps = [base + d for d in (5000, 1000, 9000, 3000, 2000)]
    topic = produce_with_timestamps(bs, topic, stamps, layout, unique_topic)
    info = kc.list_offset(bs, topic, 0, OffsetSpec.max_timestamp())
    assert (info.offset, info.timestamp) == (2, base + 9000)

    # A later record that is not the newest by timestamp does not change the answer.
    kc.produce(bs, topic, [Msg(None, b"late", timestamp=base + 100)], partition=0)
    info = kc.list_offset(bs, topic, 0, OffsetSpec.max_timestamp())
    assert (info.offset, info.timestamp) == (2, base + 9000)


def test_list_offsets_unknown_partition(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    with Conn(bs) as conn:
        assert conn.list_offset(topic, 7, LATEST)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert conn.list_offset(unique_topic("missing"), 0, LATEST)[0] == 3
