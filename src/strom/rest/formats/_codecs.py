"""A registered schema as a codec between a record's JSON form (what HTTP clients send and
receive) and its payload (what follows the schema id in Confluent's wire format).

AVRO data is Avro's JSON encoding (a union's value as ``{"<branch>": value}``, bytes and fixed
as text whose characters are the bytes U+0000..U+00FF), written and read here against the schema
fastavro parsed, so the union branch written is exactly the one named. JSONSCHEMA data is any
JSON value valid under its schema (jsonschema, with the schema's references), its payload the
compact JSON text. PROTOBUF data is the first message of the schema in protobuf's JSON mapping,
its payload the message indexes then the message; decoding prints it as protobuf's JSON printer
does with fields without presence included (lowerCamelCase names, 64-bit integers as strings).

The schemas are parsed by the registry's own formats (strom.registry.formats), so the REST API
accepts exactly the schemas the registry does.
"""

from __future__ import annotations

import json
import math
import struct
import threading
from collections.abc import Mapping
from typing import Any, Protocol

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
COMPLEX = NAMED | {"array", "map"}
INT_RANGE = (-(1 << 31), (1 << 31) - 1)
LONG_RANGE = (-(1 << 63), (1 << 63) - 1)
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class DataError(ValueError):
    """The data is not valid for its schema (encode), or the payload is not (decode)."""


class SchemaError(ValueError):
    """The registry's parser refuses the schema: `details` is its why (one line)."""

    def __init__(self, message: str, details: str) -> None:
        super().__init__(" ".join(message.split()))
        self.details = " ".join(details.split())


class Codec(Protocol):
    schema_type: str  # the registry's name: AVRO, JSON or PROTOBUF
    record_name: str | None  # what RECORD_NAME and TOPIC_RECORD_NAME name the subject after

    def encode(self, data: Any) -> bytes:
        """`data` (the JSON form) as the payload after the schema id; raises DataError."""
        ...

    def decode(self, payload: bytes) -> Any:
        """The payload after the schema id as the JSON form; raises DataError."""
        ...


def codec_for(schema_type: str, text: str, references: Mapping[str, str]) -> Codec:
    """The codec of a schema; SchemaError when the registry's parser refuses it. (The
    registry's formats load here, on the first schema: fastavro, jsonschema and protobuf are
    slow to import.)"""
    from strom.registry.formats.base import InvalidSchemaError

    kinds: dict[str, type[AvroCodec | JsonSchemaCodec | ProtobufCodec]] = {
        "AVRO": AvroCodec, "JSON": JsonSchemaCodec, "PROTOBUF": ProtobufCodec}
    kind = kinds.get(schema_type)
    if kind is None:
        raise SchemaError(f"unknown schema type {schema_type}", "unknown schema type")
    try:
        return kind(text, references)
    except InvalidSchemaError as exc:
        raise SchemaError(str(exc), exc.details) from None
    except (ValueError, TypeError, KeyError, RecursionError) as exc:  # a reference's text
        why = str(exc) or type(exc).__name__
        raise SchemaError(f"Invalid schema of type {schema_type}, details: {why}", why) from None


# -- Avro ----------------------------------------------------------------------------------------


def _zigzag(out: bytearray, n: int) -> None:
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _at(path: str) -> str:
    """Where in the data an error is, as the message's prefix ("" at the top)."""
    return f"{path}: " if path else ""


