"""Durability across restarts: clean stop, kill -9, and a damaged segment tail.

Segment files are expected in Kafka's layout: ``<log.dirs>/<topic>-<partition>/<base offset>.log``.
"""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from . import clients as kc
from .broker import BrokerProcess
from .clients import Msg
from .wire import NONE, Conn, Record, build_batch, parse_batches

pytestmark = pytest.mark.timeout(150)

TOPIC_CONFIG = {
    "retention.ms": "86400000",
    "max.message.bytes": "200000",
    "cleanup.policy": "delete",
}


def partition_dir(broker: BrokerProcess, topic: str, partition: int = 0) -> Path:
    d = broker.data_dir / f"{topic}-{partition}"
    assert d.is_dir(), (
        f"no {d.name} in {broker.data_dir}: {sorted(p.name for p in broker.data_dir.iterdir())}"
    )
    return d


def active_segment(broker: BrokerProcess, topic: str, partition: int = 0) -> Path:
    logs = sorted(partition_dir(broker, topic, partition).glob("*.log"))
    assert logs, f"no .log file for {topic}-{partition}"
    return logs[-1]  # 20-digit zero-padded base offsets sort like numbers


def batch_spans(path: Path) -> list[tuple[int, int]]:
    """(start, end) byte positions of the batches in a segment file, stopping at anything invalid."""
    data = path.read_bytes()
    spans, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if length <= 0 or pos + 12 + length > len(data):
            break
        spans.append((pos, pos + 12 + length))
        pos += 12 + length
    return spans


def snapshot(bs: str, topic: str, partitions: int) -> dict:
    """Everything a restart must keep for a topic: id, per-partition records and offsets, configs."""
    a = kc.admin(bs)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = a.describe_configs([res], request_timeout=30)[res].result(30)
    overrides = {
        k: e.value
        for k, e in configs.items()
        if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }
    parts = {}
    for p in range(partitions):
        start, end = kc.earliest(bs, topic, p), kc.latest(bs, topic, p)
        msgs = kc.consume(bs, topic, end - start, partition=p, offset=start) if end > start else []
        parts[p] = (start, end, [(m.offset, m.timestamp, *m.content()) for m in msgs])
    return {"id": kc.topic_id(bs, topic), "configs": overrides, "partitions": parts}


def fill(bs: str, unique_topic) -> dict[str, int]:
    """Create two topics and write a varied history with all three clients; return partition counts."""
    a, b = unique_topic("a"), unique_topic("b")
    kc.create_topic(bs, a, partitions=3, config=TOPIC_CONFIG)
    admin = kc.admin(bs)
    res = ConfigResource(
        ConfigResource.Type.TOPIC, a,
        incremental_configs=[
            ConfigEntry("retention.bytes", "123456789", incremental_operation=AlterConfigOpType.SET)
        ],
    )  # fmt: skip
    admin.incremental_alter_configs([res], request_timeout=30)[res].result(30)

    kc.produce(bs, a, kc.sample_messages("p0"), partition=0, **{"compression.type": "zstd"})
    kc.kp_produce(bs, a, kc.sample_messages("p1", null_header=False), partition=1)  # idempotent
    asyncio.run(
        kc.aio_produce(bs, a, kc.sample_messages("p2"), partition=2, compression_type="gzip")
    )

    kc.create_topic(bs, b)
    for i in range(20):  # many small batches
        kc.produce(
            bs, b, [Msg(f"k{i}".encode(), f"v{i}-{j}".encode()) for j in range(25)], partition=0
        )
    return {a: 3, b: 1}


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_restart_keeps_records_and_configs(make_broker, unique_topic, how):
    broker = make_broker()
    bs = broker.bootstrap
    topics = fill(bs, unique_topic)
    before = {t: snapshot(bs, t, n) for t, n in topics.items()}
    assert before[next(iter(topics))]["configs"] == {**TOPIC_CONFIG, "retention.bytes": "123456789"}

    if how == "clean":
        assert broker.stop() == 0, "SIGTERM must stop the broker cleanly (exit code 0)"
    else:
        broker.kill()
    broker.restart()

    after = {t: snapshot(bs, t, n) for t, n in topics.items()}
    assert after == before

    # Appends continue right after the old log end, with every client.
    for t, n in topics.items():
        for p in range(n):
            end = before[t]["partitions"][p][1]
            got = kc.produce(bs, t, [Msg(b"after", b"restart")], partition=p)
            assert got[0].offset == end
    a = next(iter(topics))
    kc.kp_produce(bs, a, [Msg(b"kp", b"after")], partition=1)
    assert [
        m.value for m in kc.consume(bs, a, 2, partition=1, offset=before[a]["partitions"][1][1])
    ] == [
        b"restart",
        b"after",
    ]


