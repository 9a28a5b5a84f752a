"""Message schemas as plain data, derived at run time from kio's generated dataclasses.

kio turns Kafka's JSON message specs into one dataclass per (API, version, side) and nested
struct. We only read those classes (field order, ``kafka_type``, tags, nullability, defaults);
encoding and decoding are ours (`codec.py`). This module flattens each class into a
`StructSchema` so the code generator needs no knowledge of kio, Python typing or phantom
types, and so defaults are already in the codec's value model (ints for durations and
timestamps, lists for arrays, dicts for structs).
"""

from __future__ import annotations

import datetime
import enum
import types
import typing
import uuid
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Literal, cast

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.protocol import Entity

from .errors import UnsupportedVersion
from .extra_schemas import EXTRA_ENTITIES, EXTRA_VERSIONS
from .primitives import ZERO_UUID

Side = Literal["request", "response"]

# Primitive kinds with a fixed width: struct format code and size.
FIXED_KINDS: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint8": ("B", 1),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "uint64": ("Q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}

# kio kafka_type -> wire kind. Durations, timestamps and error codes are plain integers here.
_KIND_OF_KAFKA_TYPE = {
    **{k: k for k in FIXED_KINDS},
    "error_code": "int16",
    "timedelta_i32": "int32",
    "timedelta_i64": "int64",
    "datetime_i64": "int64",
    "string": "string",
    "bytes": "bytes",
    "records": "records",
}

_IMPLICIT_DEFAULTS = {
    **{k: 0 for k in FIXED_KINDS},
    "float64": 0.0,
    "bool": False,
    "uuid": ZERO_UUID,
    "string": "",
    "bytes": b"",
    "records": b"",
}

_MS = datetime.timedelta(milliseconds=1)


@dataclass(frozen=True, eq=False, slots=True)
class FieldSchema:
    """One field of one struct version."""

    name: str
    kind: str  # a key of FIXED_KINDS, "string", "bytes", "records" or "struct"
    kafka_type: str  # kio's kafka_type ("struct" for nested entities)
    struct: StructSchema | None  # the element/value schema when kind == "struct"
    array: bool
    nullable: bool  # whether the value (or the array itself) may be null on the wire
    tag: int | None  # tag number for tagged fields
    default: object  # default in codec form: int/str/bytes/UUID/None/list/dict
    strom: bool = False  # Strom's own tagged field, not in Kafka's schema (or kio's class)


@dataclass(frozen=True, eq=False, slots=True)
class StructSchema:
    """One struct version: untagged fields in wire order, tagged fields by tag."""

    name: str
    flexible: bool
    fields: tuple[FieldSchema, ...]
    tagged: tuple[FieldSchema, ...]
    source: type  # the kio class it was derived from

    def all_fields(self) -> tuple[FieldSchema, ...]:
        return self.fields + self.tagged

    def defaults(self) -> dict[str, object]:
        return {f.name: f.default for f in self.all_fields()}


def plain_value(value: object) -> object:
    """A kio value (enum, phantom int, timedelta, datetime, tuple, entity) in codec form."""
    if value is None or type(value) in (int, str, bytes, bool, float):
        return value
    if isinstance(value, enum.Enum):
        return plain_value(value.value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, datetime.timedelta):
        return value // _MS
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, tuple | list):
        return [plain_value(v) for v in value]
    if is_dataclass(value):
        return {f.name: plain_value(getattr(value, f.name)) for f in fields(value)}
    raise TypeError(f"cannot convert {type(value).__name__} to a codec value")


