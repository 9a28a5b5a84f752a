"""iceberg.mode=value_schema with Protobuf values: the Iceberg type of the schema's first
message (imports through references or well-known), values decoded as the message their
indexes name in the schema their id names and fitted to the table by field name, and those that
do not decode (bad framing or indexes, bad bytes, values out of the column's range)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import message_factory
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestamptzType,
)

from strom.lake.value_schema import RegistryUnavailable, Undecodable, Unsupported, ValueSchema
from strom.lake.value_schema.protobuf import ProtobufValues
from strom.registry.formats.protobuf import encode_message_indexes, parse

from .stubs import OUT_OF_REACH, framed, stub_registry, written

MONEY = """syntax = "proto3";
package shop;
message Money { string currency = 1; int64 units = 2; }
"""
ORDER = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "shop/money.proto";

message Order {
  int64 id = 1;
  optional string note = 2;
  int32 i32 = 3;
  sint32 s32 = 4;
  sfixed32 sf32 = 5;
  uint32 u32 = 6;
  fixed32 f32 = 7;
  sint64 s64 = 8;
  uint64 u64 = 9;
  fixed64 f64 = 10;
  sfixed64 sf64 = 11;
  float ratio = 12;
  double price = 13;
  bool paid = 14;
  bytes blob = 15;
  Kind kind = 16;
  google.protobuf.Timestamp at = 17;
  google.protobuf.StringValue maybe = 18;
  repeated string tags = 19;
  map<string, int32> attrs = 20;
  map<int64, Line> by_id = 21;
  Line line = 22;
  repeated Line lines = 23;
  Money total = 24;
  oneof pay {
    string card = 25;
    string iban = 26;
  }
  enum Kind {
    KIND_A = 0;
    KIND_B = 1;
  }
  message Line {
    string sku = 1;
    double qty = 2;
  }
}
message Refund { int64 id = 1; string reason = 2; }
"""
OLD = """syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  string name = 2;
  repeated Line lines = 3;
  message Line { string sku = 1; float qty = 2; }
}
"""
REFS = {"shop/money.proto": MONEY}
AT = datetime(2026, 11, 29, 4, 0, 0, 250_000, tzinfo=UTC)


def _values(text: str, references: dict[str, str] | None = None) -> ProtobufValues:
    return ProtobufValues({"schema": text}, references or {})


def test_protobuf_types_as_iceberg_columns() -> None:
    struct = _values(ORDER, REFS).type
    assert isinstance(struct, StructType)
    fields = {f.name: f for f in struct.fields}
    assert not any(f.required for f in struct.fields)
    expected = {"id": LongType(), "note": StringType(), "i32": IntegerType(),
                "s32": IntegerType(), "sf32": IntegerType(), "u32": LongType(),
                "f32": LongType(), "s64": LongType(), "u64": LongType(), "f64": LongType(),
                "sf64": LongType(), "ratio": FloatType(), "price": DoubleType(),
                "paid": BooleanType(), "blob": BinaryType(), "kind": StringType(),
                "at": TimestamptzType(), "maybe": StringType(), "card": StringType(),
                "iban": StringType()}
    assert {n: fields[n].field_type for n in expected} == expected
    tags = fields["tags"].field_type
    assert isinstance(tags, ListType) and tags.element_type == StringType()
    attrs, by_id = fields["attrs"].field_type, fields["by_id"].field_type
    assert isinstance(attrs, MapType) and attrs.value_type == IntegerType()
    assert isinstance(by_id, MapType) and by_id.key_type == LongType()
    assert isinstance(by_id.value_type, StructType)
    line, total = fields["line"].field_type, fields["total"].field_type
    assert isinstance(line, StructType) and [f.name for f in line.fields] == ["sku", "qty"]
    assert isinstance(total, StructType) and [f.name for f in total.fields] == \
        ["currency", "units"]
    ids = [f.field_id for f in struct.fields] + [f.field_id for f in line.fields] + \
        [tags.element_id, attrs.key_id, attrs.value_id, by_id.key_id, by_id.value_id]
    assert len(set(ids)) == len(ids) and min(ids) >= 100


@pytest.mark.parametrize("text", [
    'syntax = "proto3"; message Node { int64 id = 1; Node next = 2; }',  # recursive
    'syntax = "proto3"; message Outer { Inner inner = 1; } message Inner { }',  # no fields
    'syntax = "proto3"; import "google/protobuf/struct.proto"; '
    'message Doc { google.protobuf.Struct body = 1; }',  # recursive too
    'syntax = "proto3"; enum Kind { A = 0; }',  # no message
    'syntax = "proto3"; message Broken {',  # does not parse
    'syntax = "proto3"; import "shop/money.proto"; message M { shop.Money m = 1; }',  # no ref
])
def test_schemas_without_a_column_type_are_refused(text: str) -> None:
    with pytest.raises(Unsupported):
        _values(text)


