"""kafka-topics.sh (org.apache.kafka.tools.TopicCommand) against one Strom broker."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from .. import clients as kc
from ..test_groups import wait_until
from . import state
from .tools import rows, unique

pytestmark = pytest.mark.timeout(180)


def test_create_list_describe_alter_delete(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic = unique("tt")
    run = kafka_tools.run

    out = run("kafka-topics", "--bootstrap-server", bs, "--create", "--topic", topic,
              "--partitions", "3", "--replication-factor", "1",
              "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact").stdout
    assert out.strip() == f"Created topic {topic}."
    kc.wait_for_topic(bs, topic, 3)
    configs = state.topic_configs(bs, topic)
    assert (configs["retention.ms"], configs["cleanup.policy"]) == ("3600000", "compact")

    assert topic in run("kafka-topics", "--bootstrap-server", bs, "--list").stdout.split()

    described = rows(run("kafka-topics", "--bootstrap-server", bs, "--describe",
                         "--topic", topic).stdout)
    head = described[0]
    assert head[:2] == ["Topic:", topic]
    # librdkafka prints ids in standard base64, Kafka in the URL-safe alphabet.
    urlsafe = kc.topic_id(bs, topic).replace("+", "-").replace("/", "_")
    assert head[head.index("TopicId:") + 1] == urlsafe
    assert head[head.index("PartitionCount:") + 1] == "3"
    assert head[head.index("ReplicationFactor:") + 1] == "1"
    assert "cleanup.policy=compact,retention.ms=3600000" in head[head.index("Configs:") + 1]
    assert [(r[3], r[5], r[7], r[9]) for r in described[1:]] == [
        (str(p), "0", "0", "0") for p in range(3)]  # partition, leader, replicas, ISR

    # A second create fails as Kafka's does; --if-not-exists makes it a no-op.
    dup = run("kafka-topics", "--bootstrap-server", bs, "--create", "--topic", topic,
              "--partitions", "1", code=1)
    assert dup.stdout.splitlines()[0] == \
        f"Error while executing topic command : Topic '{topic}' already exists."
    run("kafka-topics", "--bootstrap-server", bs, "--create", "--topic", topic,
        "--partitions", "1", "--if-not-exists")

    run("kafka-topics", "--bootstrap-server", bs, "--alter", "--topic", topic, "--partitions", "5")
    kc.wait_for_topic(bs, topic, 5)
    shrink = run("kafka-topics", "--bootstrap-server", bs, "--alter", "--topic", topic,
                 "--partitions", "2", code=1)
    assert shrink.stdout.splitlines()[0] == (
        f"Error while executing topic command : The topic {topic} currently has 5 partition(s); "
        "2 would not be an increase.")

    # One broker: no partition is under-replicated or without a leader.
    for flag in ("--under-replicated-partitions", "--unavailable-partitions",
                 "--under-min-isr-partitions"):
        assert run("kafka-topics", "--bootstrap-server", bs, "--describe", "--topic", topic,
                   flag).stdout.strip() == ""

    run("kafka-topics", "--bootstrap-server", bs, "--delete", "--topic", topic)
    wait_until(lambda: topic not in kc.topic_names(bs), 30, f"{topic} deleted")
    assert topic not in run("kafka-topics", "--bootstrap-server", bs, "--list").stdout.split()
    missing = run("kafka-topics", "--bootstrap-server", bs, "--describe", "--topic", topic,
                  code=1)
    assert f"Topic '{topic}' does not exist as expected" in missing.stdout + missing.stderr


def test_invalid_topic_and_exclude_internal(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    bad = kafka_tools.run("kafka-topics", "--bootstrap-server", bs, "--create",
                          "--topic", "bad/name", code=1)
    assert bad.stdout.splitlines()[0] == (
        "Error while executing topic command : Topic name is invalid: 'bad/name' contains one or "
        "more characters other than ASCII alphanumerics, '.', '_' and '-'"), bad
    assert "bad/name" not in kc.topic_names(bs)
    # The group coordinator's topic exists once a group committed; --exclude-internal hides it.
    topic = unique("ti")
    kc.create_topic(bs, topic)
    kc.produce(bs, topic, [kc.Msg(None, b"x")])
    c = kc.consumer(bs, group_id=unique("g"))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        kc.poll_messages(c, 1)
        c.commit(asynchronous=False, offsets=[TopicPartition(topic, 0, 1)])
    finally:
        c.close()
    listed = kafka_tools.run("kafka-topics", "--bootstrap-server", bs, "--list").stdout.split()
    assert "__consumer_offsets" in listed and topic in listed
    public = kafka_tools.run("kafka-topics", "--bootstrap-server", bs, "--list",
                             "--exclude-internal").stdout.split()
    assert "__consumer_offsets" not in public and topic in public
