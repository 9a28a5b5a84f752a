"""Avro schemas as Confluent Schema Registry handles them.

Parsing follows the Avro specification with the Java parser's checks (Confluent parses with
Apache Avro's Java library, so its messages are the ones clients see): strict names, unique
fields, symbols and union branches, no nested unions, defaults valid for their field's type.
A schema may use the named types of the schemas it references. Every valid schema is also
parsed by fastavro (`AvroSchema.fastavro_schema`), the form records are decoded with.

The stored text (`canonical`) is the schema written back as Java's `Schema.toString` writes
it: compact JSON, keys in Avro's order, namespaces only where they change, referenced types by
name. `normalized` is Confluent's normalization on top: properties sorted (a logical type's
first), aliases sorted, empty schema docs dropped, defaults in their type's form.

`can_read` applies the specification's schema resolution rules as Avro's SchemaCompatibility
checks them: numeric promotion (int to long, float, double; long to float, double; float to
double) and string/bytes; records matched by name or the reader's aliases, a reader field
absent from the writer needing a default; enums (a writer symbol the reader lacks, unless the
reader enum has a default); fixed name and size; arrays and maps by their items and values;
unions (every writer branch readable by the reader, a non-union writer readable by some reader
branch). Logical types are read as their underlying types, as Confluent does.

Left out: forward references to a named type defined later in the same schema (Avro 1.12
allows them; 1.11, like this parser, does not), and Confluent's custom logical types.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro

from strom.registry.formats import base, jsontext
from strom.registry.formats.base import Incompatibility, InvalidSchemaError, literal

SCHEMA_TYPE = "AVRO"
PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
# Avro's Schema.Type names: a named type in the current namespace with one of these names is
# still written with its namespace.
_TYPE_NAMES = frozenset(PRIMITIVES) | {"record", "enum", "array", "map", "union", "fixed"}
_SCHEMA_RESERVED = frozenset({"doc", "fields", "items", "name", "namespace", "size", "symbols",
                              "values", "type", "aliases"})
_ENUM_RESERVED = _SCHEMA_RESERVED | {"default"}
_FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})
_ORDERS = ("ascending", "descending", "ignore")
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
_MISSING: Any = object()  # a field without a default


class _Invalid(Exception):
    """A parse failure, with the Java parser's message."""


# -- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Name:
    name: str
    space: str | None

    @property
    def full(self) -> str:
        return f"{self.space}.{self.name}" if self.space else self.name

    def qualified(self, current: str | None) -> str:
        """How a reference to this name is written inside namespace `current`."""
        if self.space is not None and self.space == current and self.name not in _TYPE_NAMES:
            return self.name
        return self.full


def _make_name(name: str, space: str | None) -> Name:
    if "." in name:
        space, _, name = name.rpartition(".")
    return Name(name, space or None)


@dataclass(eq=False)
class AvroType:
    """A node of a parsed schema; identity matters (recursive records are cyclic)."""

    kind: str  # a primitive's name, "record", "enum", "fixed", "array", "map" or "union"
    props: dict[str, Any] = field(default_factory=dict)  # other attributes, as written


@dataclass(eq=False)
class Named(AvroType):
    name: Name = Name("", None)
    doc: str | None = None
    aliases: list[Name] = field(default_factory=list)

    def alias_names(self) -> set[str]:
        return {alias.full for alias in self.aliases}


@dataclass(eq=False)
class Field:
    name: str
    type: AvroType
    pos: int
    doc: str | None = None
    default: Any = _MISSING
    order: str = "ascending"
    aliases: list[str] = field(default_factory=list)
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING


@dataclass(eq=False)
class Record(Named):
    fields: list[Field] = field(default_factory=list)
    is_error: bool = False

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


@dataclass(eq=False)
class Enum(Named):
    symbols: list[str] = field(default_factory=list)
    default: str | None = None


@dataclass(eq=False)
class Fixed(Named):
    size: int = 0


