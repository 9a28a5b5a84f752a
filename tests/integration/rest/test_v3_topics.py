"""REST Proxy v3's topics, configs, partitions and replicas, checked against what a native
AdminClient sees of the same cluster."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource

from ..clients import admin, create_topic

# the fields of Confluent's documented response examples (api/v3/openapi.yaml, GetTopicResponse,
# GetTopicConfigResponse, GetPartitionResponse, GetReplicaResponse); Kafka REST's own answers
# add authorized_operations to a topic (an empty list unless asked for)
CONFLUENT_TOPIC = {"kind", "metadata", "cluster_id", "topic_name", "is_internal",
                   "replication_factor", "partitions_count", "partitions", "configs",
                   "partition_reassignments"}
CONFLUENT_TOPIC_CONFIG = {"kind", "metadata", "cluster_id", "topic_name", "name", "value",
                          "is_default", "is_read_only", "is_sensitive", "source", "synonyms"}
CONFLUENT_PARTITION = {"kind", "metadata", "cluster_id", "topic_name", "partition_id", "leader",
                       "replicas", "reassignment"}
CONFLUENT_REPLICA = {"kind", "metadata", "cluster_id", "topic_name", "partition_id",
                     "broker_id", "is_leader", "is_in_sync", "broker"}
UNKNOWN = {"error_code": 40403, "message": "This server does not host this topic-partition."}


def until(what: str, check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout}s: {what}")
        time.sleep(0.05)  # poll interval, not synchronisation


def native_configs(a: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource("topic", topic)
    return a.describe_configs([resource])[resource].result(10)


@pytest.fixture(scope="module")
def native(rest) -> AdminClient:
    return admin(rest.broker.bootstrap)


def test_create_get_list_delete(rest, native, unique_topic) -> None:
    name = unique_topic("made")
    status, made = rest.post(f"{rest.v3}/topics", {
        "topic_name": name, "partitions_count": 3, "replication_factor": 1,
        "configs": [{"name": "cleanup.policy", "value": "compact"},
                    {"name": "retention.ms", "value": None}]})
    assert status == 201, made
    self_url = made["metadata"]["self"]
    assert self_url == f"{rest.url}{rest.v3}/topics/{name}"
    assert made["metadata"]["resource_name"] == f"crn:///kafka={rest.cluster_id}/topic={name}"
    assert (made["kind"], made["topic_name"], made["is_internal"]) == ("KafkaTopic", name, False)
    assert (made["partitions_count"], made["replication_factor"]) == (3, 1)
    assert made["partitions"]["related"] == f"{self_url}/partitions"
    assert made["configs"]["related"] == f"{self_url}/configs"
    assert made["partition_reassignments"]["related"] == f"{self_url}/partitions/-/reassignment"

    meta = native.list_topics(name, timeout=10).topics[name]
    assert len(meta.partitions) == 3 and len(meta.partitions[0].replicas) == 1
    assert native_configs(native, name)["cleanup.policy"].value == "compact"

    assert rest.get(f"{rest.v3}/topics/{name}") == (200, made)
    status, listed = rest.get(f"{rest.v3}/topics")
    assert status == 200 and listed["kind"] == "KafkaTopicList"
    assert listed["metadata"] == {"self": f"{rest.url}{rest.v3}/topics", "next": None}
    assert made in listed["data"]
    names = [t["topic_name"] for t in listed["data"]]
    assert names == sorted(names)
    assert set(names) == {t for t in native.list_topics(timeout=10).topics
                          if not t.startswith("__")}  # Kafka's internal topics left out

    assert rest.post(f"{rest.v3}/topics", {"topic_name": name, "partitions_count": 1}) == (
        400, {"error_code": 40002, "message": f"Topic '{name}' already exists."})

    assert rest.delete(f"{rest.v3}/topics/{name}") == (204, None)
    until("the topic gone", lambda: name not in native.list_topics(timeout=10).topics)
    assert rest.get(f"{rest.v3}/topics/{name}") == (404, UNKNOWN)
    assert rest.delete(f"{rest.v3}/topics/{name}") == (404, UNKNOWN)


def test_create_defaults_validation_and_bad_requests(rest, native, unique_topic) -> None:
    checked = unique_topic("checked")
    status, body = rest.post(f"{rest.v3}/topics", {"topic_name": checked, "partitions_count": 2,
                                                   "validate_only": True})
    assert status == 200 and body["partitions_count"] == 2 and body["replication_factor"] == 1
    assert checked not in native.list_topics(timeout=10).topics

    plain = unique_topic("plain")  # no counts: the broker's defaults (num.partitions=1)
    status, body = rest.post(f"{rest.v3}/topics", {"topic_name": plain})
    assert status == 201 and (body["partitions_count"], body["replication_factor"]) == (1, 1)
    assert len(native.list_topics(plain, timeout=10).topics[plain].partitions) == 1

    located = unique_topic("located")  # Location: the new topic's URL, as Confluent sets it
    req = urllib.request.Request(f"{rest.url}{rest.v3}/topics", method="POST",
                                 data=json.dumps({"topic_name": located}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 201
        assert resp.headers["Location"] == f"{rest.url}{rest.v3}/topics/{located}"

    placed = unique_topic("placed")
    status, body = rest.post(f"{rest.v3}/topics", {
        "topic_name": placed, "replicas_assignments": {"0": [0], "1": [0]}})
    assert status == 201 and (body["partitions_count"], body["replication_factor"]) == (2, 1)

    assert rest.post(f"{rest.v3}/topics", raw=b"") == (
        422, {"error_code": 42206, "message": "Payload error. Request body is empty. Data is "
                                              "required."})
    assert rest.post(f"{rest.v3}/topics", {"topic_name": "bad name!"}) == (
        422, {"error_code": 42206, "message": "Payload error. Invalid topic name."})
    status, body = rest.post(f"{rest.v3}/topics", {"topic_name": unique_topic("x"),
                                                   "partitions_count": "A"})
    assert (status, body["error_code"]) == (400, 400)
    status, body = rest.post(f"{rest.v3}/topics", {"topic_name": unique_topic("zero"),
                                                   "partitions_count": 0})
    assert (status, body["error_code"]) == (400, 40002)
    assert rest.get("/v3/clusters/nope/topics") == (
        404, {"error_code": 404, "message": "Cluster nope cannot be found."})


def test_configs(rest, native, unique_topic) -> None:
    name = unique_topic("conf")
    create_topic(rest.broker.bootstrap, name, 1, {"compression.type": "gzip"})
    base = f"{rest.v3}/topics/{name}/configs"
    status, listed = rest.get(base)
    assert status == 200 and listed["kind"] == "KafkaTopicConfigList"
    names = [c["name"] for c in listed["data"]]
    expected = native_configs(native, name)
    assert names == sorted(expected)
    by_name = {c["name"]: c for c in listed["data"]}
    gzip = by_name["compression.type"]
    assert set(gzip) == CONFLUENT_TOPIC_CONFIG
    assert gzip["metadata"] == {
        "self": f"{rest.url}{base}/compression.type",
        "resource_name": f"crn:///kafka={rest.cluster_id}/topic={name}/config=compression.type"}
    assert (gzip["value"], gzip["is_default"], gzip["source"]) == (
        "gzip", False, "DYNAMIC_TOPIC_CONFIG")
    assert gzip["synonyms"][0] == {"name": "compression.type", "value": "gzip",
                                   "source": "DYNAMIC_TOPIC_CONFIG"}
    assert gzip["synonyms"][-1]["source"] == "DEFAULT_CONFIG"
    for entry in listed["data"]:
        native_entry = expected[entry["name"]]
        assert (entry["value"], entry["is_default"], entry["is_read_only"]) == (
            native_entry.value, native_entry.is_default, native_entry.is_read_only)
    assert rest.get(f"{base}/compression.type") == (200, gzip)

    assert rest.put(f"{base}/retention.ms", {"value": "3600000"}) == (204, None)
    assert native_configs(native, name)["retention.ms"].value == "3600000"
    status, one = rest.get(f"{base}/retention.ms")
    assert (one["value"], one["source"], one["is_default"]) == (
        "3600000", "DYNAMIC_TOPIC_CONFIG", False)
    assert rest.delete(f"{base}/retention.ms") == (204, None)
    assert native_configs(native, name)["retention.ms"].is_default

    batch = {"data": [{"name": "compression.type", "operation": "DELETE"},
                      {"name": "cleanup.policy", "value": "compact"}]}
    assert rest.post(f"{base}:alter", {**batch, "validate_only": True}) == (204, None)
    assert native_configs(native, name)["cleanup.policy"].value == "delete"
    assert rest.post(f"{base}:alter", batch) == (204, None)
    assert rest.post(f"{base}:alter", {"data": []}) == (204, None)
    after = native_configs(native, name)
    assert (after["cleanup.policy"].value, after["compression.type"].is_default) == (
        "compact", True)

    missing = {"error_code": 404, "message": f"Config no.such cannot be found for TOPIC {name} "
                                             f"in cluster {rest.cluster_id}."}
    assert rest.put(f"{base}/no.such", {"value": "1"}) == (404, missing)
    assert rest.delete(f"{base}/no.such") == (404, missing)
    assert rest.post(f"{base}:alter", {"data": [{"name": "no.such", "value": "1"}]}) == (
        404, missing)
    assert rest.get(f"{base}/no.such") == (404, {"error_code": 404,
                                                 "message": "HTTP 404 Not Found"})
    status, body = rest.put(f"{base}/retention.ms", {"value": "soon"})
    assert (status, body["error_code"]) == (400, 40002)
    status, body = rest.post(f"{base}:alter", {"data": [{"name": "retention.ms",
                                                         "operation": "APPEND"}]})
    assert (status, body["error_code"]) == (400, 400)
    assert rest.get(f"{rest.v3}/topics/{unique_topic('none')}/configs") == (404, UNKNOWN)
    assert rest.put(f"{rest.v3}/topics/{unique_topic('none')}/configs/retention.ms",
                    {"value": "1"}) == (404, UNKNOWN)


def test_partitions_and_replicas(rest, native, unique_topic) -> None:
    name = unique_topic("parts")
    create_topic(rest.broker.bootstrap, name, 3)
    desc = native.describe_topics(TopicCollection([name]))[name].result(10)
    base = f"{rest.v3}/topics/{name}/partitions"
    status, listed = rest.get(base)
    assert status == 200 and listed["kind"] == "KafkaPartitionList"
    assert [p["partition_id"] for p in listed["data"]] == [0, 1, 2]
    for part, native_part in zip(listed["data"], desc.partitions, strict=True):
        url = f"{rest.url}{base}/{native_part.id}"
        assert part["metadata"] == {
            "self": url,
            "resource_name": f"crn:///kafka={rest.cluster_id}/topic={name}/partition="
                             f"{native_part.id}"}
        assert part["leader"] == {"related": f"{url}/replicas/{native_part.leader.id}"}
        assert part["replicas"] == {"related": f"{url}/replicas"}
        assert part["reassignment"] == {"related": f"{url}/reassignment"}
    assert rest.get(f"{base}/1") == (200, listed["data"][1])

    status, replicas = rest.get(f"{base}/1/replicas")
    assert status == 200 and replicas["kind"] == "KafkaReplicaList"
    native_part = desc.partitions[1]
    assert [(r["broker_id"], r["is_leader"], r["is_in_sync"]) for r in replicas["data"]] == [
        (n.id, n.id == native_part.leader.id, n.id in {i.id for i in native_part.isr})
        for n in native_part.replicas]
    replica = replicas["data"][0]
    assert replica["broker"]["related"] == f"{rest.url}{rest.v3}/brokers/{replica['broker_id']}"
    assert rest.get(f"{base}/1/replicas/{replica['broker_id']}") == (200, replica)

    not_found = {"error_code": 404, "message": "HTTP 404 Not Found"}
    assert rest.get(f"{base}/7") == (404, not_found)
    assert rest.get(f"{base}/1/replicas/99") == (404, not_found)
    assert rest.get(f"{base}/7/replicas") == (404, {
        "error_code": 404,
        "message": f"Partition 7 of topic {name} could not be found on cluster "
                   f"{rest.cluster_id}."})
    gone = unique_topic("gone")
    assert rest.get(f"{rest.v3}/topics/{gone}/partitions") == (404, UNKNOWN)
    assert rest.get(f"{rest.v3}/topics/{gone}/partitions/0") == (404, {
        "error_code": 40403,
        "message": f"This server does not host topic-partition 0 for topic {gone}"})


def test_field_sets_match_confluents_examples(rest, unique_topic) -> None:
    name = unique_topic("fields")
    create_topic(rest.broker.bootstrap, name, 1)
    status, topic = rest.get(f"{rest.v3}/topics/{name}")
    assert status == 200 and set(topic) == CONFLUENT_TOPIC | {"authorized_operations"}
    assert topic["authorized_operations"] == []
    status, body = rest.get(f"{rest.v3}/topics/{name}?include_authorized_operations=maybe")
    assert (status, body["error_code"]) == (400, 400)
    status, part = rest.get(f"{rest.v3}/topics/{name}/partitions/0")
    assert status == 200 and set(part) == CONFLUENT_PARTITION
    status, replica = rest.get(f"{rest.v3}/topics/{name}/partitions/0/replicas/0")
    assert status == 200 and set(replica) == CONFLUENT_REPLICA
    status, config = rest.get(f"{rest.v3}/topics/{name}/configs/cleanup.policy")
    assert status == 200 and set(config) == CONFLUENT_TOPIC_CONFIG
    assert all(set(s) == {"name", "value", "source"} for s in config["synonyms"])
    status, doc = rest.get("/openapi.json")
    assert status == 200
    for path in ("/v3/clusters/{cluster_id}/topics/{topic_name}/configs:alter",
                 "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/"
                 "replicas/{broker_id}"):
        assert path in doc["paths"]
