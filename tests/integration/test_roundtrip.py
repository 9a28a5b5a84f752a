"""Produce/consume round trips through a real broker with every client and compression.

Every test compares exact content (key, value, headers, timestamp) and offsets, reading back with the
producing client and with librdkafka.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from . import clients as kc
from .clients import Msg, contents
from .wire import Conn, parse_batches

pytestmark = pytest.mark.timeout(90)

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def stamped(msgs: list[Msg]) -> list[Msg]:
    """Give every message a distinct, explicit CreateTime so timestamps can be compared exactly."""
    base = int(time.time() * 1000) - 60_000
    for i, m in enumerate(msgs):
        m.timestamp = base + i * 7
    return msgs


def assert_same(got: list[Msg], sent: list[Msg], first_offset: int = 0) -> None:
    assert contents(got) == contents(sent)
    assert [m.offset for m in got] == list(range(first_offset, first_offset + len(sent)))
    assert [m.timestamp for m in got] == [m.timestamp for m in sent]


def acks_conf(acks: int | None) -> dict:
    return {} if acks is None else {"acks": acks}


# --------------------------------------------------------------------------- confluent-kafka


@pytest.mark.parametrize(
    ("compression", "acks", "idempotent"),
    [(c, -1, False) for c in COMPRESSIONS]
    + [("none", 0, False), ("none", 1, False), ("lz4", 0, False), ("zstd", 1, False)]
    + [("none", -1, True), ("snappy", -1, True)],
)
def test_confluent_round_trip(strom_broker, unique_topic, compression, acks, idempotent):
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic)
    sent = stamped(kc.sample_messages(compression))
    delivered = kc.produce(
        strom_broker.bootstrap, topic, sent, partition=0,
        **{"compression.type": compression, "acks": acks, "enable.idempotence": idempotent},
    )  # fmt: skip
    if acks != 0:  # acks=0 never learns its offsets
        assert [d.offset for d in delivered] == list(range(len(sent)))
    got = kc.consume(strom_broker.bootstrap, topic, len(sent))
    assert_same(got, sent)


def test_confluent_ordering_per_partition(strom_broker, unique_topic):
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic, partitions=3)
    n = 1500
    sent = [
        Msg(f"k{i % 3}".encode(), f"{i % 3}:{i // 3}".encode(), partition=i % 3) for i in range(n)
    ]
    kc.produce(strom_broker.bootstrap, topic, sent, **{"compression.type": "lz4"})
    for p in range(3):
        got = kc.consume(strom_broker.bootstrap, topic, n // 3, partition=p)
        assert [m.value for m in got] == [f"{p}:{j}".encode() for j in range(n // 3)]
        assert [m.offset for m in got] == list(range(n // 3))
        assert kc.latest(strom_broker.bootstrap, topic, p) == n // 3


def test_consume_from_middle_offset(strom_broker, unique_topic):
    """A fetch that starts inside a batch returns records from exactly that offset on."""
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic)
    sent = stamped([Msg(b"k", f"v{i}".encode()) for i in range(50)])
    kc.produce(strom_broker.bootstrap, topic, sent, partition=0, **{"linger.ms": 50})
    got = kc.consume(strom_broker.bootstrap, topic, 25, offset=25)
    assert_same(got, sent[25:], first_offset=25)


# --------------------------------------------------------------------------- kafka-python


@pytest.mark.parametrize(
    ("compression", "acks"),
    [(c, None) for c in COMPRESSIONS] + [("none", 0), ("none", 1), ("gzip", 1)],
)
def test_kafka_python_round_trip(strom_broker, unique_topic, compression, acks):
    """kafka-python is idempotent by default (acks not given): it needs InitProducerId first."""
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic)
    sent = stamped(kc.sample_messages(compression, null_header=False))
    comp = None if compression == "none" else compression
    delivered = kc.kp_produce(
        strom_broker.bootstrap, topic, sent, compression_type=comp, **acks_conf(acks)
    )
    if acks != 0:
        assert [d.offset for d in delivered] == list(range(len(sent)))
    assert_same(kc.kp_consume(strom_broker.bootstrap, topic, len(sent)), sent)
    assert_same(kc.consume(strom_broker.bootstrap, topic, len(sent)), sent)

    with Conn(strom_broker.bootstrap) as conn:
        fetched = conn.fetch(topic, 0, 0)
    batches = parse_batches(fetched.records)
    assert batches, "fetch returned no batches"
    first = batches[0][0]
    if acks is None:  # idempotent: the broker kept the producer id and sequences the client set
        assert first.producer_id >= 0
        assert first.base_sequence == 0
    else:
        assert first.producer_id == -1
    # Stored as sent (kafka-python leaves a batch uncompressed when compressing would not help).
    codecs = {h.attributes & 0x7 for h, _ in batches}
    if compression == "none":
        assert codecs == {0}
    else:
        assert COMPRESSIONS.index(compression) in codecs


def test_kafka_python_ordering_keyed(strom_broker, unique_topic):
    """Keyed records spread over partitions by kafka-python's partitioner keep per-partition order."""
    from kafka import KafkaProducer

    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic, partitions=3)
    p = KafkaProducer(bootstrap_servers=strom_broker.bootstrap, linger_ms=5)
    try:
        futures = [
            (i, p.send(topic, key=f"key-{i % 7}".encode(), value=str(i).encode()))
            for i in range(700)
        ]
        p.flush(timeout=30)
        by_partition: dict[int, list[tuple[int, int]]] = {}
        for i, f in futures:
            md = f.get(timeout=30)
            by_partition.setdefault(md.partition, []).append((md.offset, i))
    finally:
        p.close(timeout=10)
    assert sum(len(v) for v in by_partition.values()) == 700
    for part, pairs in by_partition.items():
        pairs.sort()
        got = kc.consume(strom_broker.bootstrap, topic, len(pairs), partition=part)
        assert [int(m.value) for m in got] == [i for _, i in pairs]
        assert [i for _, i in pairs] == sorted(i for _, i in pairs), "offsets not in send order"


