"""The types a schema can see (its own and its imports'), name resolution, and the checks that
make a parsed file a usable schema (resolvable types, sane field numbers, valid enums, ...)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .model import (
    MAP_KEY_TYPES,
    MAX_FIELD_NUMBER,
    SCALAR_TYPES,
    Enum,
    Extend,
    Field,
    Message,
    ProtoError,
    ProtoFile,
)

MAIN = ""
"""The file key of the schema itself (its imports are keyed by their import path)."""

_RESERVED_NUMBERS = (19000, 19999)  # kept by the protobuf implementation


@dataclass
class TypeInfo:
    full_name: str  # without the leading dot
    element: Message | Enum
    file: str  # MAIN or an import path
    package: str

    @property
    def is_message(self) -> bool:
        return isinstance(self.element, Message)

    @property
    def is_map_entry(self) -> bool:
        return isinstance(self.element, Message) and self.element.is_map_entry

    def map_field_types(self) -> tuple[str, str] | None:
        """A map entry's (key type, value type) as written, or None for anything else."""
        if not isinstance(self.element, Message) or not self.element.is_map_entry:
            return None
        by_name = {f.name: f.type for f in self.element.fields}
        if "key" not in by_name or "value" not in by_name:
            return None
        return by_name["key"], by_name["value"]

    @property
    def local_name(self) -> str:
        """The name inside its package."""
        if self.package and self.full_name.startswith(self.package + "."):
            return self.full_name[len(self.package) + 1 :]
        return self.full_name


@dataclass
class ExtensionInfo:
    full_name: str
    field: Field
    extendee: str  # as written
    scope: str  # where the extend block sits, for resolving the field's type


def iter_types(
    types: list[Message | Enum], prefix: str
) -> Iterator[tuple[str, Message | Enum, str]]:
    """(full name, element, enclosing scope) for every type, nested ones included."""
    for t in types:
        name = f"{prefix}.{t.name}" if prefix else t.name
        yield name, t, prefix
        if isinstance(t, Message):
            yield from iter_types(t.nested, name)
            groups: list[Message | Enum] = [g.as_message() for g in t.all_groups()]
            yield from iter_types(groups, name)


def iter_messages(types: list[Message | Enum], prefix: str) -> Iterator[tuple[str, Message]]:
    for name, t, _ in iter_types(types, prefix):
        if isinstance(t, Message):
            yield name, t


def iter_extends(proto: ProtoFile) -> Iterator[tuple[Extend, str]]:
    """Every extend block with the scope it sits in."""
    package = proto.package or ""
    for ext in proto.extends:
        yield ext, package
    for name, msg in iter_messages(proto.types, package):
        for ext in msg.extends:
            yield ext, name


class TypeSpace:
    """The types of one schema and of every file it imports, directly or not."""

    def __init__(self, main: ProtoFile, files: Mapping[str, ProtoFile]) -> None:
        self.main = main
        self.files = dict(files)  # import path -> parsed file, every one reachable from main
        self.types: dict[str, TypeInfo] = {}
        self.extensions: dict[str, ExtensionInfo] = {}
        for path, proto in self.files.items():
            self._collect(path, proto)
        self._collect(MAIN, main)

    def _collect(self, key: str, proto: ProtoFile) -> None:
        package = proto.package or ""
        for name, element, _ in iter_types(proto.types, package):
            self.types[name] = TypeInfo(name, element, key, package)
        for ext, scope in iter_extends(proto):
            for f in ext.fields:
                full = f"{scope}.{f.name}" if scope else f.name
                self.extensions[full] = ExtensionInfo(full, f, ext.name, scope)

    def resolve(self, name: str, scope: str) -> str | None:
        """The full name (without a leading dot) that `name`, written inside `scope` (a package
        or message full name), refers to; None when nothing matches."""
        return _resolve(name, scope, self.types)

    def resolve_extension(self, name: str, scope: str) -> str | None:
        return _resolve(name, scope, self.extensions)

    def lookup(self, full_name: str) -> TypeInfo | None:
        return self.types.get(full_name.lstrip("."))


def _resolve(name: str, scope: str, table: Mapping[str, object]) -> str | None:
    if name.startswith("."):
        return name[1:] if name[1:] in table else None
    parts = scope.split(".") if scope else []
    while parts:
        candidate = ".".join(parts) + "." + name
        if candidate in table:
            return candidate
        parts.pop()
    return name if name in table else None


# -- checks ---------------------------------------------------------------------------------


def check_file(space: TypeSpace) -> None:
    """Raises ProtoError for what protoc would refuse in the schema's own file."""
    proto = space.main
    package = proto.package or ""
    _check_unique_names(proto.types, package or "the file")
    for name, element, _ in iter_types(proto.types, package):
        if isinstance(element, Message):
            _check_message(space, proto, name, element)
        else:
            _check_enum(proto, name, element)
    for ext, scope in iter_extends(proto):
        target = space.resolve(ext.name, scope)
        if target is None:
            raise ProtoError(f"extend {ext.name}: unknown message type '{ext.name}'")
        info = space.types[target]
        if not info.is_message:
            raise ProtoError(f"extend {ext.name}: '{target}' is not a message")
        for f in ext.fields:
            _check_field_type(space, scope, f, f"extension {f.name}")
            _check_number(f.number, f"extension {f.name}")
    for service in proto.services:
        for rpc in service.rpcs:
            for type_name in (rpc.request, rpc.response):
                resolved = space.resolve(type_name, package)
                if resolved is None or not space.types[resolved].is_message:
                    raise ProtoError(
                        f"rpc {service.name}.{rpc.name}: unknown message type '{type_name}'"
                    )


