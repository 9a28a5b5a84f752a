"""Offsets without records, end to end through Spark: a compacted topic (the cleaner removed
older values of each key) and a transactional topic (commit/abort markers, aborted records,
an open transaction at the end).

The source must return exactly what a plain consumer sees (same offsets, keys and values),
never hang on a range that ends on an offset with no record, and never read past a range's end.
"""

from __future__ import annotations

import itertools
import time
import uuid

from confluent_kafka import Producer

from ..clients import read_partition
from .conftest import create_topic, wait_for

FAST_CLEANER = {"log.cleaner.backoff.ms": 100}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
}


def consumer_view(bootstrap: str, topic: str, isolation: str = "read_uncommitted",
                  ) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of partition 0 as a plain consumer reads it, to the end."""
    return [(m.offset, m.key, m.value)
            for m in read_partition(bootstrap, topic, isolation=isolation)]


def spark_view(spark, bootstrap: str, topic: str, **options: str):
    r = (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic))
    for k, v in options.items():
        r = r.option(k, v)
    return sorted((row.offset, row.key, row.value) for row in r.load().collect())


def stream_view(spark, bootstrap: str, topic: str, checkpoint, **options: str):
    """Everything through a streaming query with Trigger.AvailableNow: (rows, batch sizes)."""
    name = f"gaps_{uuid.uuid4().hex[:10]}"
    r = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().select("offset", "key", "value").writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(checkpoint / name)).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive and q.exception() is None, q.exception()
    rows = sorted((row.offset, row.key, row.value)
                  for row in spark.sql(f"select * from {name}").collect())
    return rows, [p["numInputRows"] for p in q.recentProgress]


def test_compacted_topic_gaps(spark, make_broker, unique_topic, tmp_path):
    broker = make_broker(FAST_CLEANER)
    bs, topic = broker.bootstrap, unique_topic()
    create_topic(bs, topic, 1, COMPACTED)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.num.messages": 5})
    last: dict[bytes, bytes] = {}
    for rnd in range(6):
        # the last round rewrites only the even keys: the odd keys' survivors sit one offset
        # apart in round 4, with gaps between them
        for k in range(0, 20, 2 if rnd == 5 else 1):
            key, value = b"key-%02d" % k, b"round-%d-%02d" % (rnd, k) * 8
            p.produce(topic, value, key=key, partition=0)
            last[key] = value
    # a record stamped in the future rolls the segment with the last round: all of it may be
    # cleaned (the active segment never is)
    p.produce(topic, b"end", key=b"end", partition=0, timestamp=int(time.time() * 1000) + 5000)
    assert p.flush(30) == 0

    def compacted():
        view = consumer_view(bs, topic)
        keys = [k for _, k, _ in view]
        return view if len(keys) == len(set(keys)) else None

    want = wait_for(compacted, "the cleaner to keep one record per key", timeout=90)
    offsets = [o for o, _, _ in want]
    gaps = [(a, b) for a, b in itertools.pairwise(offsets) if b - a > 1]
    assert gaps, offsets
    assert {k: v for _, k, v in want if k != b"end"} == last

    # everything: the same records at the same offsets as the consumer sees
    assert spark_view(spark, bs, topic) == want
    # ranges that start and end inside gaps
    a, b = gaps[len(gaps) // 2]
    assert spark_view(spark, bs, topic, startingOffsets=f'{{"{topic}": {{"0": {a + 1}}}}}',
                      endingOffsets=f'{{"{topic}": {{"0": {b}}}}}') == []
    assert spark_view(spark, bs, topic, startingOffsets=f'{{"{topic}": {{"0": {a}}}}}',
                      endingOffsets=f'{{"{topic}": {{"0": {b}}}}}') == \
        [r for r in want if r[0] == a]
    assert spark_view(spark, bs, topic, startingOffsets=f'{{"{topic}": {{"0": {a + 1}}}}}') == \
        [r for r in want if r[0] >= b]
    # micro-batches of 7 offsets: many end in a gap or hold no record at all
    rows, sizes = stream_view(spark, bs, topic, tmp_path, maxOffsetsPerTrigger="7")
    assert rows == want
    assert sum(sizes) == len(want) and 0 in sizes, sizes


def test_transaction_markers_aborted_records_and_an_open_transaction(spark, strom_broker,
                                                                     unique_topic, tmp_path):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 1)
    txn = Producer({"bootstrap.servers": bs, "transactional.id": f"gaps-{uuid.uuid4().hex}",
                    "linger.ms": 5})
    txn.init_transactions(30)
    for n, outcome in enumerate(["commit", "abort", "commit", "abort", "commit"]):
        txn.begin_transaction()
        for i in range(4):
            txn.produce(topic, b"%s-%d-%d" % (outcome.encode(), n, i), partition=0)
        if outcome == "commit":
            txn.commit_transaction(30)
        else:  # send first: librdkafka purges unsent records on abort, and they must be in the log
            assert txn.flush(30) == 0
            txn.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, b"plain", partition=0)
    assert plain.flush(30) == 0
    committed = consumer_view(bs, topic, "read_committed")
    everything = consumer_view(bs, topic, "read_uncommitted")
    assert len(committed) == 13 and len(everything) == 21  # 5 markers take offsets too
    assert not any(v.startswith(b"abort") for _, _, v in committed)

    rc = {"kafka.isolation.level": "read_committed"}
    assert spark_view(spark, bs, topic, **rc) == committed
    assert spark_view(spark, bs, topic) == everything
    rows, sizes = stream_view(spark, bs, topic, tmp_path, maxOffsetsPerTrigger="3", **rc)
    assert rows == committed and 0 in sizes, sizes  # batches of only markers / aborted data

    # an open transaction at the end: read_committed stops at the last stable offset (no wait
    # for records it may never see), read_uncommitted reads the open records
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, b"open-%d" % i, partition=0)
    txn.flush(30)
    try:
        assert spark_view(spark, bs, topic, **rc) == committed
        with_open = spark_view(spark, bs, topic)
        assert with_open[:len(everything)] == everything
        assert [v for _, _, v in with_open[len(everything):]] == [b"open-0", b"open-1", b"open-2"]
    finally:
        txn.abort_transaction(30)
