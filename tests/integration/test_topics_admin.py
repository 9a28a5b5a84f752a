"""Topic administration through confluent-kafka's AdminClient: the errors Kafka gives, and their effects."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from . import clients as kc
from .clients import Msg
from .wire import OFFSET_OUT_OF_RANGE, Conn

pytestmark = pytest.mark.timeout(90)

T = 30  # seconds for any admin future


def error_code(future) -> int:
    """The Kafka error code a failed admin future carries (fails the test if it succeeded)."""
    with pytest.raises(KafkaException) as info:
        future.result(T)
    return info.value.args[0].code()


def create(bs: str, topic: NewTopic, **kw):
    a = kc.admin(bs)
    fut = a.create_topics([topic], operation_timeout=T, request_timeout=T, **kw)[topic.topic]
    fut.admin_client = a  # the handle must outlive the future, or librdkafka cancels it
    return fut


def topic_configs(bs: str, topic: str) -> dict[str, ConfigEntry]:
    a = kc.admin(bs)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return a.describe_configs([res], request_timeout=T)[res].result(T)


# --------------------------------------------------------------------------- create


def test_create_validate_only_creates_nothing(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    assert create(bs, NewTopic(topic, 3, 1), validate_only=True).result(T) is None
    assert topic not in kc.topic_names(bs)
    create(bs, NewTopic(topic, 3, 1)).result(T)
    kc.wait_for_topic(bs, topic, 3)


@pytest.mark.parametrize(
    "name", ["bad name", "bad/name", "bad:name", ".", "..", "x" * 250, "ünïcode"]
)
def test_create_invalid_name(strom_broker, name):
    bs = strom_broker.bootstrap
    assert error_code(create(bs, NewTopic(name, 1, 1))) == KafkaError.TOPIC_EXCEPTION  # 17
    assert name not in kc.topic_names(bs)


def test_create_existing(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, partitions=2)
    assert error_code(create(bs, NewTopic(topic, 5, 1))) == KafkaError.TOPIC_ALREADY_EXISTS
    assert error_code(create(bs, NewTopic(topic, 5, 1), validate_only=True)) == 36
    kc.wait_for_topic(bs, topic, 2)  # untouched


@pytest.mark.parametrize(
    "config",
    [
        {"retention.ms": "not-a-number"},
        {"cleanup.policy": "sometimes"},
        {"max.message.bytes": "-5"},
        {"no.such.topic.config": "1"},
    ],
)
def test_create_invalid_config(strom_broker, unique_topic, config):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    assert error_code(create(bs, NewTopic(topic, 1, 1, config=config))) == KafkaError.INVALID_CONFIG
    assert topic not in kc.topic_names(bs)


def test_create_invalid_partitions_and_replication(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    assert error_code(create(bs, NewTopic(topic, 1, 3))) == KafkaError.INVALID_REPLICATION_FACTOR
    assert topic not in kc.topic_names(bs)


# --------------------------------------------------------------------------- delete


def test_delete_unknown_topic(strom_broker, unique_topic):
    a = kc.admin(strom_broker.bootstrap)
    topic = unique_topic()
    fut = a.delete_topics([topic], operation_timeout=T, request_timeout=T)[topic]
    assert error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_then_recreate_serves_no_old_data(strom_broker, unique_topic):
    """A consumer that read the old topic keeps going and only ever sees the new topic's records."""
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    old = [Msg(b"old", f"old-{i}".encode()) for i in range(20)]
    kc.produce(bs, topic, old, partition=0)
    old_id = kc.topic_id(bs, topic)

    held = kc.HeldConsumer(bs, topic, first=20, then=5)
    try:
        assert held.receive() == [m.value for m in old]

        a = kc.admin(bs)
        a.delete_topics([topic], operation_timeout=T, request_timeout=T)[topic].result(T)
        kc.create_topic(bs, topic)
        assert kc.topic_id(bs, topic) != old_id
        assert (kc.earliest(bs, topic), kc.latest(bs, topic)) == (0, 0)

        new = [Msg(b"new", f"new-{i}".encode()) for i in range(5)]
        kc.produce(bs, topic, new, partition=0)

        # The held consumer was at offset 20 of the old topic: it must not get anything old back.
        held.go()
        assert held.receive() == [m.value for m in new]
    finally:
        held.close()
    assert held.proc.exitcode == 0, f"held consumer died with {held.proc.exitcode}"

    fresh = kc.consume(bs, topic, 5)
    assert [m.value for m in fresh] == [m.value for m in new]
    assert [m.offset for m in fresh] == list(range(5))


