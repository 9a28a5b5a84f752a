"""DescribeTopicPartitions, DescribeProducers and DescribeLogDirs through kafka-python's admin
client (3.0, which speaks all three) against a real broker process."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic

from . import clients as kc
from .clients import Msg

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def admin(strom_broker):
    a = KafkaAdminClient(bootstrap_servers=strom_broker.bootstrap, request_timeout_ms=30000)
    yield a
    a.close()


def _create(admin: KafkaAdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)])


def test_describe_topic_partitions_pages_through_a_topic(admin, strom_broker, unique_topic):
    topic = unique_topic("dtp")
    _create(admin, topic, 5)
    kc.wait_for_topic(strom_broker.bootstrap, topic, 5)
    seen, cursor = [], None
    for _ in range(5):
        page = admin.describe_topic_partitions([topic], response_partition_limit=2, cursor=cursor)
        [t] = page["topics"]
        assert (t["name"], t["error_code"], t["is_internal"]) == (topic, 0, False)
        seen += [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
                 for p in t["partitions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    node = admin.describe_cluster()["brokers"][0]["broker_id"]
    assert seen == [(i, node, [node], [node]) for i in range(5)]


def test_describe_topic_partitions_of_a_missing_topic(admin, unique_topic):
    missing = unique_topic("dtp-missing")
    page = admin.describe_topic_partitions([missing])
    assert [(t["name"], t["error_code"], t["partitions"]) for t in page["topics"]] == [
        (missing, 3, [])]  # UNKNOWN_TOPIC_OR_PARTITION


def test_describe_producers_shows_the_idempotent_producer(admin, strom_broker, unique_topic):
    topic = unique_topic("dp")
    _create(admin, topic, 2)
    kc.wait_for_topic(strom_broker.bootstrap, topic, 2)
    kc.kp_produce(strom_broker.bootstrap, topic, [Msg(None, b"v%d" % i) for i in range(4)],
                  enable_idempotence=True)
    states = admin.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    [producer] = states[TopicPartition(topic, 0)].active_producers
    assert (producer.last_sequence, producer.current_transaction_start_offset) == (3, -1)
    assert producer.producer_id >= 0 and producer.last_timestamp > 0
    assert states[TopicPartition(topic, 1)].active_producers == []


def test_describe_log_dirs_shows_the_partitions(admin, strom_broker, unique_topic):
    topic = unique_topic("dld")
    _create(admin, topic, 2)
    kc.wait_for_topic(strom_broker.bootstrap, topic, 2)
    kc.kp_produce(strom_broker.bootstrap, topic, [Msg(None, b"x" * 100)])
    [broker] = admin.describe_log_dirs()
    [log_dir] = broker["log_dirs"]
    assert log_dir["error_code"] == 0
    assert Path(log_dir["log_dir"]) == Path(strom_broker.data_dir).absolute()
    [t] = [t for t in log_dir["topics"] if t["name"] == topic]
    sizes = {p["partition_index"]: p["partition_size"] for p in t["partitions"]}
    assert sizes.keys() == {0, 1} and sizes[0] > 100 and sizes[1] == 0
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    only = admin.describe_log_dirs({topic: [1]})[0]["log_dirs"][0]["topics"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only] == [
        (topic, [1])]