def _check_unique_names(types: list[Message | Enum], where: str) -> None:
    seen: set[str] = set()
    for t in types:
        if t.name in seen:
            raise ProtoError(f"'{t.name}' is already defined in {where}")
        seen.add(t.name)


def _check_number(number: int, what: str) -> None:
    if not 1 <= number <= MAX_FIELD_NUMBER:
        raise ProtoError(f"{what}: field number {number} is out of range 1 to {MAX_FIELD_NUMBER}")
    if _RESERVED_NUMBERS[0] <= number <= _RESERVED_NUMBERS[1]:
        raise ProtoError(
            f"{what}: field numbers {_RESERVED_NUMBERS[0]} to {_RESERVED_NUMBERS[1]} are "
            "reserved for the protobuf implementation"
        )


def _check_message(space: TypeSpace, proto: ProtoFile, name: str, msg: Message) -> None:
    _check_unique_names([*msg.nested, *(g.as_message() for g in msg.all_groups())], f"message {name}")
    reserved_numbers: list[tuple[int, int]] = []
    reserved_names: set[str] = set()
    for r in msg.reserved:
        for v in r.values:
            if isinstance(v, str):
                reserved_names.add(v)
            elif isinstance(v, tuple):
                reserved_numbers.append(v)
            else:
                reserved_numbers.append((v, v))
    numbers: dict[int, str] = {}
    names: set[str] = set()
    fields = [f for f, _ in msg.all_fields()]
    entries: list[tuple[str, int]] = [(f.name, f.number) for f in fields]
    for group in msg.all_groups():
        entries.append((group.name.lower(), group.number))
    for field_name, number in entries:
        what = f"field {name}.{field_name}"
        _check_number(number, what)
        if number in numbers:
            raise ProtoError(
                f"{what}: field number {number} is already used by field '{numbers[number]}'"
            )
        if field_name in names:
            raise ProtoError(f"{what}: field name '{field_name}' is used twice")
        numbers[number] = field_name
        names.add(field_name)
        if field_name in reserved_names:
            raise ProtoError(f"{what}: field name '{field_name}' is reserved")
        if any(lo <= number <= hi for lo, hi in reserved_numbers):
            raise ProtoError(f"{what}: field number {number} is reserved")
    for f in fields:
        _check_field_type(space, name, f, f"field {name}.{f.name}")
        if f.default is not None and proto.is_proto3:
            raise ProtoError(f"field {name}.{f.name}: default values are not allowed in proto3")
        if f.default is not None and f.label == "repeated":
            raise ProtoError(f"field {name}.{f.name}: repeated fields cannot have a default")
    for oneof in msg.oneofs:
        if not oneof.fields and not oneof.groups:
            raise ProtoError(f"oneof {name}.{oneof.name} must have at least one field")


def _check_field_type(space: TypeSpace, scope: str, f: Field, what: str) -> None:
    if f.is_map:
        key, value = f.map_types()
        if key not in MAP_KEY_TYPES:
            raise ProtoError(f"{what}: '{key}' cannot be a map key type")
        if value not in SCALAR_TYPES:
            resolved = space.resolve(value, scope)
            if resolved is None:
                raise ProtoError(f"{what}: unknown type '{value}'")
            if space.types[resolved].is_map_entry:
                raise ProtoError(f"{what}: a map value cannot be a map")
        return
    if f.type in SCALAR_TYPES:
        return
    if space.resolve(f.type, scope) is None:
        raise ProtoError(f"{what}: unknown type '{f.type}'")


def _check_enum(proto: ProtoFile, name: str, enum: Enum) -> None:
    if not enum.constants:
        raise ProtoError(f"enum {name} must have at least one value")
    if proto.is_proto3 and enum.constants[0].number != 0:
        raise ProtoError(f"enum {name}: the first value must be zero in proto3")
    allow_alias = any(
        o.name == "allow_alias" and not o.parenthesized and o.value.value == "true"
        for o in enum.options
    )
    numbers: dict[int, str] = {}
    names: set[str] = set()
    for c in enum.constants:
        if not -(2**31) <= c.number < 2**31:
            raise ProtoError(f"enum {name}: value {c.name} = {c.number} is not a 32-bit integer")
        if c.name in names:
            raise ProtoError(f"enum {name}: value name '{c.name}' is used twice")
        names.add(c.name)
        if c.number in numbers and not allow_alias:
            raise ProtoError(
                f"enum {name}: {c.name} and {numbers[c.number]} both use {c.number} "
                "(set option allow_alias = true to allow it)"
            )
        numbers.setdefault(c.number, c.name)
