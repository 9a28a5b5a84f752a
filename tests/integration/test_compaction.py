"""Compacted topics against a real broker: the cleaner keeps the latest value of every key at its
original offset, and tombstoned keys disappear after delete.retention.ms."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError

from . import clients as kc
from .clients import Msg, read_partition
from .wire import Conn, parse_batches

FAST_CLEANER = {"log.cleaner.backoff.ms": 100}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "3000",
}


def wait_for(bootstrap: str, topic: str, predicate, what: str, timeout: float = 60.0) -> list[Msg]:
    """Re-read the partition until ``predicate(records)`` holds (the cleaner runs on its own)."""
    deadline = time.monotonic() + timeout
    got: list[Msg] = []
    while time.monotonic() < deadline:
        got = read_partition(bootstrap, topic)
        if predicate(got):
            return got
        time.sleep(0.2)  # poll interval while waiting for the background cleaner
    counts: dict = {}
    for m in got:
        counts[m.key] = counts.get(m.key, 0) + 1
    raise AssertionError(f"{what} not reached in {timeout}s; records per key: {counts}")


def produce_rounds(bootstrap: str, topic: str, keys: int, rounds: int, tombstoned: set[bytes]):
    """Several values per key, then tombstones; returns key -> (offset, value) of the latest."""
    msgs = [Msg(b"key-%02d" % k, b"round-%d-of-%02d" % (r, k) * 8)
            for r in range(rounds) for k in range(keys)]  # fmt: skip
    msgs += [Msg(k, None) for k in sorted(tombstoned)]
    delivered = kc.produce(bootstrap, topic, msgs, partition=0, linger_ms=5, batch_num_messages=5)
    latest = {}
    for d in delivered:
        latest[d.key] = (d.offset, d.value)
    # one more record stamped in the future rolls the segment holding the last round, so the
    # cleaner may compact everything written so far (the active segment is never cleaned)
    end = kc.produce(bootstrap, topic, [Msg(b"end", b"end", timestamp=int(time.time() * 1000) + 5000)],
                     partition=0)[0]  # fmt: skip
    latest[b"end"] = (end.offset, b"end")
    return latest


def exactly_latest(latest: dict, *, without: set[bytes] = frozenset()):
    expected = {k: v for k, v in latest.items() if k not in without}

    def check(got: list[Msg]) -> bool:
        seen = {}
        for m in got:
            if m.key in seen:
                return False
            seen[m.key] = (m.offset, m.value)
        return seen == expected

    return check


def test_compacted_topic_keeps_latest_value_per_key(make_broker, unique_topic):
    broker = make_broker(FAST_CLEANER)
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic, config=TOPIC_CONFIG)
    tombstoned = {b"key-00", b"key-01", b"key-02"}
    latest = produce_rounds(broker.bootstrap, topic, keys=20, rounds=6, tombstoned=tombstoned)
    hw = kc.latest(broker.bootstrap, topic)
    assert hw == 20 * 6 + 3 + 1

    # compaction: one record per key, at the offset it was written at; tombstones still there
    got = wait_for(broker.bootstrap, topic, exactly_latest(latest), "compaction")
    assert [m.value for m in got if m.key in tombstoned] == [None, None, None]
    assert kc.latest(broker.bootstrap, topic) == hw  # offsets never move
    assert kc.earliest(broker.bootstrap, topic) == 0

    # after delete.retention.ms the tombstones go, without any new write
    final = wait_for(broker.bootstrap, topic, exactly_latest(latest, without=tombstoned),
                     "tombstone removal")  # fmt: skip

    # kafka-python reads the compacted log too (offset gaps, rebuilt batches)
    kp = kc.kp_consume(broker.bootstrap, topic, len(final))
    assert [(m.key, m.value, m.offset) for m in kp] == [(m.key, m.value, m.offset) for m in final]

    # a restart keeps the compacted log and the cleaner's checkpoint
    broker.restart()
    after = read_partition(broker.bootstrap, topic)
    assert exactly_latest(latest, without=tombstoned)(after)


def test_compact_delete_policy_compacts_too(make_broker, unique_topic):
    broker = make_broker(FAST_CLEANER)
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic, config={**TOPIC_CONFIG, "cleanup.policy": "compact,delete"})
    latest = produce_rounds(broker.bootstrap, topic, keys=10, rounds=5, tombstoned=set())
    wait_for(broker.bootstrap, topic, exactly_latest(latest), "compaction")


def test_keyless_records_are_rejected_by_compacted_topics(strom_broker, unique_topic):
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    err = kc.produce_expect_error(strom_broker.bootstrap, topic, Msg(None, b"no key"))
    assert err.code() == KafkaError.INVALID_RECORD


def test_idempotent_producer_batches_survive_compaction(make_broker, unique_topic):
    """The last batch of every producer stays, emptied when all its records are superseded, so
    its sequence state can be rebuilt; clients read across such empty batches."""
    broker = make_broker(FAST_CLEANER)
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic, config=TOPIC_CONFIG)
    msgs = [Msg(b"k%d" % (i % 4), b"v%d" % i * 20) for i in range(200)]
    kc.produce(broker.bootstrap, topic, msgs, partition=0, enable_idempotence=True,
               batch_num_messages=5)  # fmt: skip
    final = [Msg(b"k%d" % i, b"final-%d" % i) for i in range(4)]  # a plain producer supersedes all
    done = kc.produce(broker.bootstrap, topic, final, partition=0, linger_ms=50)
    end = kc.produce(broker.bootstrap, topic,
                     [Msg(b"end", b"end", timestamp=int(time.time() * 1000) + 5000)],
                     partition=0)[0]  # fmt: skip
    latest = {m.key: (d.offset, m.value) for m, d in zip(final, done, strict=True)}
    latest[b"end"] = (end.offset, b"end")
    got = wait_for(broker.bootstrap, topic, exactly_latest(latest), "compaction")
    kp = kc.kp_consume(broker.bootstrap, topic, len(got))
    assert [(m.key, m.offset) for m in kp] == [(m.key, m.offset) for m in got]
    heads, offset = [], 0
    with Conn(broker.bootstrap) as conn:
        while offset <= end.offset:  # every batch of every segment
            batch_heads = [h for h, _ in parse_batches(conn.fetch(topic, 0, offset).records)]
            heads += batch_heads
            offset = batch_heads[-1].base_offset + batch_heads[-1].last_offset_delta + 1
    last = [h for h in heads if h.producer_id >= 0][-1]
    assert last.count == 0  # the producer's last batch, emptied: every key is newer elsewhere
    assert last.base_sequence + last.last_offset_delta == 199  # but its last sequence is there
    broker.restart()
    more = kc.produce(broker.bootstrap, topic, [Msg(b"k0", b"after")], partition=0,
                      enable_idempotence=True)  # fmt: skip
    assert more[0].offset == end.offset + 1