class AvroCodec:
    """Avro's JSON encoding to and from its binary encoding, for one parsed schema."""

    schema_type = "AVRO"

    def __init__(self, text: str, references: Mapping[str, str]) -> None:
        from strom.registry.formats.avro import AVRO

        parsed = AVRO.parse(text, references)
        self.record_name = parsed.name
        self.root: Any = parsed.fastavro_schema
        self.named: dict[str, Any] = {}
        self._collect(self.root)

    def _collect(self, node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                self._collect(branch)
        elif isinstance(node, dict):
            self.named.update(node.get("__named_schemas") or {})
            kind = node.get("type")
            if kind in NAMED and isinstance(node.get("name"), str):
                self.named.setdefault(node["name"], node)
            for f in node.get("fields") or ():
                self._collect(f.get("type"))
            for key in ("items", "values"):
                if key in node:
                    self._collect(node[key])
            if isinstance(kind, dict | list):
                self._collect(kind)

    def _kind(self, node: Any) -> tuple[str, Any]:
        """The node's Avro type (a named reference and a logical type resolved) and its
        definition."""
        for _ in range(64):
            if isinstance(node, list):
                return "union", node
            if isinstance(node, str):
                if node in PRIMITIVES:
                    return node, node
                found = self.named.get(node)
                if found is None:
                    raise DataError(f"the schema names an unknown type {node}")
                node = found
                continue
            kind = node.get("type")
            if isinstance(kind, str) and kind in COMPLEX:
                return ("record" if kind == "error" else kind), node
            node = kind
        raise DataError("the schema nests type aliases too deeply")

    def _branch_name(self, node: Any) -> str:
        kind, found = self._kind(node)
        return str(found["name"]) if kind in NAMED else kind

    # -- JSON -> binary --------------------------------------------------------------------------

    def encode(self, data: Any) -> bytes:
        out = bytearray()
        try:
            self._write(self.root, data, out, "", False)
        except RecursionError:
            raise DataError("the data nests too deeply") from None
        return bytes(out)

    def _write(self, node: Any, value: Any, out: bytearray, path: str, default: bool) -> None:
        kind, found = self._kind(node)
        if kind == "union":
            self._write_union(found, value, out, path, default)
        elif kind == "record":
            self._write_record(found, value, out, path, default)
        elif kind in ("array", "map"):
            self._write_collection(kind, found, value, out, path, default)
        elif kind in ("enum", "fixed"):
            self._write_named(kind, found, value, out, path)
        else:
            self._write_primitive(kind, value, out, path)

    def _write_union(self, branches: list[Any], value: Any, out: bytearray, path: str,
                     default: bool) -> None:
        if default:  # a default value is the first branch's, unwrapped
            _zigzag(out, 0)
            self._write(branches[0], value, out, path, True)
            return
        names = [self._branch_name(b) for b in branches]
        if value is None and "null" in names:
            _zigzag(out, names.index("null"))
            return
        if isinstance(value, dict) and len(value) == 1:
            (name, inner), = value.items()
            index = _branch_index(names, name)
            if index is not None and names[index] != "null":
                _zigzag(out, index)
                self._write(branches[index], inner, out, f"{path}.{name}" if path else name,
                            False)
                return
        shown = ", ".join(names)
        raise DataError(f"{_at(path)}expected a value of the union [{shown}] as "
                        f"{{\"<type>\": value}}" + (" or null" if "null" in names else "")
                        + f", got {_json_kind(value)}")

    def _write_record(self, record: Any, value: Any, out: bytearray, path: str,
                      default: bool) -> None:
        if not isinstance(value, dict):
            raise DataError(f"{_at(path)}expected record {record['name']} as a JSON "
                            f"object, got {_json_kind(value)}")
        for f in record["fields"]:
            name = f["name"]
            where = f"{path}.{name}" if path else name
            if name in value:
                self._write(f["type"], value[name], out, where, default)
            elif "default" in f:
                self._write(f["type"], f["default"], out, where, True)
            else:
                raise DataError(f"{_at(path)}field {name} of record {record['name']} is "
                                "missing and has no default")

    def _write_collection(self, kind: str, node: Any, value: Any, out: bytearray, path: str,
                          default: bool) -> None:
        if kind == "array":
            if not isinstance(value, list):
                raise DataError(f"{_at(path)}expected an array, got {_json_kind(value)}")
            if value:
                _zigzag(out, len(value))
                for i, item in enumerate(value):
                    self._write(node["items"], item, out, f"{path}[{i}]", default)
        else:
            if not isinstance(value, dict):
                raise DataError(f"{_at(path)}expected a map as a JSON object, got "
                                f"{_json_kind(value)}")
            if value:
                _zigzag(out, len(value))
                for key, item in value.items():
                    self._write_primitive("string", key, out, path)
                    self._write(node["values"], item, out, f"{path}[{json.dumps(key)}]",
                                default)
        out.append(0)

    def _write_named(self, kind: str, node: Any, value: Any, out: bytearray, path: str) -> None:
        if kind == "enum":
            symbols = node["symbols"]
            if not isinstance(value, str) or value not in symbols:
                raise DataError(f"{_at(path)}expected a symbol of enum {node['name']} "
                                f"({', '.join(symbols)}), got {_shown(value)}")
            _zigzag(out, symbols.index(value))
            return
        raw = _latin1(value, path, f"fixed {node['name']}")
        if len(raw) != node["size"]:
            raise DataError(f"{_at(path)}fixed {node['name']} holds {node['size']} "
                            f"bytes, got {len(raw)}")
        out += raw

    def _write_primitive(self, kind: str, value: Any, out: bytearray, path: str) -> None:
        if kind == "null":
            if value is not None:
                raise DataError(f"{_at(path)}expected null, got {_json_kind(value)}")
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise DataError(f"{_at(path)}expected a boolean, got {_json_kind(value)}")
            out.append(1 if value else 0)
        elif kind in ("int", "long"):
            low, high = INT_RANGE if kind == "int" else LONG_RANGE
            if not isinstance(value, int) or isinstance(value, bool):
                raise DataError(f"{_at(path)}expected {kind}, got {_json_kind(value)}")
            if not low <= value <= high:
                raise DataError(f"{_at(path)}{value} is out of range for {kind}")
            _zigzag(out, value)
        elif kind in ("float", "double"):
            number = SPECIAL_FLOATS.get(value) if isinstance(value, str) else value
            if not isinstance(number, int | float) or isinstance(number, bool):
                raise DataError(f"{_at(path)}expected {kind}, got {_json_kind(value)}")
            try:
                out += struct.pack("<f" if kind == "float" else "<d", float(number))
            except (OverflowError, struct.error):
                raise DataError(f"{_at(path)}{value} is out of range for {kind}") from None
        elif kind == "bytes":
            raw = _latin1(value, path, "bytes")
            _zigzag(out, len(raw))
            out += raw
        else:
            if not isinstance(value, str):
                raise DataError(f"{_at(path)}expected a string, got {_json_kind(value)}")
            try:
                raw = value.encode()
            except UnicodeEncodeError:
                raise DataError(f"{_at(path)}the string is not valid Unicode") from None
            _zigzag(out, len(raw))
            out += raw

    # -- binary -> JSON --------------------------------------------------------------------------

    def decode(self, payload: bytes) -> Any:
        try:
            value, _ = self._read(self.root, payload, 0)
        except (IndexError, struct.error):
            raise DataError("the Avro payload ends before its datum does") from None
        except UnicodeDecodeError:
            raise DataError("an Avro string of the payload is not UTF-8") from None
        except RecursionError:
            raise DataError("the Avro payload nests too deeply") from None
        return value

    def _read(self, node: Any, data: bytes, pos: int) -> tuple[Any, int]:
        kind, found = self._kind(node)
        if kind == "union":
            index, pos = _read_long(data, pos)
            if not 0 <= index < len(found):
                raise DataError(f"union branch {index} does not exist")
            branch = found[index]
            name = self._branch_name(branch)
            if name == "null":
                return None, pos
            value, pos = self._read(branch, data, pos)
            return {name: value}, pos
        if kind == "record":
            out: dict[str, Any] = {}
            for f in found["fields"]:
                out[f["name"]], pos = self._read(f["type"], data, pos)
            return out, pos
        if kind in ("array", "map"):
            return self._read_blocks(kind, found, data, pos)
        if kind == "enum":
            index, pos = _read_long(data, pos)
            if not 0 <= index < len(found["symbols"]):
                raise DataError(f"enum {found['name']} has no symbol {index}")
            return found["symbols"][index], pos
        if kind == "fixed":
            size = found["size"]
            return _bytes_text(data, pos, size), pos + size
        return _read_primitive(kind, data, pos)

    def _read_blocks(self, kind: str, node: Any, data: bytes, pos: int) -> tuple[Any, int]:
        items: list[Any] = []
        entries: dict[str, Any] = {}
        while True:
            count, pos = _read_long(data, pos)
            if count == 0:
                return (items if kind == "array" else entries), pos
            if count < 0:  # a block with its size in bytes
                count = -count
                _, pos = _read_long(data, pos)
            if count > len(data) - pos:
                raise DataError(f"an Avro {kind} block claims {count} items")
            for _ in range(count):
                if kind == "array":
                    item, pos = self._read(node["items"], data, pos)
                    items.append(item)
                else:
                    key, pos = _read_primitive("string", data, pos)
                    entries[key], pos = self._read(node["values"], data, pos)


def _branch_index(names: list[str], name: str) -> int | None:
    if name in names:
        return names.index(name)
    short = [i for i, n in enumerate(names) if n.rsplit(".", 1)[-1] == name]
    return short[0] if len(short) == 1 else None


def _latin1(value: Any, path: str, what: str) -> bytes:
    if not isinstance(value, str):
        raise DataError(f"{_at(path)}expected {what} as a string, got {_json_kind(value)}")
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        raise DataError(f"{_at(path)}{what} must be a string of characters U+0000..U+00FF "
                        "(one per byte)") from None


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(10):
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise DataError("an Avro varint is longer than 10 bytes")


def _bytes_text(data: bytes, pos: int, size: int) -> str:
    if size < 0 or pos + size > len(data):
        raise DataError("the Avro payload ends before its datum does")
    return data[pos:pos + size].decode("latin-1")


def _read_primitive(kind: str, data: bytes, pos: int) -> tuple[Any, int]:
    if kind == "null":
        return None, pos
    if kind == "boolean":
        return data[pos] != 0, pos + 1
    if kind in ("int", "long"):
        return _read_long(data, pos)
    if kind in ("float", "double"):
        size = 4 if kind == "float" else 8
        (number,) = struct.unpack_from("<f" if kind == "float" else "<d", data, pos)
        if math.isnan(number):
            return "NaN", pos + size
        if math.isinf(number):
            return ("Infinity" if number > 0 else "-Infinity"), pos + size
        return number, pos + size
    size, pos = _read_long(data, pos)
    if kind == "bytes":
        return _bytes_text(data, pos, size), pos + size
    if size < 0 or pos + size > len(data):
        raise DataError("the Avro payload ends before its datum does")
    return data[pos:pos + size].decode(), pos + size


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- JSON Schema ---------------------------------------------------------------------------------


class JsonSchemaCodec:
    """JSON valid under a JSON Schema (its references resolved by their names)."""

    schema_type = "JSON"

    def __init__(self, text: str, references: Mapping[str, str]) -> None:
        from jsonschema import Draft7Validator, validators
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7

        from strom.registry.formats.json_schema import JSON

        parsed = JSON.parse(text, references)
        value = parsed.value
        title = value.get("title") if isinstance(value, dict) else None
        self.record_name = title if isinstance(title, str) else None
        registry: Registry[Any] = Registry().with_resources(
            (name, Resource.from_contents(json.loads(ref), default_specification=DRAFT7))
            for name, ref in references.items())
        cls = validators.validator_for(value, default=Draft7Validator)
        self._validator = cls(value, registry=registry, format_checker=cls.FORMAT_CHECKER)

    def encode(self, data: Any) -> bytes:
        from jsonschema import exceptions
        from referencing.exceptions import Unresolvable

        try:
            error = exceptions.best_match(self._validator.iter_errors(data))
        except Unresolvable as exc:
            raise DataError(f"the schema's reference cannot be resolved: {exc}") from None
        except RecursionError:
            raise DataError("the data nests too deeply") from None
        if error is not None:
            where = "#" + "".join(f"/{p}" for p in error.absolute_path)
            raise DataError(f"{where}: {_one_line(error.message)}")
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()

    def decode(self, payload: bytes) -> Any:
        try:
            return json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataError(f"the JSON Schema payload is not JSON: {exc}") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- Protobuf ------------------------------------------------------------------------------------


class ProtobufCodec:
    """The schema's first message in protobuf's JSON mapping (written with indexes [0])."""

    schema_type = "PROTOBUF"

    def __init__(self, text: str, references: Mapping[str, str]) -> None:
        from strom.registry.formats.protobuf import FORMAT

        self.schema = FORMAT.parse(text, references)
        self.pool = self.schema.compile()
        self.record_name = self.schema.name() or None
        self._classes: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _class(self, name: str) -> Any:
        found = self._classes.get(name)
        if found is None:
            from google.protobuf import message_factory

            descriptor = self.pool.FindMessageTypeByName(name)
            with self._lock:
                found = self._classes.setdefault(name,
                                                 message_factory.GetMessageClass(descriptor))
        return found

    def encode(self, data: Any) -> bytes:
        from google.protobuf import json_format
        from google.protobuf.message import EncodeError

        from strom.registry.formats.protobuf import encode_message_indexes

        if not self.schema.message_names():
            raise DataError("the Protobuf schema has no message")
        name = self.schema.message_name([0])
        if not isinstance(data, dict):
            raise DataError(f"expected message {name} as a JSON object, got {_json_kind(data)}")
        try:
            message = json_format.ParseDict(data, self._class(name)(),
                                           descriptor_pool=self.pool)
            body = message.SerializeToString()
        except json_format.ParseError as exc:
            raise DataError(f"not a valid {name}: {_one_line(str(exc))}") from None
        except EncodeError as exc:
            raise DataError(f"not a valid {name}: {_one_line(str(exc))}") from None
        except RecursionError:
            raise DataError("the data nests too deeply") from None
        return encode_message_indexes([0]) + body

    def decode(self, payload: bytes) -> Any:
        from google.protobuf import json_format
        from google.protobuf.message import DecodeError

        from strom.registry.formats.protobuf import decode_message_indexes

        try:
            indexes, pos = decode_message_indexes(payload, 0)
            name = self.schema.message_name(indexes)
        except ValueError as exc:
            raise DataError(f"invalid Protobuf message indexes: {exc}") from None
        try:
            message = self._class(name).FromString(payload[pos:])
        except DecodeError as exc:
            raise DataError(f"the payload is not a valid {name}: {exc}") from None
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                         descriptor_pool=self.pool)
