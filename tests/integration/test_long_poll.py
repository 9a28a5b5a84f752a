"""Long polling: a waiting Fetch is answered as soon as data arrives, and not before."""

from __future__ import annotations

import select
import time

import pytest
from confluent_kafka import TopicPartition

from . import clients as kc
from .wire import FETCH, NONE, Conn, fetch_v4_body, parse_fetch_v4, records_of, simple_batch

pytestmark = pytest.mark.timeout(60)


def readable(conn: Conn, timeout: float) -> bool:
    r, _, _ = select.select([conn.sock], [], [], timeout)
    return bool(r)


def test_waiting_fetch_wakes_on_produce(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    with Conn(bs) as waiter, Conn(bs) as writer:
        corr = waiter.send(FETCH, 4, fetch_v4_body(topic, 0, 0, max_wait_ms=20_000, min_bytes=1))
        # The broker holds the request while there is nothing to return.
        assert not readable(waiter, 0.5), "fetch on an empty partition answered before max wait"

        start = time.monotonic()
        assert writer.produce(topic, 0, simple_batch(b"wake up"), acks=1).error == NONE
        assert readable(waiter, 10), "parked fetch not answered within 10 s of the produce"
        latency = time.monotonic() - start
        part = parse_fetch_v4(waiter.recv_response(corr))[(topic, 0)]
    assert part.error == NONE
    assert [r.value for r in records_of(part.records)] == [b"wake up"]
    assert latency < 2.0, f"parked fetch answered {latency:.3f}s after the produce (expected < 1 s)"


def test_fetch_waits_about_max_wait_when_empty(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    with Conn(bs) as conn:
        start = time.monotonic()
        part = conn.fetch(topic, 0, 0, max_wait_ms=400, min_bytes=1)
        elapsed = time.monotonic() - start
    assert part.error == NONE and not records_of(part.records)
    assert 0.3 <= elapsed < 5, f"empty fetch with max_wait 400 ms took {elapsed:.3f}s"


def test_fetch_with_data_does_not_wait(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    with Conn(bs) as conn:
        assert conn.produce(topic, 0, simple_batch(b"here")).error == NONE
        start = time.monotonic()
        part = conn.fetch(topic, 0, 0, max_wait_ms=10_000, min_bytes=1)
        elapsed = time.monotonic() - start
    assert [r.value for r in records_of(part.records)] == [b"here"]
    assert elapsed < 2, f"fetch with data ready took {elapsed:.3f}s"


def test_consumer_with_long_fetch_wait_gets_records_quickly(strom_broker, unique_topic):
    """librdkafka with fetch.wait.max.ms=10 s: each record arrives well under a second after it is acked."""
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    p = kc.producer(bs, **{"linger.ms": 0})
    c = kc.consumer(bs, **{"fetch.wait.max.ms": 10_000, "fetch.min.bytes": 1})
    latencies = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        for i in range(4):
            start = time.monotonic()
            kc.produce_with(p, topic, f"m{i}".encode())
            got = kc.poll_messages(c, 1, timeout=15)
            latencies.append(time.monotonic() - start)
            assert [m.value for m in got] == [f"m{i}".encode()]
    finally:
        c.close()
    # Round 0 includes the consumer's start-up; later rounds hit a parked fetch.
    assert max(latencies[1:]) < 2.0, f"latencies {latencies} (expected < 1 s each)"


def test_min_bytes_waits_for_enough_data(strom_broker, unique_topic):
    """fetch.min.bytes: a fetch is held until enough bytes arrived, then answered."""
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    with Conn(bs) as waiter, Conn(bs) as writer:
        corr = waiter.send(FETCH, 4, fetch_v4_body(topic, 0, 0, max_wait_ms=20_000, min_bytes=5000))
        assert writer.produce(topic, 0, simple_batch(b"small")).error == NONE
        assert not readable(waiter, 0.5), "answered before min_bytes were available"
        assert writer.produce(topic, 0, simple_batch(b"x" * 6000)).error == NONE
        assert readable(waiter, 5), "not answered once min_bytes were available"
        part = parse_fetch_v4(waiter.recv_response(corr))[(topic, 0)]
    assert [r.value for r in records_of(part.records)][:2] == [b"small", b"x" * 6000]


def test_produce_unrelated_partition_does_not_wake(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic, other = unique_topic(), unique_topic("other")
    kc.create_topic(bs, topic)
    kc.create_topic(bs, other)
    with Conn(bs) as waiter, Conn(bs) as writer:
        start = time.monotonic()
        corr = waiter.send(FETCH, 4, fetch_v4_body(topic, 0, 0, max_wait_ms=1500, min_bytes=1))
        assert writer.produce(other, 0, simple_batch(b"elsewhere")).error == NONE
        part = parse_fetch_v4(waiter.recv_response(corr))[(topic, 0)]
        elapsed = time.monotonic() - start
    assert part.error == NONE and not records_of(part.records)
    assert 1.2 <= elapsed < 10, f"fetch with max_wait 1.5 s answered after {elapsed:.3f}s"