def _strip_optional(tp: object) -> tuple[object, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union type {tp!r}")
        return args[0], True
    return tp, False


_SCHEMAS: dict[type, StructSchema] = {}

# Strom's own tagged fields on Kafka messages, (name, wire kind, tag, default) by kio class. A
# Kafka peer skips an unknown tag, and a Strom peer writes it only when it is not the default,
# so the bytes are Kafka's whenever the field is unused. `not_before_ms`: the end of a share
# record's redelivery delay (share.redelivery.delay.ms, a Strom extension), carried by the
# share-state RPCs between the share-partition leader and the share coordinator as the
# `__share_group_state` records carry it.
STROM_NOT_BEFORE_TAG = 0x5374
_NOT_BEFORE = (("not_before_ms", "int64", STROM_NOT_BEFORE_TAG, 0),)
_STROM_TAGGED: dict[tuple[str, str], tuple[tuple[str, str, int, object], ...]] = {
    ("kio.schema.read_share_group_state.v0.response", "StateBatch"): _NOT_BEFORE,
    ("kio.schema.write_share_group_state.v0.request", "StateBatch"): _NOT_BEFORE,
    ("kio.schema.write_share_group_state.v1.request", "StateBatch"): _NOT_BEFORE,
}


def struct_schema(entity: type[Entity]) -> StructSchema:
    """The schema of a kio entity class (message, nested struct, header or data record)."""
    schema = _SCHEMAS.get(entity)
    if schema is None:
        schema = _SCHEMAS[entity] = _build(entity)
    return schema


def _build(entity: type[Entity]) -> StructSchema:
    flexible = bool(entity.__flexible__)
    plain: list[FieldSchema] = []
    tagged: list[FieldSchema] = []
    for f in fields(entity):
        tp, nullable = _strip_optional(f.type)
        array = typing.get_origin(tp) is tuple
        if array:
            tp = _strip_optional(typing.get_args(tp)[0])[0]  # element nullability is unused
        sub = None
        if is_dataclass(tp):
            sub = struct_schema(cast("type[Entity]", tp))  # kio's nested structs are entities
            kind = kafka_type = "struct"
        else:
            kafka_type = f.metadata["kafka_type"]
            kind = _KIND_OF_KAFKA_TYPE[kafka_type]
        if kind == "uuid" and not array:
            nullable = False  # null UUIDs travel as the zero UUID
        tag = f.metadata.get("tag")

        if f.default is not MISSING:
            default = plain_value(f.default)
        elif f.default_factory is not MISSING:
            default = plain_value(f.default_factory())
        elif nullable:
            default = None
        elif array:
            default = []
        elif sub is not None:
            default = sub.defaults()
        else:
            default = _IMPLICIT_DEFAULTS[kind]
        if default is None and not array:
            if kind == "uuid":
                default = ZERO_UUID
            elif kafka_type == "datetime_i64":
                default = -1  # Kafka's null timestamp
        field = FieldSchema(f.name, kind, kafka_type, sub, array, nullable, tag, default)
        (plain if tag is None else tagged).append(field)
    for name, kind, tag, default in _STROM_TAGGED.get((entity.__module__, entity.__qualname__), ()):
        tagged.append(FieldSchema(name, kind, kind, None, False, False, tag, default, True))
    if tagged and not flexible:
        raise TypeError(f"{entity.__name__}: tagged fields in a non-flexible version")
    tagged.sort(key=lambda fs: fs.tag or 0)  # every tagged field has a tag
    return StructSchema(entity.__name__, flexible, tuple(plain), tuple(tagged), entity)


def kio_entity(api_key: int, version: int, side: Side) -> type[Entity]:
    """kio's class for a message (or Strom's, for an API newer than kio: `extra_schemas`);
    raises `UnsupportedVersion` if there is none."""
    extra = EXTRA_ENTITIES.get((api_key, version, side))
    if extra is not None:
        return extra
    loader = load_request_schema if side == "request" else load_response_schema
    try:
        return loader(api_key, version)
    except KioIndexError:
        raise UnsupportedVersion(api_key, version) from None


def load_schema(api_key: int, version: int, side: Side) -> StructSchema:
    return struct_schema(kio_entity(api_key, version, side))


def api_keys() -> tuple[int, ...]:
    """Every API key kio has schemas for (not the `extra_schemas` ones)."""
    return tuple(sorted(api_key_map))


def supported_versions(api_key: int) -> tuple[int, int]:
    """(min, max) version with schemas (request side; kio always has both sides)."""
    if api_key in EXTRA_VERSIONS:
        return EXTRA_VERSIONS[api_key]
    try:
        versions = schema_name_map[api_key_map[api_key]]
    except KeyError:
        raise UnsupportedVersion(api_key) from None
    return min(versions), max(versions)


# Flexible-since versions of APIs that Kafka 4 removed (no kio schema); from Kafka's JSON specs.
_REMOVED_API_FLEXIBLE_SINCE = {4: 4, 5: 2, 6: 6, 7: 3}
_FLEXIBLE_SINCE: dict[int, int | None] = {}


def flexible_since(api_key: int) -> int | None:
    """First flexible version of an API (Kafka's flexibleVersions are open-ended "N+")."""
    try:
        return _FLEXIBLE_SINCE[api_key]
    except KeyError:
        pass
    if api_key in _REMOVED_API_FLEXIBLE_SINCE:
        result: int | None = _REMOVED_API_FLEXIBLE_SINCE[api_key]
    else:
        try:
            lo, hi = supported_versions(api_key)
        except UnsupportedVersion:
            return None
        result = None
        for v in range(lo, hi + 1):
            if kio_entity(api_key, v, "request").__flexible__:
                result = v
                break
    _FLEXIBLE_SINCE[api_key] = result
    return result


def is_flexible(api_key: int, version: int) -> bool:
    """Whether this version uses compact encodings and tagged fields (also beyond kio's range).

    A version kio has answers from its own schema, which its codec loads anyway: scanning the
    API's earlier versions for the first flexible one would import every one of them.
    """
    if api_key in api_key_map and version in schema_name_map[api_key_map[api_key]]:
        return bool(kio_entity(api_key, version, "request").__flexible__)
    since = flexible_since(api_key)
    return since is not None and version >= since
