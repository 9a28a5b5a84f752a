"""REST Proxy v3's consumer groups, consumers, assignments and lag, checked against a real
confluent-kafka consumer in a group with committed offsets and what a native AdminClient sees."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ..clients import admin, create_topic

# the fields of Confluent's documented response examples (api/v3/openapi.yaml,
# GetConsumerGroupResponse, GetConsumerResponse, GetConsumerAssignmentResponse,
# GetConsumerLagResponse, GetConsumerGroupLagSummaryResponse)
CONFLUENT_GROUP = {"kind", "metadata", "cluster_id", "consumer_group_id", "is_simple",
                   "partition_assignor", "state", "type", "is_mixed_consumer_group",
                   "coordinator", "consumers", "lag_summary"}
CONFLUENT_CONSUMER = {"kind", "metadata", "cluster_id", "consumer_group_id", "consumer_id",
                      "instance_id", "client_id", "assignments"}
CONFLUENT_ASSIGNMENT = {"kind", "metadata", "cluster_id", "consumer_group_id", "consumer_id",
                        "topic_name", "partition_id", "partition", "lag"}
CONFLUENT_LAG = {"kind", "metadata", "cluster_id", "consumer_group_id", "topic_name",
                 "partition_id", "consumer_id", "instance_id", "client_id", "current_offset",
                 "log_end_offset", "lag"}
CONFLUENT_LAG_SUMMARY = {"kind", "metadata", "cluster_id", "consumer_group_id",
                         "max_lag_consumer_id", "max_lag_instance_id", "max_lag_client_id",
                         "max_lag_topic_name", "max_lag_partition_id", "max_lag", "total_lag",
                         "max_lag_consumer", "max_lag_partition"}
RECORDS = {0: 5, 1: 3, 2: 2}  # records per partition
COMMITTED = {0: 2, 1: 3, 2: 0}  # -> lag 3, 0, 2


@dataclass
class Group:
    group_id: str
    topic: str
    member_id: str
    native: AdminClient


@pytest.fixture(scope="module")
def group(rest) -> Iterator[Group]:
    """A live consumer (client id, static instance id) assigned all 3 partitions of a topic,
    with COMMITTED offsets committed."""
    bootstrap = rest.broker.bootstrap
    topic, gid = f"lagged-{uuid.uuid4().hex[:8]}", f"lag-group-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, count in RECORDS.items():
        for i in range(count):
            producer.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": gid,
                         "client.id": "lag-client", "group.instance.id": "lag-instance",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 15
        while len(consumer.assignment()) < 3:
            consumer.poll(0.1)
            assert time.monotonic() < deadline, "the consumer was not assigned its partitions"
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()],
                        asynchronous=False)
        native = admin(bootstrap)
        desc = native.describe_consumer_groups([gid])[gid].result(10)
        assert len(desc.members) == 1
        yield Group(gid, topic, desc.members[0].member_id, native)
    finally:
        consumer.close()


def test_groups_and_consumers(rest, group: Group) -> None:
    desc = group.native.describe_consumer_groups([group.group_id])[group.group_id].result(10)
    status, listed = rest.get(f"{rest.v3}/consumer-groups")
    assert status == 200 and listed["kind"] == "KafkaConsumerGroupList"
    assert listed["metadata"] == {"self": f"{rest.url}{rest.v3}/consumer-groups", "next": None}
    found = [g for g in listed["data"] if g["consumer_group_id"] == group.group_id]
    assert len(found) == 1
    body = found[0]
    url = f"{rest.url}{rest.v3}/consumer-groups/{group.group_id}"
    assert body == {
        "kind": "KafkaConsumerGroup",
        "metadata": {"self": url, "resource_name":
                     f"crn:///kafka={rest.cluster_id}/consumer-group={group.group_id}"},
        "cluster_id": rest.cluster_id,
        "consumer_group_id": group.group_id,
        "is_simple": False,
        "partition_assignor": desc.partition_assignor,
        "state": "STABLE",
        "type": "CLASSIC",
        "is_mixed_consumer_group": False,
        "coordinator": {"related": f"{rest.url}{rest.v3}/brokers/{desc.coordinator.id}"},
        "consumers": {"related": f"{url}/consumers"},
        "lag_summary": {"related": f"{url}/lag-summary"},
    }
    assert desc.partition_assignor  # the member's protocol, e.g. "range"
    assert rest.get(f"{rest.v3}/consumer-groups/{group.group_id}") == (200, body)

    status, consumers = rest.get(f"{url.removeprefix(rest.url)}/consumers")
    assert status == 200 and consumers["kind"] == "KafkaConsumerList"
    member_url = f"{url}/consumers/{group.member_id}"
    consumer = {
        "kind": "KafkaConsumer",
        "metadata": {"self": member_url, "resource_name":
                     f"crn:///kafka={rest.cluster_id}/consumer-group={group.group_id}/"
                     f"consumer={group.member_id}"},
        "cluster_id": rest.cluster_id,
        "consumer_group_id": group.group_id,
        "consumer_id": group.member_id,
        "instance_id": "lag-instance",
        "client_id": "lag-client",
        "assignments": {"related": f"{member_url}/assignments"},
    }
    assert consumers["data"] == [consumer]
    path = member_url.removeprefix(rest.url)
    assert rest.get(path) == (200, consumer)

    status, assignments = rest.get(f"{path}/assignments")
    assert status == 200 and assignments["kind"] == "KafkaConsumerAssignmentList"
    assert [(a["topic_name"], a["partition_id"]) for a in assignments["data"]] == [
        (group.topic, p) for p in range(3)]
    first = assignments["data"][0]
    assert set(first) == CONFLUENT_ASSIGNMENT
    assert first["partition"] == {"related": f"{rest.url}{rest.v3}/topics/{group.topic}/"
                                             "partitions/0"}
    assert first["lag"] == {"related": f"{url}/lags/{group.topic}/partitions/0"}
    assert rest.get(f"{path}/assignments/{group.topic}/partitions/0") == (200, first)


def test_lags_and_summary(rest, group: Group) -> None:
    base = f"{rest.v3}/consumer-groups/{group.group_id}"
    status, lags = rest.get(f"{base}/lags")
    assert status == 200 and lags["kind"] == "KafkaConsumerLagList"
    # largest lag first, then by topic and partition
    assert [(x["partition_id"], x["current_offset"], x["log_end_offset"], x["lag"])
            for x in lags["data"]] == [(0, 2, 5, 3), (2, 0, 2, 2), (1, 3, 3, 0)]
    for x in lags["data"]:
        assert (x["consumer_id"], x["instance_id"], x["client_id"]) == (
            group.member_id, "lag-instance", "lag-client")
    one = lags["data"][0]
    assert one["metadata"] == {
        "self": f"{rest.url}{base}/lags/{group.topic}/partitions/0",
        "resource_name": f"crn:///kafka={rest.cluster_id}/consumer-group={group.group_id}/"
                         f"lag={group.topic}/partition=0"}
    assert rest.get(f"{base}/lags/{group.topic}/partitions/0") == (200, one)

    status, summary = rest.get(f"{base}/lag-summary")
    assert status == 200
    assert summary == {
        "kind": "KafkaConsumerGroupLagSummary",
        "metadata": {"self": f"{rest.url}{base}/lag-summary", "resource_name":
                     f"crn:///kafka={rest.cluster_id}/consumer-group={group.group_id}/"
                     "lag-summary"},
        "cluster_id": rest.cluster_id,
        "consumer_group_id": group.group_id,
        "max_lag_consumer_id": group.member_id,
        "max_lag_instance_id": "lag-instance",
        "max_lag_client_id": "lag-client",
        "max_lag_topic_name": group.topic,
        "max_lag_partition_id": 0,
        "max_lag": 3,
        "total_lag": 5,
        "max_lag_consumer": {"related": f"{rest.url}{base}/consumers/{group.member_id}"},
        "max_lag_partition": {"related": f"{rest.url}{rest.v3}/topics/{group.topic}/"
                                         "partitions/0"},
    }


def test_a_group_of_offsets_only(rest, group: Group) -> None:
    """Offsets committed without members (a "simple" group): lag without a consumer."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    gid = f"offsets-only-{uuid.uuid4().hex[:8]}"
    request = [ConsumerGroupTopicPartitions(gid, [TopicPartition(group.topic, 0, 4)])]
    group.native.alter_consumer_group_offsets(request)[gid].result(10)
    status, body = rest.get(f"{rest.v3}/consumer-groups/{gid}")
    assert status == 200, body
    assert (body["is_simple"], body["state"]) == (True, "EMPTY")
    assert body in rest.get(f"{rest.v3}/consumer-groups")[1]["data"]
    assert rest.get(f"{rest.v3}/consumer-groups/{gid}/consumers")[1]["data"] == []
    status, lags = rest.get(f"{rest.v3}/consumer-groups/{gid}/lags")
    assert status == 200 and [(x["lag"], x["consumer_id"], x["instance_id"], x["client_id"])
                              for x in lags["data"]] == [(1, "", None, "")]


