"""Protobuf values: the Iceberg type of the schema's first message, and values decoded as the
message their indexes name in the schema their id names (parsed and compiled as the registry
does), fitted to the table's type by field name.

Protobuf to Iceberg: a message is a struct (every field optional), a repeated field a list, a
map field a map (keys of the key's type); int32, sint32, sfixed32: int; int64, sint64,
sfixed64, uint32, fixed32, uint64, fixed64: long (a uint64 above a long's range does not
decode); float, double, bool, string; bytes: binary; enum: string (the value's name, or its
number for a value the schema does not name). A field without presence (a proto3 scalar) holds
its default when unset; one with presence, or a message, is null. google.protobuf.Timestamp is
a timestamptz, the wrappers (StringValue, Int64Value, ...) their optional scalar. A recursive
message or one without fields is refused when the table is made. Imports resolve through the
schema's references, which are fetched from the registry, or to the well-known files."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DoubleType,
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

from .common import Ids, Undecodable, Unsupported, shaper

_SCALARS: dict[int, Callable[[], IcebergType]] = {
    FieldDescriptor.TYPE_DOUBLE: DoubleType, FieldDescriptor.TYPE_FLOAT: FloatType,
    FieldDescriptor.TYPE_INT32: IntegerType, FieldDescriptor.TYPE_SINT32: IntegerType,
    FieldDescriptor.TYPE_SFIXED32: IntegerType, FieldDescriptor.TYPE_INT64: LongType,
    FieldDescriptor.TYPE_SINT64: LongType, FieldDescriptor.TYPE_SFIXED64: LongType,
    FieldDescriptor.TYPE_UINT32: LongType, FieldDescriptor.TYPE_FIXED32: LongType,
    FieldDescriptor.TYPE_UINT64: LongType, FieldDescriptor.TYPE_FIXED64: LongType,
    FieldDescriptor.TYPE_BOOL: BooleanType, FieldDescriptor.TYPE_STRING: StringType,
    FieldDescriptor.TYPE_BYTES: BinaryType,
}
_MESSAGES = (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WRAPPERS: dict[str, Callable[[], IcebergType]] = {
    "google.protobuf.DoubleValue": DoubleType, "google.protobuf.FloatValue": FloatType,
    "google.protobuf.Int64Value": LongType, "google.protobuf.UInt64Value": LongType,
    "google.protobuf.Int32Value": IntegerType, "google.protobuf.UInt32Value": LongType,
    "google.protobuf.BoolValue": BooleanType, "google.protobuf.StringValue": StringType,
    "google.protobuf.BytesValue": BinaryType,
}
_TIMESTAMP = "google.protobuf.Timestamp"


def _is_map(field: Any) -> bool:
    return bool(field.is_repeated and field.type == FieldDescriptor.TYPE_MESSAGE
                and field.message_type.GetOptions().map_entry)


class _Types(Ids):
    def __init__(self) -> None:
        super().__init__()
        self.open: set[str] = set()

    def message(self, descriptor: Any) -> IcebergType:
        name = descriptor.full_name
        if name == _TIMESTAMP:
            return TimestamptzType()
        if name in _WRAPPERS:
            return _WRAPPERS[name]()
        if name in self.open:
            raise Unsupported(f"the recursive message {name}")
        self.open.add(name)
        fields = [NestedField(self.new_id(), f.name, self.field(f), required=False)
                  for f in descriptor.fields]
        self.open.discard(name)
        if not fields:
            raise Unsupported(f"the message {name} (no fields)")
        return StructType(*fields)

    def field(self, field: Any) -> IcebergType:
        if _is_map(field):
            entry = field.message_type.fields_by_name
            return MapType(self.new_id(), self.single(entry["key"]), self.new_id(),
                           self.single(entry["value"]), value_required=True)
        if field.is_repeated:
            return ListType(self.new_id(), self.single(field), element_required=True)
        return self.single(field)

    def single(self, field: Any) -> IcebergType:
        if field.type in _MESSAGES:
            return self.message(field.message_type)
        if field.type == FieldDescriptor.TYPE_ENUM:
            return StringType()
        return _SCALARS[field.type]()


def _single(field: Any, value: Any) -> Any:
    if field.type in _MESSAGES:
        return _message(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else str(value)
    return value


def _message(message: Any) -> Any:
    """A decoded message as dicts, lists and scalars (what `shaper` fits to the table)."""
    descriptor = message.DESCRIPTOR
    name = descriptor.full_name
    if name == _TIMESTAMP:
        return _EPOCH + timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)
    if name in _WRAPPERS:
        return message.value
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        value = getattr(message, field.name)
        if _is_map(field):
            entry = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _single(entry, value[k]) for k in value}
        elif field.is_repeated:
            out[field.name] = [_single(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _single(field, value)
    return out


def _parse(registered: dict[str, Any], references: dict[str, str],
           error: type[Exception]) -> Any:
    from strom.registry.formats.base import InvalidSchemaError
    from strom.registry.formats.protobuf import parse

    try:
        return parse(str(registered["schema"]), references)
    except InvalidSchemaError as exc:
        raise error(f"its schema does not parse: {exc.details}") from None


class _Writer:
    """A registered schema and its messages' classes, by message indexes."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.classes: dict[tuple[int, ...], Any] = {}

    def message_class(self, indexes: list[int]) -> Any:
        key = tuple(indexes)
        found = self.classes.get(key)
        if found is None:
            from google.protobuf import message_factory

            try:
                name = self.schema.message_name(indexes)
            except ValueError as exc:
                raise Undecodable(str(exc)) from None
            descriptor = self.schema.compile().FindMessageTypeByName(name)
            found = self.classes[key] = message_factory.GetMessageClass(descriptor)
        return found


class ProtobufValues:
    """Protobuf values (`Values`): decoded as the message their indexes name in their writer
    schema, fitted to the type of the latest schema's first message by field name."""

    def __init__(self, registered: dict[str, Any], references: dict[str, str]) -> None:
        schema = _parse(registered, references, Unsupported)
        try:
            name = schema.message_name([0])
        except ValueError:
            raise Unsupported("a schema without messages") from None
        self.message = name
        self.type = _Types().message(schema.compile().FindMessageTypeByName(name))
        self.shape = shaper(self.type)

    def writer(self, registered: dict[str, Any], references: dict[str, str]) -> Any:
        return _Writer(_parse(registered, references, Undecodable))

    def decode(self, writer: Any, payload: bytes) -> Any:
        from strom.registry.formats.protobuf import decode_message_indexes

        try:
            indexes, offset = decode_message_indexes(payload)
        except ValueError as exc:
            raise Undecodable(str(exc)) from None
        cls = writer.message_class(indexes)
        try:
            message = cls.FromString(payload[offset:])
        except Exception as exc:  # the runtime's DecodeError
            raise Undecodable(f"not a {cls.DESCRIPTOR.full_name}: {exc}") from None
        if not message.IsInitialized():
            missing = ", ".join(message.FindInitializationErrors())
            raise Undecodable(f"not a {cls.DESCRIPTOR.full_name}: no {missing}")
        try:
            value = _message(message)
        except (OverflowError, ValueError) as exc:  # a timestamp out of range
            raise Undecodable(f"{type(exc).__name__}: {exc}") from None
        return self.shape(value)
