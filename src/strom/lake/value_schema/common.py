"""What every value format shares: the errors, the value columns' field ids, and `shaper`,
which fits a decoded value (written with any version of the subject) to the table's type by
field name."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any, Protocol

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestamptzType,
)

FIRST_ID = 100  # field ids of the value's columns (the table's own are below)


class Unsupported(Exception):
    """The value schema has no Iceberg type here."""


class Undecodable(Exception):
    """A value that does not decode with the schema its id names (or names no schema)."""


class RegistryUnavailable(Exception):
    """The schema a value names cannot be fetched now: the value waits (a registry outage
    must not send good records to a dead-letter topic)."""


class Ids:
    """Hands out the value columns' field ids (unique in the table's schema)."""

    def __init__(self) -> None:
        self.next_id = FIRST_ID

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1


class Values(Protocol):
    """One format's values: the table's type (from the subject's latest schema), the writer
    schemas values name, and the decoding of a value's payload (what follows the schema id)."""

    type: IcebergType

    def writer(self, registered: dict[str, Any], references: dict[str, str]) -> Any:
        """A registered schema (the registry's answer) as a writer of values; Undecodable when
        it cannot be one."""
        ...

    def decode(self, writer: Any, payload: bytes) -> Any:
        """The payload, written with `writer`, as the value column takes it (Undecodable)."""
        ...


Shape = Callable[[Any], Any]

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _kind(value: Any) -> str:
    return type(value).__name__


def _integer(bounds: tuple[int, int]) -> Shape:
    low, high = bounds

    def shape(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise Undecodable(f"{_kind(value)} {value!r} where the table has an integer")
        if not low <= value <= high:
            raise Undecodable(f"{value} is out of the column's range")
        return value
    return shape


def _float(value: Any) -> Any:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise Undecodable(f"{_kind(value)} {value!r} where the table has a number")
    return float(value)


def _exactly(kind: type, name: str) -> Shape:
    def shape(value: Any) -> Any:
        if not isinstance(value, kind):
            raise Undecodable(f"{_kind(value)} {value!r} where the table has {name}")
        return value
    return shape


def _date(value: Any) -> Any:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise Undecodable(f"{value!r} is not a date")


def _timestamp(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.upper())
        except ValueError:
            raise Undecodable(f"{value!r} is not a date-time") from None
    if not isinstance(value, datetime):
        raise Undecodable(f"{_kind(value)} {value!r} where the table has a timestamp")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _required(shape: Shape, required: bool, where: str) -> Shape:
    if not required:
        return lambda value: None if value is None else shape(value)

    def checked(value: Any) -> Any:
        if value is None:
            raise Undecodable(f"no {where}, which the table requires")
        return shape(value)
    return checked


def shaper(kind: IcebergType) -> Shape:
    """A function that fits a decoded value (dicts, lists, scalars) to `kind`, the table's
    type: struct fields by name (a missing one is None, one the table lacks is dropped);
    Undecodable when a value does not fit (a string where the table has a number, ...)."""
    if isinstance(kind, StructType):
        fields = [(f.name, _required(shaper(f.field_type), f.required, f"field {f.name!r}"))
                  for f in kind.fields]

        def struct(value: Any) -> Any:
            if not isinstance(value, dict):
                raise Undecodable(f"{_kind(value)} where the table has a struct")
            out = {}
            for name, shape in fields:
                try:
                    out[name] = shape(value.get(name))
                except Undecodable as exc:
                    raise Undecodable(f"{name}: {exc}") from None
            return out
        return struct
    if isinstance(kind, ListType):
        element = _required(shaper(kind.element_type), kind.element_required, "list element")

        def array(value: Any) -> Any:
            if not isinstance(value, list):
                raise Undecodable(f"{_kind(value)} where the table has a list")
            return [element(v) for v in value]
        return array
    if isinstance(kind, MapType):
        key = shaper(kind.key_type)
        item = _required(shaper(kind.value_type), kind.value_required, "map value")

        def mapping(value: Any) -> Any:
            if not isinstance(value, dict):
                raise Undecodable(f"{_kind(value)} where the table has a map")
            return {key(k): item(v) for k, v in value.items()}
        return mapping
    if isinstance(kind, IntegerType):
        return _integer(_INT32)
    if isinstance(kind, LongType):
        return _integer(_INT64)
    if isinstance(kind, (FloatType, DoubleType)):
        return _float
    if isinstance(kind, BooleanType):
        return _exactly(bool, "a boolean")
    if isinstance(kind, StringType):
        return _exactly(str, "a string")
    if isinstance(kind, BinaryType):
        return _exactly(bytes, "bytes")
    if isinstance(kind, DateType):
        return _date
    if isinstance(kind, TimestamptzType):
        return _timestamp
    raise Unsupported(f"the column type {kind}")