def test_a_group_id_with_a_slash_and_a_percent_sign(rest, group: Group) -> None:
    """Kafka allows any characters in a group id: a URL carries '/' and '%' encoded in one
    segment (%2F, %25), and the links in the bodies are encoded the same way."""
    from urllib.parse import quote

    from confluent_kafka import ConsumerGroupTopicPartitions

    gid = f"team/a%2F-{uuid.uuid4().hex[:8]}"
    request = [ConsumerGroupTopicPartitions(gid, [TopicPartition(group.topic, 0, 4)])]
    group.native.alter_consumer_group_offsets(request)[gid].result(10)
    path = f"{rest.v3}/consumer-groups/{quote(gid, safe='')}"
    status, body = rest.get(path)
    assert status == 200, body
    assert body["consumer_group_id"] == gid
    assert body["metadata"]["self"] == rest.url + path
    status, lags = rest.get(f"{path}/lags")
    assert status == 200 and [x["consumer_group_id"] for x in lags["data"]] == [gid]


def test_errors(rest, group: Group) -> None:
    base = f"{rest.v3}/consumer-groups"
    http_404 = (404, {"error_code": 404, "message": "HTTP 404 Not Found"})
    assert rest.get(f"{base}/no-such-group") == http_404
    assert rest.get(f"{base}/no-such-group/consumers") == (404, {
        "error_code": 404, "message": "Consumer Group no-such-group does not exist."})
    for tail in ("lags", "lag-summary", f"lags/{group.topic}/partitions/0"):
        assert rest.get(f"{base}/no-such-group/{tail}") == (404, {
            "error_code": 404, "message": "Consumer Group no-such-group could not be found."})
    mine = f"{base}/{group.group_id}"
    assert rest.get(f"{mine}/consumers/no-such-member") == http_404
    assert rest.get(f"{mine}/consumers/no-such-member/assignments") == (404, {
        "error_code": 404, "message": "Consumer no-such-member does not exist."})
    assert rest.get(f"{mine}/consumers/{group.member_id}/assignments/{group.topic}/"
                    "partitions/9") == http_404
    assert rest.get(f"{mine}/lags/{group.topic}/partitions/9") == http_404
    assert rest.get("/v3/clusters/nope/consumer-groups") == (
        404, {"error_code": 404, "message": "Cluster nope could not be found."})


def test_field_sets_match_confluents_examples(rest, group: Group) -> None:
    mine = f"{rest.v3}/consumer-groups/{group.group_id}"
    assert set(rest.get(mine)[1]) == CONFLUENT_GROUP
    assert set(rest.get(f"{mine}/consumers/{group.member_id}")[1]) == CONFLUENT_CONSUMER
    assert set(rest.get(f"{mine}/lags/{group.topic}/partitions/1")[1]) == CONFLUENT_LAG
    assert set(rest.get(f"{mine}/lag-summary")[1]) == CONFLUENT_LAG_SUMMARY
    status, doc = rest.get("/openapi.json")
    assert status == 200
    assert {"ConsumerGroup", "ConsumerLag", "ConsumerGroupLagSummary"} <= set(
        doc["components"]["schemas"])
