"""kafka-configs.sh: topic, broker and broker-default configs and client quotas on one Strom
broker."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import ConfigResource

from .. import clients as kc
from . import state
from .tools import properties, unique

pytestmark = pytest.mark.timeout(180)
BROKER = ConfigResource.Type.BROKER


def test_topic_configs(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic = unique("cfg")
    kc.create_topic(bs, topic)

    def configs(*args: str, code: int = 0):
        return kafka_tools.run("kafka-configs", "--bootstrap-server", bs, "--entity-type",
                               "topics", "--entity-name", topic, *args, code=code)

    out = configs("--alter", "--add-config",
                  "retention.ms=3600000,cleanup.policy=[compact,delete],max.message.bytes=200000")
    assert out.stdout.strip() == f"Completed updating config for topic {topic}."
    now = state.topic_configs(bs, topic)
    assert (now["retention.ms"], now["cleanup.policy"], now["max.message.bytes"]) == (
        "3600000", "compact,delete", "200000")
    described = configs("--describe").stdout
    assert described.splitlines()[0] == f"Dynamic configs for topic {topic} are:"
    assert properties(described) == {"retention.ms": "3600000",
                                      "cleanup.policy": "compact,delete",
                                      "max.message.bytes": "200000"}
    assert "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000, " \
           "DEFAULT_CONFIG:log.retention.hours=168}" in described

    configs("--alter", "--delete-config", "cleanup.policy,max.message.bytes")
    now = state.topic_configs(bs, topic)
    assert (now["retention.ms"], now["cleanup.policy"], now["max.message.bytes"]) == (
        "3600000", "delete", "1048588")
    every = properties(configs("--describe", "--all").stdout)
    assert every["cleanup.policy"] == "delete" and every["segment.bytes"] == "1073741824"

    bad = configs("--alter", "--add-config", "retention.ms=soon", code=1)
    assert "InvalidConfigurationException: Invalid value soon for configuration retention.ms: " \
           "Not a number of type LONG" in bad.stdout + bad.stderr
    bad = configs("--alter", "--add-config", "no.such.config=1", code=1)
    assert "no.such.config" in bad.stdout + bad.stderr
    assert state.topic_configs(bs, topic)["retention.ms"] == "3600000"


def test_broker_and_default_configs(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic = unique("cfg-b")
    kc.create_topic(bs, topic)

    def configs(*args: str):
        return kafka_tools.run("kafka-configs", "--bootstrap-server", bs, "--entity-type",
                               "brokers", *args).stdout

    out = configs("--entity-name", "0", "--alter", "--add-config",
                  "log.cleaner.threads=2,message.max.bytes=2000000")
    assert out.strip() == "Completed updating config for broker 0."
    assert properties(configs("--entity-name", "0", "--describe")) == {
        "log.cleaner.threads": "2", "message.max.bytes": "2000000"}
    now = state.configs(bs, BROKER, "0")
    assert (now["log.cleaner.threads"], now["message.max.bytes"]) == ("2", "2000000")

    out = configs("--entity-default", "--alter", "--add-config", "log.retention.ms=7200000")
    assert out.strip() == "Completed updating default config for brokers in the cluster."
    described = configs("--entity-default", "--describe")
    assert described.splitlines()[0] == "Default configs for brokers in the cluster are:"
    assert "log.retention.ms=7200000 sensitive=false " \
           "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}" in described
    assert state.configs(bs, BROKER, "0")["log.retention.ms"] == "7200000"
    # A topic without its own retention.ms follows the new cluster-wide default.
    assert state.topic_configs(bs, topic)["retention.ms"] == "7200000"
    every = properties(kafka_tools.run("kafka-configs", "--bootstrap-server", bs,
                                       "--entity-type", "topics", "--entity-name", topic,
                                       "--describe", "--all").stdout)
    assert every["retention.ms"] == "7200000"

    # Without --entity-name or --entity-default: every broker, then the defaults.
    both = configs("--describe")
    assert "Dynamic configs for broker 0 are:" in both
    assert "Default configs for brokers in the cluster are:" in both

    configs("--entity-name", "0", "--alter", "--delete-config",
            "log.cleaner.threads,message.max.bytes")
    configs("--entity-default", "--alter", "--delete-config", "log.retention.ms")
    assert properties(configs("--entity-name", "0", "--describe")) == {}
    now = state.configs(bs, BROKER, "0")
    assert (now["log.cleaner.threads"], now["message.max.bytes"]) == ("1", "1048588")
    assert state.topic_configs(bs, topic)["retention.ms"] == "604800000"


def test_client_quotas(kafka_tools, strom_broker):
    """kafka-configs sets, describes and deletes quotas (AlterClientQuotas and
    DescribeClientQuotas); its output is what it prints against Kafka 4.4."""
    bs = strom_broker.bootstrap
    user, client = unique("quser"), unique("qapp")
    pair = ["--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
            "--entity-name", client]

    def configs(*args: str, code: int = 0):
        return kafka_tools.run("kafka-configs", "--bootstrap-server", bs, *args, code=code)

    out = configs("--alter", "--add-config", "producer_byte_rate=1024", *pair).stdout
    assert out.strip() == f"Completed updating config for user {user}."
    out = configs("--alter", "--add-config", "consumer_byte_rate=2048,request_percentage=12.5",
                  "--entity-type", "clients", "--entity-default").stdout
    assert out.strip() == "Completed updating default config for clients in the cluster."

    described = configs("--describe", *pair).stdout
    assert described.strip() == (f"Quota configs for user-principal '{user}', client-id "
                                 f"'{client}' are producer_byte_rate=1024.0")
    described = configs("--describe", "--entity-type", "clients", "--entity-default").stdout
    prefix = "Quota configs for the default client-id are "
    assert described.startswith(prefix)
    assert sorted(described.strip()[len(prefix):].split(", ")) == [
        "consumer_byte_rate=2048.0", "request_percentage=12.5"]
    # users alone, strictly: the user + client id entity is not one of them
    assert f"'{user}'" not in configs("--describe", "--entity-type", "users").stdout

    bad = configs("--alter", "--add-config", "producer_byte_rate=1.5", *pair, code=1)
    assert ("InvalidRequestException: producer_byte_rate cannot be a fractional value."
            in bad.stdout + bad.stderr)

    configs("--alter", "--delete-config", "producer_byte_rate", *pair)
    assert configs("--describe", *pair).stdout.strip() == ""
    configs("--alter", "--delete-config", "consumer_byte_rate,request_percentage",
            "--entity-type", "clients", "--entity-default")
    assert configs("--describe", "--entity-type", "clients", "--entity-default").stdout == ""



def test_group_configs(kafka_tools, strom_broker):
    """kafka-configs --entity-type groups: Kafka 4's group configs, with its output and errors."""
    bs = strom_broker.bootstrap
    group = unique("cfg-g")

    def configs(*args: str, code: int = 0):
        return kafka_tools.run("kafka-configs", "--bootstrap-server", bs, "--entity-type",
                               "groups", "--entity-name", group, *args, code=code)

    out = configs("--alter", "--add-config",
                  "consumer.session.timeout.ms=50000,share.auto.offset.reset=earliest")
    assert out.stdout.strip() == f"Completed updating config for group {group}."
    described = configs("--describe").stdout
    assert described.splitlines() == [
        f"Dynamic configs for group {group} are:",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}",
        "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "share.auto.offset.reset=earliest, DEFAULT_CONFIG:share.auto.offset.reset=latest}"]
    bad = configs("--alter", "--add-config", "consumer.session.timeout.ms=1", code=1)
    assert "InvalidConfigurationException: consumer.session.timeout.ms must be in the range " \
           "45000 to 60000 inclusive." in bad.stdout + bad.stderr
    configs("--alter", "--delete-config", "share.auto.offset.reset")
    every = properties(configs("--describe", "--all").stdout)
    assert every["consumer.session.timeout.ms"] == "50000"
    assert every["share.auto.offset.reset"] == "latest"
    assert every["consumer.heartbeat.interval.ms"] == "5000"


def test_describe_without_a_name_lists_every_group_and_topic(kafka_tools, strom_broker):
    """--describe without --entity-name: the tool asks ListConfigResources (API 74) for the
    groups that have configs and adds the groups that exist (as against Kafka 4.4)."""
    bs = strom_broker.bootstrap
    configured, plain, topic = unique("cfg-all"), unique("cfg-plain"), unique("cfg-all-t")
    kc.create_topic(bs, topic)

    def configs(*args: str):
        return kafka_tools.run("kafka-configs", "--bootstrap-server", bs, *args).stdout

    configs("--alter", "--entity-type", "groups", "--entity-name", configured,
            "--add-config", "consumer.session.timeout.ms=50000")
    c = kc.consumer(bs, **{"group.id": plain})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    groups = configs("--describe", "--entity-type", "groups").splitlines()
    heading = groups.index(f"Dynamic configs for group {configured} are:")
    assert groups[heading + 1].startswith("  consumer.session.timeout.ms=50000 ")
    assert f"Dynamic configs for group {plain} are:" in groups
    assert f"Dynamic configs for topic {topic} are:" in configs("--describe", "--entity-type",
                                                                 "topics").splitlines()
