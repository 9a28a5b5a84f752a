"""Avro values: the schema's Iceberg type, and values decoded by fastavro with the schema their
id names read as the latest one (Avro schema resolution).

Avro to Iceberg: boolean, int, long, float, double, bytes, string; enum as string; fixed as
fixed; record as struct; array as list; map as map with string keys; a union of null and one
type as that type, optional; logical types date, timestamp-millis/-micros (timestamptz),
decimal and uuid (as string). Named types may come from the schema's references (Confluent's
schema references: other subjects' schemas, whose named types the schema uses by full name).
Anything else (other unions, recursive records) is refused when the table is made."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from typing import Any

import fastavro
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from .common import Ids, Undecodable, Unsupported

_PRIMITIVES: dict[str, Callable[[], IcebergType]] = {
    "boolean": BooleanType, "int": IntegerType, "long": LongType, "float": FloatType,
    "double": DoubleType, "bytes": BinaryType, "string": StringType,
}


class _Types(Ids):
    def __init__(self) -> None:
        super().__init__()
        self.named: dict[str, Any] = {}
        self.open: set[str] = set()

    def convert(self, node: Any, space: str | None = None) -> tuple[IcebergType, bool]:
        """The Iceberg type of an Avro schema node, and whether a value is required."""
        if isinstance(node, list):
            members = [m for m in node if m != "null"]
            if len(members) != 1:
                raise Unsupported(f"a union of {json.dumps(node)} (only null and one type)")
            return self.convert(members[0], space)[0], len(members) == len(node)
        if isinstance(node, str):
            if node in _PRIMITIVES:
                return _PRIMITIVES[node](), True
            if node == "null":
                raise Unsupported("a null column")
            full = node if "." in node or space is None else f"{space}.{node}"
            found = self.named.get(full, self.named.get(node))
            if found is None:
                raise Unsupported(f"the type {node!r} (not defined before)")
            if full in self.open or node in self.open:
                raise Unsupported(f"the recursive type {node!r}")
            return self.convert(found, space)
        if not isinstance(node, dict):
            raise Unsupported(f"the schema {json.dumps(node)}")
        kind = node.get("type")
        logical = node.get("logicalType")
        if kind == "int" and logical == "date":
            return DateType(), True
        if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
            return TimestamptzType(), True
        if kind in ("bytes", "fixed") and logical == "decimal":
            if kind == "fixed":
                self._define(node, space)
            return DecimalType(int(node["precision"]), int(node.get("scale", 0))), True
        if kind == "string" and logical == "uuid":
            return StringType(), True
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind](), True
        if kind == "enum":
            self._define(node, space)
            return StringType(), True
        if kind == "fixed":
            self._define(node, space)
            return FixedType(int(node["size"])), True
        if kind == "array":
            element, required = self.convert(node["items"], space)
            return ListType(self.new_id(), element, element_required=required), True
        if kind == "map":
            value, required = self.convert(node["values"], space)
            return MapType(self.new_id(), StringType(), self.new_id(), value,
                           value_required=required), True
        if kind == "record":
            full = self._define(node, space)
            inner = full.rpartition(".")[0] or None
            self.open.add(full)
            fields = []
            for field in node.get("fields", []):
                ftype, required = self.convert(field["type"], inner)
                fields.append(NestedField(self.new_id(), field["name"], ftype,
                                          required=required))
            self.open.discard(full)
            return StructType(*fields), True
        if isinstance(kind, (dict, list, str)):
            return self.convert(kind, space)
        raise Unsupported(f"the schema {json.dumps(node)}")

    def _define(self, node: dict[str, Any], space: str | None) -> str:
        name = str(node["name"])
        space = node.get("namespace", space)
        full = name if "." in name or not space else f"{space}.{name}"
        self.named[full] = node
        return full

    def learn(self, node: Any, space: str | None = None) -> None:
        """Define the named types of a referenced schema (records, enums, fixed, at any depth)
        without making columns of them: the schema that references it may use them."""
        if isinstance(node, list):
            for member in node:
                self.learn(member, space)
            return
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind in ("record", "enum", "fixed") and "name" in node:
            full = self._define(node, space)
            inner = full.rpartition(".")[0] or None
            for field in node.get("fields", []) if kind == "record" else []:
                self.learn(field.get("type"), inner)
        elif kind == "array":
            self.learn(node.get("items"), space)
        elif kind == "map":
            self.learn(node.get("values"), space)
        elif isinstance(kind, (dict, list)):
            self.learn(kind, space)


def iceberg_type(schema: Any, references: dict[str, str] | None = None) -> IcebergType:
    """The value column's type for an Avro schema (parsed JSON), whose named types may be
    defined in its references (texts by reference name)."""
    types = _Types()
    for text in (references or {}).values():
        try:
            types.learn(_parse(text))
        except Undecodable as exc:
            raise Unsupported(f"a referenced schema: {exc}") from None
    return types.convert(schema)[0]


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Undecodable(f"a schema that is not JSON: {exc}") from None


def parsed_with_references(schema: Any, references: dict[str, str]) -> Any:
    """fastavro's parsed schema, the referenced schemas' named types known to it. A referenced
    schema may itself use another's types, so they are parsed in an order that works."""
    named: dict[str, Any] = {}
    pending = [_parse(text) for text in references.values()]
    while pending:
        left = []
        for ref in pending:
            try:
                fastavro.parse_schema(ref, named_schemas=named)
            except fastavro.schema.UnknownType:
                left.append(ref)
        if len(left) == len(pending):  # none parsed in this pass: a name nobody defines
            fastavro.parse_schema(left[0], named_schemas=named)  # raises, naming it
        pending = left
    return fastavro.parse_schema(schema, named_schemas=named)


def _plain(value: Any) -> Any:
    """fastavro's values as pyarrow takes them (uuid as text)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


class AvroValues:
    """Avro values (`Values`): decoded with their writer schema, read as the latest one."""

    def __init__(self, registered: dict[str, Any], references: dict[str, str]) -> None:
        self.schema = json.loads(registered["schema"])
        self.type = iceberg_type(self.schema, references)
        self.reader = parsed_with_references(self.schema, references)

    def writer(self, registered: dict[str, Any], references: dict[str, str]) -> Any:
        try:
            return parsed_with_references(json.loads(registered["schema"]), references)
        except Exception as exc:
            raise Undecodable(f"its schema does not parse: {exc}") from None

    def decode(self, writer: Any, payload: bytes) -> Any:
        try:
            return _plain(fastavro.schemaless_reader(io.BytesIO(payload), writer, self.reader))
        except Exception as exc:
            raise Undecodable(f"{type(exc).__name__}: {exc}") from None
