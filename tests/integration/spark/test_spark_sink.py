"""df.write / df.writeStream .format("strom"): round trips through a real broker."""

from __future__ import annotations

import pytest

from .conftest import create_topic, produce, read_all


def sink(df, bootstrap, **options):
    w = df.write.format("strom").option("kafka.bootstrap.servers", bootstrap).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_batch_round_trip_with_every_column(spark, strom_broker, unique_topic):
    from pyspark.sql import Row
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    bs = strom_broker.bootstrap
    a, b = unique_topic("a"), unique_topic("b")
    create_topic(bs, a, 2)
    create_topic(bs, b, 1)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([
        StructField("topic", StringType()), StructField("key", StringType()),
        StructField("value", BinaryType()), StructField("partition", IntegerType()),
        StructField("headers", ArrayType(header)), StructField("ignored", StringType()),
    ])
    rows = [
        (a, "k1", b"v1", 1, [Row(key="h", value=b"x")], "-"),
        (a, None, b"v2", 0, None, "-"),
        (b, "k3", None, None, [], "-"),  # null value: a tombstone
    ]
    sink(spark.createDataFrame(rows, schema), bs).save()

    got_a = sorted(read_all(spark, bs, a, includeHeaders="true"), key=lambda r: r.value)
    assert [(r.key, r.value, r.partition) for r in got_a] == [(b"k1", b"v1", 1), (None, b"v2", 0)]
    assert [(h.key, h.value) for h in got_a[0].headers] == [("h", b"x")]
    assert got_a[1].headers is None
    (got_b,) = read_all(spark, bs, b, includeHeaders="true")
    assert (got_b.key, got_b.value, got_b.headers) == (b"k3", None, None)

    # the topic option wins over the topic column; string values are written as UTF-8
    df = spark.createDataFrame([(a, "text")], "topic STRING, value STRING")
    sink(df, bs, topic=b).save()
    assert sorted((r.value for r in read_all(spark, bs, b) if r.value), key=bytes) == [b"text"]


def test_keyed_records_land_where_the_java_client_puts_them(spark, strom_broker, unique_topic):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 4)
    keys = [f"user-{i}" for i in range(40)]
    sink(spark.createDataFrame([(k, k) for k in keys], "key STRING, value STRING"), bs,
         topic=topic).save()
    where = {r.key.decode(): r.partition for r in read_all(spark, bs, topic)}
    # murmur2 partitioning (the Java client's): one fixed partition per key, spread out
    produce(bs, topic, ({"key": k.encode(), "value": b"again"} for k in keys))
    again = {r.key.decode(): r.partition for r in read_all(spark, bs, topic)
             if r.value == b"again"}
    assert where == again
    assert len(set(where.values())) > 1


def test_streaming_sink_round_trip(spark, strom_broker, unique_topic, tmp_path):
    bs = strom_broker.bootstrap
    src, dst = unique_topic("src"), unique_topic("dst")
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    produce(bs, src, ({"partition": i % 2, "key": b"k%d" % i, "value": b"v%d" % i}
                      for i in range(200)))
    q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
         .option("subscribe", src).option("startingOffsets", "earliest").load()
         .selectExpr("key", "upper(cast(value as string)) as value", "partition")
         .writeStream.format("strom").option("kafka.bootstrap.servers", bs)
         .option("topic", dst).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = sorted((r.partition, r.key, r.value) for r in read_all(spark, bs, dst))
    assert got == sorted((i % 2, b"k%d" % i, b"V%d" % i) for i in range(200))


@pytest.mark.parametrize("ddl, options, message", [
    ("key STRING", {"topic": "t"}, "Required attribute 'value' not found"),
    ("value STRING", {}, "topic option required"),
    ("value INT", {"topic": "t"}, "value attribute type must be a string or binary"),
    ("value STRING, partition STRING", {"topic": "t"}, "partition attribute type must be an int"),
    ("value STRING", {"topic": "t", "kafka.transactional.id": "x"},
     "derives one transactional id per Spark task"),
    ("value STRING", {"topic": "t", "transactionalIdPrefix": "p"}, "needs exactlyOnce=true"),
])
def test_sink_rejects_bad_input(spark, strom_broker, ddl, options, message):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        sink(df, strom_broker.bootstrap, **options).save()


def test_overwrite_is_refused(spark, strom_broker):
    df = spark.createDataFrame([("x",)], "value STRING")
    with pytest.raises(Exception, match="Overwrite is not allowed"):
        sink(df, strom_broker.bootstrap, topic="t").mode("overwrite").save()
