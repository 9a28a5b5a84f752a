"""Protobuf schema compatibility, by Confluent Schema Registry's rules.

`compare(writer, reader)` lists every difference between a schema that wrote data (Confluent's
"original") and one that reads it (the "update"), each with Confluent's Difference type name
and path (``#/Message/3``: a message, then a field number or a oneof name). Differences whose
type is in `COMPATIBLE` do not stop the reader; the rest do.

The rules, briefly: fields are matched by number (a rename is harmless); a field's type may only
change within a wire-compatible group of scalars (`SCALAR_GROUPS`; an enum counts as a varint
number); a numeric field's label may not change between optional, required and repeated (a
string's or bytes' may); required fields may be neither added nor removed; a message type may
not disappear (adding one, or reordering messages, is fine: a serialized message index refers to
the writer's schema); fields may leave a oneof but not be newly made mutually exclusive; a oneof
member may not be dropped unless the whole oneof goes; the package may not change. Enum and
enum value changes are all allowed. A field whose message type comes from another file is
compared through that type, and fails when the type does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import SCALAR_TYPES, Enum, Field, Message, ProtoFile
from .types import MAIN, TypeInfo, TypeSpace

PACKAGE_CHANGED = "PACKAGE_CHANGED"
MESSAGE_ADDED = "MESSAGE_ADDED"
MESSAGE_REMOVED = "MESSAGE_REMOVED"
MESSAGE_MOVED = "MESSAGE_MOVED"
ENUM_ADDED = "ENUM_ADDED"
ENUM_REMOVED = "ENUM_REMOVED"
ENUM_CONST_ADDED = "ENUM_CONST_ADDED"
ENUM_CONST_CHANGED = "ENUM_CONST_CHANGED"
ENUM_CONST_REMOVED = "ENUM_CONST_REMOVED"
FIELD_ADDED = "FIELD_ADDED"
FIELD_REMOVED = "FIELD_REMOVED"
FIELD_NAME_CHANGED = "FIELD_NAME_CHANGED"
FIELD_KIND_CHANGED = "FIELD_KIND_CHANGED"
FIELD_SCALAR_KIND_CHANGED = "FIELD_SCALAR_KIND_CHANGED"
FIELD_NAMED_TYPE_CHANGED = "FIELD_NAMED_TYPE_CHANGED"
FIELD_NUMERIC_LABEL_CHANGED = "FIELD_NUMERIC_LABEL_CHANGED"
FIELD_STRING_OR_BYTES_LABEL_CHANGED = "FIELD_STRING_OR_BYTES_LABEL_CHANGED"
REQUIRED_FIELD_ADDED = "REQUIRED_FIELD_ADDED"
REQUIRED_FIELD_REMOVED = "REQUIRED_FIELD_REMOVED"
ONEOF_ADDED = "ONEOF_ADDED"
ONEOF_REMOVED = "ONEOF_REMOVED"
ONEOF_FIELD_ADDED = "ONEOF_FIELD_ADDED"
ONEOF_FIELD_REMOVED = "ONEOF_FIELD_REMOVED"
ONEOF_FIELD_MOVED_TO_TOP_LEVEL = "ONEOF_FIELD_MOVED_TO_TOP_LEVEL"
MULTIPLE_FIELDS_MOVED_TO_ONEOF = "MULTIPLE_FIELDS_MOVED_TO_ONEOF"
FIELD_MOVED_TO_EXISTING_ONEOF = "FIELD_MOVED_TO_EXISTING_ONEOF"

COMPATIBLE = frozenset(
    {
        MESSAGE_ADDED, MESSAGE_MOVED, ENUM_ADDED, ENUM_REMOVED, ENUM_CONST_ADDED,
        ENUM_CONST_CHANGED, ENUM_CONST_REMOVED, FIELD_ADDED, FIELD_REMOVED, FIELD_NAME_CHANGED,
        FIELD_STRING_OR_BYTES_LABEL_CHANGED, ONEOF_ADDED, ONEOF_REMOVED, ONEOF_FIELD_ADDED,
        ONEOF_FIELD_MOVED_TO_TOP_LEVEL,
    }
)  # fmt: skip
"""The difference types a reader copes with."""

# Scalars that read each other's values on the wire, by group. Varint numbers (with bool and
# enums) share one group, zigzag numbers another, the fixed widths one each, and a string reads
# bytes and back (not checked as UTF-8 here, as Confluent does not).
SCALAR_GROUPS = {
    "int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER",
    "uint64": "GENERAL_NUMBER", "bool": "GENERAL_NUMBER",
    "sint32": "SIGNED_NUMBER", "sint64": "SIGNED_NUMBER",
    "fixed32": "FIXED32", "sfixed32": "FIXED32",
    "fixed64": "FIXED64", "sfixed64": "FIXED64",
    "float": "FLOAT", "double": "DOUBLE",
    "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES",
}  # fmt: skip
_NUMERIC_GROUPS = frozenset(
    {"GENERAL_NUMBER", "SIGNED_NUMBER", "FIXED32", "FIXED64", "FLOAT", "DOUBLE"}
)

# Descriptions: {reader} and {writer} name the two schemas, {path} is where.
DESCRIPTIONS = {
    PACKAGE_CHANGED: "The package at '{path}' in the {reader} schema differs from the package "
    "of the {writer} schema",
    MESSAGE_REMOVED: "The {reader} schema has no message type for '{path}' of the {writer} schema",
    FIELD_KIND_CHANGED: "The field at '{path}' has a different kind of type (scalar, message "
    "or map) in the {reader} schema than in the {writer} schema",
    FIELD_SCALAR_KIND_CHANGED: "The scalar field at '{path}' in the {reader} schema has a type "
    "that cannot read its values written with the {writer} schema",
    FIELD_NAMED_TYPE_CHANGED: "The message field at '{path}' in the {reader} schema has a type "
    "that cannot read its values written with the {writer} schema",
    FIELD_NUMERIC_LABEL_CHANGED: "The numeric field at '{path}' in the {reader} schema has a "
    "different label (optional, required, repeated) than in the {writer} schema",
    REQUIRED_FIELD_ADDED: "The required field at '{path}' in the {reader} schema is not in the "
    "{writer} schema",
    REQUIRED_FIELD_REMOVED: "The {reader} schema has no field for the required field at "
    "'{path}' of the {writer} schema",
    ONEOF_FIELD_REMOVED: "The {reader} schema has no field for the oneof field at '{path}' of "
    "the {writer} schema",
    MULTIPLE_FIELDS_MOVED_TO_ONEOF: "The oneof at '{path}' in the {reader} schema holds "
    "several fields that are outside any oneof in the {writer} schema",
    FIELD_MOVED_TO_EXISTING_ONEOF: "The oneof at '{path}' in the {reader} schema holds a field "
    "that is not in the same oneof in the {writer} schema",
}


@dataclass(frozen=True)
class Difference:
    type: str
    path: str

    @property
    def compatible(self) -> bool:
        return self.type in COMPATIBLE


@dataclass
class _Context:
    writer: TypeSpace
    reader: TypeSpace
    writer_package: str
    reader_package: str
    path: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the enclosing messages, for resolution
    visiting: set[int] = field(default_factory=set)  # writer messages being compared
    diffs: list[Difference] = field(default_factory=list)

    def add(self, kind: str, *extra: str) -> None:
        self.diffs.append(Difference(kind, "#/" + "/".join([*self.path, *extra])))

    def sub(self, writer_package: str, reader_package: str, local_name: str) -> _Context:
        parts = local_name.split(".")
        return _Context(
            self.writer,
            self.reader,
            writer_package,
            reader_package,
            list(parts),
            list(parts),
            set(self.visiting),
        )

    def scope(self, writer: bool) -> str:
        package = self.writer_package if writer else self.reader_package
        return ".".join(p for p in [package, *self.names] if p)

    def lookup(self, name: str, writer: bool) -> TypeInfo | None:
        space = self.writer if writer else self.reader
        resolved = space.resolve(name, self.scope(writer))
        return None if resolved is None else space.types[resolved]


def compare(
    writer: ProtoFile, writer_space: TypeSpace, reader: ProtoFile, reader_space: TypeSpace
) -> list[Difference]:
    """Every difference between the writer's schema and the reader's."""
    ctx = _Context(writer_space, reader_space, writer.package or "", reader.package or "")
    if (writer.package or None) != (reader.package or None):
        ctx.add(PACKAGE_CHANGED)
    _compare_types(ctx, writer.types, reader.types)
    return ctx.diffs


def _compare_types(
    ctx: _Context, writer: list[Message | Enum], reader: list[Message | Enum]
) -> None:
    w_messages = {t.name: t for t in writer if isinstance(t, Message)}
    r_messages = {t.name: t for t in reader if isinstance(t, Message)}
    w_index = {name: i for i, name in enumerate(w_messages)}
    r_index = {name: i for i, name in enumerate(r_messages)}
    for name in [*w_messages, *(n for n in r_messages if n not in w_messages)]:
        ctx.path.append(name)
        ctx.names.append(name)
        w, r = w_messages.get(name), r_messages.get(name)
        if r is None:
            info = ctx.lookup(name, writer=True)
            if info is not None and not info.is_map_entry:
                ctx.add(MESSAGE_REMOVED)
        elif w is None:
            info = ctx.lookup(name, writer=False)
            if info is not None and not info.is_map_entry:
                ctx.add(MESSAGE_ADDED)
        else:
            _compare_messages(ctx, w, r)
            if w_index[name] != r_index[name]:
                ctx.add(MESSAGE_MOVED)
        ctx.names.pop()
        ctx.path.pop()
    w_enums = {t.name: t for t in writer if isinstance(t, Enum)}
    r_enums = {t.name: t for t in reader if isinstance(t, Enum)}
    for name in [*w_enums, *(n for n in r_enums if n not in w_enums)]:
        ctx.path.append(name)
        ctx.names.append(name)
        we, re_ = w_enums.get(name), r_enums.get(name)
        if re_ is None:
            ctx.add(ENUM_REMOVED)
        elif we is None:
            ctx.add(ENUM_ADDED)
        else:
            _compare_enums(ctx, we, re_)
        ctx.names.pop()
        ctx.path.pop()


def _compare_enums(ctx: _Context, writer: Enum, reader: Enum) -> None:
    w = {c.number: c.name for c in writer.constants}
    r = {c.number: c.name for c in reader.constants}
    for number in sorted(w.keys() | r.keys()):
        if number not in r:
            ctx.add(ENUM_CONST_REMOVED, str(number))
        elif number not in w:
            ctx.add(ENUM_CONST_ADDED, str(number))
        elif w[number] != r[number]:
            ctx.add(ENUM_CONST_CHANGED, str(number))


def _fields(msg: Message) -> tuple[dict[int, Field], dict[int, str], dict[str, list[Field]]]:
    by_number: dict[int, Field] = {}
    oneof_of: dict[int, str] = {}
    oneofs: dict[str, list[Field]] = {}
    for f in msg.fields:
        by_number[f.number] = f
    for oneof in msg.oneofs:
        oneofs[oneof.name] = oneof.fields
        for f in oneof.fields:
            by_number[f.number] = f
            oneof_of[f.number] = oneof.name
    return by_number, oneof_of, oneofs


def _compare_messages(ctx: _Context, writer: Message, reader: Message) -> None:
    key = id(writer)
    if key in ctx.visiting:  # a recursive type, already being compared further up
        _compare_types(ctx, writer.nested, reader.nested)
        return
    ctx.visiting.add(key)
    try:
        _compare_fields(ctx, writer, reader)
        _compare_types(ctx, writer.nested, reader.nested)
    finally:
        ctx.visiting.discard(key)


def _compare_fields(ctx: _Context, writer: Message, reader: Message) -> None:
    w_fields, w_oneof_of, w_oneofs = _fields(writer)
    r_fields, r_oneof_of, r_oneofs = _fields(reader)

    # A oneof gone by name, none of whose members survive anywhere, was deleted whole: fine.
    deleted_whole = {
        name
        for name, members in w_oneofs.items()
        if name not in r_oneofs and not any(f.number in r_fields for f in members)
    }

    # Fields that were independent in the writer must not become mutually exclusive.
    for oneof in reader.oneofs:
        origins: set[str] = set()
        moved_in = 0
        for f in oneof.fields:
            if f.number in w_oneof_of:
                origins.add("oneof:" + w_oneof_of[f.number])
            elif f.number in w_fields:
                origins.add(f"field:{f.number}")
                moved_in += 1
        if len(origins) > 1:
            kind = MULTIPLE_FIELDS_MOVED_TO_ONEOF if moved_in > 1 else FIELD_MOVED_TO_EXISTING_ONEOF
            ctx.add(kind, oneof.name)

    for name in sorted(w_oneofs.keys() | r_oneofs.keys()):
        if name not in r_oneofs:
            ctx.add(ONEOF_REMOVED, name)
        elif name not in w_oneofs:
            ctx.add(ONEOF_ADDED, name)

    for number in sorted(w_fields.keys() | r_fields.keys()):
        w, r = w_fields.get(number), r_fields.get(number)
        w_oneof, r_oneof = w_oneof_of.get(number), r_oneof_of.get(number)
        tag = str(number)
        if r is None:
            assert w is not None
            if w_oneof is not None:
                if w_oneof not in deleted_whole:
                    ctx.add(ONEOF_FIELD_REMOVED, w_oneof, tag)
            else:
                ctx.add(REQUIRED_FIELD_REMOVED if w.label == "required" else FIELD_REMOVED, tag)
        elif w is None:
            if r_oneof is not None:
                ctx.add(ONEOF_FIELD_ADDED, r_oneof, tag)
            else:
                ctx.add(REQUIRED_FIELD_ADDED if r.label == "required" else FIELD_ADDED, tag)
        else:
            if w_oneof is not None and r_oneof is None:
                ctx.add(ONEOF_FIELD_MOVED_TO_TOP_LEVEL, tag)
            where = [r_oneof, tag] if r_oneof is not None else [tag]
            ctx.path.extend(where)
            _compare_field(ctx, w, r)
            del ctx.path[-len(where) :]


def _compare_field(ctx: _Context, writer: Field, reader: Field) -> None:
    if writer.name != reader.name:
        ctx.add(FIELD_NAME_CHANGED)
    _compare_types_of(ctx, writer.label, reader.label, writer.type, reader.type)


def _as_map(ctx: _Context, type_name: str, writer: bool) -> str:
    """A map entry message's type written as the `map<K, V>` it stands for."""
    if type_name in SCALAR_TYPES or type_name.startswith("map<"):
        return type_name
    info = ctx.lookup(type_name, writer)
    entry = None if info is None else info.map_field_types()
    return type_name if entry is None else f"map<{entry[0]}, {entry[1]}>"


