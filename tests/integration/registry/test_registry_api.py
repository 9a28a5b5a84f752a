"""The schema registry a broker serves (issue 31), driven by confluent-kafka's own
`SchemaRegistryClient`, its Avro serializers and raw HTTP: Confluent's API, bodies and error
codes; its state in `_schemas`, kept across a kill -9."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from .. import clients as kc
from ..broker import BrokerProcess

V1 = json.dumps({"type": "record", "name": "Click", "namespace": "shop", "fields": [
    {"name": "user", "type": "string"}]})
V2 = json.dumps({"type": "record", "name": "Click", "namespace": "shop", "fields": [
    {"name": "user", "type": "string"},
    {"name": "page", "type": "string", "default": "/"}]})
BREAKING = json.dumps({"type": "record", "name": "Click", "namespace": "shop", "fields": [
    {"name": "user", "type": "string"}, {"name": "required", "type": "int"}]})


def registry_url(broker: BrokerProcess, timeout: float = 10.0) -> str:
    """The registry's address, from the broker's start-up line (port 0: the OS chose it)."""
    return broker.started_url("schema registry", timeout)


def http(url: str, method: str = "GET", body: Any = None, raw: bytes | None = None
         ) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_ready(url: str, timeout: float = 30.0) -> None:
    """The registry answers once this broker leads `_schemas` and has loaded it."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = http(f"{url}/subjects")
        if status == 200:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"registry not ready: {status} {body}")
        time.sleep(0.05)  # poll interval, not synchronisation


@pytest.fixture(scope="module")
def registry(make_module_broker) -> tuple[BrokerProcess, str]:
    """One broker per test module (a test restarting it leaves it running): its tests use
    subjects and topics of their own."""
    broker = make_module_broker({"schema.registry.listeners": "http://127.0.0.1:0",
                                 "metrics.listener": ""})
    url = registry_url(broker)
    wait_ready(url)
    return broker, url


def test_subjects_versions_ids_and_compatibility(registry) -> None:
    _broker, url = registry
    client = SchemaRegistryClient({"url": url})
    first = client.register_schema("clicks-value", Schema(V1, "AVRO"))
    again = client.register_schema("clicks-value", Schema(V1, "AVRO"))
    assert again == first  # the same schema: the same version and id
    second = client.register_schema("clicks-value", Schema(V2, "AVRO"))
    assert second > first
    assert client.get_subjects() == ["clicks-value"]
    assert client.get_versions("clicks-value") == [1, 2]
    latest = client.get_latest_version("clicks-value")
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(client.get_schema(first).schema_str) == json.loads(V1)
    found = client.lookup_schema("clicks-value", Schema(V1, "AVRO"))
    assert (found.version, found.schema_id) == (1, first)
    # the same schema under another subject keeps its id
    assert client.register_schema("views-value", Schema(V1, "AVRO")) == first
    assert sorted(client.get_subjects()) == ["clicks-value", "views-value"]

    # BACKWARD (the default) refuses a new field without a default: 409
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("clicks-value", Schema(BREAKING, "AVRO"))
    assert refused.value.http_status_code == 409
    assert client.test_compatibility("clicks-value", Schema(BREAKING, "AVRO")) is False
    client.set_compatibility("clicks-value", "NONE")
    assert client.get_compatibility("clicks-value") == "NONE"
    assert client.register_schema("clicks-value", Schema(BREAKING, "AVRO")) > second

    # soft, then permanent deletes
    assert client.delete_version("clicks-value", 3) == 3
    assert client.get_versions("clicks-value") == [1, 2]
    assert client.delete_subject("views-value") == [1]
    assert client.get_subjects() == ["clicks-value"]
    assert client.delete_subject("views-value", permanent=True) == [1]
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_latest_version("views-value")
    assert missing.value.error_code == 40401


