"""writeStream / write .format("strom") with exactlyOnce=true: a task retried after it wrote part
of its rows, and a micro-batch replayed from the checkpoint, leave every row exactly once for
read_committed consumers."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from .conftest import create_topic, produce, read_all, wait_for

PAD = 200  # bytes per value: enough rows to reach the writer before the injected failure


def end_offsets(consumer: Consumer, topic: str, partitions: int) -> dict[int, int]:
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(partitions)}


def read_topic(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of ``topic`` as a consumer with ``isolation`` sees it, once no transaction
    is open in it any more (EndTxn answers before the markers are written: until they are,
    the last stable offset trails the high watermark)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eo-check", "enable.auto.commit": False,
                  "isolation.level": isolation})
    other = Consumer({"bootstrap.servers": bootstrap, "group.id": "eo-check",
                      "isolation.level": "read_committed" if isolation == "read_uncommitted"
                      else "read_uncommitted"})
    try:
        wait_for(lambda: end_offsets(c, topic, partitions) == end_offsets(other, topic, partitions),
                 f"no open transaction in {topic}", timeout=30)
        ends = end_offsets(c, topic, partitions)
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while any(c.position([TopicPartition(topic, p)])[0].offset < end
                  for p, end in ends.items() if end > 0):
            assert time.monotonic() < deadline, "timed out reading back the topic"
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    values.append(m.value())
        return values
    finally:
        c.close()
        other.close()


def fail_once_after_partial_write(bootstrap: str, dst: str, trigger_value: str):
    """A UDF that pads values and, in attempt 0 of Spark partition 1, on ``trigger_value``:
    waits until that task's writer has put records of its open transaction into ``dst``
    partition 1, then fails the task. Spark (local[2,3]) runs the task again."""

    def pad(value):  # no type hints: PySpark would try to infer an Arrow UDF from them
        import time as t

        from confluent_kafka import Consumer as C
        from confluent_kafka import TopicPartition as TP
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and ctx.partitionId() == 1 and value == trigger_value:
            c = C({"bootstrap.servers": bootstrap, "group.id": "eo-probe",
                   "isolation.level": "read_uncommitted"})
            deadline = t.monotonic() + 30
            while (c.get_watermark_offsets(TP(dst, 1), 5)[1] == 0
                   and t.monotonic() < deadline):
                t.sleep(0.02)  # polling the broker, bounded by the deadline
            c.close()
            raise RuntimeError("injected failure after a partial write")
        return value.rjust(PAD, ".")

    return pad


@pytest.fixture
def small_arrow_batches(spark):
    """Arrow batches of 100 rows to the Python writer, so that it writes before the task fails."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    yield
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_task_retry_after_partial_write(spark, strom_broker, unique_topic, tmp_path,
                                        small_arrow_batches):
    from pyspark.sql.functions import col, spark_partition_id, udf

    bs = strom_broker.bootstrap
    src, dst = unique_topic("src"), unique_topic("dst")
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    n = 1000
    produce(bs, src, ({"partition": i % 2, "value": b"%d" % i} for i in range(2 * n)))
    # row 701 of source partition 1 (one task per source partition: Spark partition 1) fails
    # attempt 0; each Spark partition writes to the destination partition of the same number
    pad = udf(fail_once_after_partial_write(bs, dst, str(2 * 700 + 1)), "string")
    q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
         .option("subscribe", src).option("startingOffsets", "earliest").load()
         .select(pad(col("value").cast("string")).alias("value"),
                 spark_partition_id().alias("partition"))
         .writeStream.format("strom").option("kafka.bootstrap.servers", bs)
         .option("topic", dst).option("exactlyOnce", "true")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None

    expected = sorted(str(i).rjust(PAD, ".").encode() for i in range(2 * n))
    committed = read_topic(bs, dst, 2, "read_committed")
    assert sorted(committed) == expected
    # the failed attempt really wrote part of its rows; they were aborted, not committed
    everything = read_topic(bs, dst, 2, "read_uncommitted")
    assert len(everything) > len(committed)
    assert set(everything) == set(committed)
    # the strom source honours read_committed as well
    rows = read_all(spark, bs, dst, **{"kafka.isolation.level": "read_committed"})
    assert sorted(r.value for r in rows) == expected


def marks(bootstrap: str, group: str) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                               require_stable=True)[group].result(timeout=30)
    return [tp.metadata for tp in result.topic_partitions]


