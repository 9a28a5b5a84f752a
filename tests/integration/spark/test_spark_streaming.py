"""spark.readStream.format("strom"): admission control, Trigger.AvailableNow, new topics and
partitions, data loss."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from .conftest import create_topic, produce, wait_for


def stream(spark, bootstrap, **options):
    r = spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def to_memory(df, tmp_path, **trigger):
    name = f"q_{uuid.uuid4().hex[:10]}"
    q = (df.select("topic", "partition", "offset", "value").writeStream.format("memory")
         .queryName(name).option("checkpointLocation", str(tmp_path / name))
         .trigger(**trigger).start())
    return q, name


def test_max_offsets_per_trigger_with_available_now(spark, strom_broker, unique_topic, tmp_path):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 3)
    backlog = {0: 600, 1: 300, 2: 6}
    produce(bs, topic, ({"partition": p, "value": b"%d" % i}
                        for p, n in backlog.items() for i in range(n)))
    df = stream(spark, bs, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="200")
    q, name = to_memory(df, tmp_path, availableNow=True)
    q.awaitTermination(120)
    assert not q.isActive and q.exception() is None
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    sizes = [p["numInputRows"] for p in batches]
    assert sum(sizes) == 906
    assert len(batches) >= 5  # 906 offsets, 200 per trigger
    assert all(s <= 200 + 3 for s in sizes), sizes  # at most one extra per tiny share
    ends = [json.loads(p["sources"][0]["endOffset"]) for p in batches]
    assert list(ends[0]) == [topic] and list(ends[0][topic]) == ["0", "1", "2"]
    # the small partition is not starved: it advances in the first batch already
    assert ends[0][topic]["2"] >= 1 and ends[0][topic]["0"] < 600
    assert ends[-1][topic] == {"0": 600, "1": 300, "2": 6}
    rows = spark.sql(f"select partition, offset from {name}").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p, n in backlog.items() for o in range(n)]


def test_pattern_picks_up_new_topics_and_partitions(spark, strom_broker, unique_topic, tmp_path):
    bs = strom_broker.bootstrap
    prefix = unique_topic("pat").replace(".", "_")
    first, second = f"{prefix}.a", f"{prefix}.b"
    create_topic(bs, first, 1)
    produce(bs, first, ({"value": b"a%d" % i} for i in range(5)))
    df = stream(spark, bs, subscribePattern=f"{prefix}\\..*", startingOffsets="earliest",
                metadataRefreshMs="0")
    q, name = to_memory(df, tmp_path, processingTime="300 milliseconds")
    try:
        def rows():
            return sorted((r.topic, r.partition, r.offset)
                          for r in spark.sql(f"select * from {name}").collect())

        wait_for(lambda: len(rows()) == 5, "the first topic's records")
        # a new topic matching the pattern is read from its earliest offset
        create_topic(bs, second, 2)
        produce(bs, second, ({"partition": i % 2, "value": b"b%d" % i} for i in range(6)))
        wait_for(lambda: len(rows()) == 11, "the new topic's records")
        # so is a partition added to a topic the query already reads
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_partitions([NewPartitions(first, 2)]).values():
            f.result(timeout=30)
        wait_for(lambda: len(admin.list_topics(first, timeout=10).topics[first].partitions) == 2,
                 "the new partition")
        produce(bs, first, ({"partition": 1, "value": b"n%d" % i} for i in range(3)))
        wait_for(lambda: len(rows()) == 14, "the new partition's records")
        assert rows() == sorted(
            [(first, 0, o) for o in range(5)] + [(first, 1, o) for o in range(3)]
            + [(second, 0, o) for o in range(3)] + [(second, 1, o) for o in range(3)])
        assert q.exception() is None
    finally:
        q.stop()


def test_stream_fail_on_data_loss(spark, strom_broker, unique_topic, tmp_path):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 1)
    produce(bs, topic, ({"value": b"%d" % i} for i in range(20)))
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.delete_records([TopicPartition(topic, 0, 10)]).values():
        f.result(timeout=30)
    start = json.dumps({topic: {"0": 2}})

    q, _ = to_memory(stream(spark, bs, subscribe=topic, startingOffsets=start), tmp_path,
                     availableNow=True)
    with pytest.raises(Exception) as e:
        q.awaitTermination(120)
    assert "Cannot fetch offset 2" in str(e.value) and "failOnDataLoss" in str(e.value)

    q, name = to_memory(stream(spark, bs, subscribe=topic, startingOffsets=start,
                               failOnDataLoss="false"), tmp_path, availableNow=True)
    q.awaitTermination(120)
    assert q.exception() is None
    rows = spark.sql(f"select offset from {name}").collect()
    assert sorted(r.offset for r in rows) == list(range(10, 20))
