"""REST Proxy v2 consumer instances: records produced by a native producer read back over HTTP
(binary, JSON, and Avro through the schema registry), commits checked with native clients, seeks, assignments, pattern
subscriptions, deletion and idle expiry — and Confluent's documented examples."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from .. import clients as kc
from ..broker import BrokerProcess
from .conftest import REST_OVERRIDES, Rest

V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"
JSON_TYPE = "application/vnd.kafka.json.v2+json"
EXPIRY_MS = 2500  # short, so the expiry test waits little; every other test keeps busy


@pytest.fixture(scope="module")
def rest_broker(make_module_broker) -> BrokerProcess:
    """This file's broker: instances expire after EXPIRY_MS idle."""
    return make_module_broker({**REST_OVERRIDES,
                               "rest.consumer.instance.timeout.ms": str(EXPIRY_MS)})


def http(rest: Rest, method: str, path: str, body: Any = None,
         accept: str | None = None) -> tuple[int, str | None, Any]:
    """(status, Content-Type, JSON body) — the response headers matter here."""
    headers = {"Content-Type": V2}
    if accept is not None:
        headers["Accept"] = accept
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(rest.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read()
            return resp.status, resp.headers.get("Content-Type"), (
                json.loads(text) if text.strip() else None)
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, e.headers.get("Content-Type"), json.loads(text) if text.strip() else None


def group_name() -> str:
    return f"v2-{uuid.uuid4().hex[:8]}"


def create(rest: Rest, group: str, **config: Any) -> str:
    """A new instance reading from the earliest offsets, answering as soon as it has records;
    its path."""
    body = {"format": "binary", "auto.offset.reset": "earliest", "fetch.min.bytes": 1,
            "consumer.request.timeout.ms": 500, **config}
    status, instance = rest.post(f"/consumers/{group}", body)
    assert status == 200, instance
    return f"/consumers/{group}/instances/{instance['instance_id']}"


def read(rest: Rest, path: str, count: int, accept: str = BINARY, query: str = "",
         timeout: float = 20.0) -> list[dict[str, Any]]:
    """Records until `count` arrived (several requests: a read returns what it has)."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        status, kind, body = http(rest, "GET", f"{path}/records{query}", accept=accept)
        assert status == 200, body
        assert kind == accept
        got += body
        assert time.monotonic() < deadline, f"{len(got)} of {count} records"
    return got


def produce(rest: Rest, topic: str, values: list[bytes], keys: list[bytes | None] | None = None,
            partition: int = 0, timestamps: list[int] | None = None) -> None:
    msgs = [kc.Msg(keys[i] if keys else None, v, partition=partition,
                   timestamp=timestamps[i] if timestamps else None)
            for i, v in enumerate(values)]
    kc.produce(rest.broker.bootstrap, topic, msgs)


def committed_natively(rest: Rest, group: str, topic: str, partitions: int
                       ) -> dict[int, tuple[int, str | None]]:
    consumer = Consumer({"bootstrap.servers": rest.broker.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=10)
        return {tp.partition: (tp.offset, tp.metadata) for tp in found if tp.offset >= 0}
    finally:
        consumer.close()


def test_create_instance_as_confluents_example(rest) -> None:
    group = group_name()
    # Confluent's documented request: name, format, auto.offset.reset, auto.commit.enable
    status, kind, body = http(rest, "POST", f"/consumers/{group}", {
        "name": "my_consumer", "format": "binary", "auto.offset.reset": "earliest",
        "auto.commit.enable": "false"})
    assert (status, kind) == (200, V2)
    assert body == {"instance_id": "my_consumer",
                    "base_uri": f"{rest.url}/consumers/{group}/instances/my_consumer"}
    status, kind, again = http(rest, "POST", f"/consumers/{group}", {"name": "my_consumer"})
    assert (status, again["error_code"]) == (409, 40902)
    status, _, generated = http(rest, "POST", f"/consumers/{group}", None)  # all defaults
    assert status == 200 and generated["instance_id"].startswith("rest-consumer-")
    assert generated["base_uri"].endswith(f"/instances/{generated['instance_id']}")
    for bad in ({"format": "xml"}, {"auto.offset.reset": "sometimes"},
                {"auto.commit.enable": "maybe"}):
        status, _, error = http(rest, "POST", f"/consumers/{group}", bad)
        assert status == 422, (bad, error)
    status, _, error = http(rest, "POST", f"/consumers/{group}", {"fetch.min.bytes": -5})
    assert (status, error["error_code"]) == (422, 40001)
    for name in ("my_consumer", generated["instance_id"]):
        path = f"/consumers/{group}/instances/{name}"
        assert http(rest, "DELETE", path) == (204, None, None)
        status, _, gone = http(rest, "DELETE", path)
        assert (status, gone) == (404, {"error_code": 40403,
                                        "message": "Consumer instance not found."})


def test_records_in_binary_as_confluents_example(rest, unique_topic) -> None:
    topic = unique_topic("v2-binary")
    kc.create_topic(rest.broker.bootstrap, topic, 1)
    produce(rest, topic, [b"confluent", b"kafka", b"\x00\xff"], keys=[b"key", b"key", None])
    path = create(rest, group_name())
    assert rest.post(f"{path}/subscription", {"topics": [topic]}) == (204, None)
    assert rest.get(f"{path}/subscription") == (200, {"topics": [topic]})
    got = read(rest, path, 3, query="?timeout=3000&max_bytes=300000")
    # the documented shape: base64 keys and values, topic, partition, offset
    assert got[:2] == [
        {"topic": topic, "key": "a2V5", "value": "Y29uZmx1ZW50", "partition": 0, "offset": 0},
        {"topic": topic, "key": "a2V5", "value": "a2Fma2E=", "partition": 0, "offset": 1}]
    assert got[2]["key"] is None and base64.b64decode(got[2]["value"]) == b"\x00\xff"
    # the generic v2 type and no Accept at all both mean binary
    produce(rest, topic, [b"more"])
    assert read(rest, path, 1, accept=V2)[0]["value"] == base64.b64encode(b"more").decode()
    status, _, body = http(rest, "GET", f"{path}/records", accept=JSON_TYPE)
    assert (status, body["error_code"]) == (406, 40601)
    status, _, body = http(rest, "GET", f"{path}/records", accept="text/html")
    assert (status, body["error_code"]) == (406, 406)
    assert rest.delete(path) == (204, None)


def test_records_in_json_as_confluents_example(rest, unique_topic) -> None:
    topic = unique_topic("v2-json")
    kc.create_topic(rest.broker.bootstrap, topic, 1)
    produce(rest, topic, [b'{"foo":"bar"}', b'["foo","bar"]', b"null"],
            keys=[b'"somekey"', b'"somekey"', None])
    path = create(rest, group_name(), format="json")
    assert rest.post(f"{path}/subscription", {"topics": [topic]}) == (204, None)
    got = read(rest, path, 3, accept=JSON_TYPE)
    assert got == [
        {"topic": topic, "key": "somekey", "value": {"foo": "bar"}, "partition": 0, "offset": 0},
        {"topic": topic, "key": "somekey", "value": ["foo", "bar"], "partition": 0, "offset": 1},
        {"topic": topic, "key": None, "value": None, "partition": 0, "offset": 2}]
    status, _, body = http(rest, "GET", f"{path}/records")  # no Accept: binary, not json
    assert (status, body["error_code"]) == (406, 40601)
    assert rest.delete(path) == (204, None)


def test_records_in_avro_through_the_registry(rest, unique_topic) -> None:
    topic = unique_topic("v2-avro")
    kc.create_topic(rest.broker.bootstrap, topic, 1)
    schema = json.dumps({"type": "record", "name": "Click", "namespace": "web", "fields": [
        {"name": "page", "type": "string"}, {"name": "n", "type": "int"}]})
    serializer = AvroSerializer(SchemaRegistryClient({"url": rest.registry_url}), schema)
    value = serializer({"page": "/cart", "n": 3}, SerializationContext(topic,
                                                                        MessageField.VALUE))
    produce(rest, topic, [value], keys=[None])
    path = create(rest, group_name(), format="avro")
    assert rest.post(f"{path}/subscription", {"topics": [topic]}) == (204, None)
    avro = "application/vnd.kafka.avro.v2+json"
    assert read(rest, path, 1, accept=avro) == [
        {"topic": topic, "key": None, "value": {"page": "/cart", "n": 3}, "partition": 0,
         "offset": 0}]
    status, _, body = http(rest, "GET", f"{path}/records", accept=BINARY)
    assert (status, body["error_code"]) == (406, 40601)
    assert rest.delete(path) == (204, None)


def test_commit_and_read_offsets(rest, unique_topic) -> None:
    topic = unique_topic("v2-offsets")
    kc.create_topic(rest.broker.bootstrap, topic, 2)
    produce(rest, topic, [b"a", b"b", b"c"], partition=0)
    produce(rest, topic, [b"x"], partition=1)
    group = group_name()
    path = create(rest, group, **{"auto.commit.enable": "false"})
    both = [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]
    assert rest.post(f"{path}/assignments", {"partitions": both}) == (204, None)
    assert rest.get(f"{path}/assignments") == (200, {"partitions": both})
    assert len(read(rest, path, 4)) == 4
    # no body: everything handed out so far
    status, done = rest.post(f"{path}/offsets")
    assert status == 200
    assert sorted((o["partition"], o["committed"]) for o in done["offsets"]) == [(0, 3), (1, 1)]
    assert committed_natively(rest, group, topic, 2) == {0: (3, None), 1: (1, None)}
    # explicit offsets: the last record processed, so the group's offset is the next one
    status, _ = rest.post(f"{path}/offsets", {"offsets": [
        {"topic": topic, "partition": 0, "offset": 0, "metadata": "checkpoint"}]})
    assert status == 200
    assert committed_natively(rest, group, topic, 2)[0] == (1, "checkpoint")
    status, kind, body = http(rest, "GET", f"{path}/offsets", {"partitions": both})
    assert (status, kind) == (200, V2)
    assert body == {"offsets": [
        {"topic": topic, "partition": 0, "offset": 1, "metadata": "checkpoint"},
        {"topic": topic, "partition": 1, "offset": 1, "metadata": ""}]}
    admin = AdminClient({"bootstrap.servers": rest.broker.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    offsets = listed[group].result(10).topic_partitions
    assert {(tp.partition, tp.offset) for tp in offsets if tp.topic == topic} == {(0, 1), (1, 1)}
    status, body = rest.get(f"{path}/offsets")  # which partitions? (Confluent: 40402)
    assert (status, body["error_code"]) == (404, 40402)
    assert rest.delete(path) == (204, None)


def test_seek_to_beginning_end_offset_and_time(rest, unique_topic) -> None:
    topic = unique_topic("v2-seek")
    kc.create_topic(rest.broker.bootstrap, topic, 2)
    produce(rest, topic, [b"r0", b"r1", b"r2", b"r3"],
            timestamps=[1_000_000, 2_000_000, 3_000_000, 4_000_000])
    path = create(rest, group_name())
    p0 = {"topic": topic, "partition": 0}
    status, body = rest.post(f"{path}/positions/beginning", {"partitions": [p0]})
    assert (status, body["error_code"]) == (409, 40903)  # nothing assigned yet
    assert rest.post(f"{path}/assignments", {"partitions": [p0]}) == (204, None)
    assert [r["offset"] for r in read(rest, path, 4)] == [0, 1, 2, 3]
    assert rest.post(f"{path}/positions/beginning", {"partitions": [p0]}) == (204, None)
    assert read(rest, path, 1)[0]["offset"] == 0
    assert rest.post(f"{path}/positions", {"offsets": [{**p0, "offset": 2}]}) == (204, None)
    assert read(rest, path, 1)[0]["offset"] == 2
    when = "1970-01-01T00:33:20Z"  # 2 000 000 ms: the second record
    assert rest.post(f"{path}/positions",
                     {"timestamps": [{**p0, "timestamp": when}]}) == (204, None)
    assert read(rest, path, 1)[0]["offset"] == 1
    assert rest.post(f"{path}/positions/end", {"partitions": [p0]}) == (204, None)
    produce(rest, topic, [b"r4"])
    assert [r["value"] for r in read(rest, path, 1)] == [base64.b64encode(b"r4").decode()]
    status, body = rest.post(f"{path}/positions", {"offsets": [
        {"topic": topic, "partition": 1, "offset": 0}]})
    assert (status, body["error_code"]) == (409, 40903)
    assert rest.delete(path) == (204, None)


def test_subscription_by_pattern_and_limits(rest, unique_topic) -> None:
    prefix = f"v2pat{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}-a", f"{prefix}-b", f"{prefix}x-other"]
    for topic in topics:
        kc.create_topic(rest.broker.bootstrap, topic, 1)
        produce(rest, topic, [topic.encode() * 4, b"2", b"3"])
    path = create(rest, group_name())
    assert rest.post(f"{path}/subscription", {"topic_pattern": f"{prefix}-.*"}) == (204, None)
    status, body = rest.post(f"{path}/assignments", {"partitions": [
        {"topic": topics[0], "partition": 0}]})
    assert (status, body["error_code"]) == (409, 40903)
    # max_bytes: the first record alone is larger, so each read returns one and loses nothing
    got = read(rest, path, 6, query="?max_bytes=4")
    assert sorted((r["topic"], r["offset"]) for r in got) == sorted(
        (t, o) for t in topics[:2] for o in range(3))
    assert rest.get(f"{path}/subscription") == (200, {"topics": topics[:2]})
    status, body = rest.get(f"{path}/assignments")
    assert status == 200 and {p["topic"] for p in body["partitions"]} == set(topics[:2])
    assert rest.delete(f"{path}/subscription") == (204, None)
    assert rest.get(f"{path}/subscription") == (200, {"topics": []})
    assert rest.delete(path) == (204, None)


def test_unknown_instances_and_bad_bodies(rest) -> None:
    path = f"/consumers/{group_name()}/instances/nobody"
    for method, suffix, body in (("GET", "/records", None), ("POST", "/offsets", None),
                                 ("GET", "/subscription", None), ("POST", "/subscription",
                                                                  {"topics": ["t"]}),
                                 ("POST", "/positions/end", {"partitions": []}),
                                 ("DELETE", "", None)):
        status, media, error = http(rest, method, path + suffix, body)
        assert (status, error["error_code"]) == (404, 40403), (method, suffix)
        assert media == V2, (method, suffix)  # the negotiated v2 type, as Confluent's
    status, media, error = http(rest, "GET", path + "/subscription", accept="application/json")
    assert (status, media, error["error_code"]) == (404, "application/json", 40403)
    status, media, _ = http(rest, "GET", "/consumers/g/nowhere")  # no such route: v2 too
    assert (status, media) == (404, V2)
    status, media, _ = http(rest, "GET", "/v3/clusters/nope")  # v3 answers application/json
    assert (status, media) == (404, "application/json")
    live = create(rest, group_name())
    status, error = rest.post(f"{live}/subscription", {"topics": "not-a-list"})
    assert (status, error["error_code"]) == (400, 400)
    status, error = rest.post(f"{live}/subscription")
    assert (status, error["error_code"]) == (422, 422)
    status, error = rest.get(f"{live}/records?timeout=soon")
    assert status == 400
    assert rest.delete(live) == (204, None)


def test_a_group_name_with_a_slash(rest) -> None:
    """A group name with '/' is one path segment, %2F-encoded; base_uri encodes it so."""
    group = f"team/{uuid.uuid4().hex[:8]}"
    status, body = rest.post(f"/consumers/{group.replace('/', '%2F')}", {"name": "one"})
    assert status == 200, body
    assert "/consumers/team%2F" in body["base_uri"] and body["base_uri"].endswith("/instances/one")
    base = body["base_uri"][len(rest.url):]
    status, _, got = http(rest, "POST", base + "/subscription", {"topics": ["t"]})
    assert status == 204, got
    assert rest.delete(base) == (204, None)


def test_idle_instances_expire_and_leave_their_group(rest, unique_topic) -> None:
    topic = unique_topic("v2-expiry")
    kc.create_topic(rest.broker.bootstrap, topic, 1)
    group = group_name()
    path = create(rest, group)
    assert rest.post(f"{path}/subscription", {"topics": [topic]}) == (204, None)
    produce(rest, topic, [b"one"])
    assert len(read(rest, path, 1)) == 1
    admin = AdminClient({"bootstrap.servers": rest.broker.bootstrap})
    members = admin.describe_consumer_groups([group])[group].result(10).members
    assert len(members) == 1
    # watched from outside: a request to the instance would keep it alive. It must leave the
    # group cleanly on expiry (a consumer that just vanished stays a member for its 45 s
    # session timeout)
    started = time.monotonic()
    while admin.describe_consumer_groups([group])[group].result(10).members:
        assert time.monotonic() - started < EXPIRY_MS / 1000 + 5, "still a member"
        time.sleep(0.1)  # poll interval, not synchronisation
    assert time.monotonic() - started > EXPIRY_MS / 1000 - 1  # not before it was idle
    status, body = rest.get(f"{path}/subscription")
    assert (status, body["error_code"]) == (404, 40403)


def test_openapi_lists_the_v2_routes(rest) -> None:
    status, doc = rest.get("/openapi.json")
    assert status == 200
    base = "/consumers/{group_name}/instances/{instance}"
    for path, method in (("/consumers/{group_name}", "post"), (base, "delete"),
                         (f"{base}/offsets", "post"), (f"{base}/offsets", "get"),
                         (f"{base}/subscription", "delete"), (f"{base}/assignments", "get"),
                         (f"{base}/positions/beginning", "post"), (f"{base}/records", "get")):
        assert method in doc["paths"][path], (path, method)
    records = doc["paths"][f"{base}/records"]["get"]["responses"]["200"]["content"]
    assert {BINARY, JSON_TYPE, V2} <= set(records)