@dataclass(eq=False)
class Array(AvroType):
    items: AvroType = field(default_factory=lambda: AvroType("null"))


@dataclass(eq=False)
class MapType(AvroType):
    values: AvroType = field(default_factory=lambda: AvroType("null"))


@dataclass(eq=False)
class Union(AvroType):
    branches: list[AvroType] = field(default_factory=list)


def _union_key(t: AvroType) -> str:
    """Java's `getFullName` of a union branch: the name of a named type, else the type."""
    return t.name.full if isinstance(t, Named) else t.kind


# -- parsing -----------------------------------------------------------------------------------


def _json(node: Any) -> str:
    return jsontext.dumps(node)


def _text(node: Mapping[str, Any], key: str) -> str | None:
    value = node.get(key)
    return value if isinstance(value, str) else None


def _required(node: Any, key: str, error: str) -> str:
    value = _text(node, key) if isinstance(node, dict) else None
    if value is None:
        raise _Invalid(f"{error}: {_json(node)}")
    return value


def _name_error(name: str | None) -> str | None:
    """Avro's strict name rule ([A-Za-z_][A-Za-z0-9_]*), in its validator's words."""
    if name is None:
        return "Null name"
    if not name:
        return "Empty name"
    if not (_ascii_letter(name[0]) or name[0] == "_"):
        return f"Illegal initial character: {name}"
    if any(not (_ascii_letter(c) or (c.isascii() and c.isdigit()) or c == "_") for c in name[1:]):
        return f"Illegal character in: {name}"
    return None


def _ascii_letter(c: str) -> bool:
    return c.isascii() and c.isalpha()


def _check_simple_name(name: str | None) -> str:
    problem = _name_error(name)
    if problem is not None:
        raise _Invalid(problem)
    assert name is not None
    return name


def _check_full_name(name: Name) -> None:
    parts = name.space.split(".") if name.space else []
    for part in parts:
        problem = _name_error(part)
        if problem is not None:
            raise _Invalid(f'Namespace part "{part}" is invalid: {problem}')
    problem = _name_error(name.name)
    if problem is not None:
        raise _Invalid(f'Name "{name.name}" is invalid: {problem}')
    if name.full in PRIMITIVES:
        raise _Invalid(f"Schemas may not be named after primitives: {name.full}")


def _aliases(node: Mapping[str, Any]) -> list[str]:
    raw = node.get("aliases")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _Invalid(f"aliases not an array: {_json(node)}")
    out: list[str] = []
    for alias in raw:
        if not isinstance(alias, str):
            raise _Invalid(f"alias not a string: {_json(alias)}")
        if alias not in out:
            out.append(alias)
    return out


def _props(node: Mapping[str, Any], reserved: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in node.items() if key not in reserved}


