"""Group configs (Kafka 4.4's, KIP-848/932/1071) through confluent-kafka's AdminClient on a real
broker: DescribeConfigs, IncrementalAlterConfigs and AlterConfigs on GROUP resources, Kafka's
errors, validate_only, DeleteGroups leaving them, and a restart keeping them."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from . import clients as kc

pytestmark = pytest.mark.timeout(120)
T = 30


@pytest.fixture(autouse=True)
def _strom_only(peer: str | None) -> None:
    if peer:
        pytest.skip("group configs are Kafka 4's; the peer lacks them")


def describe(bs: str, group: str) -> dict:
    a = kc.admin(bs)
    r = ConfigResource(ResourceType.GROUP, group)
    return a.describe_configs([r], request_timeout=20)[r].result(T)


def alter(bs: str, group: str, *entries: tuple[str, str | None, AlterConfigOpType],
          validate_only: bool = False) -> None:
    a = kc.admin(bs)
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries])
    a.incremental_alter_configs([r], validate_only=validate_only,
                                request_timeout=20)[r].result(T)


SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def dynamic(bs: str, group: str) -> dict[str, str]:
    return {k: e.value for k, e in describe(bs, group).items()
            if e.source == ConfigSource.GROUP_CONFIG.value}


def test_describe_alter_validate_and_errors(make_broker) -> None:
    broker = make_broker()
    bs = broker.bootstrap
    every = describe(bs, "never-created")  # a group need not exist
    entry = every["consumer.session.timeout.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "45000", ConfigSource.DEFAULT_CONFIG.value, False)
    assert [(s.name, s.value) for s in entry.synonyms.values()] == [
        ("group.consumer.session.timeout.ms", "45000")]
    assert every["share.auto.offset.reset"].value == "latest"
    assert every["streams.assignor.name"].value == "sticky"
    assert "streams.num.warmup.replicas" not in every  # Kafka's internal ones: only when set

    alter(bs, "app", ("consumer.session.timeout.ms", "50000", SET),
          ("share.auto.offset.reset", "by_duration:PT1H", SET),
          ("streams.num.warmup.replicas", "3", SET), ("share.redelivery.delay.ms", "500", SET))
    assert dynamic(bs, "app") == {"consumer.session.timeout.ms": "50000",
                                  "share.auto.offset.reset": "by_duration:PT1H",
                                  "streams.num.warmup.replicas": "3",
                                  "share.redelivery.delay.ms": "500"}
    alter(bs, "app", ("share.redelivery.delay.ms", None, DELETE))
    assert "share.redelivery.delay.ms" not in dynamic(bs, "app")

    alter(bs, "other", ("consumer.session.timeout.ms", "55000", SET), validate_only=True)
    assert dynamic(bs, "other") == {}

    for entries, message in [
        ((("consumer.session.timeout.ms", "10", SET),),
         "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
        ((("nope", "1", SET),), "Unknown group config name: nope"),
        ((("share.record.lock.duration.ms", "99999999", SET),),
         "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
        ((("streams.rack.aware.assignment.tags", "a", APPEND),),
         "Can't APPEND to key streams.rack.aware.assignment.tags because its type is not LIST."),
    ]:
        with pytest.raises(KafkaException) as exc:
            alter(bs, "app", *entries)
        assert exc.value.args[0].name() == "INVALID_CONFIG"
        assert exc.value.args[0].str() == message
    assert dynamic(bs, "app")["consumer.session.timeout.ms"] == "50000"

    # the legacy AlterConfigs replaces the group's whole set, as Kafka 4.4 does
    a = kc.admin(bs)
    r = ConfigResource(ResourceType.GROUP, "legacy", set_config={
        "consumer.heartbeat.interval.ms": "6000"})
    a.alter_configs([r], request_timeout=20)[r].result(T)
    assert dynamic(bs, "legacy") == {"consumer.heartbeat.interval.ms": "6000"}

    # DeleteGroups leaves a group's configs, as in Kafka 4.4
    topic = "gc-topic"
    kc.create_topic(bs, topic)
    c = Consumer({"bootstrap.servers": bs, "group.id": "app", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    c.close()
    a = kc.admin(bs)  # kept alive until the future resolves
    a.delete_consumer_groups(["app"], request_timeout=20)["app"].result(T)
    assert dynamic(bs, "app")["consumer.session.timeout.ms"] == "50000"

    broker.restart()
    assert dynamic(bs, "app") == {"consumer.session.timeout.ms": "50000",
                                  "share.auto.offset.reset": "by_duration:PT1H",
                                  "streams.num.warmup.replicas": "3"}
    assert dynamic(bs, "legacy") == {"consumer.heartbeat.interval.ms": "6000"}

