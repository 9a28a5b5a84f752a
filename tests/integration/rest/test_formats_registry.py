"""The HTTP API's schema formats (strom.rest.formats, in this process) against a broker's real
schema registry: AVRO, JSONSCHEMA and PROTOBUF data registered, written in Confluent's wire
format and read back, and the bytes checked both ways against confluent-kafka's own
serializers (one registry client per format: the client keeps a schema's text by id whatever
its type)."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.rest.errors import RestError
from strom.rest.formats import Encoded, Formats

from .conftest import started_url

USER = json.dumps({"type": "record", "name": "User", "namespace": "app", "fields": [
    {"name": "name", "type": "string"},
    {"name": "age", "type": ["null", "int"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]})
PERSON = json.dumps({"title": "Person", "type": "object",
                     "properties": {"name": {"type": "string"},
                                    "age": {"type": "integer", "minimum": 0}},
                     "required": ["name"]})
ORDER = """syntax = "proto3";
package shop;

message Order {
  string id = 1;
  int64 total = 2;
  repeated Line lines = 3;
  message Line { string sku = 1; int32 qty = 2; }
}
"""


@pytest.fixture(scope="module")
def registry_url(rest_broker) -> str:
    return started_url(rest_broker, "schema registry")


def encode(formats: Formats, topic: str, spec: dict[str, Any]) -> Encoded:
    return asyncio.run(formats.encode(topic, spec, is_key=False))


def decode(formats: Formats, raw: bytes | None, fmt: str) -> Any:
    return asyncio.run(formats.decode(raw, fmt))


def value_of(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_avro_round_trips_through_the_registry(registry_url: str) -> None:
    formats = Formats(registry_url)
    data = {"name": "ada", "age": {"int": 36}, "tags": ["x", "y"]}
    out = encode(formats, "users", {"type": "AVRO", "schema": USER, "data": data})
    assert (out.type, out.subject, out.schema_version) == ("AVRO", "users-value", 1)
    assert out.data is not None and out.data[0] == 0
    assert int.from_bytes(out.data[1:5], "big") == out.schema_id
    assert decode(formats, out.data, "AVRO") == data

    client = SchemaRegistryClient({"url": registry_url})
    read = AvroDeserializer(client)(out.data, value_of("users"))
    assert read == {"name": "ada", "age": 36, "tags": ["x", "y"]}

    # confluent-kafka's bytes, read by the HTTP API's decoder
    theirs = AvroSerializer(client, USER)({"name": "bo", "age": None, "tags": []},
                                          value_of("users"))
    assert decode(Formats(registry_url), theirs, "AVRO") == {"name": "bo", "age": None,
                                                             "tags": []}

    # the same schema by id, by version and as the subject's latest
    by_id = encode(formats, "users", {"schema_id": out.schema_id, "data": {"name": "c"}})
    by_version = encode(formats, "users", {"schema_version": 1, "data": {"name": "c"}})
    latest = encode(Formats(registry_url), "users", {"data": {"name": "c"}})
    assert by_id == by_version == latest
    assert (latest.schema_id, latest.schema_version) == (out.schema_id, 1)


def test_registry_errors_keep_confluents_codes(registry_url: str) -> None:
    formats = Formats(registry_url)
    cases = [({"schema_id": 999_999, "data": 1}, 422, 42207),
             ({"data": 1}, 422, 42207),  # no subject nothing-value
             ({"schema_version": 3, "data": 1}, 400, 400),
             ({"type": "AVRO", "schema": '{"type": "nope"}', "data": 1}, 422, 42205)]
    for spec, status, code in cases:
        with pytest.raises(RestError) as caught:
            encode(formats, "nothing", spec)
        assert (caught.value.status, caught.value.error_code) == (status, code), spec
    encode(formats, "compat", {"type": "AVRO", "schema": USER, "data": {"name": "a"}})
    incompatible = json.dumps({"type": "record", "name": "User", "namespace": "app",
                               "fields": [{"name": "id", "type": "long"}]})
    with pytest.raises(RestError) as caught:
        encode(formats, "compat", {"type": "AVRO", "schema": incompatible, "data": {"id": 1}})
    assert (caught.value.status, caught.value.error_code) == (422, 42207)
    assert "Error when registering schema" in caught.value.message


def test_jsonschema_round_trips_through_the_registry(registry_url: str) -> None:
    formats = Formats(registry_url)
    data = {"name": "ada", "age": 36}
    out = encode(formats, "people", {"type": "JSONSCHEMA", "schema": PERSON, "data": data})
    assert (out.type, out.subject) == ("JSONSCHEMA", "people-value")
    assert out.data is not None and json.loads(out.data[5:]) == data
    assert decode(formats, out.data, "JSONSCHEMA") == data
    with pytest.raises(RestError) as caught:
        encode(formats, "people", {"schema_id": out.schema_id, "data": {"age": -1}})
    assert (caught.value.status, caught.value.error_code) == (400, 400)

    client = SchemaRegistryClient({"url": registry_url})
    assert JSONDeserializer(None, schema_registry_client=client)(
        out.data, value_of("people")) == data
    theirs = JSONSerializer(PERSON, client)({"name": "bo"}, value_of("people"))
    assert decode(Formats(registry_url), theirs, "JSONSCHEMA") == {"name": "bo"}


def test_protobuf_round_trips_through_the_registry(registry_url: str) -> None:
    formats = Formats(registry_url)
    data = {"id": "o1", "total": "1200", "lines": [{"sku": "a", "qty": 2}]}
    out = encode(formats, "orders", {"type": "PROTOBUF", "schema": ORDER, "data": data})
    assert (out.type, out.subject) == ("PROTOBUF", "orders-value")
    assert decode(formats, out.data, "PROTOBUF") == data

    # the message class from the registry's compiled descriptor (not from the code under test)
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    with urllib.request.urlopen(f"{registry_url}/schemas/ids/{out.schema_id}"
                                "?format=serialized", timeout=10) as resp:
        serialized = json.loads(resp.read())["schema"]
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized)))
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))

    client = SchemaRegistryClient({"url": registry_url})
    read = ProtobufDeserializer(order, {"use.deprecated.format": False},
                                schema_registry_client=client)(out.data, value_of("orders"))
    assert (read.id, read.total, [(x.sku, x.qty) for x in read.lines]) == ("o1", 1200,
                                                                          [("a", 2)])
    # confluent-kafka's bytes (it registers the schema from the class's descriptor), read by
    # the HTTP API's decoder
    serializer = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    theirs = serializer(order(id="o2", total=5), value_of("orders"))
    assert theirs is not None
    assert decode(Formats(registry_url), theirs, "PROTOBUF") == {"id": "o2", "total": "5",
                                                                "lines": []}
