"""auto.create.topics.enable and num.partitions: what Metadata and Produce do with unknown topics."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

from . import clients as kc
from .clients import Msg
from .wire import (
    INVALID_TOPIC_EXCEPTION,
    LEADER_NOT_AVAILABLE,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    Conn,
    simple_batch,
)

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def no_auto_create(make_module_broker):
    return make_module_broker({"auto.create.topics.enable": "false"})


@pytest.fixture(scope="module")
def auto_create_3(make_module_broker):
    return make_module_broker({"auto.create.topics.enable": "true", "num.partitions": 3})


def metadata_until_ready(conn: Conn, topic: str, allow: bool, timeout: float = 20.0):
    """Repeat Metadata until the topic has no error (auto-creation may answer LEADER_NOT_AVAILABLE)."""
    deadline = time.monotonic() + timeout
    while True:
        _, topics = conn.metadata([topic], allow_auto_create=allow)
        t = topics[topic]
        ready = (
            t.error == NONE and t.partitions and all(e == NONE for e, _ in t.partitions.values())
        )
        if ready or time.monotonic() > deadline:
            return t
        assert t.error in (NONE, LEADER_NOT_AVAILABLE), t
        time.sleep(0.05)


# --------------------------------------------------------------------------- off


def test_produce_to_missing_topic_is_rejected(no_auto_create, unique_topic):
    topic = unique_topic()
    with Conn(no_auto_create.bootstrap) as conn:
        assert conn.produce(topic, 0, simple_batch(b"v")).error == UNKNOWN_TOPIC_OR_PARTITION
        _, topics = conn.metadata([topic], allow_auto_create=True)
        assert topics[topic].error == UNKNOWN_TOPIC_OR_PARTITION
        assert conn.produce(topic, 0, simple_batch(b"v")).error == UNKNOWN_TOPIC_OR_PARTITION
    assert topic not in kc.topic_names(no_auto_create.bootstrap)


def test_clients_cannot_create_by_producing(no_auto_create, unique_topic):
    bs = no_auto_create.bootstrap
    topic = unique_topic()
    err = kc.produce_expect_error(
        bs, topic, Msg(None, b"v"),
        **{"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 10_000},
    )  # fmt: skip
    assert err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), err
    assert topic not in kc.topic_names(bs)

    # Explicit creation still works, and then producing does.
    kc.create_topic(bs, topic)
    kc.produce(bs, topic, [Msg(None, b"v")], partition=0)
    assert [m.value for m in kc.consume(bs, topic, 1)] == [b"v"]


# --------------------------------------------------------------------------- on


def test_metadata_creates_topic_with_num_partitions(auto_create_3, unique_topic):
    topic = unique_topic()
    with Conn(auto_create_3.bootstrap) as conn:
        # allow_auto_topic_creation=false never creates, even with the broker setting on
        _, topics = conn.metadata([topic], allow_auto_create=False)
        assert topics[topic].error == UNKNOWN_TOPIC_OR_PARTITION
        assert topic not in kc.topic_names(auto_create_3.bootstrap)

        t = metadata_until_ready(conn, topic, allow=True)
        assert t.error == NONE
        assert sorted(t.partitions) == [0, 1, 2]
        assert all(leader >= 0 for _, leader in t.partitions.values())

        for p in range(3):
            assert conn.produce(topic, p, simple_batch(f"p{p}".encode())).error == NONE


def test_produce_alone_does_not_create(auto_create_3, unique_topic):
    """Only Metadata auto-creates: a Produce for an unknown topic fails even with the setting on."""
    topic = unique_topic()
    with Conn(auto_create_3.bootstrap) as conn:
        assert conn.produce(topic, 0, simple_batch(b"v")).error == UNKNOWN_TOPIC_OR_PARTITION
    assert topic not in kc.topic_names(auto_create_3.bootstrap)


def test_invalid_name_is_not_auto_created(auto_create_3):
    with Conn(auto_create_3.bootstrap) as conn:
        _, topics = conn.metadata(["bad name!"], allow_auto_create=True)
        assert topics["bad name!"].error == INVALID_TOPIC_EXCEPTION
    assert "bad name!" not in kc.topic_names(auto_create_3.bootstrap)


def test_producer_auto_creates(auto_create_3, unique_topic):
    bs = auto_create_3.bootstrap
    topic = unique_topic()
    sent = [Msg(f"k{i}".encode(), f"v{i}".encode()) for i in range(30)]
    delivered = kc.produce(bs, topic, sent)
    assert {d.partition for d in delivered} <= {0, 1, 2}
    kc.wait_for_topic(bs, topic, 3)
    got = []
    for p in range(3):
        n = sum(1 for d in delivered if d.partition == p)
        got += kc.consume(bs, topic, n, partition=p) if n else []
    assert sorted(m.value for m in got) == sorted(m.value for m in sent)


def test_create_topics_default_partitions(auto_create_3, unique_topic):
    """CreateTopics with num_partitions=-1 takes the broker's num.partitions."""
    bs = auto_create_3.bootstrap
    topic = unique_topic()
    a = kc.admin(bs)
    a.create_topics([NewTopic(topic)], request_timeout=30)[topic].result(30)
    kc.wait_for_topic(bs, topic, 3)

    cluster = a.describe_cluster(request_timeout=30).result(30)
    res = ConfigResource(ConfigResource.Type.BROKER, str(cluster.nodes[0].id))
    entry = a.describe_configs([res], request_timeout=30)[res].result(30)["num.partitions"]
    assert entry.value == "3"
    assert entry.source == ConfigSource.STATIC_BROKER_CONFIG.value