class _Parser:
    """Parses schemas into one name space: the references' named types, then the schema's."""

    def __init__(self, names: dict[str, Named] | None = None) -> None:
        self.names: dict[str, Named] = dict(names or {})

    def parse(self, node: Any, space: str | None = None, field_name: str | None = None
              ) -> AvroType:
        if isinstance(node, str):
            return self._named_ref(node, space, field_name)
        if isinstance(node, list):
            return self._union(node, space, field_name)
        if isinstance(node, dict):
            return self._object(node, space, field_name)
        raise _Invalid(f"Schema not yet supported: {_json(node)}")

    def _lookup(self, name: str, space: str | None) -> Named | None:
        if space and "." not in name:
            found = self.names.get(f"{space}.{name}")
            if found is not None:
                return found
        return self.names.get(name)

    def _named_ref(self, name: str, space: str | None, field_name: str | None) -> AvroType:
        if name in PRIMITIVES:
            return AvroType(name)
        found = self._lookup(name, space)
        if found is not None:
            return found
        if field_name is not None:
            raise _Invalid(f'"{name}" is not a defined name. The type of the "{field_name}" field '
                           'must be a defined name or a {"type": ...} expression.')
        raise _Invalid(f'Undefined name: "{name}"')

    def _union(self, node: list[Any], space: str | None, field_name: str | None) -> Union:
        union = Union("union")
        seen: set[str] = set()
        for item in node:
            branch = self.parse(item, space, field_name)
            if isinstance(branch, Union):
                raise _Invalid(f"Nested union: {_json(node)}")
            key = _union_key(branch)
            if key in seen:
                raise _Invalid(f"Duplicate in union:{key}")
            seen.add(key)
            union.branches.append(branch)
        return union

    def _object(self, node: dict[str, Any], space: str | None, field_name: str | None
                ) -> AvroType:
        kind = _required(node, "type", "No type")
        if kind in PRIMITIVES:
            return AvroType(kind, _props(node, _SCHEMA_RESERVED))
        if kind in ("record", "error"):
            return self._record(node, space, kind == "error")
        if kind == "enum":
            return self._enum(node, space)
        if kind == "fixed":
            return self._fixed(node, space)
        if kind == "array":
            if "items" not in node:
                raise _Invalid(f"Array has no items type: {_json(node)}")
            return Array("array", _props(node, _SCHEMA_RESERVED),
                         items=self.parse(node["items"], space, field_name))
        if kind == "map":
            if "values" not in node:
                raise _Invalid(f"Map has no values type: {_json(node)}")
            return MapType("map", _props(node, _SCHEMA_RESERVED),
                           values=self.parse(node["values"], space, field_name))
        named = self._lookup(kind, space)  # {"type": "SomeRecord"}, as Avro 1.11 reads it
        if named is not None:
            return named
        raise _Invalid(f"Type not supported: {kind}")

    def _declare(self, node: dict[str, Any], space: str | None
                 ) -> tuple[Name, str | None, list[Name]]:
        raw = _required(node, "name", "No name in schema")
        namespace = _text(node, "namespace")
        name = _make_name(raw, namespace if namespace is not None else space)
        _check_full_name(name)
        aliases = [_make_name(alias, name.space) for alias in _aliases(node)]
        return name, _text(node, "doc"), aliases

    def _define(self, named: Named, node: dict[str, Any], space: str | None) -> Named:
        """Add a named type; the same name again must be the same type (Java's rule)."""
        existing = self.names.get(named.name.full)
        if existing is None:
            self.names[named.name.full] = named
            return named
        # A schema may repeat a referenced type's definition, as long as it is the same one.
        again = _Parser({k: v for k, v in self.names.items() if k != named.name.full})
        redefined = again.parse(node, space)
        if _Writer(set()).text(redefined) != _Writer(set()).text(existing):
            raise _Invalid(f"Can't redefine: {named.name.full}")
        return existing

    def _record(self, node: dict[str, Any], space: str | None, is_error: bool) -> Named:
        name, doc, aliases = self._declare(node, space)
        if name.full in self.names:
            return self._define(Record("record", name=name), node, space)
        record = Record("record", _props(node, _SCHEMA_RESERVED), name=name, doc=doc,
                        aliases=aliases, is_error=is_error)
        self.names[name.full] = record  # before the fields: they may refer to the record
        try:
            fields = node.get("fields")
            if not isinstance(fields, list):
                raise _Invalid(f"Record has no fields: {_json(node)}")
            for raw in fields:
                parsed = self._field(raw, name, len(record.fields))
                clash = record.field(parsed.name)
                if clash is not None:
                    raise _Invalid(f"Duplicate field {parsed.name} in record {name.full}: "
                                   f"{_field_text(parsed)} and {_field_text(clash)}.")
                record.fields.append(parsed)
        except _Invalid:
            del self.names[name.full]
            raise
        return record

    def _field(self, node: Any, record: Name, pos: int) -> Field:
        fname = _check_simple_name(_required(node, "name", "No field name"))
        if "type" not in node:
            raise _Invalid(f"No field type: {_json(node)}")
        ftype = self.parse(node["type"], record.space, fname)
        order = node.get("order", "ascending")
        if not isinstance(order, str) or order.lower() not in _ORDERS:
            raise _Invalid("No enum constant org.apache.avro.Schema.Field.Order."
                           f"{str(order).upper()}")
        default = node.get("default", _MISSING)
        if default is not _MISSING:
            if ftype.kind in ("float", "double") and isinstance(default, str):
                try:
                    default = float(default)
                except ValueError:
                    raise _Invalid(f'For input string: "{default}"') from None
            if not _valid_default(ftype, default):
                raise _Invalid(f"Invalid default for field {fname}: {_json(node['default'])} "
                               f"not a {_Writer(set()).text(ftype)}")
        return Field(fname, ftype, pos, doc=_text(node, "doc"), default=default,
                     order=order.lower(), aliases=_aliases(node),
                     props=_props(node, _FIELD_RESERVED))

    def _enum(self, node: dict[str, Any], space: str | None) -> Named:
        name, doc, aliases = self._declare(node, space)
        symbols = node.get("symbols")
        if not isinstance(symbols, list):
            raise _Invalid(f"Enum has no symbols: {_json(node)}")
        seen: list[str] = []
        for symbol in symbols:
            checked = _check_simple_name(symbol if isinstance(symbol, str) else None)
            if checked in seen:
                raise _Invalid(f"Duplicate enum symbol: {checked}")
            seen.append(checked)
        default = _text(node, "default")
        if default is not None and default not in seen:
            raise _Invalid(f"The Enum Default: {default} is not in the enum symbol set: "
                           f"[{', '.join(seen)}]")
        enum = Enum("enum", _props(node, _ENUM_RESERVED), name=name, doc=doc, aliases=aliases,
                    symbols=seen, default=default)
        return self._define(enum, node, space)

    def _fixed(self, node: dict[str, Any], space: str | None) -> Named:
        name, doc, aliases = self._declare(node, space)
        size = node.get("size")
        if (not isinstance(size, int) or isinstance(size, bool)
                or not 0 <= size <= _INT_RANGE[1]):
            raise _Invalid(f"Invalid or no size: {_json(node)}")
        fixed = Fixed("fixed", _props(node, _SCHEMA_RESERVED), name=name, doc=doc,
                      aliases=aliases, size=size)
        return self._define(fixed, node, space)


