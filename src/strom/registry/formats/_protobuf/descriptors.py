"""Conversions between the parsed model and `google.protobuf.FileDescriptorProto`.

Confluent's serializers (confluent-kafka-python's, for one) register a schema as the base64 of
its compiled `FileDescriptorProto` rather than as `.proto` text, and read schemas back with
`?format=serialized`. `from_descriptor` turns such a descriptor into the model as Confluent's
registry does (so the canonical text is the same), and `to_descriptor` compiles the model into
a descriptor a client's `DescriptorPool` accepts.

Custom options (extensions of the descriptor option messages) are not carried across either
way; the standard ones are.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.message import Message as PbMessage

from .model import (
    BOOL,
    ENUM,
    MAX_FIELD_NUMBER,
    NUMBER,
    SCALAR_TYPES,
    STRING,
    Enum,
    EnumConstant,
    Extend,
    Extensions,
    Field,
    Group,
    Message,
    OneOf,
    Option,
    OptionValue,
    ProtoError,
    ProtoFile,
    Reserved,
    Rpc,
    Service,
)
from .types import TypeSpace

FDP = descriptor_pb2.FieldDescriptorProto

# Options Confluent carries from a descriptor into the text, in the order it writes them.
_FILE_OPTIONS = (
    "java_package", "java_outer_classname", "java_multiple_files",
    "java_generate_equals_and_hash", "java_string_check_utf8", "optimize_for", "go_package",
    "cc_generic_services", "java_generic_services", "py_generic_services", "deprecated",
    "cc_enable_arenas", "objc_class_prefix", "csharp_namespace", "swift_prefix",
    "php_class_prefix", "php_namespace", "php_metadata_namespace", "ruby_package",
)  # fmt: skip
_MESSAGE_OPTIONS = ("no_standard_descriptor_accessor", "deprecated", "map_entry")
_FIELD_OPTIONS = ("ctype", "packed", "jstype", "deprecated", "debug_redact", "retention")
_ENUM_OPTIONS = ("allow_alias", "deprecated")
_ENUM_VALUE_OPTIONS = ("deprecated", "debug_redact")
_SERVICE_OPTIONS = ("deprecated",)
_METHOD_OPTIONS = ("deprecated", "idempotency_level")

_TYPE_NAMES = {
    getattr(FDP, "TYPE_" + name.upper()): name
    for name in (*SCALAR_TYPES, "group", "message", "enum")
}


# -- descriptor -> model --------------------------------------------------------------------


def from_descriptor(fd: descriptor_pb2.FileDescriptorProto) -> ProtoFile:
    syntax = fd.syntax if fd.syntax in ("proto2", "proto3") else None
    proto3 = fd.syntax == "proto3"
    proto = ProtoFile(syntax=syntax, package=fd.package or None)
    public = set(fd.public_dependency)
    weak = set(fd.weak_dependency)
    for i, dep in enumerate(fd.dependency):
        if i in public:
            proto.public_imports.append(dep)
        elif i in weak:
            proto.weak_imports.append(dep)
        else:
            proto.imports.append(dep)
    proto.options = _options_from(fd.options, _FILE_OPTIONS)
    proto.types = [_message_from(m, proto3) for m in fd.message_type]
    proto.types += [_enum_from(e) for e in fd.enum_type]
    proto.services = [_service_from(s) for s in fd.service]
    proto.extends = _extends_from(fd.extension, proto3)
    return proto


def _options_from(options: PbMessage, names: tuple[str, ...]) -> list[Option]:
    out: list[Option] = []
    for name in names:
        field = options.DESCRIPTOR.fields_by_name.get(name)
        if field is None:
            continue
        if _repeated(field):
            values = list(getattr(options, name))
        elif options.HasField(name):
            values = [getattr(options, name)]
        else:
            continue
        for value in values:
            out.append(Option(name, _option_value(field, value)))
    return out


def _repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # protobuf >= 6.31 (label is gone in 7)
    if is_repeated is not None:
        return bool(is_repeated)
    return bool(field.label == FDP.LABEL_REPEATED)


def _option_value(field: Any, value: Any) -> OptionValue:
    if field.type == FDP.TYPE_BOOL:
        return OptionValue(BOOL, "true" if value else "false")
    if field.type == FDP.TYPE_ENUM:
        return OptionValue(ENUM, field.enum_type.values_by_number[value].name)
    if field.type == FDP.TYPE_STRING:
        return OptionValue(STRING, value)
    return OptionValue(NUMBER, str(value))


def _default_kind(type_name: str) -> str:
    if type_name == "bool":
        return BOOL
    if type_name in ("string", "bytes"):
        return STRING
    if type_name in SCALAR_TYPES:
        return NUMBER
    return ENUM


def _label_from(fdp: descriptor_pb2.FieldDescriptorProto, proto3: bool) -> str | None:
    if fdp.proto3_optional:
        return "optional"
    if fdp.label == FDP.LABEL_REPEATED:
        return "repeated"
    if proto3:
        return None
    return "required" if fdp.label == FDP.LABEL_REQUIRED else "optional"


def _field_from(fdp: descriptor_pb2.FieldDescriptorProto, proto3: bool, in_oneof: bool) -> Field:
    type_name = fdp.type_name if fdp.type_name else _TYPE_NAMES[fdp.type]
    f = Field(
        fdp.name,
        fdp.number,
        type_name,
        None if in_oneof else _label_from(fdp, proto3),
        _options_from(fdp.options, _FIELD_OPTIONS),
    )
    if fdp.HasField("json_name"):
        f.json_name = fdp.json_name
    if not proto3 and fdp.HasField("default_value"):
        f.default = OptionValue(_default_kind(type_name), fdp.default_value)
    return f


def _message_from(m: descriptor_pb2.DescriptorProto, proto3: bool) -> Message:
    msg = Message(m.name)
    oneofs = [OneOf(o.name) for o in m.oneof_decl]
    for fdp in m.field:
        if fdp.HasField("oneof_index") and not fdp.proto3_optional:
            oneofs[fdp.oneof_index].fields.append(_field_from(fdp, proto3, True))
        else:
            msg.fields.append(_field_from(fdp, proto3, False))
    msg.oneofs = [o for o in oneofs if o.fields]  # proto3 optional's synthetic oneofs go
    msg.nested = [_message_from(n, proto3) for n in m.nested_type]
    msg.nested += [_enum_from(e) for e in m.enum_type]
    for r in m.reserved_range:  # end exclusive
        msg.reserved.append(Reserved([r.start if r.end - 1 == r.start else (r.start, r.end - 1)]))
    msg.reserved += [Reserved([name]) for name in m.reserved_name]
    for e in m.extension_range:
        end = min(e.end - 1, MAX_FIELD_NUMBER)
        msg.extensions.append(Extensions([e.start if end == e.start else (e.start, end)]))
    msg.options = _options_from(m.options, _MESSAGE_OPTIONS)
    msg.extends = _extends_from(m.extension, proto3)
    return msg


def _enum_from(e: descriptor_pb2.EnumDescriptorProto) -> Enum:
    enum = Enum(e.name, options=_options_from(e.options, _ENUM_OPTIONS))
    for v in e.value:
        enum.constants.append(
            EnumConstant(v.name, v.number, _options_from(v.options, _ENUM_VALUE_OPTIONS))
        )
    for r in e.reserved_range:  # end inclusive
        enum.reserved.append(Reserved([r.start if r.end == r.start else (r.start, r.end)]))
    enum.reserved += [Reserved([name]) for name in e.reserved_name]
    return enum


def _service_from(s: descriptor_pb2.ServiceDescriptorProto) -> Service:
    service = Service(s.name, options=_options_from(s.options, _SERVICE_OPTIONS))
    for m in s.method:
        service.rpcs.append(
            Rpc(
                m.name,
                m.input_type,
                m.output_type,
                m.client_streaming,
                m.server_streaming,
                _options_from(m.options, _METHOD_OPTIONS),
            )
        )
    return service


def _extends_from(fields: Any, proto3: bool) -> list[Extend]:
    by_target: dict[str, Extend] = {}
    for fdp in fields:
        ext = by_target.setdefault(fdp.extendee, Extend(fdp.extendee))
        ext.fields.append(_field_from(fdp, proto3, False))
    return list(by_target.values())


# -- model -> descriptor --------------------------------------------------------------------


def _camel(name: str) -> str:
    """protoc's map entry name: the field name in CamelCase (`tag_counts` -> `TagCounts`)."""
    out = []
    upper = True
    for c in name:
        if c == "_":
            upper = True
        elif upper:
            out.append(c.upper())
            upper = False
        else:
            out.append(c)
    return "".join(out)


