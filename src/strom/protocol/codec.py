"""Generic encoders/decoders for every Kafka request and response that kio has schemas for.

Each struct version (`schema.StructSchema`) is compiled once into a pair of plain Python
functions, generated as source text and ``exec``-ed (as ``dataclasses`` and ``namedtuple``
do). Straight-line code avoids a Python call per field, which is what makes kio's closure
based serializer slow: consecutive fixed-width fields become one precompiled
``struct.Struct`` call, and only strings, arrays, nested structs and tagged fields take
extra steps.

Value model (decoded, and accepted when encoding):
- decoded messages are `Struct` objects (attribute access, equality by value); every field of
  the version is present, absent tagged fields take their default, unknown tags are skipped;
- ints (error codes, durations and timestamps as plain milliseconds), bool, float, str/None,
  bytes/None, `uuid.UUID` (zero UUID for null), records as zero-copy memoryview slices, lists;
- encoders take a `Struct`, a dict/Mapping or any object with attributes (e.g. a kio entity);
  missing fields get the schema default, unknown keys are ignored, tagged fields are written
  only when their encoding differs from the default's. ``timedelta``/``datetime`` and enums are
  converted on a slow path, so kio entities encode byte-for-byte like kio does.

Hostile input: an array longer than the bytes left or than `primitives.MAX_ARRAY_ELEMENTS`, and
a tagged-field section of more than `primitives.MAX_TAGGED_FIELDS` fields, are refused with
`ProtocolError` before anything is allocated for them.
"""

from __future__ import annotations

import datetime
import enum
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

from kio.static.protocol import Entity

from . import primitives as p
from .errors import ProtocolError, UnsupportedVersion
from .header import request_header_version, response_header_version
from .schema import (
    FIXED_KINDS,
    FieldSchema,
    Side,
    StructSchema,
    api_keys,
    load_schema,
    struct_schema,
    supported_versions,
)

__all__ = [
    "Codec",
    "ProtocolError",
    "Struct",
    "UnsupportedVersion",
    "entity_codec",
    "precompile",
    "request_codec",
    "response_codec",
    "supported_versions",
]


class Struct:
    """A decoded message or nested struct: attribute access, value equality, readable repr.

    A plain class rather than ``types.SimpleNamespace``: decoders fill ``__dict__`` in one
    assignment, which is about a third cheaper than keyword construction.
    """

    def __init__(self, **fields: object) -> None:
        self.__dict__.update(fields)

    if TYPE_CHECKING:
        # Fields are whatever the message version has: attribute access is dynamic.
        def __getattr__(self, name: str) -> Any: ...

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Struct):
            return self.__dict__ == other.__dict__
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like SimpleNamespace: unhashable

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"Struct({inner})"

    def to_dict(self) -> dict[str, object]:
        """Deep copy as plain dicts and lists (for logging and tests)."""
        return {k: _to_plain(v) for k, v in self.__dict__.items()}


def _to_plain(v: object) -> object:
    if isinstance(v, Struct):
        return v.to_dict()
    if isinstance(v, list):
        return [_to_plain(x) for x in v]
    return v


# ---------------------------------------------------------------------------------------------
# Run-time helpers referenced by the generated code.
# ---------------------------------------------------------------------------------------------

_MISSING = object()
_MS = datetime.timedelta(milliseconds=1)
_PACK_ERRORS = (struct.error, TypeError)


def _getter(value: object) -> Callable[[str, object], object]:
    """A ``get(name, default)`` for a Mapping or an attribute-bearing object."""
    if isinstance(value, Mapping):
        return value.get
    if value is None:
        raise ProtocolError("null struct where a non-nullable one is required")
    return partial(getattr, value)


def _norm_int(x: object) -> object:
    """Slow path for ints given as timedelta / datetime / enum (e.g. from kio entities)."""
    if isinstance(x, datetime.timedelta):
        return x // _MS
    if isinstance(x, datetime.datetime):
        return round(x.timestamp() * 1000)
    if isinstance(x, enum.Enum):
        return x.value
    return x


def _norm_nullable_ms(x: object) -> object:
    return -1 if x is None else _norm_int(x)