# --------------------------------------------------------------------------- aiokafka


@pytest.mark.parametrize(
    ("compression", "acks", "idempotent"),
    [(c, 1, False) for c in COMPRESSIONS] + [("none", 0, False), ("none", "all", False)]
    + [("gzip", "all", True)],
)  # fmt: skip
def test_aiokafka_round_trip(strom_broker, unique_topic, compression, acks, idempotent):
    """aiokafka speaks old, non-flexible versions (ApiVersions v0, Produce v7, Fetch <= v11)."""
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic)
    sent = stamped(kc.sample_messages(compression))
    comp = None if compression == "none" else compression

    async def run():
        delivered = await kc.aio_produce(
            strom_broker.bootstrap, topic, sent, compression_type=comp, acks=acks,
            enable_idempotence=idempotent, linger_ms=5,
        )  # fmt: skip
        got = await kc.aio_consume(strom_broker.bootstrap, topic, len(sent))
        return delivered, got

    delivered, got = asyncio.run(run())
    if acks != 0:
        assert [d.offset for d in delivered] == list(range(len(sent)))
    assert_same(got, sent)
    assert_same(kc.consume(strom_broker.bootstrap, topic, len(sent)), sent)


# --------------------------------------------------------------------------- across clients


def test_all_clients_into_one_partition(strom_broker, unique_topic):
    """Three clients append to the same partition in turn; everyone reads back the same log."""
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic)
    a = stamped(kc.sample_messages("confluent"))
    b = stamped(kc.sample_messages("kafka-python", null_header=False))
    c = stamped(kc.sample_messages("aiokafka"))
    kc.produce(strom_broker.bootstrap, topic, a, partition=0, **{"compression.type": "zstd"})
    kc.kp_produce(strom_broker.bootstrap, topic, b, compression_type="lz4")
    asyncio.run(kc.aio_produce(strom_broker.bootstrap, topic, c, compression_type="snappy"))
    everything = a + b + c
    assert_same(kc.consume(strom_broker.bootstrap, topic, len(everything)), everything)
    assert_same(kc.kp_consume(strom_broker.bootstrap, topic, len(everything)), everything)
    got = asyncio.run(kc.aio_consume(strom_broker.bootstrap, topic, len(everything)))
    assert_same(got, everything)