def _set_options(target: PbMessage, options: list[Option]) -> None:
    """Copies the standard options; custom (parenthesized) ones are left out."""
    for option in options:
        if option.parenthesized or option.sub is not None:
            continue
        field = target.DESCRIPTOR.fields_by_name.get(option.name)
        if field is None:
            continue
        value = _option_python_value(field, option.value)
        if value is None:
            continue
        if _repeated(field):
            getattr(target, option.name).append(value)
        else:
            setattr(target, option.name, value)


def _option_python_value(field: Any, value: OptionValue) -> Any:
    if not isinstance(value.value, str):
        return None
    text = value.value
    try:
        if field.type == FDP.TYPE_BOOL:
            return {"true": True, "false": False}.get(text)
        if field.type == FDP.TYPE_ENUM:
            v = field.enum_type.values_by_name.get(text)
            return None if v is None else v.number
        if field.type in (FDP.TYPE_STRING, FDP.TYPE_BYTES):
            return text if field.type == FDP.TYPE_STRING else text.encode("latin-1")
        if field.type in (FDP.TYPE_FLOAT, FDP.TYPE_DOUBLE):
            return float(text.rstrip("fF"))
        return int(text, 0)
    except (ValueError, UnicodeEncodeError):
        return None


_C_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "'": "\\'", "\\": "\\\\"}


