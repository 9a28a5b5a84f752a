"""REST Proxy v3 beyond topics: a topic's partition count raised with PATCH, every topic's
configs at once, one broker's and every broker's configs, set and reset through Kafka's
incremental alter (the broker's own answer), and the cluster-wide broker defaults."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from ..clients import admin, create_topic

# the fields of Confluent's documented example (GetBrokerConfigResponse)
CONFIG = {"kind", "metadata", "cluster_id", "name", "value", "is_default", "is_read_only",
          "is_sensitive", "source", "synonyms"}
CONFLUENT_BROKER_CONFIG = CONFIG | {"broker_id"}


@pytest.fixture(scope="module")
def native(rest) -> AdminClient:
    return admin(rest.broker.bootstrap)


def test_partition_count_and_every_topics_configs(rest, native, unique_topic) -> None:
    topic = unique_topic("grown")
    create_topic(rest.broker.bootstrap, topic, 1, {"retention.ms": "3600000"})
    status, body = rest.call("PATCH", f"{rest.v3}/topics/{topic}", {"partitions_count": 3})
    assert status == 200 and body["partitions_count"] == 3, body
    assert len(native.list_topics(topic, timeout=10).topics[topic].partitions) == 3
    status, body = rest.call("PATCH", f"{rest.v3}/topics/{topic}", {"partitions_count": 2})
    assert status == 400 and body["error_code"] == 40002, body  # Kafka never takes any away
    assert rest.call("PATCH", f"{rest.v3}/topics/{topic}", {})[0] == 422
    assert rest.call("PATCH", f"{rest.v3}/topics/{unique_topic('none')}",
                     {"partitions_count": 2})[1]["error_code"] == 40403

    status, body = rest.get(f"{rest.v3}/topics/-/configs")
    assert status == 200 and body["kind"] == "KafkaTopicConfigList", body
    mine = {c["name"]: c for c in body["data"] if c["topic_name"] == topic}
    assert mine["retention.ms"]["value"] == "3600000"
    assert mine["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert mine["retention.ms"]["kind"] == "KafkaTopicConfig"
    assert mine["retention.ms"]["metadata"]["self"].endswith(
        f"/topics/{topic}/configs/retention.ms")
    assert all(not c["topic_name"].startswith("__") for c in body["data"])


def test_broker_and_cluster_configs(rest, native) -> None:
    [broker] = sorted(native.list_topics(timeout=10).brokers)
    base = f"{rest.v3}/brokers/{broker}/configs"
    status, body = rest.get(base)
    assert status == 200 and body["kind"] == "KafkaBrokerConfigList", body
    names = {c["name"]: c for c in body["data"]}
    assert names["num.partitions"]["value"] == "1" and names["num.partitions"]["broker_id"] == \
        broker
    assert rest.get(f"{rest.v3}/brokers/-/configs")[1]["data"] == body["data"]
    status, one = rest.get(f"{base}/log.cleaner.threads")
    assert status == 200 and one["kind"] == "KafkaBrokerConfig", one
    assert set(one) == CONFLUENT_BROKER_CONFIG
    assert rest.get(f"{base}/no.such.config")[0] == 404
    assert rest.get(f"{rest.v3}/brokers/{broker + 100}/configs")[0] == 404

    # a dynamic broker config, set and reset on this broker, then cluster-wide
    assert rest.put(f"{base}/log.cleaner.threads", {"value": "2"}) == (204, None)
    status, one = rest.get(f"{base}/log.cleaner.threads")
    assert (one["value"], one["source"]) == ("2", "DYNAMIC_BROKER_CONFIG"), one
    assert rest.delete(f"{base}/log.cleaner.threads") == (204, None)
    assert rest.get(f"{base}/log.cleaner.threads")[1]["source"] != "DYNAMIC_BROKER_CONFIG"
    status, body = rest.put(f"{base}/broker.id", {"value": "7"})  # static: Kafka refuses
    assert status == 400, body

    # the cluster-wide defaults (Kafka's broker resource "", as kafka-configs --entity-default)
    defaults = f"{rest.v3}/broker-configs"
    assert rest.put(f"{defaults}/log.cleaner.threads", {"value": "2"}) == (204, None)
    status, body = rest.get(defaults)
    assert status == 200 and body["kind"] == "KafkaClusterConfigList", body
    assert body["metadata"]["self"].endswith("/broker-configs")
    [one] = [c for c in body["data"] if c["name"] == "log.cleaner.threads"]
    assert set(one) == CONFIG | {"config_type"}, one
    assert (one["kind"], one["config_type"], one["value"], one["source"], one["is_default"]) \
        == ("KafkaClusterConfig", "BROKER", "2", "DYNAMIC_DEFAULT_BROKER_CONFIG", False), one
    assert one["metadata"]["self"].endswith("/broker-configs/log.cleaner.threads")
    assert rest.get(f"{defaults}/log.cleaner.threads")[1] == one
    assert rest.get(f"{base}/log.cleaner.threads")[1]["source"] == \
        "DYNAMIC_DEFAULT_BROKER_CONFIG"  # the broker takes the new default
    assert rest.call("POST", f"{defaults}:alter", {"data": [
        {"name": "log.cleaner.threads", "value": "1"}]}) == (204, None)
    assert rest.get(f"{defaults}/log.cleaner.threads")[1]["value"] == "1"
    assert rest.delete(f"{defaults}/log.cleaner.threads") == (204, None)
    assert rest.get(f"{defaults}/log.cleaner.threads")[0] == 404
    assert rest.delete(f"{defaults}/log.cleaner.threads")[0] == 404  # not set: Confluent's 404
    assert rest.put(f"{defaults}/broker.id", {"value": "7"})[0] == 400  # static: Kafka refuses
