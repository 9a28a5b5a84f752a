"""iceberg.mode=value_schema: an Avro value schema as the table's value column, values decoded
with the schema their id names, and a value that does not decode held back, not skipped."""

from __future__ import annotations

import email.message
import io
import json
import threading
import urllib.error
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from pyiceberg.types import (
    DecimalType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestamptzType,
)

from strom.lake.mapping import Row
from strom.lake.process import LakeWriter, TopicConfig
from strom.lake.settings import Handoff, LakeSettings
from strom.lake.value_schema import (
    RegistryUnavailable,
    Undecodable,
    Unsupported,
    ValueSchema,
    iceberg_type,
)
from strom.lake.writer import open_catalog

SCHEMA = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "int"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "again", "type": ["null", "Kind"], "default": None},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                               "scale": 2}},
]}
OLD = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "int"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                               "scale": 2}},
]}
TOPIC = "orders"
AT = datetime(2026, 11, 29, 4, 0, tzinfo=UTC)


def test_avro_types_as_iceberg_columns() -> None:
    struct = iceberg_type(SCHEMA)
    assert isinstance(struct, StructType)
    fields = {f.name: f for f in struct.fields}
    assert fields["id"].field_type == LongType() and fields["id"].required
    assert fields["note"].field_type == StringType() and not fields["note"].required
    assert fields["at"].field_type == TimestamptzType()
    assert isinstance(fields["tags"].field_type, ListType)
    attrs = fields["attrs"].field_type
    assert isinstance(attrs, MapType) and attrs.value_type == IntegerType()
    assert fields["kind"].field_type == StringType()
    assert fields["again"].field_type == StringType() and not fields["again"].required
    assert fields["price"].field_type == DecimalType(9, 2)
    ids = [f.field_id for f in struct.fields]
    assert len(set(ids)) == len(ids) and min(ids) >= 100


@pytest.mark.parametrize("schema", [
    ["int", "string"],
    {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
    "Nowhere",
])
def test_schemas_without_a_column_type_are_refused(schema: Any) -> None:
    with pytest.raises(Unsupported):
        iceberg_type(schema)


def _framed(schema_id: int, schema: Any, value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {
        "/subjects/orders-value/versions/latest": {"id": 2, "schema": json.dumps(SCHEMA)},
        "/schemas/ids/1": {"schema": json.dumps(OLD)},
    }

    def get(self: ValueSchema, path: str) -> dict[str, Any]:
        if path == "/schemas/ids/5":
            raise OSError("connection refused")  # the registry is out of reach
        if path not in answers:
            raise urllib.error.HTTPError(path, 404, "Not Found", email.message.Message(), None)
        return answers[path]

    monkeypatch.setattr(ValueSchema, "_get", get)


def _new(i: int) -> dict[str, Any]:
    return {"id": i, "note": f"n{i}", "at": AT, "tags": ["x"], "attrs": {"a": i},
            "kind": "B", "again": None, "price": Decimal("1.25")}


def test_values_decode_with_the_schema_their_id_names(registry: None) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    assert schema.decode(_framed(2, SCHEMA, _new(7)))["note"] == "n7"
    old = {"id": 3, "at": AT, "tags": [], "attrs": {}, "kind": "A", "price": Decimal("2.00")}
    decoded = schema.decode(_framed(1, OLD, old))
    assert decoded["id"] == 3 and decoded["note"] is None  # the reader's default
    assert schema.decode(None) is None
    for bad in (b"plain text", _framed(9, OLD, old), b"\0\0\0\0\2\xff"):
        with pytest.raises(Undecodable):
            schema.decode(bad)
    with pytest.raises(RegistryUnavailable):  # waits: not a value to dead-letter
        schema.decode(_framed(5, OLD, old))


def test_a_value_that_does_not_decode_is_held_back(tmp_path: Path, registry: None) -> None:
    settings = LakeSettings.of(Handoff({"log.dirs": str(tmp_path)}, "127.0.0.1:9092",
                                       registry_url="http://registry"))
    from .test_process import Assignments

    consumer = Assignments()
    writer = LakeWriter(settings, threading.Event(), open_catalog(settings), None, consumer)
    writer.start(TOPIC, TopicConfig("value_schema", 500, {0: 0, 1: 0}))
    state = writer.topics[TOPIC]
    values = {(0, 0): _framed(2, SCHEMA, _new(0)), (0, 1): _framed(2, SCHEMA, _new(1)),
              (0, 2): b"not avro", (0, 3): _framed(2, SCHEMA, _new(3)),
              (1, 0): _framed(2, SCHEMA, _new(10)), (1, 1): None}
    for (partition, offset), value in values.items():
        state.batch.add(Row(partition, offset, 1_700_000_000_000, b"k", value))
    writer.flush(TOPIC)
    assert consumer.reading == {0: 2, 1: 2}  # partition 0 waits at its bad value
    table = state.table.table
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["partition"],
                                                                      r["offset"]))
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert rows[0]["value"]["note"] == "n0" and rows[0]["value"]["attrs"] == [("a", 0)]
    assert rows[0]["value"]["price"] == Decimal("1.25") and rows[0]["value"]["at"] == AT
    assert rows[3]["value"] is None
    summary = table.current_snapshot().summary
    assert summary["strom.offsets"] == '{"0":2,"1":2}'


COUNTRY = {"type": "enum", "name": "Country", "namespace": "geo", "symbols": ["DE", "FR"]}
ADDRESS = {"type": "record", "name": "Address", "namespace": "geo", "fields": [
    {"name": "city", "type": "string"}, {"name": "country", "type": "geo.Country"}]}
SHIPMENT = {"type": "record", "name": "Shipment", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "to", "type": "geo.Address"},
    {"name": "via", "type": ["null", "geo.Address"], "default": None}]}


def test_avro_schema_references_give_their_named_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """Confluent's schema references: Shipment uses geo.Address from another subject, which
    uses geo.Country from a third; the column has their fields, values decode."""
    answers = {
        "/subjects/shipments-value/versions/latest": {
            "id": 7, "schema": json.dumps(SHIPMENT),
            "references": [{"name": "geo.Address", "subject": "address", "version": 1}]},
        "/subjects/address/versions/1": {
            "id": 5, "schema": json.dumps(ADDRESS),
            "references": [{"name": "geo.Country", "subject": "country", "version": 1}]},
        "/subjects/country/versions/1": {"id": 4, "schema": json.dumps(COUNTRY)},
    }
    monkeypatch.setattr(ValueSchema, "_get", lambda self, path: answers[path])
    schema = ValueSchema("http://registry", "shipments-value")
    column = schema.type
    assert isinstance(column, StructType)
    to = column.field_by_name("to")
    assert to is not None and to.required and isinstance(to.field_type, StructType)
    assert [(f.name, f.field_type) for f in to.field_type.fields] == [
        ("city", StringType()), ("country", StringType())]
    via = column.field_by_name("via")
    assert via is not None and not via.required

    named: dict[str, Any] = {}
    for ref in (COUNTRY, ADDRESS):
        fastavro.parse_schema(ref, named_schemas=named)
    writer = fastavro.parse_schema(SHIPMENT, named_schemas=named)
    out = io.BytesIO()
    value = {"id": 9, "to": {"city": "Lyon", "country": "FR"}, "via": None}
    fastavro.schemaless_writer(out, writer, value)
    assert schema.decode(b"\0" + (7).to_bytes(4, "big") + out.getvalue()) == value