# --------------------------------------------------------------------------- partitions


def test_create_partitions(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, partitions=1)
    a = kc.admin(bs)

    fut = a.create_partitions([NewPartitions(topic, 3)], validate_only=True, request_timeout=T)[
        topic
    ]
    fut.result(T)
    kc.wait_for_topic(bs, topic, 1)

    a.create_partitions([NewPartitions(topic, 3)], request_timeout=T)[topic].result(T)
    kc.wait_for_topic(bs, topic, 3)
    sent = [Msg(b"k", f"p{p}".encode(), partition=p) for p in range(3)]
    kc.produce(bs, topic, sent)
    for p in range(3):
        assert [m.value for m in kc.consume(bs, topic, 1, partition=p)] == [f"p{p}".encode()]

    shrink = a.create_partitions([NewPartitions(topic, 2)], request_timeout=T)[topic]
    assert error_code(shrink) == KafkaError.INVALID_PARTITIONS
    missing = unique_topic("missing")
    fut = a.create_partitions([NewPartitions(missing, 2)], request_timeout=T)[missing]
    assert error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART
    kc.wait_for_topic(bs, topic, 3)


# --------------------------------------------------------------------------- configs


def test_describe_configs_sources_and_defaults(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, config={"retention.ms": "3600000", "cleanup.policy": "delete"})
    cfg = topic_configs(bs, topic)

    set_explicitly = cfg["retention.ms"]
    assert set_explicitly.value == "3600000"
    assert set_explicitly.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not set_explicitly.is_default
    assert cfg["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    defaults = {
        "segment.bytes": "1073741824",
        "max.message.bytes": "1048588",
        "retention.bytes": "-1",
        "message.timestamp.type": "CreateTime",
        "min.insync.replicas": "1",
        "compression.type": "producer",
    }
    for name, value in defaults.items():
        entry = cfg[name]
        assert (name, entry.value) == (name, value)
        assert entry.source == ConfigSource.DEFAULT_CONFIG.value, name
        assert entry.is_default, name


def test_describe_broker_configs(strom_broker):
    bs = strom_broker.bootstrap
    a = kc.admin(bs)
    cluster = a.describe_cluster(request_timeout=T).result(T)
    res = ConfigResource(ConfigResource.Type.BROKER, str(cluster.nodes[0].id))
    cfg = a.describe_configs([res], request_timeout=T)[res].result(T)
    # Given on the command line (--override) -> a static broker config.
    assert cfg["auto.create.topics.enable"].value == "true"
    assert cfg["auto.create.topics.enable"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert cfg["message.max.bytes"].value == "1048588"
    assert cfg["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert cfg["num.partitions"].value == "1"


def test_alter_configs_replaces_the_whole_set(strom_broker, unique_topic):
    """Legacy AlterConfigs: the given set becomes the topic's config; other overrides go away."""
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, config={"retention.ms": "3600000"})
    a = kc.admin(bs)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"max.message.bytes": "5000"})
    a.alter_configs([res], request_timeout=T)[res].result(T)

    cfg = topic_configs(bs, topic)
    assert cfg["max.message.bytes"].value == "5000"
    assert cfg["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["retention.ms"].is_default
    assert cfg["retention.ms"].value == "604800000"

    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "soon"})
    assert error_code(a.alter_configs([bad], request_timeout=T)[bad]) == KafkaError.INVALID_CONFIG
    assert topic_configs(bs, topic)["max.message.bytes"].value == "5000"