def _norm_same(x: object) -> object:
    return x


_Norm: TypeAlias = Callable[[object], object]


def _normalize(norms: Iterable[_Norm], values: Iterable[object]) -> tuple[object, ...]:
    return tuple(f(x) for f, x in zip(norms, values, strict=True))


def _null_error(name: str) -> ProtocolError:
    return ProtocolError(f"null value for non-nullable field {name!r}")


def fresh_default(value: object) -> object:
    """A private copy of a mutable default (lists, structs given as dicts) for a decoded
    message, so no two messages share one."""
    if isinstance(value, list):
        return [fresh_default(v) for v in value]
    if isinstance(value, dict):
        s = Struct()
        s.__dict__ = {k: fresh_default(v) for k, v in value.items()}
        return s
    return value


def _read_tags(
    mv: memoryview, pos: int, readers: dict[int, p.Reader]
) -> tuple[dict[int, object], int]:
    """Tagged-field section: {tag: value} for known tags; unknown tags are skipped."""
    n, pos = p.read_tag_count(mv, pos)
    end_of_buf = len(mv)
    values: dict[int, object] = {}
    for _ in range(n):
        tag, pos = p.read_uvarint(mv, pos)
        size, pos = p.read_uvarint(mv, pos)
        end = pos + size
        if end > end_of_buf:
            raise p.truncated("tagged field")
        reader = readers.get(tag)
        if reader is not None:
            # Reading from a view that stops at `end` keeps a bad field inside its bytes.
            values[tag] = reader(mv[:end], pos)[0]
        pos = end
    return values, pos


def _bad_length(n: int) -> ProtocolError:
    return ProtocolError(f"invalid length {n}")


def _too_many(n: int, left: int) -> ProtocolError:
    if n > p.MAX_ARRAY_ELEMENTS:
        return ProtocolError(f"array of {n} elements exceeds the limit of {p.MAX_ARRAY_ELEMENTS}")
    return ProtocolError(f"array of {n} elements exceeds the {left} bytes left")


def _records_into(
    ap: Callable[[p.Buf], None], x: object, compact: bool, nullable: bool, name: str
) -> None:
    if x is None:
        if not nullable:
            raise _null_error(name)
        ap(p.NULL_COMPACT if compact else p.NULL_BYTES)
        return
    if not isinstance(x, bytes | bytearray | memoryview):
        raise ProtocolError(f"expected a bytes-like value for {name!r}, got {type(x).__name__}")
    n = p.nbytes(x)
    ap(p.write_compact_bytes_length(n) if compact else p.pack_int32(n))
    if n:
        ap(x)


_BASE_NS = {
    "_Struct": Struct,
    "_new": object.__new__,
    "_MISSING": _MISSING,
    "_PACK_ERRORS": _PACK_ERRORS,
    "_getter": _getter,
    "_normalize": _normalize,
    "_null_error": _null_error,
    "_fresh": fresh_default,
    "_read_tags": _read_tags,
    "_records_into": _records_into,
    "_dict": dict,
    "_str": str,
    "_UUID": uuid.UUID,
    "_I16": p.INT16,
    "_I32": p.INT32,
    "_SMALL_UVARINTS": p.SMALL_UVARINTS,
    "_bad_length": _bad_length,
    "_too_many": _too_many,
    "_truncated": p.truncated,
    "_encode_utf8": p.encode_utf8,
    "_read_uvarint": p.read_uvarint,
    "_write_uvarint": p.write_uvarint,
    "_write_compact_fixed_array": p.write_compact_fixed_array,
    "_write_legacy_fixed_array": p.write_legacy_fixed_array,
    "_skip_tags": p.skip_tagged_fields,
    "_write_tags": p.write_tagged_fields,
    "_uuid": p.uuid_from_bytes,
    "_uuid_bytes": p.uuid_bytes,
    "_read_uuid": p.read_uuid,
    "_read_fixed_array": p.read_fixed_array,
    "_write_fixed_array": p.write_fixed_array,
    "_read_array_length": p.read_array_length,
    "_read_compact_array_length": p.read_compact_array_length,
    "_write_array_length": p.write_array_length,
    "_write_compact_array_length": p.write_compact_array_length,
}