def _field_text(f: Field) -> str:
    return f"{f.name} type:{f.type.kind.upper()} pos:{f.pos}"


def _is_integral(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _valid_default(t: AvroType, value: Any) -> bool:
    """Avro's check of a default value against its type (a union's: any branch)."""
    kind = t.kind
    if kind in ("string", "bytes", "enum", "fixed"):
        return isinstance(value, str)
    if kind == "int":
        return _is_integral(value) and _INT_RANGE[0] <= value <= _INT_RANGE[1]
    if kind == "long":
        return _is_integral(value) and _LONG_RANGE[0] <= value <= _LONG_RANGE[1]
    if kind in ("float", "double"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if isinstance(t, Array):
        return isinstance(value, list) and all(_valid_default(t.items, v) for v in value)
    if isinstance(t, MapType):
        return isinstance(value, dict) and all(_valid_default(t.values, v)
                                               for v in value.values())
    if isinstance(t, Union):
        return any(_valid_default(branch, value) for branch in t.branches)
    if isinstance(t, Record):
        if not isinstance(value, dict):
            return False
        for f in t.fields:
            given = value.get(f.name, f.default)
            if given is _MISSING or not _valid_default(f.type, given):
                return False
        return True
    return False


# -- writing -----------------------------------------------------------------------------------

_LONG_LOGICAL = frozenset({"time-micros", "timestamp-millis", "timestamp-micros",
                           "timestamp-nanos", "local-timestamp-millis",
                           "local-timestamp-micros", "local-timestamp-nanos"})


def _logical_type(t: AvroType) -> str | None:
    """The logical type Avro recognises on `t`, or None (an invalid one is ignored)."""
    name = t.props.get("logicalType")
    if not isinstance(name, str):
        return None
    kind = t.kind
    if name == "decimal":
        if kind not in ("bytes", "fixed"):
            return None
        precision: Any = t.props.get("precision")
        scale: Any = t.props.get("scale", 0)
        if not (_is_integral(precision) and _is_integral(scale)):
            return None
        if precision <= 0 or scale < 0 or scale > precision:
            return None
        if isinstance(t, Fixed):
            digits = math.floor(math.log10(2 ** (8 * t.size - 1) - 1)) if t.size else 0
            if precision > digits:
                return None
        return name
    valid = {
        "big-decimal": kind == "bytes",
        "uuid": kind == "string" or (isinstance(t, Fixed) and t.size == 16),
        "date": kind == "int",
        "time-millis": kind == "int",
        "duration": isinstance(t, Fixed) and t.size == 12,
    }
    if name in _LONG_LOGICAL:
        return name if kind == "long" else None
    return name if valid.get(name) else None


def _sorted_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_json(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_json(v) for v in value]
    return value


class _Writer:
    """Writes a schema as Java's `Schema.toString` does; `normalize` adds Confluent's
    normalization. Names in `known` (and every named type once written) are written by name."""

    def __init__(self, known: set[str], normalize: bool = False) -> None:
        self.known = set(known)
        self.normalize = normalize

    def text(self, t: AvroType) -> str:
        return jsontext.dumps(self.write(t, None))

    def _props(self, t: AvroType) -> dict[str, Any]:
        if not self.normalize:
            return dict(t.props)
        out: dict[str, Any] = {}
        logical = _logical_type(t)
        if logical is not None:
            out["logicalType"] = logical
            if logical == "decimal":
                out["precision"] = t.props["precision"]
                if t.props.get("scale", 0) != 0:
                    out["scale"] = t.props["scale"]
        for key in sorted(t.props):
            if key not in out:
                out[key] = _sorted_json(t.props[key])
        return out

    def _doc(self, doc: str | None) -> bool:
        return doc is not None and (bool(doc) or not self.normalize)

    def _name(self, t: Named, space: str | None, out: dict[str, Any]) -> None:
        out["name"] = t.name.name
        if t.name.space is not None:
            if t.name.space != space:
                out["namespace"] = t.name.space
        elif space is not None:
            out["namespace"] = ""

    def _aliases(self, t: Named) -> list[str]:
        aliases = sorted(t.aliases, key=lambda a: a.full) if self.normalize else t.aliases
        return [alias.qualified(t.name.space) for alias in aliases]

    def write(self, t: AvroType, space: str | None) -> Any:
        if isinstance(t, Union):
            return [self.write(branch, space) for branch in t.branches]
        if isinstance(t, Named):
            if t.name.full in self.known:
                return t.name.qualified(space)
            self.known.add(t.name.full)
            return self._named(t, space)
        if isinstance(t, Array):
            return {"type": "array", "items": self.write(t.items, space), **self._props(t)}
        if isinstance(t, MapType):
            return {"type": "map", "values": self.write(t.values, space), **self._props(t)}
        if not t.props:
            return t.kind
        return {"type": t.kind, **self._props(t)}

    def _named(self, t: Named, space: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if isinstance(t, Record):
            out["type"] = "error" if t.is_error else "record"
        else:
            out["type"] = t.kind
        self._name(t, space, out)
        if self._doc(t.doc):
            out["doc"] = t.doc
        if isinstance(t, Record):
            out["fields"] = [self._field(f, t.name.space) for f in t.fields]
        elif isinstance(t, Enum):
            out["symbols"] = list(t.symbols)
            if t.default is not None:
                out["default"] = t.default
        elif isinstance(t, Fixed):
            out["size"] = t.size
        out.update(self._props(t))
        if t.aliases:
            out["aliases"] = self._aliases(t)
        return out

    def _field(self, f: Field, space: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": f.name, "type": self.write(f.type, space)}
        if f.doc is not None:
            out["doc"] = f.doc
        if f.has_default:
            out["default"] = _normal_default(f.type, f.default) if self.normalize else f.default
        if f.order != "ascending":
            out["order"] = f.order
        if f.aliases:
            out["aliases"] = sorted(f.aliases) if self.normalize else list(f.aliases)
        if f.props:
            out.update({k: _sorted_json(f.props[k]) for k in sorted(f.props)}
                       if self.normalize else f.props)
        return out


def _normal_default(t: AvroType, value: Any) -> Any:
    """A default in its type's form, as Confluent's normalization writes it (a float field's
    integral default as a float, objects with sorted keys)."""
    if isinstance(t, Union):
        branch = next((b for b in t.branches if _valid_default(b, value)), None)
        return _normal_default(branch, value) if branch is not None else _sorted_json(value)
    if t.kind in ("float", "double") and _is_integral(value):
        return float(value)
    if isinstance(t, Array) and isinstance(value, list):
        return [_normal_default(t.items, v) for v in value]
    if isinstance(t, MapType) and isinstance(value, dict):
        return {k: _normal_default(t.values, value[k]) for k in sorted(value)}
    if isinstance(t, Record) and isinstance(value, dict):
        out = {}
        for key in sorted(value):
            f = t.field(key)
            out[key] = _normal_default(f.type, value[key]) if f else _sorted_json(value[key])
        return out
    return _sorted_json(value)


# -- compatibility -----------------------------------------------------------------------------

_DESCRIPTIONS = {
    "FIXED_SIZE_MISMATCH": "The size of FIXED type field at path '{path}' in the {{reader}} "
                           "schema does not match with the {{writer}} schema",
    "TYPE_MISMATCH": "The type (path '{path}') of a field in the {{reader}} schema does not "
                     "match with the {{writer}} schema",
    "NAME_MISMATCH": "The name of the schema has changed (path '{path}')",
    "MISSING_ENUM_SYMBOLS": "The {{reader}} schema is missing enum symbols '{info}' at path "
                            "'{path}' in the {{writer}} schema",
    "MISSING_UNION_BRANCH": "The {{reader}} schema is missing a type inside a union field at "
                            "path '{path}' in the {{writer}} schema",
    "READER_FIELD_MISSING_DEFAULT_VALUE": "The field '{info}' at path '{path}' in the "
                                          "{{reader}} schema has no default value and is "
                                          "missing in the {{writer}} schema",
}
_PROMOTIONS = {
    "long": ("int",),
    "float": ("int", "long"),
    "double": ("int", "long", "float"),
    "bytes": ("string",),
    "string": ("bytes",),
}


def _pointer(location: list[str]) -> str:
    """Avro's location of an incompatibility: a JSON pointer, without the root token."""
    return "/" + "/".join(t.replace("~", "~0").replace("/", "~1") for t in location[1:])


def _incompatibility(error_type: str, info: str, location: list[str]) -> Incompatibility:
    path = _pointer(location)
    description = _DESCRIPTIONS[error_type].format(path=literal(path), info=literal(info))
    return Incompatibility(error_type, description, path, SCHEMA_TYPE, info)


class _Checker:
    """Avro's reader/writer compatibility check; a pair already being checked (a recursive
    type) counts as compatible, and every pair is checked once."""

    def __init__(self) -> None:
        self.memo: dict[tuple[int, int], list[Incompatibility] | None] = {}

    def check(self, reader: AvroType, writer: AvroType, token: str = "",
              location: list[str] | None = None) -> list[Incompatibility]:
        location = [] if location is None else location
        location.append(token)
        key = (id(reader), id(writer))
        if key in self.memo:
            result = self.memo[key] or []
        else:
            self.memo[key] = None
            result = self._calculate(reader, writer, location)
            self.memo[key] = result
        location.pop()
        return result

    def _calculate(self, reader: AvroType, writer: AvroType, location: list[str]
                   ) -> list[Incompatibility]:
        if reader.kind == writer.kind:
            if isinstance(reader, Array) and isinstance(writer, Array):
                return self.check(reader.items, writer.items, "items", location)
            if isinstance(reader, MapType) and isinstance(writer, MapType):
                return self.check(reader.values, writer.values, "values", location)
            if isinstance(reader, Fixed) and isinstance(writer, Fixed):
                return self._names(reader, writer, location) + _sizes(reader, writer, location)
            if isinstance(reader, Enum) and isinstance(writer, Enum):
                return self._names(reader, writer, location) + _symbols(reader, writer,
                                                                          location)
            if isinstance(reader, Record) and isinstance(writer, Record):
                return self._names(reader, writer, location) + self._fields(reader, writer,
                                                                              location)
            if isinstance(reader, Union) and isinstance(writer, Union):
                out: list[Incompatibility] = []
                for i, branch in enumerate(writer.branches):
                    location.append(str(i))
                    if self.check(reader, branch):
                        out.append(_incompatibility(
                            "MISSING_UNION_BRANCH",
                            f"reader union lacking writer type: {branch.kind.upper()}",
                            location))
                    location.pop()
                return out
            return []
        if isinstance(writer, Union):
            out = []
            for i, branch in enumerate(writer.branches):
                out += self.check(reader, branch, str(i), location)
            return out
        if isinstance(reader, Union):
            if any(not self.check(branch, writer) for branch in reader.branches):
                return []
            return [_incompatibility(
                "MISSING_UNION_BRANCH",
                f"reader union lacking writer type: {writer.kind.upper()}", location)]
        if writer.kind in _PROMOTIONS.get(reader.kind, ()):
            return []
        return [_incompatibility(
            "TYPE_MISMATCH",
            f"reader type: {reader.kind.upper()} not compatible with writer type: "
            f"{writer.kind.upper()}", location)]

    @staticmethod
    def _names(reader: Named, writer: Named, location: list[str]) -> list[Incompatibility]:
        if reader.name.name == writer.name.name or writer.name.full in reader.alias_names():
            return []
        location.append("name")
        out = [_incompatibility("NAME_MISMATCH", f"expected: {writer.name.full}", location)]
        location.pop()
        return out

    def _fields(self, reader: Record, writer: Record, location: list[str]
                ) -> list[Incompatibility]:
        out: list[Incompatibility] = []
        location.append("fields")
        for f in reader.fields:
            location.append(str(f.pos))
            source = writer.field(f.name)
            for alias in f.aliases:
                source = source or writer.field(alias)
            if source is not None:
                out += self.check(f.type, source.type, "type", location)
            elif not f.has_default:
                if isinstance(f.type, Enum) and f.type.default is not None:
                    # Avro's checker compares such an enum with the writer record itself.
                    out += self.check(f.type, writer, "type", location)
                else:
                    out.append(_incompatibility("READER_FIELD_MISSING_DEFAULT_VALUE", f.name,
                                                location))
            location.pop()
        location.pop()
        return out


def _sizes(reader: Fixed, writer: Fixed, location: list[str]) -> list[Incompatibility]:
    if reader.size == writer.size:
        return []
    location.append("size")
    out = [_incompatibility("FIXED_SIZE_MISMATCH",
                            f"expected: {writer.size}, found: {reader.size}", location)]
    location.pop()
    return out


def _symbols(reader: Enum, writer: Enum, location: list[str]) -> list[Incompatibility]:
    missing = sorted(set(writer.symbols) - set(reader.symbols))
    if not missing or (reader.default is not None and reader.default in reader.symbols):
        return []
    location.append("symbols")
    out = [_incompatibility("MISSING_ENUM_SYMBOLS", f"[{', '.join(missing)}]", location)]
    location.pop()
    return out


# -- the format --------------------------------------------------------------------------------


class AvroSchema:
    """A parsed, valid Avro schema (with the texts of the schemas it references)."""

    schema_type = SCHEMA_TYPE

    def __init__(self, root: AvroType, references: Mapping[str, str], known: set[str],
                 fastavro_schema: Any) -> None:
        self.root = root
        self.references = dict(references)
        self._known = known  # the references' own (top-level) named types
        self.fastavro_schema = fastavro_schema
        self._canonical: str | None = None
        self._normalized: str | None = None

    @property
    def name(self) -> str | None:
        """The record's full name (what the record name strategies use), or None."""
        return self.root.name.full if isinstance(self.root, Record) else None

    def canonical(self) -> str:
        if self._canonical is None:
            self._canonical = _Writer(self._known).text(self.root)
        return self._canonical

    def normalized(self) -> str:
        if self._normalized is None:
            self._normalized = _Writer(self._known, normalize=True).text(self.root)
        return self._normalized

    def can_read(self, writer: Any) -> list[Incompatibility]:
        if not isinstance(writer, AvroSchema):
            return [Incompatibility("", "Incompatible because of different schema type", "")]
        return _Checker().check(self.root, writer.root)

    def fingerprint(self) -> str:
        return base.fingerprint(SCHEMA_TYPE, self.canonical(), self.references)

    def __repr__(self) -> str:
        return f"AvroSchema({self.canonical()})"


class AvroFormat:
    """Parses Avro schemas (`SchemaFormat`)."""

    schema_type = SCHEMA_TYPE

    def parse(self, text: str, references: Mapping[str, str]) -> AvroSchema:
        try:
            return self._parse(text, references)
        except RecursionError:
            raise InvalidSchemaError(SCHEMA_TYPE, "the schema nests too deeply") from None

    def _parse(self, text: str, references: Mapping[str, str]) -> AvroSchema:
        parser = _Parser()
        known: set[str] = set()
        try:
            for ref_root in _parse_references(parser, references):
                if isinstance(ref_root, Named):
                    known.add(ref_root.name.full)
            from_refs = set(parser.names)
            root = parser.parse(_load(text))
        except _Invalid as exc:
            raise InvalidSchemaError(SCHEMA_TYPE, str(exc)) from None
        # fastavro reads the same schema (references by name): the form records decode with.
        named: dict[str, Any] = {}
        try:
            for ref in (parser.names[n] for n in from_refs):
                if ref.name.full not in named:
                    fastavro.parse_schema(_fastavro_json(ref, set(named)), named)
            parsed = fastavro.parse_schema(_fastavro_json(root, from_refs), named)
        except RecursionError:
            raise
        except Exception as exc:  # fastavro raises several kinds
            raise InvalidSchemaError(SCHEMA_TYPE, str(exc)) from None
        schema = AvroSchema(root, references, known, parsed)
        schema.canonical()  # the registry needs it anyway; written here, depth is checked here
        return schema


def _fastavro_json(t: AvroType, known: set[str]) -> Any:
    return _Writer(known).write(t, None)


def _load(text: str) -> Any:
    try:
        return jsontext.loads(text)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None


def _parse_references(parser: _Parser, references: Mapping[str, str]) -> list[AvroType]:
    """Parse the referenced schemas into `parser`, in order but retrying one that uses a name
    another defines later, until none is left or none parses."""
    pending = list(references.items())
    roots: list[AvroType] = []
    while pending:
        failed: list[tuple[str, str]] = []
        error: _Invalid | None = None
        for name, text in pending:
            before = dict(parser.names)
            try:
                roots.append(parser.parse(_load(text)))
            except _Invalid as exc:
                parser.names = before
                failed.append((name, text))
                error = error or exc
        if len(failed) == len(pending):
            assert error is not None
            raise error
        pending = failed
    return roots


AVRO = AvroFormat()
