"""spark.read.format("strom") against a real Strom broker: ranges, schema, headers, timestamps,
data loss, isolation level, option errors."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from .conftest import create_topic, produce, read_all


def reader(spark, bootstrap, **options):
    r = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_exact_offset_ranges(spark, strom_broker, unique_topic):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 3)
    produce(bs, topic, ({"partition": p, "key": f"k{i}".encode(), "value": f"p{p}-{i}".encode()}
                        for p in range(3) for i in range(30)))
    start = json.dumps({topic: {"0": 5, "1": -2, "2": 20}})
    end = json.dumps({topic: {"0": 10, "1": 3, "2": -1}})
    rows = reader(spark, bs, subscribe=topic, startingOffsets=start, endingOffsets=end).collect()
    got = sorted((r.partition, r.offset, r.value.decode()) for r in rows)
    want = sorted([(0, o, f"p0-{o}") for o in range(5, 10)] + [(1, o, f"p1-{o}") for o in range(3)]
                  + [(2, o, f"p2-{o}") for o in range(20, 30)])
    assert got == want
    assert {r.topic for r in rows} == {topic}

    # defaults: earliest to latest; minPartitions splits the ranges into more tasks
    everything = reader(spark, bs, subscribe=topic, minPartitions="7")
    assert everything.rdd.getNumPartitions() >= 6
    rows = everything.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in range(3) for o in range(30)]


def test_schema_headers_and_timestamps(spark, strom_broker, unique_topic):
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 2)
    produce(bs, topic, [
        {"partition": 1, "value": b"with", "key": b"k", "timestamp": 1_700_000_000_123,
         "headers": [("a", b"1"), ("b", None), ("a", b"2")]},
        {"partition": 1, "value": None, "timestamp": 1_700_000_000_456},
    ])
    base = [
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    plain = reader(spark, bs, assign=json.dumps({topic: [1]}))
    assert plain.schema == StructType(base)
    headers_type = ArrayType(StructType([StructField("key", StringType()),
                                         StructField("value", BinaryType())]))
    df = reader(spark, bs, assign=json.dumps({topic: [1]}), includeHeaders="true")
    assert df.schema == StructType([*base, StructField("headers", headers_type)])
    first, second = sorted(df.collect(), key=lambda r: r.offset)
    assert (first.key, first.value, first.partition, first.offset) == (b"k", b"with", 1, 0)
    assert first.timestamp.replace(tzinfo=dt.UTC) == dt.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert first.timestampType == 0  # CreateTime
    assert [(h.key, h.value) for h in first.headers] == [("a", b"1"), ("b", None), ("a", b"2")]
    assert (second.key, second.value, second.headers) == (None, None, None)

    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("strom").schema("x INT").option("kafka.bootstrap.servers", bs) \
            .option("subscribe", topic).load().collect()


def test_starting_and_ending_timestamps(spark, strom_broker, unique_topic):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 1)
    produce(bs, topic, ({"value": b"%d" % i, "timestamp": 1_000_000 + 1000 * i} for i in range(10)))
    by_global = reader(spark, bs, subscribe=topic, startingTimestamp="1003500",
                       endingTimestamp="1007000")
    assert sorted(r.offset for r in by_global.collect()) == [4, 5, 6]
    by_partition = reader(spark, bs, subscribe=topic,
                          startingOffsetsByTimestamp=json.dumps({topic: {"0": 1_008_000}}))
    assert sorted(r.offset for r in by_partition.collect()) == [8, 9]
    with pytest.raises(Exception, match="No offset matched"):
        reader(spark, bs, subscribe=topic, startingTimestamp="9999999999999").collect()
    late = reader(spark, bs, subscribe=topic, startingTimestamp="9999999999999",
                  startingOffsetsByTimestampStrategy="latest")
    assert late.count() == 0


def test_fail_on_data_loss_after_delete_records(spark, strom_broker, unique_topic):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 1)
    produce(bs, topic, ({"value": b"%d" % i} for i in range(20)))
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.delete_records([TopicPartition(topic, 0, 10)]).values():
        f.result(timeout=30)
    start = json.dumps({topic: {"0": 2}})
    with pytest.raises(Exception) as e:
        reader(spark, bs, subscribe=topic, startingOffsets=start).collect()
    text = str(e.value)
    assert "Cannot fetch offset 2" in text and f"{topic}-0" in text
    assert "failOnDataLoss" in text
    rows = reader(spark, bs, subscribe=topic, startingOffsets=start,
                  failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(10, 20))
    # earliest now means offset 10
    assert sorted(r.offset for r in read_all(spark, bs, topic)) == list(range(10, 20))


def test_read_committed_passthrough(spark, strom_broker, unique_topic):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 1)
    produce(bs, topic, ({"value": b"%d" % i} for i in range(5)))
    rows = read_all(spark, bs, topic, **{"kafka.isolation.level": "read_committed"})
    assert sorted(r.offset for r in rows) == list(range(5))


@pytest.mark.parametrize("options, message", [
    ({}, "One of the following options must be specified"),
    ({"subscribe": "x", "kafka.auto.offset.reset": "earliest"}, "auto.offset.reset"),
    ({"subscribe": "x", "startingOffsets": "latest"}, "can't be latest for batch"),
    ({"subscribe": "x", "kafka.no.such.setting": "1"}, "no.such.setting"),
])
def test_option_errors(spark, strom_broker, options, message):
    with pytest.raises(Exception, match=message):
        reader(spark, strom_broker.bootstrap, **options).collect()