def test_errors_are_confluents_and_never_a_traceback(registry) -> None:
    _broker, url = registry
    assert http(f"{url}/subjects/nope/versions") == (404, {
        "error_code": 40401, "message": "Subject 'nope' not found."})
    status, body = http(f"{url}/schemas/ids/12345")
    assert (status, body["error_code"]) == (404, 40403)
    status, body = http(f"{url}/subjects/s/versions", "POST", {"schema": "{not avro"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = http(f"{url}/subjects/s/versions", "POST", raw=b"\x00not json")
    assert (status, body["error_code"]) == (400, 400)
    status, body = http(f"{url}/subjects/s/versions/0")
    assert (status, body["error_code"]) == (422, 42202)
    status, body = http(f"{url}/config", "PUT", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)
    status, body = http(f"{url}/no/such/path")
    assert (status, body["error_code"]) == (404, 404)
    big = json.dumps({"type": "enum", "name": "E", "symbols": [f"S{i}" for i in range(200_000)]})
    status, body = http(f"{url}/subjects/big/versions", "POST", {"schema": big})
    assert (status, body["error_code"]) == (422, 42209)
    status, body = http(f"{url}/schemas/ids/99999999999999999999999")  # a huge id
    assert (status, body["error_code"]) == (404, 40403)
    status, body = http(f"{url}/schemas/ids/abc")
    assert (status, body["error_code"]) == (404, 404)
    status, body = http(f"{url}/subjects/s/versions", "POST", {
        "schema": V1, "references": [{"name": "x.avsc", "subject": "nowhere", "version": 1}]})
    assert (status, body["error_code"]) == (422, 42201)  # an unknown reference
    status, body = http(f"{url}/subjects/s/versions", "POST", {"schema": V1, "schemaType": "XML"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = http(f"{url}/subjects/s/versions", "POST", ["not", "an", "object"])
    assert (status, body["error_code"]) == (422, 422)
    status, body = http(f"{url}/subjects/s/versions/99999999999")  # beyond 2^31-1
    assert (status, body["error_code"]) == (422, 42202)
    assert http(f"{url}/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    assert http(f"{url}/contexts") == (200, ["."])


def test_json_and_protobuf_serializers(registry) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    _broker, url = registry
    client = SchemaRegistryClient({"url": url})
    json_schema = json.dumps({"type": "object", "properties": {"user": {"type": "string"}},
                              "required": ["user"]})
    ctx = SerializationContext("views", MessageField.VALUE)
    data = JSONSerializer(json_schema, client)({"user": "ada"}, ctx)
    assert JSONDeserializer(json_schema, schema_registry_client=client)(data, ctx) == \
        {"user": "ada"}
    registered = client.get_latest_version("views-value")
    assert registered.schema.schema_type == "JSON"

    # a Protobuf message type compiled at run time, as generated code would hold it
    fd = descriptor_pb2.FileDescriptorProto(name="shop/click.proto", package="shop",
                                            syntax="proto3")
    msg = fd.message_type.add(name="Click")
    msg.field.add(name="user", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    click = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Click"))
    pctx = SerializationContext("clicks-pb", MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    data = ProtobufSerializer(click, client, conf)(click(user="bob"), pctx)
    assert data[0] == 0  # Confluent's framing: magic byte, schema id, message indexes, payload
    # a consumer's own client (the producer's caches the registered text under the id, which
    # its deserializer would take for the ?format=serialized answer, with Confluent's too)
    reader = SchemaRegistryClient({"url": url})
    back = ProtobufDeserializer(click, conf, reader)(data, pctx)
    assert back.user == "bob"
    stored = client.get_latest_version("clicks-pb-value").schema
    assert stored.schema_type == "PROTOBUF" and "message Click" in stored.schema_str
    # ?format=serialized by subject version too (use.latest.version asks for it this way)
    for path in ("subjects/clicks-pb-value/versions/latest", "subjects/clicks-pb-value/versions/1"):
        status, body = http(f"{url}/{path}?format=serialized")
        assert status == 200 and "message Click" not in body["schema"], body
        parsed = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(body["schema"]))
        assert [m.name for m in parsed.message_type] == ["Click"]


def test_avro_serializer_round_trip_and_a_kill_9(registry) -> None:
    """Last in this module: it restarts the module's broker (its registry on a new port)."""
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    kc.create_topic(broker.bootstrap, "clicks", 1)
    serialize = AvroSerializer(client, V2)
    ctx = SerializationContext("clicks", MessageField.VALUE)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        p.produce("clicks", serialize({"user": f"u{i}", "page": "/home"}, ctx))
    assert p.flush(20) == 0
    registered = client.get_latest_version("clicks-value")

    broker.restart(kill=True)
    url = registry_url(broker)
    wait_ready(url)
    client = SchemaRegistryClient({"url": url})  # a new client: nothing cached
    assert client.get_latest_version("clicks-value").schema_id == registered.schema_id
    deserialize = AvroDeserializer(client)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "avro-reader",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["clicks"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(deserialize(m.value(), ctx))
    c.close()
    assert got == [{"user": f"u{i}", "page": "/home"} for i in range(3)]
    # ids keep growing after the restart
    assert client.register_schema("other-value", Schema(BREAKING, "AVRO")) > registered.schema_id