def test_incremental_alter_configs(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, config={"retention.ms": "3600000"})
    a = kc.admin(bs)

    def alter(*entries: ConfigEntry):
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=list(entries))
        return a.incremental_alter_configs([res], request_timeout=T)[res]

    alter(
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)
    ).result(T)
    cfg = topic_configs(bs, topic)
    assert cfg["max.message.bytes"].value == "2000"
    assert cfg["retention.ms"].value == "3600000"  # untouched, unlike legacy AlterConfigs

    # The new limit is in force at once.
    err = kc.produce_expect_error(
        bs, topic, Msg(None, b"x" * 5000), **{"message.max.bytes": 10_000_000}
    )
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    kc.produce(bs, topic, [Msg(None, b"x" * 1000)], partition=0)

    alter(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)).result(
        T
    )
    cfg = topic_configs(bs, topic)
    assert cfg["retention.ms"].is_default and cfg["retention.ms"].value == "604800000"

    bad = alter(ConfigEntry("segment.bytes", "huge", incremental_operation=AlterConfigOpType.SET))
    assert error_code(bad) == KafkaError.INVALID_CONFIG

    missing = unique_topic("missing")
    res = ConfigResource(
        ConfigResource.Type.TOPIC, missing,
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )  # fmt: skip
    fut = a.incremental_alter_configs([res], request_timeout=T)[res]
    assert error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART


# --------------------------------------------------------------------------- records


def test_delete_records(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    sent = [Msg(None, f"v{i}".encode()) for i in range(10)]
    for chunk in (sent[:3], sent[3:7], sent[7:]):
        kc.produce(bs, topic, chunk, partition=0)
    a = kc.admin(bs)

    tp = TopicPartition(topic, 0, 5)  # inside the second batch
    result = a.delete_records([tp], request_timeout=T)[tp].result(T)
    assert result.low_watermark == 5
    assert kc.earliest(bs, topic) == 5
    assert kc.latest(bs, topic) == 10

    # Reading below the log start: the broker says OFFSET_OUT_OF_RANGE...
    with Conn(bs) as conn:
        assert conn.fetch(topic, 0, 2).error == OFFSET_OUT_OF_RANGE
    # ...and a client with auto.offset.reset=earliest starts again at the new log start.
    got = kc.consume(bs, topic, 5, offset=2, **{"auto.offset.reset": "earliest"})
    assert [(m.offset, m.value) for m in got] == [(i, f"v{i}".encode()) for i in range(5, 10)]

    c = kc.consumer(bs, **{"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, 2)])
        msg = c.poll(15)
        assert msg is not None and msg.error() is not None
        assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET
    finally:
        c.close()

    # Deleting up to the high watermark (-1) empties the partition.
    everything = TopicPartition(topic, 0, -1)
    assert (
        a.delete_records([everything], request_timeout=T)[everything].result(T).low_watermark == 10
    )
    assert (kc.earliest(bs, topic), kc.latest(bs, topic)) == (10, 10)
    beyond = TopicPartition(topic, 0, 50)
    fut = a.delete_records([beyond], request_timeout=T)[beyond]
    assert error_code(fut) == KafkaError.OFFSET_OUT_OF_RANGE

    kc.produce(bs, topic, [Msg(None, b"after")], partition=0)
    assert [(m.offset, m.value) for m in kc.consume(bs, topic, 1, offset=10)] == [(10, b"after")]


# --------------------------------------------------------------------------- cluster


def test_describe_cluster(strom_broker):
    a = kc.admin(strom_broker.bootstrap)
    cluster = a.describe_cluster(request_timeout=T).result(T)
    assert cluster.cluster_id
    assert len(cluster.nodes) == 1
    node = cluster.nodes[0]
    assert (node.host, node.port) == ("127.0.0.1", strom_broker.port)
    assert cluster.controller is not None and cluster.controller.id == node.id
    md = a.list_topics(timeout=T)
    assert set(md.brokers) == {node.id}
    assert md.cluster_id == cluster.cluster_id


def test_earliest_offset_spec_matches_watermarks(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    kc.produce(bs, topic, [Msg(None, b"a"), Msg(None, b"b")], partition=0)
    assert kc.list_offset(bs, topic, 0, OffsetSpec.earliest()).offset == 0
    assert kc.list_offset(bs, topic, 0, OffsetSpec.latest()).offset == 2
