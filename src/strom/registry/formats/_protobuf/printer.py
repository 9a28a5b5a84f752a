"""Prints a parsed `.proto` file back as text, in Confluent Schema Registry's layout.

The canonical form keeps the file's content and order (message order matters: message indexes
count it) and lays it out one way: syntax, package, imports, options, messages then enums,
extends, services; fields, oneofs, nested messages then nested enums inside a message; options
in brackets one per line when there are several; comments dropped.

The normalized form (for `?normalize=true`) also resolves every type name to its fully
qualified `.pkg.Name`, folds synthetic map-entry messages back into `map<K, V>` fields, sorts
imports, options, fields (by number), oneofs, enum values and reserved ranges, merges repeated
custom options into one text-format map, and writes numbers one way. Normalizing the normalized
text gives the same text.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation, localcontext
from typing import TypeVar, cast

from .model import (
    LIST,
    MAP,
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
    ProtoFile,
    Reserved,
    Rpc,
    Service,
)
from .types import TypeSpace

_ESCAPED = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
    "\\": "\\\\", "'": "\\'", '"': '\\"',
}  # fmt: skip
_ENUM_MAX = 2**31 - 1
_V = TypeVar("_V")


def escape(text: str) -> str:
    return "".join(_ESCAPED.get(c, c) for c in text)


def indent(text: str) -> str:
    """Every line of `text` indented by two spaces (blank lines too, trailing ones dropped)."""
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    return "".join(f"  {line}\n" for line in lines)


def _count_sort_key(value: object) -> tuple[int, str]:
    if isinstance(value, tuple):
        return value[0], f"{value[0]}..{value[1]}"
    if isinstance(value, int):
        return value, str(value)
    return 2**63, str(value)


class Printer:
    """Canonical printing when `space` is None; normalized printing with the schema's types."""

    def __init__(self, space: TypeSpace | None = None) -> None:
        self.space = space
        self.normalize = space is not None

    # -- file ------------------------------------------------------------------------------

    def file(self, proto: ProtoFile) -> str:
        out: list[str] = []
        if proto.syntax is not None and (not self.normalize or proto.syntax == "proto3"):
            out.append(f'syntax = "{proto.syntax}";\n')
        if proto.package is not None:
            out.append(f"package {proto.package};\n")
        if proto.imports or proto.public_imports or proto.weak_imports:
            out.append("\n")
            for kind, paths in (
                ("", proto.imports),
                ("public ", proto.public_imports),
                ("weak ", proto.weak_imports),
            ):
                if self.normalize:
                    paths = sorted(set(paths))
                out.extend(f'import {kind}"{path}";\n' for path in paths)
        scope = proto.package or ""
        options = self.options(proto.options, scope)
        if options:
            out.append("\n")
            out.extend(self.option_statement(o, scope) for o in options)
        types = self.types(proto.types)
        if types:
            out.append("\n")
            out.extend(self.message(t, scope) for t in types if isinstance(t, Message))
            out.extend(self.enum(t, scope) for t in types if isinstance(t, Enum))
        if proto.extends:
            out.append("\n")
            out.extend(self.extend(e, scope) for e in self.extends(proto.extends, scope))
        if proto.services:
            out.append("\n")
            out.extend(self.service(s, scope) for s in proto.services)
        return "".join(out)

    def types(self, types: list[Message | Enum]) -> list[Message | Enum]:
        if not self.normalize:
            return types
        # A map field's synthetic entry message is printed as the map<K, V> it stands for.
        return [t for t in types if not (isinstance(t, Message) and t.is_map_entry)]

    # -- messages --------------------------------------------------------------------------

    def message(self, msg: Message, parent: str) -> str:
        scope = f"{parent}.{msg.name}" if parent else msg.name
        out = [f"message {msg.name} {{"]
        if msg.reserved:
            out.append("\n")
            out.extend(
                indent(self.reserved(r, MAX_FIELD_NUMBER)) for r in self.reserved_list(msg.reserved)
            )
        options = self.options(msg.options, scope)
        if options:
            out.append("\n")
            out.extend(indent(self.option_statement(o, scope)) for o in options)
        if msg.fields:
            out.append("\n")
            fields = sorted(msg.fields, key=lambda f: f.number) if self.normalize else msg.fields
            out.extend(indent(self.field(f, scope)) for f in fields)
        oneofs = msg.oneofs
        if self.normalize:
            oneofs = [
                OneOf(o.name, sorted(o.fields, key=lambda f: f.number), o.options, o.groups)
                for o in oneofs
                if o.fields
            ]
            oneofs.sort(key=lambda o: o.fields[0].number)
        if oneofs:
            out.append("\n")
            out.extend(indent(self.oneof(o, scope)) for o in oneofs)
        if msg.groups:
            out.append("\n")
            groups = sorted(msg.groups, key=lambda g: g.number) if self.normalize else msg.groups
            out.extend(indent(self.group(g, scope)) for g in groups)
        if msg.extensions:
            out.append("\n")
            out.extend(
                indent(self.extensions(e, scope)) for e in self.extensions_list(msg.extensions)
            )
        if msg.extends:
            out.append("\n")
            out.extend(indent(self.extend(e, scope)) for e in self.extends(msg.extends, scope))
        nested = self.types(msg.nested)
        if nested:
            out.append("\n")
            out.extend(indent(self.message(t, scope)) for t in nested if isinstance(t, Message))
            out.extend(indent(self.enum(t, scope)) for t in nested if isinstance(t, Enum))
        out.append("}\n")
        return "".join(out)

    def reserved_list(self, items: list[Reserved]) -> list[Reserved]:
        """Reserved statements; normalized, one value per statement, in order."""
        if not self.normalize:
            return items
        out = [Reserved([_single(v)]) for item in items for v in item.values]
        out.sort(key=lambda r: _count_sort_key(r.values[0]))
        return out

    def extensions_list(self, items: list[Extensions]) -> list[Extensions]:
        if not self.normalize:
            return items
        out = [Extensions([_single(v)], item.options) for item in items for v in item.values]
        out.sort(key=lambda r: _count_sort_key(r.values[0]))
        return out

    def reserved(self, r: Reserved, max_value: int) -> str:
        parts = []
        for v in r.values:
            parts.append(f'"{v}"' if isinstance(v, str) else self.range(v, max_value))
        return "reserved " + ", ".join(parts) + ";\n"

    def range(self, v: int | tuple[int, int], max_value: int) -> str:
        if isinstance(v, int):
            return str(v)
        if self.normalize and v[0] == v[1]:
            return str(v[0])
        return f"{v[0]} to {'max' if v[1] >= max_value else v[1]}"

    def extensions(self, e: Extensions, scope: str) -> str:
        text = "extensions " + ", ".join(self.range(v, MAX_FIELD_NUMBER) for v in e.values)
        options = self.options(e.options, scope)
        if options:
            text += " " + self.bracketed([self.option_text(o, scope) for o in options])
        return text + ";\n"

    def field(self, f: Field, scope: str) -> str:
        label = f.label
        type_name = f.type
        if self.normalize:
            type_name, is_map = self.normalized_type(f.type, scope)
            if is_map:
                label = None
        out = f"{label} " if label else ""
        out += f"{type_name} {f.name} = {f.number}"
        options = list(f.options)
        if f.default is not None:
            options.append(Option("default", f.default))
        if f.json_name is not None:
            options.append(Option("json_name", OptionValue(STRING, f.json_name)))
        options = self.options(options, scope)
        if options:
            out += " " + self.bracketed([self.option_text(o, scope) for o in options])
        return out + ";\n"

    def normalized_type(self, type_name: str, scope: str) -> tuple[str, bool]:
        """(the fully qualified type, whether it is a map)."""
        assert self.space is not None
        if type_name in SCALAR_TYPES:
            return type_name, False
        if type_name.startswith("map<"):
            key, value = Field("", 0, type_name).map_types()
            return f"map<{key}, {self.qualified(value, scope)}>", True
        resolved = self.space.resolve(type_name, scope)
        if resolved is None:
            return type_name, False
        info = self.space.types[resolved]
        entry = info.map_field_types()
        if entry is not None:
            key, value = entry
            return f"map<{key}, {self.qualified(value, resolved)}>", True
        return "." + resolved, False

    def qualified(self, type_name: str, scope: str) -> str:
        if type_name in SCALAR_TYPES or self.space is None:
            return type_name
        resolved = self.space.resolve(type_name, scope)
        return type_name if resolved is None else "." + resolved

    def oneof(self, oneof: OneOf, scope: str) -> str:
        out = [f"oneof {oneof.name} {{"]
        options = self.options(oneof.options, scope)
        if options:
            out.append("\n")
            out.extend(indent(self.option_statement(o, scope)) for o in options)
        if oneof.fields:
            out.append("\n")
            out.extend(indent(self.field(f, scope)) for f in oneof.fields)
        if oneof.groups:
            out.append("\n")
            groups = (
                sorted(oneof.groups, key=lambda g: g.number) if self.normalize else oneof.groups
            )
            out.extend(indent(self.group(g, scope)) for g in groups)
        out.append("}\n")
        return "".join(out)

    def group(self, group: Group, scope: str) -> str:
        out = [f"{group.label} " if group.label else ""]
        out.append(f"group {group.name} = {group.number} {{")
        if group.fields:
            out.append("\n")
            inner = f"{scope}.{group.name}" if scope else group.name
            fields = (
                sorted(group.fields, key=lambda f: f.number) if self.normalize else group.fields
            )
            out.extend(indent(self.field(f, inner)) for f in fields)
        out.append("}\n")
        return "".join(out)

    def extends(self, extends: list[Extend], scope: str) -> list[Extend]:
        if not self.normalize:
            return extends
        merged: dict[str, Extend] = {}
        for ext in extends:
            name = self.qualified(ext.name, scope)
            merged.setdefault(name, Extend(name)).fields.extend(ext.fields)
        for ext in merged.values():
            ext.fields.sort(key=lambda f: f.number)
        return list(merged.values())

    def extend(self, ext: Extend, scope: str) -> str:
        out = [f"extend {ext.name} {{"]
        if ext.fields:
            out.append("\n")
            out.extend(indent(self.field(f, scope)) for f in ext.fields)
        out.append("}\n")
        return "".join(out)

    # -- enums -----------------------------------------------------------------------------

    def enum(self, enum: Enum, parent: str) -> str:
        scope = f"{parent}.{enum.name}" if parent else enum.name
        out = [f"enum {enum.name} {{"]
        if enum.reserved:
            out.append("\n")
            out.extend(
                indent(self.reserved(r, _ENUM_MAX)) for r in self.reserved_list(enum.reserved)
            )
        elif enum.options or enum.constants:
            out.append("\n")
        out.extend(indent(self.option_statement(o, scope)) for o in self.options(enum.options, scope))
        constants = enum.constants
        if self.normalize:
            constants = sorted(constants, key=lambda c: (c.number, c.name))
        out.extend(indent(self.constant(c, scope)) for c in constants)
        out.append("}\n")
        return "".join(out)

    def constant(self, c: EnumConstant, scope: str) -> str:
        out = f"{c.name} = {c.number}"
        options = self.options(c.options, scope)
        if options:
            out += " " + self.bracketed([self.option_text(o, scope) for o in options])
        return out + ";\n"

    # -- services --------------------------------------------------------------------------

    def service(self, service: Service, scope: str) -> str:
        out = [f"service {service.name} {{"]
        options = self.options(service.options, scope)
        if options:
            out.append("\n")
            out.extend(indent(self.option_statement(o, scope)) for o in options)
        if service.rpcs:
            out.append("\n")
            out.extend(indent(self.rpc(r, scope)) for r in service.rpcs)
        out.append("}\n")
        return "".join(out)

    def rpc(self, rpc: Rpc, scope: str) -> str:
        request, response = rpc.request, rpc.response
        if self.normalize:
            request, response = self.qualified(request, scope), self.qualified(response, scope)
        out = f"rpc {rpc.name} ("
        out += ("stream " if rpc.client_streaming else "") + request + ") returns ("
        out += ("stream " if rpc.server_streaming else "") + response + ")"
        options = self.options(rpc.options, scope)
        if options:
            out += " {\n" + "".join(indent(self.option_statement(o, scope)) for o in options) + "}"
        return out + ";\n"

    # -- options ---------------------------------------------------------------------------

    def option_statement(self, option: Option, scope: str) -> str:
        return f"option {self.option_text(option, scope)};\n"

    def option_text(self, option: Option, scope: str) -> str:
        name = f"({option.name})" if option.parenthesized else option.name
        if option.sub is not None:
            name += "." + option.sub
        value = option.value
        if value.kind == STRING:
            return f'{name} = "{escape(value.scalar())}"'
        if value.kind == MAP:
            return f"{name} = {{\n{self.map_entries(value.entries(), scope)}}}"
        if value.kind == LIST:
            return f"{name} = " + self.bracketed([self.value(v, scope) for v in value.items()])
        return f"{name} = {self.scalar(value)}"

    def scalar(self, value: OptionValue) -> str:
        if value.kind == NUMBER and self.normalize:
            return normalize_number(value.scalar())
        return value.scalar()

    def bracketed(self, items: list[str]) -> str:
        if len(items) == 1:
            return f"[{items[0]}]"
        return (
            "[\n"
            + "".join(
                indent(item + ("," if i < len(items) - 1 else "")) for i, item in enumerate(items)
            )
            + "]"
        )

    def value(self, value: OptionValue, scope: str) -> str:
        if value.kind == STRING:
            return f'"{escape(value.scalar())}"'
        if value.kind == MAP:
            return "{\n" + self.map_entries(value.entries(), scope) + "}"
        if value.kind == LIST:
            items = value.items()
            if self.normalize and len(items) == 1:
                return self.value(items[0], scope)
            rendered = [self.value(v, scope) for v in items]
            return (
                "[\n"
                + "".join(
                    indent(item + ("," if i < len(rendered) - 1 else ""))
                    for i, item in enumerate(rendered)
                )
                + "]"
            )
        return self.scalar(value)

    def map_entries(self, entries: dict[str, OptionValue], scope: str) -> str:
        items = list(entries.items())
        if self.normalize:
            normalized: dict[str, OptionValue] = {}
            for key, value in items:
                if value.kind == LIST and not value.items():
                    continue
                if key.startswith("[") and key.endswith("]") and self.space is not None:
                    resolved = self.space.resolve_extension(key[1:-1], scope)
                    if resolved is not None:
                        key = f"[{resolved}]"
                normalized.setdefault(key, value)
            items = sorted(normalized.items())
        return "".join(
            indent(f"{key}: {self.value(value, scope)}" + ("," if i < len(items) - 1 else ""))
            for i, (key, value) in enumerate(items)
        )

    def options(self, options: list[Option], scope: str) -> list[Option]:
        """The options to print: as they are, or normalized (qualified, sorted, merged)."""
        if not self.normalize or not options:
            return options
        assert self.space is not None
        qualified: list[Option] = []
        for option in options:
            if option.parenthesized:
                resolved = self.space.resolve_extension(option.name, scope)
                if resolved is not None:
                    option = _as_map(Option(resolved, option.value, True, option.sub))
            qualified.append(option)
        qualified.sort(key=lambda o: o.name)
        out: list[Option] = []
        i = 0
        while i < len(qualified):
            j = i
            while j < len(qualified) and qualified[j].name == qualified[i].name:
                j += 1
            same = qualified[i:j]
            ext = self.space.extensions.get(same[0].name) if same[0].parenthesized else None
            if ext is not None and ext.field.label != "repeated":
                merged = same[0]
                for other in same[1:]:
                    merged = self._merge_option(ext.field, ext.scope, merged, other)
                out.append(merged)
            else:
                out.extend(same)
            i = j
        return out

    def _merge_option(self, field: Field, scope: str, a: Option, b: Option) -> Option:
        b = _as_map(b)
        if a.value.kind == MAP and b.value.kind == MAP:
            merged = self._merge_maps(field, scope, a.value.entries(), b.value.entries())
            return Option(b.name, OptionValue(MAP, merged), b.parenthesized)
        return b

    def _merge_maps(
        self, field: Field, scope: str, a: dict[str, OptionValue], b: dict[str, OptionValue]
    ) -> dict[str, OptionValue]:
        container = self._message_of(field, scope)
        merged = dict(a)
        for key, value in b.items():
            if key not in merged:
                merged[key] = value
                continue
            nested: Field | None = None
            nested_scope = scope
            if container is not None:
                msg, nested_scope = container
                nested = next((f for f, _ in msg.all_fields() if f.name == key), None)
            merged[key] = self._merge_values(nested, nested_scope, merged[key], value)
        return merged

    def _merge_values(
        self, field: Field | None, scope: str, a: OptionValue, b: OptionValue
    ) -> OptionValue:
        singular = field is not None and field.label != "repeated"
        if (
            singular
            and field is not None
            and a.kind == MAP
            and b.kind == MAP
            and self._message_of(field, scope) is not None
        ):
            return OptionValue(MAP, self._merge_maps(field, scope, a.entries(), b.entries()))
        if singular:
            return b
        values: list[OptionValue] = []
        for v in (*(a.items() if a.kind == LIST else [a]), *(b.items() if b.kind == LIST else [b])):
            if v not in values:
                values.append(v)
        return OptionValue(LIST, values)

    def _message_of(self, field: Field, scope: str) -> tuple[Message, str] | None:
        assert self.space is not None
        if field.type in SCALAR_TYPES or field.is_map:
            return None
        resolved = self.space.resolve(field.type, scope)
        if resolved is None:
            return None
        element = self.space.types[resolved].element
        return (element, resolved) if isinstance(element, Message) else None