# (kind, flexible, nullable) -> primitive reader / writer name
_READERS = {
    ("string", False, False): "read_string",
    ("string", False, True): "read_nullable_string",
    ("string", True, False): "read_compact_string",
    ("string", True, True): "read_compact_nullable_string",
    ("bytes", False, False): "read_bytes",
    ("bytes", False, True): "read_nullable_bytes",
    ("bytes", True, False): "read_compact_bytes",
    ("bytes", True, True): "read_compact_nullable_bytes",
    ("records", False, False): "read_bytes_view",
    ("records", False, True): "read_nullable_bytes_view",
    ("records", True, False): "read_compact_bytes_view",
    ("records", True, True): "read_compact_nullable_bytes_view",
}
_WRITERS = {
    ("string", False, False): "write_string",
    ("string", False, True): "write_nullable_string",
    ("string", True, False): "write_compact_string",
    ("string", True, True): "write_compact_nullable_string",
    ("bytes", False, False): "write_bytes",
    ("bytes", False, True): "write_nullable_bytes",
    ("bytes", True, False): "write_compact_bytes",
    ("bytes", True, True): "write_compact_nullable_bytes",
}
for _name in (*_READERS.values(), *_WRITERS.values()):
    _BASE_NS["_" + _name] = getattr(p, _name)


# ---------------------------------------------------------------------------------------------
# Code generation.
# ---------------------------------------------------------------------------------------------


