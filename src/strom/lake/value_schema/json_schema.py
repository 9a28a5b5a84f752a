"""JSON Schema values: the schema's Iceberg type, and values parsed as JSON, validated against
the schema their id names (with `jsonschema`, as the registry does) and fitted to the table's
type by field name.

JSON Schema to Iceberg: an object with `properties` is a struct (every field optional: a value
may leave any out, and one written with another version of the schema may lack it), an object
with only an `additionalProperties` schema a map with string keys, an array with an `items`
schema a list; string (`format` date: date, date-time: timestamptz), integer (long), number
(double), boolean; `enum`s of strings or of integers; `null` in a type list, or a `oneOf` /
`anyOf` of null and one schema, makes a value optional. `$ref`s resolve inside the schema
(`#/definitions/...`, `#/$defs/...`, any JSON pointer). Anything else (other `oneOf`/`anyOf`,
`allOf`, tuples, objects without properties, any-value schemas, recursive `$ref`s) is
refused when the table is made. A `$ref` to another subject's schema (Confluent's schema
references: `"$ref": "address.json"`, the reference's name, with or without a `#` pointer
into it) resolves to that schema, and values are validated with the references known."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    IcebergType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from .common import Ids, Undecodable, Unsupported, shaper

_FORMATS = {"date": DateType, "date-time": TimestamptzType}
_SCALARS = {"integer": LongType, "number": DoubleType, "boolean": BooleanType}


def _text(node: Any) -> str:
    text = json.dumps(node)
    return text if len(text) <= 200 else text[:197] + "..."


def _is_null(node: Any) -> bool:
    return isinstance(node, dict) and (node.get("type") == "null" or node.get("const", 0) is None
                                       or node.get("enum") == [None])


class _Types(Ids):
    def __init__(self, root: Any, docs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.root = root  # the document local `$ref`s point into: the schema, or a reference
        self.docs = docs or {}  # the referenced schemas, by reference name
        self.doc = ""  # the name of `root` ("" for the schema itself)
        self.open: list[str] = []  # the $refs being expanded (a recursive one is refused)

    def convert(self, node: Any) -> tuple[IcebergType, bool]:
        """The Iceberg type of a schema node, and whether a value is required (not null)."""
        if not isinstance(node, dict):
            raise Unsupported(f"the schema {_text(node)} (a schema of any value, or none)")
        if "$ref" in node:
            ref = str(node["$ref"])
            name, _, pointer = ref.partition("#")
            doc = name or self.doc
            key = f"{doc}#{pointer}"
            if key in self.open:
                raise Unsupported(f"the recursive $ref {ref!r}")
            saved = self.root, self.doc
            if name:
                if name not in self.docs:
                    raise Unsupported(f"the $ref {ref!r} (neither local nor a reference of "
                                      "the schema)")
                self.root, self.doc = self.docs[name], name
            self.open.append(key)
            try:
                return self.convert(self.resolve(f"#{pointer}"))
            finally:
                self.open.pop()
                self.root, self.doc = saved
        for combined in ("oneOf", "anyOf"):
            if combined in node:
                branches = node[combined]
                others = [b for b in branches if not _is_null(b)]
                if len(others) != 1 or any(k in node for k in ("type", "properties", "items")):
                    raise Unsupported(f"{combined} {_text(branches)} (only null and one schema)")
                kind, required = self.convert(others[0])
                return kind, required and len(others) == len(branches)
        if "allOf" in node:
            raise Unsupported(f"allOf {_text(node['allOf'])}")
        kinds = node.get("type")
        if kinds is None:
            return self._untyped(node)
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        nullable = "null" in kinds
        rest = {k for k in kinds if k != "null"}
        if rest == {"integer", "number"}:
            rest = {"number"}
        if len(rest) != 1:
            raise Unsupported(f"the type {_text(node['type'])} (only null and one type)")
        return self._typed(rest.pop(), node), not nullable

    def _untyped(self, node: dict[str, Any]) -> tuple[IcebergType, bool]:
        if "enum" in node or "const" in node:
            values = node["enum"] if "enum" in node else [node["const"]]
            present = [v for v in values if v is not None]
            if present and all(isinstance(v, str) for v in present):
                return StringType(), len(present) == len(values)
            if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
                return LongType(), len(present) == len(values)
            raise Unsupported(f"the enum {_text(values)} (only strings, or integers)")
        if "properties" in node or "additionalProperties" in node:
            return self._typed("object", node), True
        if "items" in node:
            return self._typed("array", node), True
        raise Unsupported(f"the schema {_text(node)} (no type)")

    def _typed(self, kind: str, node: dict[str, Any]) -> IcebergType:
        if kind == "string":
            return _FORMATS.get(str(node.get("format")), StringType)()
        if kind in _SCALARS:
            return _SCALARS[kind]()
        if kind == "object":
            properties = node.get("properties")
            if isinstance(properties, dict) and properties:
                return StructType(*(NestedField(self.new_id(), name, self.convert(sub)[0],
                                                required=False)
                                    for name, sub in properties.items()))
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and not node.get("patternProperties"):
                value, required = self.convert(extra)
                return MapType(self.new_id(), StringType(), self.new_id(), value,
                               value_required=required)
            raise Unsupported(f"the object {_text(node)} (neither properties nor an "
                              "additionalProperties schema)")
        if kind == "array":
            items = node.get("items")
            if not isinstance(items, dict) or "prefixItems" in node:
                raise Unsupported(f"the array {_text(node)} (only one items schema)")
            element, required = self.convert(items)
            return ListType(self.new_id(), element, element_required=required)
        raise Unsupported(f"the type {kind!r}")

    def resolve(self, ref: str) -> Any:
        """A `$ref` inside the schema: `#` or a JSON pointer (`#/definitions/X` is also looked
        for under `$defs`, and the other way round, as the registry resolves them)."""
        if ref == "#":
            return self.root
        if not ref.startswith("#/"):
            raise Unsupported(f"the $ref {ref!r} (only local JSON pointers)")
        tokens = [urllib.parse.unquote(t).replace("~1", "/").replace("~0", "~")
                  for t in ref[2:].split("/")]
        paths = [tokens]
        swapped = {"definitions": "$defs", "$defs": "definitions"}.get(tokens[0])
        if swapped is not None:
            paths.append([swapped, *tokens[1:]])
        for path in paths:
            node = self.root
            for token in path:
                if isinstance(node, dict) and token in node:
                    node = node[token]
                elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                    node = node[int(token)]
                else:
                    break
            else:
                return node
        raise Unsupported(f"the $ref {ref!r} (not found in the schema)")


def iceberg_type(schema: Any, references: dict[str, str] | None = None) -> IcebergType:
    """The value column's type for a JSON Schema (parsed JSON), with the texts of its
    references by name."""
    try:
        docs = {name: json.loads(text) for name, text in (references or {}).items()}
    except ValueError as exc:
        raise Unsupported(f"a referenced schema that is not JSON: {exc}") from None
    return _Types(schema, docs).convert(schema)[0]


def _both_definitions(schema: Any) -> Any:
    """`#/definitions/X` finds `$defs` too, and back, as the registry resolves them."""
    if isinstance(schema, dict):
        for one, other in (("definitions", "$defs"), ("$defs", "definitions")):
            if one in schema and other not in schema:
                schema = {**schema, other: schema[one]}
    return schema


class JsonValues:
    """JSON Schema values (`Values`): validated with their writer schema, fitted to the
    latest one's type by field name."""

    def __init__(self, registered: dict[str, Any], references: dict[str, str]) -> None:
        self.schema = json.loads(registered["schema"])
        self.type = iceberg_type(self.schema, references)
        self.shape = shaper(self.type)

    def writer(self, registered: dict[str, Any], references: dict[str, str]) -> Any:
        import jsonschema
        from jsonschema import validators
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7

        try:
            schema = _both_definitions(json.loads(registered["schema"]))
            known: Registry[Any] = Registry().with_resources(
                (name, Resource.from_contents(_both_definitions(json.loads(text)),
                                              default_specification=DRAFT7))
                for name, text in references.items())
            cls = validators.validator_for(schema, default=jsonschema.Draft7Validator)
            return cls(schema, registry=known)
        except Exception as exc:
            raise Undecodable(f"its schema does not load: {exc}") from None

    def decode(self, writer: Any, payload: bytes) -> Any:
        try:
            value = json.loads(payload)
        except ValueError as exc:
            raise Undecodable(f"not JSON: {exc}") from None
        try:
            error = next(iter(writer.iter_errors(value)), None)
        except Exception as exc:  # a $ref the validator cannot follow, ...
            raise Undecodable(f"cannot be validated: {exc}") from None
        if error is not None:
            where = "".join(f"/{p}" for p in error.absolute_path)
            raise Undecodable(f"not valid for its schema at #{where}: {error.message}")
        return None if value is None else self.shape(value)