def test_log_start_offset_survives_clean_restart(make_broker, unique_topic):
    """DeleteRecords moves the log start offset; a clean restart must not bring old records back."""
    broker = make_broker()
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    for i in range(10):
        kc.produce(bs, topic, [Msg(None, f"v{i}".encode())], partition=0)
    from confluent_kafka import TopicPartition

    a = kc.admin(bs)
    tp = TopicPartition(topic, 0, 6)
    assert a.delete_records([tp], request_timeout=30)[tp].result(30).low_watermark == 6
    assert broker.stop() == 0
    broker.restart()
    assert (kc.earliest(bs, topic), kc.latest(bs, topic)) == (6, 10)
    assert [m.value for m in kc.consume(bs, topic, 4, offset=6)] == [
        f"v{i}".encode() for i in range(6, 10)
    ]


def write_batches(bs: str, topic: str, batches: int, per_batch: int) -> list[bytes]:
    values = []
    with Conn(bs) as conn:
        for i in range(batches):
            vals = [f"b{i}-r{j}".encode() for j in range(per_batch)]
            res = conn.produce(topic, 0, build_batch(Record(b"k", v) for v in vals))
            assert (res.error, res.base_offset) == (NONE, i * per_batch)
            values += vals
    return values


def check_serves(bs: str, topic: str, values: list[bytes]) -> None:
    """Exactly ``values`` are served, and the next append lands right after them and reads back."""
    assert (kc.earliest(bs, topic), kc.latest(bs, topic)) == (0, len(values))
    got = kc.consume(bs, topic, len(values)) if values else []
    assert [m.value for m in got] == values
    with Conn(bs) as conn:
        res = conn.produce(topic, 0, build_batch([Record(b"k", b"appended")]))
        assert (res.error, res.base_offset) == (NONE, len(values))
        fetched = conn.fetch(topic, 0, len(values))
        assert fetched.error == NONE
        recs = [r for _, rs in parse_batches(fetched.records) for r in rs or []]
        assert [(r.offset, r.value) for r in recs] == [(len(values), b"appended")]


@pytest.mark.parametrize("garbage", ["random", "zeros", "torn-batch"])
def test_garbage_after_last_batch_is_truncated(make_broker, unique_topic, garbage):
    broker = make_broker()
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    values = write_batches(bs, topic, batches=10, per_batch=5)
    broker.kill()  # a crash: recovery must run, whatever a clean shutdown may let it skip

    seg = active_segment(broker, topic)
    assert len(batch_spans(seg)) == 10, f"precondition: 10 batches in {seg}"
    tail = {
        "random": os.urandom(777),
        "zeros": b"\0" * 4096,
        # the first 40 bytes of a real next batch: a write torn by the crash
        "torn-batch": build_batch([Record(b"k", b"lost" * 50)], base_offset=len(values))[:40],
    }[garbage]
    with open(seg, "ab") as f:
        f.write(tail)

    broker.restart()
    check_serves(bs, topic, values)


def test_corrupt_last_batch_is_dropped(make_broker, unique_topic):
    broker = make_broker()
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    values = write_batches(bs, topic, batches=10, per_batch=5)
    broker.kill()

    seg = active_segment(broker, topic)
    spans = batch_spans(seg)
    assert len(spans) == 10, f"precondition: 10 batches in {seg}, found {len(spans)}"
    _, end = spans[-1]
    data = bytearray(seg.read_bytes())
    data[end - 3] ^= 0xFF  # inside the last record: only the CRC can tell
    seg.write_bytes(bytes(data))

    broker.restart()
    check_serves(bs, topic, values[:45])


def test_corrupt_last_batch_then_clean_restart_twice(make_broker, unique_topic):
    """After recovery the log is whole again: a second, clean restart changes nothing."""
    broker = make_broker()
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    values = write_batches(bs, topic, batches=4, per_batch=3)
    broker.kill()
    seg = active_segment(broker, topic)
    with open(seg, "ab") as f:
        f.write(os.urandom(100))
    broker.restart()
    check_serves(bs, topic, values)
    assert broker.stop() == 0
    broker.restart()
    check_serves(bs, topic, [*values, b"appended"])