def _registered(schema_id: int, text: str, **more: Any) -> dict[str, Any]:
    return {"id": schema_id, "schemaType": "PROTOBUF", "schema": text, **more}


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    refs = [{"name": "shop/money.proto", "subject": "money", "version": 1}]
    stub_registry(monkeypatch, {
        "/subjects/orders-value/versions/latest": _registered(2, ORDER, references=refs),
        "/subjects/money/versions/1": _registered(4, MONEY),
        "/schemas/ids/1": _registered(1, OLD),
        "/schemas/ids/3": {"schemaType": "JSON", "schema": json.dumps({"type": "string"})},
    })


def _cls(text: str, name: str, references: dict[str, str] | None = None) -> Any:
    pool = parse(text, references).compile()
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def _order(**fields: Any) -> Any:
    order = _cls(ORDER, "shop.Order", REFS)(**fields)
    return order


def _new() -> Any:
    order = _order(id=7, note="n7", i32=-3, u32=(1 << 32) - 1, u64=1 << 40, ratio=0.5,
                   price=2.25, paid=True, blob=b"\x00\x01", kind=1, tags=["x", "y"],
                   card="4111")
    order.at.FromDatetime(AT)
    order.maybe.value = "hi"
    order.attrs["a"] = 1
    order.by_id[9].sku = "s9"
    order.line.sku = "s"
    order.lines.add(sku="t", qty=1.5)
    order.total.currency = "EUR"
    return order


def _first(message: Any) -> bytes:  # the single 0 byte: the schema's first message
    return encode_message_indexes([0]) + message.SerializeToString()


def test_values_decode_with_the_schema_their_id_names(registry: None) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    value = schema.decode(framed(2, _first(_new())))
    assert value["id"] == 7 and value["note"] == "n7" and value["i32"] == -3
    assert value["u32"] == (1 << 32) - 1 and value["u64"] == 1 << 40
    assert value["ratio"] == 0.5 and value["paid"] is True and value["blob"] == b"\x00\x01"
    assert value["kind"] == "KIND_B" and value["at"] == AT and value["maybe"] == "hi"
    assert value["tags"] == ["x", "y"] and value["attrs"] == {"a": 1}
    assert value["by_id"] == {9: {"sku": "s9", "qty": 0.0}}
    assert value["line"] == {"sku": "s", "qty": 0.0}
    assert value["lines"] == [{"sku": "t", "qty": 1.5}]
    assert value["total"] == {"currency": "EUR", "units": 0}
    assert value["card"] == "4111" and value["iban"] is None
    # unset: a field with presence (optional, a message, a oneof member) is null, a proto3
    # scalar its default
    empty = schema.decode(framed(2, _first(_order())))
    assert empty["note"] is None and empty["at"] is None and empty["maybe"] is None
    assert empty["line"] is None and empty["card"] is None
    assert empty["id"] == 0 and empty["kind"] == "KIND_A" and empty["tags"] == []
    # version 1: fitted to the table by name (name dropped, note missing)
    old = _cls(OLD, "shop.Order")(id=3, name="x")
    old.lines.add(sku="u", qty=2.5)
    decoded = schema.decode(framed(1, _first(old)))
    assert decoded["id"] == 3 and decoded["note"] is None and "name" not in decoded
    assert decoded["lines"] == [{"sku": "u", "qty": 2.5}]
    # the message the indexes name: the second one, fitted by name too
    refund = _cls(ORDER, "shop.Refund", REFS)(id=5, reason="late")
    data = framed(2, encode_message_indexes([1]) + refund.SerializeToString())
    assert schema.decode(data)["id"] == 5
    assert schema.decode(None) is None


@pytest.mark.parametrize("data", [
    b"plain text",  # no framing
    framed(2, b""),  # no message indexes
    framed(2, b"\x02"),  # indexes cut short
    framed(2, encode_message_indexes([5]) + b"\x08\x01"),  # no such message
    framed(2, b"\x00\xff\xff\xff"),  # not a message
    framed(2, _first(_order(u64=1 << 63))),  # above a long's range
    framed(9, b"\x00\x08\x01"),  # an id the registry does not know
    framed(3, b"\x00\x08\x01"),  # a JSON Schema's id
])
def test_values_that_do_not_decode(registry: None, data: bytes) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    with pytest.raises(Undecodable):
        schema.decode(data)


def test_a_schema_out_of_reach_waits(registry: None) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    with pytest.raises(RegistryUnavailable):
        schema.decode(framed(OUT_OF_REACH, b"\x00\x08\x01"))


def test_decoded_values_reach_the_table(tmp_path: Path, registry: None) -> None:
    schema = ValueSchema("http://registry", "orders-value")
    first, second = written(tmp_path, schema, [framed(2, _first(_new())), None])
    assert first["id"] == 7 and first["at"] == AT and first["blob"] == b"\x00\x01"
    assert first["attrs"] == [("a", 1)] and first["by_id"] == [(9, {"sku": "s9", "qty": 0.0})]
    assert first["lines"] == [{"sku": "t", "qty": 1.5}] and first["kind"] == "KIND_B"
    assert first["total"] == {"currency": "EUR", "units": 0}
    assert second is None
