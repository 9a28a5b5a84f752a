"""Iceberg topics in value_schema mode (issue 33 point 2), on one broker with its schema
registry: Avro values land decoded in the table's typed value column, and a value that does
not decode is held back and reported, or sent to a dead-letter topic once the topic has one;
values produced with confluent-kafka's JSONSerializer and ProtobufSerializer land decoded too;
so do Avro values whose schema takes a named type from another subject (a schema reference),
from AvroSerializer."""

from __future__ import annotations

import io
import json
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime

import fastavro
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from pyiceberg.catalog.sql import SqlCatalog

from .. import clients as kc
from ..broker import BrokerProcess
from ..rest.conftest import started_url
from .tables import T, duckdb_rows, table_rows, wait_exactly

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "note": {"type": ["string", "null"]},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "line": {"$ref": "#/definitions/Line"},
    },
    "required": ["id"],
    "definitions": {"Line": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}}}},
}
AT = datetime(2026, 11, 29, 4, 0, tzinfo=UTC)
ADDRESS = {"type": "record", "name": "Address", "namespace": "geo", "fields": [
    {"name": "city", "type": "string"},
    {"name": "zip", "type": ["null", "string"], "default": None}]}
SHIPMENT = {"type": "record", "name": "Shipment", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "to", "type": "geo.Address"}]}


def _order_class() -> type:
    """shop.Order compiled at run time, as generated code would hold it: an id, a note, a
    google.protobuf.Timestamp, repeated tags and a nested Line."""
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop",
                                            syntax="proto3",
                                            dependency=["google/protobuf/timestamp.proto"])
    order = fd.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    order.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="note", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    order.field.add(name="at", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".google.protobuf.Timestamp")
    order.field.add(name="tags", number=4, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    order.field.add(name="line", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".shop.Order.Line")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


@dataclass
class Typed:
    broker: BrokerProcess
    catalog: SqlCatalog


@pytest.fixture(scope="module")
def typed(make_module_broker, tmp_path_factory) -> Typed:
    """One broker for the module: Iceberg topics, with its schema registry."""
    lake = tmp_path_factory.mktemp("lake")
    settings = {"iceberg.catalog.uri": f"sqlite:///{lake}/catalog.db",
                "iceberg.catalog.warehouse": (lake / "warehouse").as_uri()}
    broker = make_module_broker({"iceberg.enable": "true", **settings,
                                 "schema.registry.listeners": "http://127.0.0.1:0",
                                 "schema.registry.topic.replication.factor": "1"})
    return Typed(broker, SqlCatalog("strom", uri=settings["iceberg.catalog.uri"],
                                    warehouse=settings["iceberg.catalog.warehouse"]))


def test_json_schema_and_protobuf_values_decode_into_columns(typed: Typed,
                                                            unique_topic) -> None:
    broker, catalog = typed.broker, typed.catalog
    client = SchemaRegistryClient({"url": started_url(broker, "schema registry")})
    json_topic, proto_topic = unique_topic("json"), unique_topic("proto")

    # the serializers register each topic's schema under <topic>-value on first use, so the
    # schemas are there when the topics (and their tables) are made
    to_json = JSONSerializer(json.dumps(ORDER), client)
    context = SerializationContext(json_topic, MessageField.VALUE)
    json_values = [to_json({"id": i, "note": None if i % 2 else f"n{i}", "tags": ["a"] * i,
                            "at": AT.isoformat(), "line": {"sku": f"s{i}", "qty": i}}, context)
                   for i in range(4)]
    order = _order_class()
    to_proto = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    context = SerializationContext(proto_topic, MessageField.VALUE)
    proto_values = []
    for i in range(4):
        message = order(id=i, note=f"n{i}", tags=["b"] * i)
        message.at.FromDatetime(AT)
        if i % 2:
            message.line.sku, message.line.qty = f"s{i}", i
        proto_values.append(to_proto(message, context))

    # Avro with a schema reference: shop.Shipment uses geo.Address, registered under a
    # subject of its own; the serializer writes with the subject's latest version
    avro_topic = unique_topic("avro-refs")
    client.register_schema("geo-address", Schema(json.dumps(ADDRESS), "AVRO"))
    client.register_schema(f"{avro_topic}-value", Schema(
        json.dumps(SHIPMENT), "AVRO", [SchemaReference("geo.Address", "geo-address", 1)]))
    to_avro = AvroSerializer(client, conf={"auto.register.schemas": False,
                                           "use.latest.version": True})
    context = SerializationContext(avro_topic, MessageField.VALUE)
    shipments = [{"id": i, "to": {"city": f"c{i}", "zip": None if i % 2 else f"z{i}"}}
                 for i in range(3)]
    avro_values = [to_avro(v, context) for v in shipments]

    config = {"iceberg.mode": "value_schema", "iceberg.commit.interval.ms": "300"}
    kc.create_topic(broker.bootstrap, json_topic, 1, config)
    kc.create_topic(broker.bootstrap, proto_topic, 1, config)
    kc.create_topic(broker.bootstrap, avro_topic, 1, config)
    json_sent = kc.produce(broker.bootstrap, json_topic, [kc.Msg(b"k", v) for v in json_values])
    proto_sent = kc.produce(broker.bootstrap, proto_topic,
                            [kc.Msg(b"k", v) for v in proto_values])
    avro_sent = kc.produce(broker.bootstrap, avro_topic, [kc.Msg(b"k", v) for v in avro_values])

    rows = sorted(wait_exactly(catalog, json_topic, json_sent), key=lambda r: r["offset"])
    assert [r["value"] for r in rows[:2]] == [
        {"id": 0, "note": "n0", "at": AT, "tags": [], "line": {"sku": "s0", "qty": 0}},
        {"id": 1, "note": None, "at": AT, "tags": ["a"], "line": {"sku": "s1", "qty": 1}}]
    rows = sorted(wait_exactly(catalog, proto_topic, proto_sent), key=lambda r: r["offset"])
    assert [r["value"] for r in rows[:2]] == [  # an unset message field is null
        {"id": 0, "note": "n0", "at": AT, "tags": [], "line": None},
        {"id": 1, "note": "n1", "at": AT, "tags": ["b"], "line": {"sku": "s1", "qty": 1}}]
    rows = sorted(wait_exactly(catalog, avro_topic, avro_sent), key=lambda r: r["offset"])
    assert [r["value"] for r in rows] == shipments
    log = broker.log_text()
    assert not any(f"topic {t}: the value at" in log for t in (json_topic, proto_topic, avro_topic))


AVRO_ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"]}]}


def _avro(schema_id: int, value: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_ORDER), value)
    return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()