def test_replayed_micro_batch_is_not_written_twice(spark, strom_broker, unique_topic, tmp_path):
    import json

    bs = strom_broker.bootstrap
    src, dst = unique_topic("src"), unique_topic("dst")
    create_topic(bs, src, 3)
    create_topic(bs, dst, 2)
    produce(bs, src, ({"partition": i % 3, "key": b"k%d" % i, "value": b"v%d" % i}
                      for i in range(300)))
    ck: Path = tmp_path / "ck"

    def run():
        q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
             .option("subscribe", src).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "150").load()
             .selectExpr("key", "value")
             .writeStream.format("strom").option("kafka.bootstrap.servers", bs)
             .option("topic", dst).option("exactlyOnce", "true")
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        return q

    first = run()  # batches 0 and 1, three tasks each
    assert sorted(p.name for p in (ck / "commits").iterdir() if p.name.isdigit()) == ["0", "1"]
    # As if the driver died after the batch's transactions committed but before Spark logged
    # the batch as done: the restart runs batch 1 again. New records, in one source partition
    # only, make a batch 2 with a single task (Spark partition 0 again, other rows).
    for name in ("1", ".1.crc"):  # the commit record and the local filesystem's checksum
        (ck / "commits" / name).unlink(missing_ok=True)
    produce(bs, src, ({"partition": 2, "key": b"k%d" % i, "value": b"v%d" % i}
                      for i in range(300, 360)))
    second = run()
    assert second.id == first.id
    assert (ck / "commits" / "1").exists() and (ck / "commits" / "2").exists()
    replayed = [p for p in second.recentProgress if p["batchId"] == 1]
    assert replayed and replayed[0]["numInputRows"] == 150  # Spark did run batch 1 again

    expected = sorted(b"v%d" % i for i in range(360))
    committed = read_topic(bs, dst, 2, "read_committed")
    assert sorted(committed) == expected
    # nothing was even attempted twice: no aborted copies either
    assert Counter(read_topic(bs, dst, 2, "read_uncommitted")) == Counter(committed)

    # what each task recorded: Spark partitions 1 and 2 last wrote batch 1, partition 0 batch 2
    last = {}
    for p in range(3):
        found = [json.loads(m) for m in marks(bs, f"strom-sink-{first.id}-{p}")]
        assert {m["write"] for m in found} == {str(first.id)}
        last[p] = max(m["batch"] for m in found)
    assert last == {0: 2, 1: 1, 2: 1}


def test_batch_write_exactly_once(spark, strom_broker, unique_topic):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 2)
    df = spark.range(0, 500, 1, 3).selectExpr("cast(id as string) as value")
    (df.write.format("strom").option("kafka.bootstrap.servers", bs).option("topic", topic)
     .option("exactlyOnce", "true").mode("append").save())
    (df.write.format("strom").option("kafka.bootstrap.servers", bs).option("topic", topic)
     .option("exactlyOnce", "true").mode("append").save())  # a new write: written again
    committed = read_topic(bs, topic, 2, "read_committed")
    assert Counter(committed) == Counter({b"%d" % i: 2 for i in range(500)})


def test_foreach_batch_write_skips_a_replayed_micro_batch(spark, strom_broker, unique_topic,
                                                        tmp_path):
    import json

    bs = strom_broker.bootstrap
    src, dst = unique_topic("src"), unique_topic("dst")
    create_topic(bs, src, 2)
    create_topic(bs, dst, 1)
    produce(bs, src, ({"partition": i % 2, "value": b"v%d" % i} for i in range(100)))
    ck, prefix = tmp_path / "ck", f"fb-{dst}"

    def write_batch(df, batch_id):
        (df.selectExpr("value").write.format("strom").option("kafka.bootstrap.servers", bs)
         .option("topic", dst).option("exactlyOnce", "true")
         .option("transactionalIdPrefix", prefix).mode("append").save())

    def run():
        q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
             .option("subscribe", src).option("startingOffsets", "earliest").load()
             .writeStream.foreachBatch(write_batch).option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        return q

    first = run()
    for name in ("0", ".0.crc"):
        (ck / "commits" / name).unlink(missing_ok=True)
    second = run()  # foreachBatch runs batch 0 again; both of its writes' tasks skip
    assert [p["batchId"] for p in second.recentProgress if p["numInputRows"]] == [0]

    assert Counter(read_topic(bs, dst, 1, "read_uncommitted")) == Counter(
        b"v%d" % i for i in range(100))
    for p in range(2):
        (mark,) = [json.loads(m) for m in marks(bs, f"{prefix}-{p}")]
        assert (mark["write"], mark["batch"], mark["records"]) == (str(first.id), 0, 50)
