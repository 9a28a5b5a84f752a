"""Iceberg topics in value_schema mode with JSON Schema and Protobuf values (issue 33 point 2):
values produced with confluent-kafka's JSONSerializer and ProtobufSerializer against the
broker's own registry land decoded in the tables' typed value columns; so do Avro values whose
schema takes a named type from another subject (a schema reference), from AvroSerializer."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from pyiceberg.catalog.sql import SqlCatalog

from .. import clients as kc
from ..rest.conftest import started_url
from .tables import wait_exactly

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


def test_json_schema_and_protobuf_values_decode_into_columns(make_broker, unique_topic,
                                                            tmp_path: Path) -> None:
    broker = make_broker({"iceberg.enable": "true",
                          "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
                          "iceberg.catalog.warehouse": (tmp_path / "warehouse").as_uri(),
                          "schema.registry.listeners": "http://127.0.0.1:0",
                          "schema.registry.topic.replication.factor": "1"})
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

    catalog = SqlCatalog("strom", uri=f"sqlite:///{tmp_path}/catalog.db",
                         warehouse=(tmp_path / "warehouse").as_uri())
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
    assert "does not decode" not in broker.log_text()
