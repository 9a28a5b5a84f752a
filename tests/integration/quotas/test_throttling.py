"""Client quotas enforced on a real broker, with real clients: a producer limited to 1 MB/s
gets 1 MB/s (± 10% over 30 s) while an unlimited one beside it is never throttled; a consumer
over consumer_byte_rate is slowed the same way; the throttle time shows in the metrics.

Quotas are set with AlterClientQuotas v0, encoded here by hand (tests/integration/wire.py's
style), so the broker's own codec is not what checks itself."""

from __future__ import annotations

import json
import struct
import threading
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from ..clients import create_topic
from ..wire import Conn, array, i8, string

ALTER_CLIENT_QUOTAS = 49
MB = 1024 * 1024
pytestmark = pytest.mark.timeout(180)


def set_quota(bootstrap: str, entity: list[tuple[str, str | None]], key: str,
              value: float | None) -> None:
    """AlterClientQuotas v0 of one entity and key (value None: remove it)."""
    op = string(key) + struct.pack(">d", value or 0.0) + i8(1 if value is None else 0)
    body = array([array([string(t) + string(n) for t, n in entity]) + array([op])]) + i8(0)
    with Conn(bootstrap) as conn:
        reply = conn.request(ALTER_CLIENT_QUOTAS, 0, body)
    _throttle, count = struct.unpack_from(">ii", reply, 0)
    assert count == 1
    (code,) = struct.unpack_from(">h", reply, 8)
    assert code == 0, f"AlterClientQuotas answered error {code}"


class Rate:
    """What one producer got acknowledged, with the time of each acknowledgement."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []
        self.errors: list[str] = []
        self.max_throttle_ms = 0

    def delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.events.append((time.monotonic(), len(msg.value())))

    def stats(self, text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            self.max_throttle_ms = max(self.max_throttle_ms, broker.get("throttle", {}).get("max", 0))

    def bytes_between(self, start: float, end: float) -> int:
        return sum(n for t, n in self.events if start <= t < end)


VALUE = b"x" * 10_000


def run_producer(bootstrap: str, topic: str, client_id: str, rate: Rate, stop: threading.Event,
                 count: int) -> None:
    """Produce up to ``count`` values of 10 kB as fast as the broker takes them."""
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                  "acks": 1, "statistics.interval.ms": 500, "stats_cb": rate.stats,
                  "queue.buffering.max.kbytes": 4096})
    sent = 0
    try:
        while not stop.is_set() and sent < count:
            try:
                p.produce(topic, VALUE, on_delivery=rate.delivered)
                sent += 1
            except BufferError:  # the local queue is full: wait for acknowledgements
                p.poll(0.05)
            p.poll(0)
        p.flush(30)
    finally:
        p.poll(0)


def test_a_producer_over_its_quota_gets_its_rate_and_its_neighbour_is_untouched(
        make_broker) -> None:
    broker = make_broker({"quota.window.num": 3})  # a 2 s window: the first burst is short
    topic = f"q-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=2)
    set_quota(broker.bootstrap, [("client-id", "limited")], "producer_byte_rate", float(MB))
    limited, free = Rate(), Rate()
    stop = threading.Event()
    threads = [
        threading.Thread(target=run_producer, args=(broker.bootstrap, topic, "limited",
                                                    limited, stop, 20_000)),
        threading.Thread(target=run_producer, args=(broker.bootstrap, topic, "free",
                                                    free, stop, 15_000)),
    ]
    for t in threads:
        t.start()
    try:
        warm = time.monotonic() + 4  # past the window's first burst
        end = warm + 30
        while time.monotonic() < end:  # the measurement: 30 s of the limited producer
            time.sleep(0.2)  # waiting out the measured interval, not synchronisation
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not limited.errors and not free.errors
    measured = limited.bytes_between(warm, end) / 30
    assert 0.9 * MB <= measured <= 1.1 * MB, f"limited producer got {measured / MB:.3f} MB/s"
    assert limited.max_throttle_ms > 0, "its responses carried throttle_time_ms"
    assert free.max_throttle_ms == 0, "the unlimited producer was never throttled"
    free_total = sum(n for _, n in free.events)
    assert free_total == 15_000 * len(VALUE), "the unlimited producer got all acknowledged"
    free_span = free.events[-1][0] - free.events[0][0]
    assert free_total / free_span > 5 * measured, "and went far faster"
    samples = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    assert any(line.startswith("kafka_server_produce_throttle_time{")
               and 'client_id="limited"' in line for line in samples.splitlines())


def test_a_consumer_over_its_quota_is_slowed_and_the_quota_can_be_lifted(make_broker) -> None:
    broker = make_broker({"quota.window.num": 3})
    topic = f"q-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for _ in range(800):  # 8 MB
        p.produce(topic, b"y" * 10_000)
    assert p.flush(30) == 0
    set_quota(broker.bootstrap, [("client-id", "slow-reader")], "consumer_byte_rate",
              float(MB))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "client.id": "slow-reader", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.max.bytes": 1_000_000,
                  "max.partition.fetch.bytes": 1_000_000})
    try:
        c.subscribe([topic])
        got, first_at = 0, None
        deadline = time.monotonic() + 60
        while got < 6 * MB and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is None:
                    first_at = first_at or time.monotonic()
                    got += len(m.value())
        assert got >= 6 * MB
        elapsed = time.monotonic() - first_at
        # at 1 MB/s with a 2 s window, 6 MB take at least ~3 s more than an unthrottled read
        assert got / elapsed < 2.0 * MB, f"read {got / elapsed / MB:.2f} MB/s"
        set_quota(broker.bootstrap, [("client-id", "slow-reader")], "consumer_byte_rate", None)
        deadline = time.monotonic() + 30
        while got < 8_000_000 and time.monotonic() < deadline:  # the rest comes once lifted
            for m in c.consume(100, 0.5):
                if m.error() is None:
                    got += len(m.value())
        assert got == 8_000_000
    finally:
        c.close()