def _single(value: _V) -> _V:
    """A range of one number as that number."""
    if isinstance(value, tuple) and value[0] == value[1]:
        return cast(_V, value[0])
    return value


def _as_map(option: Option) -> Option:
    """`(ext).a.b = v` as `(ext) = {a: {b: v}}`."""
    if option.sub is None:
        return option
    value = option.value
    for part in reversed(option.sub.split(".")):
        value = OptionValue(MAP, {part: value})
    return Option(option.name, value, option.parenthesized)


_INT_TEXT = re.compile(r"[-+]?(0[xX][0-9A-Fa-f]+|0[0-7]*|[1-9]\d*)")


def normalize_number(text: str) -> str:
    """A number written one way: integers in decimal, others with at most three decimals
    (as Confluent's normalizer does), no suffix; anything else (inf, nan) as it was."""
    if _INT_TEXT.fullmatch(text):
        sign = -1 if text.startswith("-") else 1
        digits = text.lstrip("+-")
        if digits[:2].lower() == "0x":
            return str(sign * int(digits, 16))
        if len(digits) > 1 and digits.startswith("0"):
            return str(sign * int(digits, 8))
        return str(sign * int(digits))
    body = text[:-1] if text[-1:] in ("f", "F") and not text.lower().endswith("inf") else text
    try:
        number = Decimal(body)
    except InvalidOperation:
        return text
    if not number.is_finite():
        return text
    with localcontext() as context:
        context.prec = 2000
        try:
            rounded = number.quantize(Decimal("0.001"), rounding=ROUND_HALF_EVEN)
        except InvalidOperation:
            return text
    out = format(rounded, "f")
    if "." in out:
        out = out.rstrip("0").rstrip(".")
    return "0" if out in ("-0", "") else out


def canonical_text(proto: ProtoFile) -> str:
    return Printer().file(proto)


def normalized_text(proto: ProtoFile, space: TypeSpace) -> str:
    return Printer(space).file(proto)