def _bytes_default(text: str) -> str:
    """A bytes default as descriptors hold it: C-escaped."""
    out = []
    for c in text:
        if c in _C_ESCAPES:
            out.append(_C_ESCAPES[c])
        elif " " <= c <= "~":
            out.append(c)
        else:
            out.append(f"\\{ord(c) & 0xFF:03o}")
    return "".join(out)


class _Compiler:
    def __init__(self, proto: ProtoFile, space: TypeSpace) -> None:
        self.proto = proto
        self.space = space
        self.proto3 = proto.is_proto3

    def file(self, name: str) -> descriptor_pb2.FileDescriptorProto:
        proto = self.proto
        fd = descriptor_pb2.FileDescriptorProto(name=name)
        if proto.package:
            fd.package = proto.package
        if self.proto3:
            fd.syntax = "proto3"
        for dep in proto.imports:
            fd.dependency.append(dep)
        for dep in proto.public_imports:
            fd.public_dependency.append(len(fd.dependency))
            fd.dependency.append(dep)
        for dep in proto.weak_imports:
            fd.weak_dependency.append(len(fd.dependency))
            fd.dependency.append(dep)
        _set_options(fd.options, proto.options)
        if not fd.options.ListFields():
            fd.ClearField("options")
        scope = proto.package or ""
        for t in proto.types:
            if isinstance(t, Message):
                self.message(fd.message_type.add(), t, scope)
            else:
                self.enum(fd.enum_type.add(), t)
        for ext in proto.extends:
            self.extend(fd.extension, ext, scope)
        for service in proto.services:
            self.service(fd.service.add(), service, scope)
        return fd

    def resolve_type(self, type_name: str, scope: str) -> tuple[int, str]:
        if type_name in SCALAR_TYPES:
            return getattr(FDP, "TYPE_" + type_name.upper()), ""
        resolved = self.space.resolve(type_name, scope)
        if resolved is None:
            raise ProtoError(f"unknown type '{type_name}'")
        kind = FDP.TYPE_MESSAGE if self.space.types[resolved].is_message else FDP.TYPE_ENUM
        return kind, "." + resolved

    def field(
        self,
        fdp: descriptor_pb2.FieldDescriptorProto,
        f: Field,
        scope: str,
        label: str | None,
    ) -> None:
        fdp.name = f.name
        fdp.number = f.number
        fdp.label = {
            "repeated": FDP.LABEL_REPEATED,
            "required": FDP.LABEL_REQUIRED,
        }.get(label or "", FDP.LABEL_OPTIONAL)
        kind, type_name = self.resolve_type(f.type, scope)
        fdp.type = kind
        if type_name:
            fdp.type_name = type_name
        if f.default is not None:
            text = f.default.scalar()
            fdp.default_value = _bytes_default(text) if f.type == "bytes" else text
        if f.json_name is not None:
            fdp.json_name = f.json_name
        _set_options(fdp.options, f.options)
        if not fdp.options.ListFields():
            fdp.ClearField("options")

    def message(self, m: descriptor_pb2.DescriptorProto, msg: Message, parent: str) -> None:
        scope = f"{parent}.{msg.name}" if parent else msg.name
        m.name = msg.name
        for n in msg.nested:
            if isinstance(n, Message):
                self.message(m.nested_type.add(), n, scope)
            else:
                self.enum(m.enum_type.add(), n)
        synthetic: list[tuple[descriptor_pb2.FieldDescriptorProto, str]] = []
        for f in msg.fields:
            fdp = m.field.add()
            if f.is_map:
                key, value = f.map_types()
                entry = m.nested_type.add(name=_camel(f.name) + "Entry")
                entry.options.map_entry = True
                self.field(entry.field.add(), Field("key", 1, key), scope, None)
                self.field(entry.field.add(), Field("value", 2, value), scope, None)
                self.field(
                    fdp, Field(f.name, f.number, value, "repeated", f.options), scope, "repeated"
                )
                fdp.type = FDP.TYPE_MESSAGE
                fdp.type_name = f".{scope}.{entry.name}"
                if f.json_name is not None:
                    fdp.json_name = f.json_name
                continue
            self.field(fdp, f, scope, f.label)
            if self.proto3 and f.label == "optional":
                fdp.proto3_optional = True
                synthetic.append((fdp, f.name))
        for group in msg.groups:
            self.group(m, group, scope, None)
        for index, oneof in enumerate(msg.oneofs):
            m.oneof_decl.add(name=oneof.name)
            _set_options(m.oneof_decl[index].options, oneof.options)
            for f in oneof.fields:
                fdp = m.field.add()
                self.field(fdp, f, scope, None)
                fdp.oneof_index = index
            for group in oneof.groups:
                self.group(m, group, scope, index)
        names = {o.name for o in msg.oneofs}
        for fdp, name in synthetic:  # proto3 optional: one synthetic oneof each, after real ones
            oneof_name = "_" + name
            while oneof_name in names:
                oneof_name = "X" + oneof_name
            names.add(oneof_name)
            fdp.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name=oneof_name)
        for r in msg.reserved:
            for v in r.values:
                if isinstance(v, str):
                    m.reserved_name.append(v)
                else:
                    lo, hi = (v, v) if isinstance(v, int) else v
                    m.reserved_range.add(start=lo, end=hi + 1)
        for e in msg.extensions:
            for v in e.values:
                lo, hi = (v, v) if isinstance(v, int) else v
                m.extension_range.add(start=lo, end=hi + 1)
        for ext in msg.extends:
            self.extend(m.extension, ext, scope)
        _set_options(m.options, msg.options)
        if not m.options.ListFields():
            m.ClearField("options")

    def group(
        self, m: descriptor_pb2.DescriptorProto, group: Group, scope: str, oneof: int | None
    ) -> None:
        nested = m.nested_type.add(name=group.name)
        inner = f"{scope}.{group.name}"
        for f in group.fields:
            self.field(nested.field.add(), f, inner, f.label)
        fdp = m.field.add(name=group.name.lower(), number=group.number)
        fdp.label = {"repeated": FDP.LABEL_REPEATED, "required": FDP.LABEL_REQUIRED}.get(
            group.label or "", FDP.LABEL_OPTIONAL
        )
        fdp.type = FDP.TYPE_GROUP
        fdp.type_name = "." + inner
        if oneof is not None:
            fdp.oneof_index = oneof

    def enum(self, e: descriptor_pb2.EnumDescriptorProto, enum: Enum) -> None:
        e.name = enum.name
        for c in enum.constants:
            v = e.value.add(name=c.name, number=c.number)
            _set_options(v.options, c.options)
            if not v.options.ListFields():
                v.ClearField("options")
        for r in enum.reserved:
            for value in r.values:
                if isinstance(value, str):
                    e.reserved_name.append(value)
                else:
                    lo, hi = (value, value) if isinstance(value, int) else value
                    e.reserved_range.add(start=lo, end=hi)
        _set_options(e.options, enum.options)
        if not e.options.ListFields():
            e.ClearField("options")

    def extend(self, target: Any, ext: Extend, scope: str) -> None:
        extendee = self.space.resolve(ext.name, scope)
        if extendee is None:
            raise ProtoError(f"unknown message type '{ext.name}'")
        for f in ext.fields:
            fdp = target.add()
            self.field(fdp, f, scope, f.label)
            fdp.extendee = "." + extendee

    def service(
        self, s: descriptor_pb2.ServiceDescriptorProto, service: Service, scope: str
    ) -> None:
        s.name = service.name
        for rpc in service.rpcs:
            m = s.method.add(name=rpc.name)
            m.input_type = self.resolve_type(rpc.request, scope)[1]
            m.output_type = self.resolve_type(rpc.response, scope)[1]
            if rpc.client_streaming:
                m.client_streaming = True
            if rpc.server_streaming:
                m.server_streaming = True
            _set_options(m.options, rpc.options)
            if not m.options.ListFields():
                m.ClearField("options")
        _set_options(s.options, service.options)
        if not s.options.ListFields():
            s.ClearField("options")


