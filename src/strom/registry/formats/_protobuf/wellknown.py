"""The files a schema may import without passing them as references, as Confluent's registry
allows: google/protobuf/*.proto (taken from the protobuf runtime), google/type/*.proto and
Confluent's own confluent/meta.proto and confluent/type/*.proto (declared here; only their
types' shapes matter to the registry: names, fields and numbers).

Each is parsed once, on first use.
"""

from __future__ import annotations

import importlib
from functools import cache

from .model import ProtoFile

_RUNTIME_MODULES = {
    "google/protobuf/any.proto": "any_pb2",
    "google/protobuf/api.proto": "api_pb2",
    "google/protobuf/descriptor.proto": "descriptor_pb2",
    "google/protobuf/duration.proto": "duration_pb2",
    "google/protobuf/empty.proto": "empty_pb2",
    "google/protobuf/field_mask.proto": "field_mask_pb2",
    "google/protobuf/source_context.proto": "source_context_pb2",
    "google/protobuf/struct.proto": "struct_pb2",
    "google/protobuf/timestamp.proto": "timestamp_pb2",
    "google/protobuf/type.proto": "type_pb2",
    "google/protobuf/wrappers.proto": "wrappers_pb2",
}


def _proto3(package: str, body: str, *imports: str) -> str:
    head = f'syntax = "proto3";\npackage {package};\n'
    head += "".join(f'import "{i}";\n' for i in imports)
    return head + body


def _enum(name: str, *values: str) -> str:
    return f"enum {name} {{ " + " ".join(f"{v} = {i};" for i, v in enumerate(values)) + " }"


def _message(name: str, *fields: str) -> str:
    return f"message {name} {{ " + " ".join(f"{f} = {i};" for i, f in enumerate(fields, 1)) + " }"


_TEXTS = {
    "google/type/calendar_period.proto": _proto3(
        "google.type",
        _enum(
            "CalendarPeriod",
            "CALENDAR_PERIOD_UNSPECIFIED",
            "DAY",
            "WEEK",
            "FORTNIGHT",
            "MONTH",
            "QUARTER",
            "HALF",
            "YEAR",
        ),
    ),
    "google/type/color.proto": _proto3(
        "google.type",
        _message(
            "Color", "float red", "float green", "float blue", "google.protobuf.FloatValue alpha"
        ),
        "google/protobuf/wrappers.proto",
    ),
    "google/type/date.proto": _proto3(
        "google.type", _message("Date", "int32 year", "int32 month", "int32 day")
    ),
    "google/type/datetime.proto": _proto3(
        "google.type",
        "message DateTime { int32 year = 1; int32 month = 2; int32 day = 3; int32 hours = 4; "
        "int32 minutes = 5; int32 seconds = 6; int32 nanos = 7; oneof time_offset { "
        "google.protobuf.Duration utc_offset = 8; TimeZone time_zone = 9; } }\n"
        + _message("TimeZone", "string id", "string version"),
        "google/protobuf/duration.proto",
    ),
    "google/type/dayofweek.proto": _proto3(
        "google.type",
        _enum(
            "DayOfWeek",
            "DAY_OF_WEEK_UNSPECIFIED",
            "MONDAY",
            "TUESDAY",
            "WEDNESDAY",
            "THURSDAY",
            "FRIDAY",
            "SATURDAY",
            "SUNDAY",
        ),
    ),
    "google/type/decimal.proto": _proto3("google.type", _message("Decimal", "string value")),
    "google/type/expr.proto": _proto3(
        "google.type",
        _message(
            "Expr", "string expression", "string title", "string description", "string location"
        ),
    ),
    "google/type/fraction.proto": _proto3(
        "google.type", _message("Fraction", "int64 numerator", "int64 denominator")
    ),
    "google/type/interval.proto": _proto3(
        "google.type",
        _message(
            "Interval", "google.protobuf.Timestamp start_time", "google.protobuf.Timestamp end_time"
        ),
        "google/protobuf/timestamp.proto",
    ),
    "google/type/latlng.proto": _proto3(
        "google.type", _message("LatLng", "double latitude", "double longitude")
    ),
    "google/type/money.proto": _proto3(
        "google.type", _message("Money", "string currency_code", "int64 units", "int32 nanos")
    ),
    "google/type/month.proto": _proto3(
        "google.type",
        _enum(
            "Month",
            "MONTH_UNSPECIFIED",
            "JANUARY",
            "FEBRUARY",
            "MARCH",
            "APRIL",
            "MAY",
            "JUNE",
            "JULY",
            "AUGUST",
            "SEPTEMBER",
            "OCTOBER",
            "NOVEMBER",
            "DECEMBER",
        ),
    ),
    "google/type/phone_number.proto": _proto3(
        "google.type",
        "message PhoneNumber { oneof kind { string e164_number = 1; ShortCode short_code = 2; } "
        "string extension = 3; "
        + _message("ShortCode", "string region_code", "string number")
        + " }",
    ),
    "google/type/postal_address.proto": _proto3(
        "google.type",
        _message(
            "PostalAddress",
            "int32 revision",
            "string region_code",
            "string language_code",
            "string postal_code",
            "string sorting_code",
            "string administrative_area",
            "string locality",
            "string sublocality",
            "repeated string address_lines",
            "repeated string recipients",
            "string organization",
        ),
    ),
    "google/type/quaternion.proto": _proto3(
        "google.type", _message("Quaternion", "double x", "double y", "double z", "double w")
    ),
    "google/type/timeofday.proto": _proto3(
        "google.type",
        _message("TimeOfDay", "int32 hours", "int32 minutes", "int32 seconds", "int32 nanos"),
    ),
    "confluent/meta.proto": _proto3(
        "confluent",
        _message(
            "Meta",
            "string doc",
            "map<string, string> params",
            "repeated string tags",
            "repeated Rule rules",
        )
        + "\n"
        + _message("Rule", "string name", "string doc", "string expr", "string sql")
        + "\n"
        + "".join(
            f"extend google.protobuf.{target}Options {{ Meta {name}_meta = 1088; }}\n"
            for target, name in (
                ("File", "file"),
                ("Message", "message"),
                ("Field", "field"),
                ("Enum", "enum"),
                ("EnumValue", "enum_value"),
            )
        ),
        "google/protobuf/descriptor.proto",
    ),
    "confluent/type/decimal.proto": _proto3(
        "confluent.type", _message("Decimal", "bytes value", "uint32 precision", "int32 scale")
    ),
    "confluent/type/variant.proto": _proto3(
        "confluent.type", _message("Variant", "bytes metadata", "bytes value")
    ),
}

NAMES = frozenset(_RUNTIME_MODULES) | frozenset(_TEXTS)


def is_well_known(path: str) -> bool:
    return path in NAMES


@cache
def well_known(path: str) -> ProtoFile | None:
    """The parsed file for a well-known import path, or None for any other path."""
    module = _RUNTIME_MODULES.get(path)
    if module is not None:
        from google.protobuf import descriptor_pb2

        from .descriptors import from_descriptor

        pb2 = importlib.import_module(f"google.protobuf.{module}")
        fd = descriptor_pb2.FileDescriptorProto.FromString(pb2.DESCRIPTOR.serialized_pb)
        return from_descriptor(fd)
    text = _TEXTS.get(path)
    if text is None:
        return None
    from .parser import parse_proto

    return parse_proto(text)