def _kind(ctx: _Context, type_name: str, writer: bool) -> str:
    if type_name in SCALAR_TYPES:
        return "SCALAR"
    if type_name.startswith("map<"):
        return "MAP"
    info = ctx.lookup(type_name, writer)
    if info is not None and isinstance(info.element, Enum):
        return "SCALAR"
    return "MESSAGE"


def _scalar_group(type_name: str) -> str:
    return SCALAR_GROUPS.get(type_name, "GENERAL_NUMBER")  # else an enum, a varint number


def _compare_types_of(
    ctx: _Context, w_label: str | None, r_label: str | None, w_type: str, r_type: str
) -> None:
    w_type = _as_map(ctx, w_type, writer=True)
    r_type = _as_map(ctx, r_type, writer=False)
    w_kind, r_kind = _kind(ctx, w_type, True), _kind(ctx, r_type, False)
    if w_kind != r_kind:
        ctx.add(FIELD_KIND_CHANGED)
    elif w_kind == "SCALAR":
        w_group, r_group = _scalar_group(w_type), _scalar_group(r_type)
        if w_group != r_group:
            ctx.add(FIELD_SCALAR_KIND_CHANGED)
        elif w_label is not None and r_label is not None and w_label != r_label:
            if w_group in _NUMERIC_GROUPS:
                ctx.add(FIELD_NUMERIC_LABEL_CHANGED)
            else:
                ctx.add(FIELD_STRING_OR_BYTES_LABEL_CHANGED)
    elif w_kind == "MESSAGE":
        _compare_message_types(ctx, w_type, r_type)
    else:
        w_key, w_value = Field("", 0, w_type).map_types()
        r_key, r_value = Field("", 0, r_type).map_types()
        _compare_types_of(ctx, None, None, w_key, r_key)
        _compare_types_of(ctx, None, None, w_value, r_value)


def _compare_message_types(ctx: _Context, w_type: str, r_type: str) -> None:
    w_info, r_info = ctx.lookup(w_type, True), ctx.lookup(r_type, False)
    if w_info is None or r_info is None:
        if w_type != r_type:
            ctx.add(FIELD_NAMED_TYPE_CHANGED)
        return
    if w_info.local_name != r_info.local_name:
        ctx.add(FIELD_NAMED_TYPE_CHANGED)
        return
    if w_info.file == MAIN and r_info.file == MAIN:
        return  # both the schema's own: compared where they are declared
    assert isinstance(w_info.element, Message) and isinstance(r_info.element, Message)
    sub = ctx.sub(w_info.package, r_info.package, w_info.local_name)
    _compare_messages(sub, w_info.element, r_info.element)
    ctx.diffs.extend(sub.diffs)
    if any(not d.compatible for d in sub.diffs):
        ctx.add(FIELD_NAMED_TYPE_CHANGED)
