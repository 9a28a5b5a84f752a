"""iceberg.mode=value_schema with JSON Schema values: the schema's Iceberg type, values
validated with the schema their id names and fitted to the table by field name, and those that
do not decode (bad framing, not JSON, invalid for their schema, not fitting the table)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestamptzType,
)

from strom.lake.value_schema import RegistryUnavailable, Undecodable, Unsupported, ValueSchema
from strom.lake.value_schema.json_schema import iceberg_type

from .stubs import OUT_OF_REACH, framed, stub_registry, written

SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order", "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "note": {"type": ["string", "null"]},
        "price": {"type": "number"},
        "paid": {"type": "boolean"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": ["integer", "null"]}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "kind": {"enum": ["A", "B"]},
        "ship": {"$ref": "#/definitions/Address"},
        "bill": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/Address"}]},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
    },
    "required": ["id"],
    "definitions": {
        "Address": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "zip": {"type": "string"}}},
        "Line": {"type": "object", "properties": {"sku": {"type": "string"},
                                                  "qty": {"type": "integer"}}},
    },
}
OLD = {  # version 1: no note, a name since dropped, qty as a number
    "type": "object",
    "properties": {
        "id": {"type": "integer"}, "name": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "number"}}}},
    },
    "required": ["id", "name"],
}
AT = datetime(2026, 11, 29, 4, 0, tzinfo=UTC)


def test_json_schema_types_as_iceberg_columns() -> None:
    struct = iceberg_type(SCHEMA)
    assert isinstance(struct, StructType)
    fields = {f.name: f for f in struct.fields}
    assert not any(f.required for f in struct.fields)  # any field may be left out
    assert fields["id"].field_type == LongType()
    assert fields["note"].field_type == StringType()
    assert fields["price"].field_type == DoubleType()
    assert fields["paid"].field_type == BooleanType()
    assert fields["day"].field_type == DateType()
    assert fields["at"].field_type == TimestamptzType()
    tags, scores = fields["tags"].field_type, fields["scores"].field_type
    assert isinstance(tags, ListType) and tags.element_type == StringType()
    assert tags.element_required
    assert isinstance(scores, ListType) and not scores.element_required
    attrs = fields["attrs"].field_type
    assert isinstance(attrs, MapType) and attrs.key_type == StringType()
    assert attrs.value_type == LongType()
    assert fields["kind"].field_type == StringType()
    ship, bill = fields["ship"].field_type, fields["bill"].field_type
    assert isinstance(ship, StructType) and [f.name for f in ship.fields] == ["city", "zip"]
    assert isinstance(bill, StructType) and [f.name for f in bill.fields] == ["city", "zip"]
    lines = fields["lines"].field_type
    assert isinstance(lines, ListType) and isinstance(lines.element_type, StructType)
    ids = [f.field_id for f in struct.fields] + [f.field_id for f in ship.fields] + \
        [f.field_id for f in bill.fields] + [tags.element_id, attrs.key_id, attrs.value_id]
    assert len(set(ids)) == len(ids) and min(ids) >= 100


@pytest.mark.parametrize("schema", [
    {"type": "object"},  # no properties: nothing to make columns of
    {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
    {"type": "object", "properties": {"a": {}}},  # any value
    {"type": "object", "properties": {"a": True}},
    {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    {"anyOf": [{"type": "string"}, {"type": "null"}, {"type": "integer"}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]},
    {"type": ["string", "integer"]},
    {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},  # a tuple
    {"type": "array"},
    {"type": "null"},
    {"enum": ["a", 1]},
    {"type": "object", "properties": {"next": {"$ref": "#"}}},  # recursive
    {"definitions": {"N": {"type": "object", "properties": {"n": {"$ref": "#/definitions/N"}}}},
     "$ref": "#/definitions/N"},
    {"type": "object", "properties": {"a": {"$ref": "other.json"}}},  # a schema reference
    {"type": "object", "properties": {"a": {"$ref": "#/definitions/Missing"}}},
])
def test_schemas_without_a_column_type_are_refused(schema: Any) -> None:
    with pytest.raises(Unsupported):
        iceberg_type(schema)


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _registered(schema_id: int, schema: Any, **more: Any) -> dict[str, Any]:
    return {"id": schema_id, "schemaType": "JSON", "schema": json.dumps(schema), **more}


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    stub_registry(monkeypatch, {
        "/subjects/orders-value/versions/latest": _registered(2, SCHEMA),
        "/schemas/ids/1": _registered(1, OLD),
        "/schemas/ids/3": {"schema": json.dumps({"type": "string"})},  # Avro
    })


NEW = {"id": 7, "note": "n7", "price": 2.5, "paid": True, "day": "2026-11-29",
       "at": "2026-11-29T05:00:00+01:00", "tags": ["x"], "scores": [1, None],
       "attrs": {"a": 1}, "kind": "B", "ship": {"city": "Oslo"}, "bill": None,
       "lines": [{"sku": "s", "qty": 2}], "extra": "dropped"}


def test_values_decode_with_the_schema_their_id_names(registry: None) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    value = schema.decode(framed(2, _json(NEW)))
    assert value["id"] == 7 and value["price"] == 2.5 and value["paid"] is True
    assert value["day"] == date(2026, 11, 29) and value["at"] == AT
    assert value["ship"] == {"city": "Oslo", "zip": None} and value["bill"] is None
    assert value["attrs"] == {"a": 1} and value["scores"] == [1, None]
    assert "extra" not in value
    # version 1: fitted to the table by name (name dropped, note missing, qty 3.0 a long)
    old = schema.decode(framed(1, _json({"id": 3, "name": "x",
                                         "lines": [{"sku": "t", "qty": 3.0}]})))
    assert old["id"] == 3 and old["note"] is None and "name" not in old
    assert old["lines"] == [{"sku": "t", "qty": 3}]
    assert schema.decode(None) is None


@pytest.mark.parametrize("data", [
    b"plain text",  # no framing
    b"\0\0\0",
    framed(2, b"{not json"),
    framed(2, b"\xff\xfe"),
    framed(2, b"null"),  # not an object
    framed(2, _json({"id": "seven"})),  # invalid for its schema
    framed(2, _json({"id": 1, "tags": [1]})),
    framed(1, _json({"id": 1})),  # version 1 requires a name
    framed(1, _json({"id": 1, "name": "x", "lines": [{"qty": 1.5}]})),  # not a long
    framed(2, _json({"id": 1, "at": "yesterday"})),  # formats are not validated, but read
    framed(2, _json({"id": 1 << 64})),  # not a long either
    framed(9, _json({"id": 1})),  # an id the registry does not know
    framed(3, _json("text")),  # an Avro schema's id
])
def test_values_that_do_not_decode(registry: None, data: bytes) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    with pytest.raises(Undecodable):
        schema.decode(data)


def test_a_schema_out_of_reach_waits(registry: None) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    with pytest.raises(RegistryUnavailable):
        schema.decode(framed(OUT_OF_REACH, _json({"id": 1})))


ADDRESS = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
           "properties": {"city": {"type": "string"}, "zone": {"$ref": "#/definitions/Zone"}},
           "required": ["city"], "definitions": {"Zone": {"type": "integer"}}}
SHIPMENT = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"id": {"type": "integer"}, "to": {"$ref": "address.json"},
                           "zone": {"$ref": "address.json#/definitions/Zone"}}}


def test_schema_references_resolve_to_other_subjects(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Confluent's JSON Schema references: `address.json` (the reference's name) is another
    subject's schema, whose local `$ref`s resolve inside it; values are validated with it."""
    ref = {"name": "address.json", "subject": "address", "version": 1}
    stub_registry(monkeypatch, {
        "/subjects/shipments-value/versions/latest": _registered(2, SHIPMENT, references=[ref]),
        "/subjects/address/versions/1": _registered(1, ADDRESS)})
    schema = ValueSchema("http://registry", "shipments-value")
    assert schema.type == iceberg_type(SHIPMENT, {"address.json": json.dumps(ADDRESS)})
    column = schema.type
    assert isinstance(column, StructType)
    to = column.field_by_name("to")
    assert to is not None and isinstance(to.field_type, StructType)
    assert [(f.name, f.field_type) for f in to.field_type.fields] == [
        ("city", StringType()), ("zone", LongType())]
    assert column.field_by_name("zone").field_type == LongType()  # type: ignore[union-attr]
    good = {"id": 1, "to": {"city": "Oslo", "zone": 3}, "zone": 3}
    assert written(tmp_path, schema, [framed(2, _json(good))]) == [good]
    with pytest.raises(Undecodable, match="not valid"):  # the referenced schema's `required`
        schema.decode(framed(2, _json({"id": 2, "to": {"zone": 1}})))
    with pytest.raises(Unsupported):  # a name that is not one of the references
        iceberg_type(SHIPMENT, {"other.json": json.dumps(ADDRESS)})


def test_decoded_values_reach_the_table(tmp_path: Path, registry: None) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    old = framed(1, _json({"id": 3, "name": "x", "lines": []}))
    first, second, third = written(tmp_path, schema, [framed(2, _json(NEW)), old, None])
    assert first["id"] == 7 and first["at"] == AT and first["day"] == date(2026, 11, 29)
    assert first["attrs"] == [("a", 1)] and first["lines"] == [{"sku": "s", "qty": 2}]
    assert first["ship"] == {"city": "Oslo", "zip": None}
    assert second["id"] == 3 and second["lines"] == [] and second["tags"] is None
    assert third is None
