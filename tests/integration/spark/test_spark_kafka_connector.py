"""Spark's own Kafka connector (spark-sql-kafka-0-10, the Java kafka-clients inside Spark's JVM)
reads and writes Strom topics: batch read, batch write, a streaming copy resumed from its
checkpoint, and read_committed around aborted transactions.

Maven Central does not serve the connector for PySpark 4.3 (the project's); it runs at 4.2.0,
the newest served, in a virtualenv of its own (compat/spark_kafka.py, cached under
~/.cache/strom-compat after the first run). Every result is checked with confluent-kafka.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from .conftest import consume_all, create_topic, produce

_PATH = Path(__file__).resolve().parents[3] / "compat" / "spark_kafka.py"
_spec = importlib.util.spec_from_file_location("compat_spark_kafka", _PATH)
assert _spec is not None and _spec.loader is not None
spark_kafka = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(spark_kafka)

RECORDS = 20_000
# A fresh machine makes the virtualenv (PyPI) and fetches the jars (Maven) in the first test.
pytestmark = ([pytest.mark.timeout(spark_kafka.INSTALL_TIMEOUT + spark_kafka.dist.FETCH_TIMEOUT)]
              if not spark_kafka.is_cached() else [])


@pytest.fixture(scope="module")
def connector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not spark_kafka.is_cached() and shutil.which("mvn") is None:
        pytest.skip("Maven is not installed (it fetches Spark's Kafka connector once)")
    driver = spark_kafka.ConnectorDriver(tmp_path_factory.mktemp("spark-kafka"), "local[2]", {
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    })
    try:
        yield driver
    finally:
        driver.close()


def kafka_source(bootstrap: str, topic: str, **options: str) -> dict[str, Any]:
    return {"format": "kafka",
            "options": {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **options}}


def kafka_sink(bootstrap: str, topic: str) -> dict[str, Any]:
    return {"format": "kafka", "options": {"kafka.bootstrap.servers": bootstrap, "topic": topic}}


def read_with_spark(connector: Any, bootstrap: str, topic: str, out: Path,
                    **options: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """A batch read by the connector, as (partition, offset, key, value)."""
    answer = connector.call("batch", source=kafka_source(bootstrap, topic, **options),
                            select=["partition", "offset", "key", "value"],
                            sink={"format": "jsonl", "path": str(out)})
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert answer["rows"] == len(rows)

    def unhex(v: str | None) -> bytes | None:
        return None if v is None else bytes.fromhex(v)

    return [(r["partition"], r["offset"], unhex(r["key"]), unhex(r["value"])) for r in rows]


def test_batch_read(connector, strom_broker, unique_topic, tmp_path):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 3)
    produce(bs, topic, ({"key": b"k%d" % i, "value": b"v%d" % i} for i in range(RECORDS)))
    spark_rows = read_with_spark(connector, bs, topic, tmp_path / "rows.jsonl")
    assert len(spark_rows) == RECORDS
    assert sorted(spark_rows) == sorted(consume_all(bs, topic))


def test_batch_write(connector, strom_broker, unique_topic):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 3)
    connector.call("batch", source={"range": RECORDS, "prefix": "w-"}, sink=kafka_sink(bs, topic))
    records = consume_all(bs, topic)
    assert Counter((k, v) for _, _, k, v in records) == Counter(
        (b"%d" % i, b"w-%d" % i) for i in range(RECORDS))
    # the Java producer's partitioner: one partition per key, and all three used
    by_key: dict[bytes | None, set[int]] = {}
    for p, _, k, _ in records:
        by_key.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in by_key.values())
    assert {p for p, *_ in records} == {0, 1, 2}


def test_stream_copy_resumes_from_checkpoint(connector, strom_broker, unique_topic, tmp_path):
    bs, src, dst = strom_broker.bootstrap, unique_topic("src"), unique_topic("dst")
    create_topic(bs, src, 3)
    create_topic(bs, dst, 3)
    half = RECORDS // 2
    produce(bs, src, ({"key": b"k%d" % i, "value": b"v%d" % i} for i in range(half)))
    ck = tmp_path / "ck"

    def run() -> dict[str, Any]:
        return connector.call(
            "stream", source=kafka_source(bs, src, startingOffsets="earliest",
                                          maxOffsetsPerTrigger=str(RECORDS // 4)),
            select=["key", "value"], sink=kafka_sink(bs, dst), checkpoint=str(ck))

    # maxOffsetsPerTrigger: at least two micro-batches each time (Spark rounds each
    # partition's share down, so a remainder may make one more)
    first = run()
    assert first["rows"] == half and first["batches"] >= 2
    produce(bs, src, ({"key": b"k%d" % i, "value": b"v%d" % i} for i in range(half, RECORDS)))
    second = run()  # the checkpoint's offsets: only what came since
    assert second["rows"] == RECORDS - half and second["batches"] >= 2
    assert Counter((k, v) for _, _, k, v in consume_all(bs, dst)) == Counter(
        (b"k%d" % i, b"v%d" % i) for i in range(RECORDS))


def test_read_committed_skips_aborted_transactions(connector, strom_broker, unique_topic,
                                                    tmp_path):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 2)
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{topic}", "linger.ms": 5})
    p.init_transactions(30)
    expected_committed: list[bytes] = []
    for txn, outcome in enumerate(("commit", "abort", "commit", "abort", "commit")):
        p.begin_transaction()
        values = [b"%s-%d-%d" % (outcome.encode(), txn, i) for i in range(2000)]
        for i, v in enumerate(values):
            p.produce(topic, v, key=b"%d" % i)
            if i % 500 == 0:
                p.poll(0)
        if outcome == "commit":
            p.commit_transaction(30)
            expected_committed += values
        else:
            p.flush(30)  # the records are in the log before the abort marker
            p.abort_transaction(30)
    produce(bs, topic, ({"value": b"plain-%d" % i} for i in range(100)))  # non-transactional
    expected_committed += [b"plain-%d" % i for i in range(100)]

    committed = read_with_spark(connector, bs, topic, tmp_path / "c.jsonl",
                                **{"kafka.isolation.level": "read_committed"})
    assert Counter(v for *_, v in committed) == Counter(expected_committed)
    assert sorted(committed) == sorted(consume_all(bs, topic, "read_committed"))
    everything = read_with_spark(connector, bs, topic, tmp_path / "u.jsonl")
    assert len(everything) == 10_100  # read_uncommitted: the aborted records too
    assert sorted(everything) == sorted(consume_all(bs, topic, "read_uncommitted"))

    # An open transaction: read_committed stops at its first record (the last stable offset).
    p.begin_transaction()
    for i in range(50):
        p.produce(topic, b"open-%d" % i)
    p.flush(30)
    again = read_with_spark(connector, bs, topic, tmp_path / "o.jsonl",
                            **{"kafka.isolation.level": "read_committed"})
    assert Counter(v for *_, v in again) == Counter(expected_committed)
    # ... and a streaming read_committed query sees the transaction once it is committed
    p.commit_transaction(30)
    out = tmp_path / "stream-out"
    answer = connector.call(
        "stream", source=kafka_source(bs, topic, startingOffsets="earliest",
                                      **{"kafka.isolation.level": "read_committed"}),
        select=["value"], sink={"format": "parquet", "path": str(out)},
        checkpoint=str(tmp_path / "ck"))
    assert answer["rows"] == len(expected_committed) + 50
    import pyarrow.parquet as pq

    streamed = pq.read_table(out).column("value").to_pylist()
    assert Counter(streamed) == Counter(expected_committed + [b"open-%d" % i for i in range(50)])