def to_descriptor(
    proto: ProtoFile, space: TypeSpace, name: str = "default"
) -> descriptor_pb2.FileDescriptorProto:
    """Compiles a checked file (every type resolvable in `space`) into a descriptor."""
    return _Compiler(proto, space).file(name)


_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


def looks_like_base64(text: str) -> bool:
    return bool(_BASE64.fullmatch(text)) and len(text.strip()) >= 4


def parse_descriptor(data: bytes) -> ProtoFile:
    """A serialized FileDescriptorProto, as the model; ProtoError when it is not one."""
    try:
        fd = descriptor_pb2.FileDescriptorProto.FromString(data)
    except Exception as e:  # DecodeError, or anything the runtime raises for garbage
        raise ProtoError(f"not a serialized FileDescriptorProto: {e}") from None
    if not fd.name and not (fd.message_type or fd.enum_type or fd.service):
        raise ProtoError("not a serialized FileDescriptorProto: it has neither name nor types")
    _check_strings(fd)
    try:
        proto = from_descriptor(fd)
    except (IndexError, KeyError, ValueError) as e:
        raise ProtoError(f"malformed FileDescriptorProto: {e!r}") from None
    _check_names(proto)
    return proto


def _check_strings(msg: PbMessage) -> None:
    """Every string in the descriptor is text (the runtime hands invalid UTF-8 over as bytes)."""
    for field, value in msg.ListFields():
        for v in value if _repeated(field) else [value]:
            if field.type in (FDP.TYPE_MESSAGE, FDP.TYPE_GROUP):
                _check_strings(v)
            elif field.type == FDP.TYPE_STRING and not isinstance(v, str):
                raise ProtoError(f"malformed FileDescriptorProto: {field.name} is not UTF-8")


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE = re.compile(r"\.?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _check_names(proto: ProtoFile) -> None:
    """What a descriptor holds must print as .proto text that parses back."""
    names: list[str] = []
    types: list[str] = [e.name for e in proto.extends]
    if proto.package:
        types.append(proto.package)

    def fields(fs: list[Field]) -> None:
        for f in fs:
            names.append(f.name)
            if not f.is_map:
                types.append(f.type)

    def message(m: Message) -> None:
        names.append(m.name)
        fields(m.fields)
        for o in m.oneofs:
            names.append(o.name)
            fields(o.fields)
        for e in m.extends:
            types.append(e.name)
            fields(e.fields)
        for n in m.nested:
            if isinstance(n, Message):
                message(n)
            else:
                enum(n)

    def enum(e: Enum) -> None:
        names.append(e.name)
        names.extend(c.name for c in e.constants)

    for t in proto.types:
        if isinstance(t, Message):
            message(t)
        else:
            enum(t)
    for ext in proto.extends:
        fields(ext.fields)
    for s in proto.services:
        names.append(s.name)
        for r in s.rpcs:
            names.append(r.name)
            types.extend((r.request, r.response))
    for name in names:
        if not _IDENT.fullmatch(name):
            raise ProtoError(f"malformed FileDescriptorProto: invalid name {name!r}")
    for type_name in types:
        if not _TYPE.fullmatch(type_name):
            raise ProtoError(f"malformed FileDescriptorProto: invalid type name {type_name!r}")