class _Source:
    """Source text plus the namespace its constants live in."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = dict(_BASE_NS)
        self.lines: list[str] = []
        self._n = 0

    def const(self, value: object, hint: str = "c") -> str:
        self._n += 1
        name = f"_{hint}{self._n}"
        self.ns[name] = value
        return name

    def emit(self, indent: int, *lines: str) -> None:
        self.lines.extend("    " * indent + line for line in lines)

    def run(self) -> dict[str, Any]:
        exec(compile("\n".join(self.lines), "<strom.protocol.codec>", "exec"), self.ns)
        return self.ns


def _norm_for(f: FieldSchema) -> _Norm:
    if f.kind in ("bool", "float64", "uuid"):
        return _norm_same
    if f.kafka_type == "datetime_i64" and f.nullable:
        return _norm_nullable_ms
    return _norm_int


def _is_fixed(f: FieldSchema) -> bool:
    return f.kind in FIXED_KINDS and not f.array


def _struct_fmt(group: list[FieldSchema]) -> struct.Struct:
    return struct.Struct(">" + "".join(FIXED_KINDS[f.kind][0] for f in group))


def _struct_of(f: FieldSchema) -> StructSchema:
    if f.struct is None:
        raise TypeError(f"struct field {f.name!r} without a schema")
    return f.struct


Decoder: TypeAlias = Callable[[memoryview, int], tuple[Struct, int]]
"""Generated ``decode(mv, pos) -> (struct, new_pos)``."""
Encoder: TypeAlias = Callable[[object, list[p.Buf]], None]
"""Generated ``encode(value, out)``: appends the pieces to `out`."""


class _Compiler:
    """Compiles struct schemas to (decode, encode) functions, memoised per schema."""

    def __init__(self) -> None:
        self._done: dict[int, tuple[Decoder, Encoder]] = {}
        self._keep: list[StructSchema] = []  # keeps the ids used as keys alive

    def get(self, schema: StructSchema) -> tuple[Decoder, Encoder]:
        pair = self._done.get(id(schema))
        if pair is None:
            pair = self._decoder(schema), self._encoder(schema)
            self._done[id(schema)] = pair
            self._keep.append(schema)
        return pair

    # -- decoding ------------------------------------------------------------------------------

    @staticmethod
    def _dec_length(src: _Source, ind: int, prefix: str) -> None:
        """Lines reading a length into ``_n`` (-1 = null, other negatives rejected).

        `prefix` is "compact" (uvarint length+1), "i16" (legacy strings) or "i32".
        """
        if prefix == "compact":
            src.emit(
                ind,
                "_n = mv[pos]",
                "if _n < 128:",
                "    pos += 1",
                "else:",
                "    _n, pos = _read_uvarint(mv, pos)",
                "_n -= 1",
            )
        else:
            s, size = ("_I16", 2) if prefix == "i16" else ("_I32", 4)
            src.emit(
                ind,
                f"(_n,) = {s}.unpack_from(mv, pos)",
                f"pos += {size}",
                "if _n < -1:",
                "    raise _bad_length(_n)",
            )

    def _dec_value(
        self, src: _Source, f: FieldSchema, var: str, flexible: bool, ind: int
    ) -> None:
        """Lines reading one field value (array or not) from mv@pos into `var`."""
        if f.array:
            self._dec_length(src, ind, "compact" if flexible else "i32")
            src.emit(ind, "if _n < 0:")
            if f.nullable:
                src.emit(ind + 1, f"{var} = None")
            else:
                src.emit(ind + 1, f"raise _null_error({f.name!r})")
            if f.kind in FIXED_KINDS and f.kind != "uuid":
                code, size = FIXED_KINDS[f.kind]
                table = src.const(p.fixed_array_structs(code), "A")
                src.emit(
                    ind,
                    f"elif _n <= {p.SMALL_ARRAY}:",
                    f"    {var} = list({table}[_n].unpack_from(mv, pos))",
                    f"    pos += {size} * _n",
                    "else:",
                    f"    {var}, pos = _read_fixed_array(mv, pos, _n, {code!r}, {size})",
                )
                return
            if f.kind == "struct":
                item = src.const(self.get(_struct_of(f))[0], "dec")
            elif f.kind == "uuid":
                item = "_read_uuid"
            else:
                item = "_" + _READERS[(f.kind, flexible, False)]
            src.emit(
                ind,
                f"elif _n > {p.MAX_ARRAY_ELEMENTS} or _n > len(mv) - pos:",
                "    raise _too_many(_n, len(mv) - pos)",
                "else:",
                f"    {var} = []",
                f"    _ap = {var}.append",
                "    for _ in range(_n):",
                f"        _x, pos = {item}(mv, pos)",
                "        _ap(_x)",
            )
            return
        if f.kind in FIXED_KINDS:
            s = src.const(_struct_fmt([f]), "S")
            src.emit(ind, f"({var},) = {s}.unpack_from(mv, pos)", f"pos += {src.ns[s].size}")
            if f.kind == "uuid":
                src.emit(ind, f"{var} = _uuid({var})")
        elif f.kind == "struct":
            dec = src.const(self.get(_struct_of(f))[0], "dec")
            if f.nullable:  # KIP-893: an int8 marker, negative for null
                src.emit(
                    ind,
                    "if mv[pos] >= 128:",
                    f"    {var} = None",
                    "    pos += 1",
                    "else:",
                    f"    {var}, pos = {dec}(mv, pos + 1)",
                )
            else:
                src.emit(ind, f"{var}, pos = {dec}(mv, pos)")
        elif f.kind == "string":  # inlined: strings are the most common variable-size field
            self._dec_length(src, ind, "compact" if flexible else "i16")
            src.emit(ind, "if _n < 0:")
            if f.nullable:
                src.emit(ind + 1, f"{var} = None")
            else:
                src.emit(ind + 1, f"raise _null_error({f.name!r})")
            src.emit(
                ind,
                "else:",
                "    _e = pos + _n",
                "    if _e > len(mv):",
                "        raise _truncated('string')",
                f"    {var} = _str(mv[pos:_e], 'utf-8', 'replace')",
                "    pos = _e",
            )
        else:
            reader = "_" + _READERS[(f.kind, flexible, f.nullable)]
            src.emit(ind, f"{var}, pos = {reader}(mv, pos)")

    def _decoder(self, schema: StructSchema) -> Decoder:
        src = _Source()
        flexible = schema.flexible
        tag_readers = {}
        for j, f in enumerate(schema.tagged):
            src.emit(0, f"def _tag_reader{j}(mv, pos):")
            self._dec_value(src, f, "_v", flexible, 1)
            src.emit(1, "return _v, pos")
            tag_readers[f.tag] = f"_tag_reader{j}"

        src.emit(0, "def decode(mv, pos):")
        group: list[tuple[str, FieldSchema]] = []

        def flush() -> None:
            if group:
                s = src.const(_struct_fmt([f for _, f in group]), "S")
                targets = ", ".join(v for v, _ in group)
                src.emit(1, f"({targets},) = {s}.unpack_from(mv, pos)", f"pos += {src.ns[s].size}")
                src.emit(1, *(f"{v} = _uuid({v})" for v, f in group if f.kind == "uuid"))
                group.clear()

        names = []
        for i, f in enumerate(schema.fields):
            var = f"v{i}"
            names.append((f.name, var))
            if _is_fixed(f):
                group.append((var, f))
            else:
                flush()
                self._dec_value(src, f, var, flexible, 1)
        flush()

        readers = None
        if flexible and not schema.tagged:
            src.emit(
                1, "if mv[pos] == 0:", "    pos += 1", "else:", "    pos = _skip_tags(mv, pos)"
            )
        elif flexible:
            readers = src.const({}, "tr")
            defaults = []
            for j, f in enumerate(schema.tagged):
                d = src.const(f.default, "d")
                defaults.append(f"_fresh({d})" if isinstance(f.default, list | dict) else d)
                names.append((f.name, f"t{j}"))
            src.emit(1, "if mv[pos] == 0:", "    pos += 1")
            src.emit(2, *(f"t{j} = {d}" for j, d in enumerate(defaults)))
            src.emit(1, "else:", f"    _tv, pos = _read_tags(mv, pos, {readers})")
            for j, (f, d) in enumerate(zip(schema.tagged, defaults, strict=True)):
                src.emit(2, f"t{j} = _tv[{f.tag}] if {f.tag} in _tv else {d}")
        items = ", ".join(f"{name!r}: {var}" for name, var in names)
        src.emit(1, "_s = _new(_Struct)", f"_s.__dict__ = {{{items}}}", "return _s, pos")
        ns = src.run()
        if readers is not None:
            ns[readers].update({tag: ns[fn] for tag, fn in tag_readers.items()})
        decode: Decoder = ns["decode"]
        return decode

    # -- encoding ------------------------------------------------------------------------------

    def _enc_value(
        self, src: _Source, f: FieldSchema, var: str, flexible: bool, ind: int
    ) -> None:
        """Lines appending the encoding of value `var` (array or not) via ``ap``."""
        if f.array:
            src.emit(ind, f"if {var} is None:")
            if f.nullable:
                null = p.NULL_COMPACT if flexible else p.NULL_BYTES
                src.emit(ind + 1, f"ap({null!r})")
            else:
                src.emit(ind + 1, f"raise _null_error({f.name!r})")
            src.emit(ind, "else:")
            ind += 1
            if f.kind in FIXED_KINDS and f.kind != "uuid":
                # Length prefix and items in one pack call for short arrays.
                code = FIXED_KINDS[f.kind][0]
                table = src.const(p.fixed_array_structs(code, "B" if flexible else "i"), "A")
                slow = "_write_compact_fixed_array" if flexible else "_write_legacy_fixed_array"
                src.emit(
                    ind,
                    f"_n = len({var})",
                    f"if _n <= {p.SMALL_ARRAY}:",
                    f"    ap({table}[_n].pack(_n{' + 1' if flexible else ''}, *{var}))",
                    "else:",
                    f"    ap({slow}({var}, {code!r}))",
                )
                return
            alen = "_write_compact_array_length" if flexible else "_write_array_length"
            src.emit(ind, f"ap({alen}(len({var})))")
            if f.kind == "struct":
                enc = src.const(self.get(_struct_of(f))[1], "enc")
                src.emit(ind, f"for _e in {var}:", f"    {enc}(_e, out)")
            else:
                item = (
                    "_uuid_bytes" if f.kind == "uuid" else "_" + _WRITERS[(f.kind, flexible, False)]
                )
                src.emit(ind, f"for _e in {var}:", f"    ap({item}(_e))")
            return
        if f.kind == "uuid":
            src.emit(ind, f"ap(_uuid_bytes({var}))")
        elif f.kind in FIXED_KINDS:
            s = src.const(_struct_fmt([f]), "S")
            norm = src.const((_norm_for(f),), "n")
            src.emit(
                ind,
                "try:",
                f"    ap({s}.pack({var}))",
                "except _PACK_ERRORS:",
                f"    ap({s}.pack(*_normalize({norm}, ({var},))))",
            )
        elif f.kind == "struct":
            enc = src.const(self.get(_struct_of(f))[1], "enc")
            if f.nullable:
                src.emit(
                    ind,
                    f"if {var} is None:",
                    "    ap(b'\\xff')",
                    "else:",
                    "    ap(b'\\x01')",
                    f"    {enc}({var}, out)",
                )
            else:
                src.emit(ind, f"{enc}({var}, out)")
        elif f.kind == "records":
            src.emit(ind, f"_records_into(ap, {var}, {flexible}, {f.nullable}, {f.name!r})")
        elif f.kind == "string" and flexible:  # inlined fast path for the common case
            if f.nullable:
                src.emit(ind, f"if {var} is None:", "    ap(b'\\x00')", "else:")
                ind += 1
            src.emit(
                ind,
                f"_b = {var}.encode() if {var}.__class__ is _str else _encode_utf8({var}, {f.name!r})",
                "_n = len(_b) + 1",
                "ap(_SMALL_UVARINTS[_n] if _n < 128 else _write_uvarint(_n))",
                "ap(_b)",
            )
        else:
            src.emit(ind, f"ap(_{_WRITERS[(f.kind, flexible, f.nullable)]}({var}))")

    def _encoder(self, schema: StructSchema) -> Encoder:
        src = _Source()
        flexible = schema.flexible
        for j, f in enumerate(schema.tagged):
            src.emit(0, f"def _tag_writer{j}(x):", "    out = []", "    ap = out.append")
            self._enc_value(src, f, "x", flexible, 1)
            src.emit(1, "return b''.join(out)")

        src.emit(
            0,
            "def encode(v, out):",
            "    _t = type(v)",
            "    if _t is _Struct:",
            "        g = v.__dict__.get",
            "    elif _t is _dict:",
            "        g = v.get",
            "    else:",
            "        g = _getter(v)",
            "    ap = out.append",
        )
        group: list[tuple[str, FieldSchema]] = []

        def flush() -> None:
            if group:
                s = src.const(_struct_fmt([f for _, f in group]), "S")
                norms = src.const(tuple(_norm_for(f) for _, f in group), "n")
                values = ", ".join(v for v, _ in group)
                src.emit(
                    1,
                    "try:",
                    f"    ap({s}.pack({values}))",
                    "except _PACK_ERRORS:",
                    f"    ap({s}.pack(*_normalize({norms}, ({values},))))",
                )
                group.clear()

        for i, f in enumerate(schema.fields):
            var = f"v{i}"
            default = src.const(f.default, "d")
            if not _is_fixed(f):
                flush()
                src.emit(1, f"{var} = g({f.name!r}, {default})")
                self._enc_value(src, f, var, flexible, 1)
            elif f.kind == "uuid":
                src.emit(
                    1,
                    f"{var} = g({f.name!r}, None)",
                    f"{var} = {var}.bytes if {var}.__class__ is _UUID else _uuid_bytes({var})",
                )
                group.append((var, f))
            else:
                src.emit(1, f"{var} = g({f.name!r}, {default})")
                group.append((var, f))
        flush()

        tag_defaults = []
        if flexible and schema.tagged:
            src.emit(1, "_tags = []")
            for j, f in enumerate(schema.tagged):
                tag_defaults.append(src.const(None, "td"))
                src.emit(
                    1,
                    f"_x = g({f.name!r}, _MISSING)",
                    "if _x is not _MISSING:",
                    f"    _b = _tag_writer{j}(_x)",
                    f"    if _b != {tag_defaults[j]}:",
                    f"        _tags.append(({f.tag}, _b))",
                )
            src.emit(1, "ap(_write_tags(_tags))")
        elif flexible:
            src.emit(1, "ap(b'\\x00')")
        ns = src.run()
        for j, f in enumerate(schema.tagged):
            # Kafka writes a tagged field only when it differs from its default; comparing
            # encodings treats every type (structs, arrays, null vs empty) the same way.
            ns[tag_defaults[j]] = ns[f"_tag_writer{j}"](f.default)
        encode: Encoder = ns["encode"]
        return encode


_COMPILER = _Compiler()

# Errors that generated code or primitives may raise on bad input / bad values.
_DECODE_ERRORS = (IndexError, struct.error, ValueError, TypeError, OverflowError, RecursionError)
_ENCODE_ERRORS = (
    struct.error,
    TypeError,
    ValueError,
    AttributeError,
    OverflowError,
    KeyError,
    RecursionError,
)


class Codec:
    """Encoder/decoder of one message version (request or response side)."""

    __slots__ = (
        "_decode",
        "_encode",
        "api_key",
        "flexible",
        "header_version",
        "schema",
        "side",
        "version",
    )

    def __init__(
        self, schema: StructSchema, api_key: int, version: int, side: str, header_version: int
    ) -> None:
        self.schema = schema
        self.api_key = api_key
        self.version = version
        self.side = side
        self.flexible = schema.flexible
        self.header_version = header_version
        self._decode, self._encode = _COMPILER.get(schema)

    def __repr__(self) -> str:
        return f"<Codec {self.schema.name} v{self.version}>"

    def decode(self, buf: p.Buf, pos: int = 0) -> tuple[Struct, int]:
        """Decode one message starting at `pos`; returns (value, position after it)."""
        mv = buf if type(buf) is memoryview else memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        try:
            return self._decode(mv, pos)
        except ProtocolError:
            raise
        except _DECODE_ERRORS as e:
            raise ProtocolError(f"malformed {self.schema.name} v{self.version}: {e!r}") from e

    def encode(self, value: object) -> bytes:
        out: list[p.Buf] = []
        self.encode_into(value, out)
        return b"".join(out)

    def encode_into(self, value: object, out: list[p.Buf]) -> None:
        """Append the encoding to `out` (pieces for ``b"".join`` / ``writelines``)."""
        mark = len(out)
        try:
            self._encode(value, out)
        except ProtocolError:
            del out[mark:]
            raise
        except _ENCODE_ERRORS as e:
            del out[mark:]
            raise ProtocolError(f"cannot encode {self.schema.name} v{self.version}: {e!r}") from e


_CODECS: dict[tuple[int, int, str], Codec] = {}


def _codec(api_key: int, version: int, side: Side) -> Codec:
    key = (api_key, version, side)
    codec = _CODECS.get(key)
    if codec is None:
        schema = load_schema(api_key, version, side)
        if side == "request":
            header_version = request_header_version(api_key, version)
        else:
            header_version = response_header_version(api_key, version)
        codec = _CODECS[key] = Codec(schema, api_key, version, side, header_version)
    return codec


def request_codec(api_key: int, version: int) -> Codec:
    """Codec of a request body; raises `UnsupportedVersion` if no schema exists."""
    codec = _CODECS.get((api_key, version, "request"))
    return codec if codec is not None else _codec(api_key, version, "request")


def response_codec(api_key: int, version: int) -> Codec:
    """Codec of a response body; raises `UnsupportedVersion` if no schema exists."""
    codec = _CODECS.get((api_key, version, "response"))
    return codec if codec is not None else _codec(api_key, version, "response")


def entity_codec(entity: type[Entity]) -> Codec:
    """Codec for any kio entity class, e.g. ConsumerProtocolAssignment data records."""
    schema = struct_schema(entity)
    version = int(getattr(entity, "__version__", 0))
    return Codec(schema, int(getattr(entity, "__api_key__", -1)), version, "data", -1)


def precompile(api_keys_: tuple[int, ...] | None = None, *, latest_only: bool = False) -> int:
    """Build the codecs of these APIs (default: all) ahead of traffic: every version, or only
    the latest (what current clients send).

    Compiling is lazy otherwise, costing a few milliseconds on an API version's first use.
    Returns the number of codecs built or found.
    """
    count = 0
    for key in api_keys_ if api_keys_ is not None else api_keys():
        lo, hi = supported_versions(key)
        for version in range(hi if latest_only else lo, hi + 1):
            request_codec(key, version)
            response_codec(key, version)
            count += 2
    return count