def test_value_schema_mode_decodes_values_into_columns(typed: Typed, unique_topic) -> None:
    broker, catalog = typed.broker, typed.catalog
    registry = started_url(broker, "schema registry")
    topic = unique_topic("typed")
    request = urllib.request.Request(
        f"{registry}/subjects/{topic}-value/versions", method="POST",
        data=json.dumps({"schema": json.dumps(AVRO_ORDER)}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=T) as answer:
        schema_id = json.loads(answer.read())["id"]
    kc.create_topic(broker.bootstrap, topic, 1, {"iceberg.mode": "value_schema",
                                                 "iceberg.commit.interval.ms": "300"})
    good = [kc.Msg(b"k", _avro(schema_id, {"id": i, "note": None if i % 2 else f"n{i}"}))
            for i in range(20)]
    delivered = kc.produce(broker.bootstrap, topic, [*good, kc.Msg(b"k", b"not avro"),
                                                     *good[:2]])
    deadline = time.monotonic() + T
    while True:  # the 20 good ones; the bad one and those after it wait, reported
        rows, offsets = table_rows(catalog, topic)
        if len(rows) == 20 and f"topic {topic}: the value at partition 0 offset 20 does not " \
                "decode" in broker.log_text():
            break
        assert len(rows) <= 20 and time.monotonic() < deadline, f"{len(rows)} rows"
        time.sleep(0.2)  # poll interval, not synchronisation
    assert offsets == {"0": delivered[20].offset}
    rows.sort(key=lambda r: r["offset"])
    assert [r["value"] for r in rows[:2]] == [{"id": 0, "note": "n0"}, {"id": 1, "note": None}]
    assert duckdb_rows(catalog, topic) == rows  # the typed value column in DuckDB too

    # given a dead-letter topic, the value that does not decode goes there, with where it came
    # from and why, and the records after it reach the table (exactly once still)
    dlq = f"dlq.{topic}"
    kc.create_topic(broker.bootstrap, dlq, 1)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("errors.deadletterqueue.topic.name", dlq,
                    incremental_operation=AlterConfigOpType.SET)])
    admin = kc.admin(broker.bootstrap)  # (kept: librdkafka ends requests of a dropped handle)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(T)
    deadline = time.monotonic() + T
    while True:
        rows, offsets = table_rows(catalog, topic)
        if offsets == {"0": delivered[-1].offset + 1}:
            break
        assert time.monotonic() < deadline, f"offsets {offsets}"
        time.sleep(0.2)  # poll interval, not synchronisation
    assert sorted(r["offset"] for r in rows) == [m.offset for m in delivered
                                                 if m.value != b"not avro"]
    [letter] = kc.consume(broker.bootstrap, dlq, 1)
    assert (letter.key, letter.value) == (b"k", b"not avro")
    headers = dict(letter.headers)
    assert headers["__dlq.errors.topic"] == topic.encode()
    assert (headers["__dlq.errors.partition"], headers["__dlq.errors.offset"]) == \
        (b"0", str(delivered[20].offset).encode())
    assert b"does not decode" in (headers["__dlq.errors.message"] or b"")
    assert "went to the dead-letter topic" in broker.log_text()
