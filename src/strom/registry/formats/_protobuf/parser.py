"""A recursive-descent parser for `.proto` text (proto2 and proto3) into `model.ProtoFile`.

It covers what a schema registry sees: syntax, package, imports, options (with text-format
values), messages with nested types, fields with labels, maps, oneofs, groups, reserved ranges
and names, extensions and extend blocks, enums, and services. Editions are refused.

Errors are `ProtoError`s that name the line and column.
"""

from __future__ import annotations

import re

from .model import (
    BOOL,
    ENUM,
    LIST,
    MAP,
    MAX_FIELD_NUMBER,
    NUMBER,
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
    Range,
    Reserved,
    Rpc,
    Service,
)

_WORD = re.compile(r"[A-Za-z0-9_.\-]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FULL_IDENT = re.compile(r"\.?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# A number as text-format and option values spell it: ints (decimal, hex, octal), floats with
# an optional exponent and f suffix, and inf/nan, each with an optional sign.
_NUMBER = re.compile(
    r"[-+]?(?:0[xX][0-9A-Fa-f]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?|inf(?:inity)?|nan)",
    re.IGNORECASE,
)
_INT = re.compile(r"-?(?:0[xX][0-9A-Fa-f]+|\d+)")
_MAX_DEPTH = 100  # nesting of messages and of option values, well past real schemas
_LABELS = ("optional", "required", "repeated")
_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.syntax: str | None = None
        self.statements = 0
        self.depth = 0

    def enter(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.error(f"nested more than {_MAX_DEPTH} levels deep")

    # -- characters ------------------------------------------------------------------------

    def error(self, message: str, pos: int | None = None) -> ProtoError:
        at = self.pos if pos is None else pos
        line = self.text.count("\n", 0, at) + 1
        column = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return ProtoError(f"Syntax error at line {line}, column {column}: {message}")

    def skip(self) -> None:
        """Skips whitespace and comments."""
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r\n\f\v":
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("unterminated comment")
                self.pos = end + 2
            else:
                return

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_end(self) -> bool:
        return self.peek() == ""

    def accept(self, c: str) -> bool:
        if self.peek() == c:
            self.pos += 1
            return True
        return False

    def expect(self, c: str, what: str = "") -> None:
        found = self.peek()
        if found != c:
            shown = f"'{found}'" if found else "end of input"
            raise self.error(f"expected '{c}'{what} but found {shown}")
        self.pos += 1

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip()
        m = pattern.match(self.text, self.pos)
        if m is None:
            found = self.peek()
            shown = f"'{found}'" if found else "end of input"
            raise self.error(f"expected {what} but found {shown}")
        self.pos = m.end()
        return m.group()

    def word(self) -> str:
        return self.match(_WORD, "a word")

    def ident(self, what: str = "a name") -> str:
        start = self.pos
        word = self.word()
        if not _IDENT.fullmatch(word):
            raise self.error(f"expected {what} but found '{word}'", start)
        return word

    def full_ident(self, what: str = "a name") -> str:
        start = self.pos
        word = self.word()
        if not _FULL_IDENT.fullmatch(word):
            raise self.error(f"expected {what} but found '{word}'", start)
        return word

    def integer(self, what: str, allow_negative: bool = False) -> int:
        self.skip()
        start = self.pos
        word = self.match(_WORD, what)
        if not _INT.fullmatch(word) or (word.startswith("-") and not allow_negative):
            raise self.error(f"expected {what} but found '{word}'", start)
        sign = -1 if word.startswith("-") else 1
        digits = word.lstrip("-")
        if digits[:2] in ("0x", "0X"):
            value = int(digits, 16)
        elif len(digits) > 1 and digits.startswith("0"):
            try:
                value = int(digits, 8)
            except ValueError:
                raise self.error(f"'{word}' is not a valid octal number", start) from None
        else:
            value = int(digits)
        return sign * value

    def string(self) -> str:
        """A quoted string; adjacent quoted strings are joined, as in C."""
        self.skip()
        parts: list[str] = []
        while self.peek() in ("'", '"'):
            parts.append(self._one_string())
        if not parts:
            raise self.error("expected a quoted string")
        return "".join(parts)

    def _one_string(self) -> str:
        text, n = self.text, len(self.text)
        quote = text[self.pos]
        start = self.pos
        self.pos += 1
        out: list[str] = []
        while True:
            if self.pos >= n or text[self.pos] == "\n":
                raise self.error("unterminated string", start)
            c = text[self.pos]
            self.pos += 1
            if c == quote:
                return "".join(out)
            if c != "\\":
                out.append(c)
                continue
            if self.pos >= n:
                raise self.error("unterminated string", start)
            e = text[self.pos]
            self.pos += 1
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
            elif e in "xX":
                m = re.compile(r"[0-9A-Fa-f]{1,2}").match(text, self.pos)
                if m is None:
                    raise self.error("expected hex digits after \\x")
                out.append(chr(int(m.group(), 16)))
                self.pos = m.end()
            elif e in "01234567":
                m = re.compile(r"[0-7]{1,3}").match(text, self.pos - 1)
                assert m is not None
                out.append(chr(int(m.group(), 8)))
                self.pos = m.end()
            elif e == "u":
                m = re.compile(r"[0-9A-Fa-f]{4}").match(text, self.pos)
                if m is None:
                    raise self.error("expected 4 hex digits after \\u")
                out.append(chr(int(m.group(), 16)))
                self.pos = m.end()
            else:
                raise self.error(f"unknown escape '\\{e}' in string")

    def end_statement(self) -> None:
        self.expect(";")

    # -- file ------------------------------------------------------------------------------

    def parse_file(self) -> ProtoFile:
        f = ProtoFile()
        while not self.at_end():
            if self.accept(";"):
                continue
            start = self.pos
            keyword = self.word()
            index = self.statements
            self.statements += 1
            if keyword == "syntax":
                if index != 0:
                    raise self.error("'syntax' must be the first statement of the file", start)
                self.expect("=")
                value = self.string()
                if value not in ("proto2", "proto3"):
                    raise self.error(f"unknown syntax '{value}' (expected proto2 or proto3)", start)
                self.syntax = f.syntax = value
                self.end_statement()
            elif keyword == "edition":
                raise self.error("editions are not supported; use syntax proto2 or proto3", start)
            elif keyword == "package":
                if f.package is not None:
                    raise self.error("more than one 'package' statement", start)
                name = self.full_ident("a package name")
                if name.startswith("."):
                    raise self.error(f"invalid package name '{name}'", start)
                f.package = name
                self.end_statement()
            elif keyword == "import":
                kind = ""
                if self.peek() not in ("'", '"'):
                    kind = self.word()
                    if kind not in ("public", "weak"):
                        raise self.error("expected a quoted file name, 'public' or 'weak'", start)
                path = self.string()
                {"": f.imports, "public": f.public_imports, "weak": f.weak_imports}[kind].append(
                    path
                )
                self.end_statement()
            elif keyword == "option":
                f.options.append(self.option("="))
                self.end_statement()
            elif keyword == "message":
                f.types.append(self.message())
            elif keyword == "enum":
                f.types.append(self.enum())
            elif keyword == "service":
                f.services.append(self.service())
            elif keyword == "extend":
                f.extends.append(self.extend())
            else:
                raise self.error(f"unexpected '{keyword}' at the top level of the file", start)
        return f

    # -- options ---------------------------------------------------------------------------

    def option(self, separator: str) -> Option:
        """`name = value` (or `name: value` inside a text-format map)."""
        parenthesized = False
        if self.accept("("):
            name = self.full_ident("an option name")
            self.expect(")")
            parenthesized = True
        elif self.accept("["):
            name = "[" + self.full_ident("an extension name") + "]"
            self.expect("]")
        else:
            name = self.full_ident("an option name")
        sub = None
        if parenthesized and self.accept("."):
            sub = self.full_ident("an option field name")
        if not (separator == ":" and self.peek() in ("{", "[")):
            # (text format lets a message value, or a list of them, drop the colon)
            self.expect(separator, " after the option name")
        return Option(name, self.option_value(), parenthesized, sub)

    def option_value(self) -> OptionValue:
        c = self.peek()
        if c == "{":
            self.enter()
            value = self.option_map()
            self.depth -= 1
            return value
        if c == "[":
            self.enter()
            self.pos += 1
            items: list[OptionValue] = []
            while not self.accept("]"):
                items.append(self.option_value())
                if not self.accept(","):
                    self.expect("]", " to close the list")
                    break
            self.depth -= 1
            return OptionValue(LIST, items)
        if c in ("'", '"'):
            return OptionValue(STRING, self.string())
        if c == "":
            raise self.error("expected an option value but found end of input")
        if c in "-+." or c.isdigit():
            start = self.pos
            m = _NUMBER.match(self.text, self.pos)
            if m is None:
                raise self.error("expected a number", start)
            self.pos = m.end()
            return OptionValue(NUMBER, m.group())
        word = self.ident("an option value")
        if word in ("true", "false"):
            return OptionValue(BOOL, word)
        return OptionValue(ENUM, word)

    def option_map(self) -> OptionValue:
        self.expect("{")
        entries: dict[str, OptionValue] = {}
        while not self.accept("}"):
            entry = self.option(":")
            key = entry.name if entry.sub is None else f"{entry.name}.{entry.sub}"
            if entry.parenthesized:
                key = f"({entry.name})" if entry.sub is None else f"({entry.name}).{entry.sub}"
            previous = entries.get(key)
            if previous is None:
                entries[key] = entry.value
            else:
                merged = previous.items() if previous.kind == LIST else [previous]
                added = entry.value.items() if entry.value.kind == LIST else [entry.value]
                entries[key] = OptionValue(LIST, [*merged, *added])
            if not self.accept(","):
                self.accept(";")
        return OptionValue(MAP, entries)

    def bracket_options(self) -> list[Option]:
        """`[a = 1, (b).c = 2]` after a field, an enum constant or an extension range."""
        if not self.accept("["):
            return []
        out = [self.option("=")]
        while self.accept(","):
            out.append(self.option("="))
        self.expect("]", " to close the options")
        return out

    # -- messages --------------------------------------------------------------------------

    def message(self) -> Message:
        self.enter()
        msg = Message(self.ident("a message name"))
        self.expect("{")
        while not self.accept("}"):
            if self.at_end():
                raise self.error(f"message '{msg.name}' is not closed with '}}'")
            if self.accept(";"):
                continue
            start = self.pos
            keyword = self.word()
            if keyword == "message":
                msg.nested.append(self.message())
            elif keyword == "enum":
                msg.nested.append(self.enum())
            elif keyword == "extend":
                msg.extends.append(self.extend())
            elif keyword == "option":
                msg.options.append(self.option("="))
                self.end_statement()
            elif keyword == "oneof":
                msg.oneofs.append(self.oneof())
            elif keyword == "reserved":
                msg.reserved.append(self.reserved(MAX_FIELD_NUMBER))
            elif keyword == "extensions":
                msg.extensions.append(self.extensions())
            else:
                item = self.field_or_group(keyword, start, in_extend=False)
                if isinstance(item, Group):
                    msg.groups.append(item)
                else:
                    msg.fields.append(item)
        self.depth -= 1
        return msg

    def field_or_group(self, word: str, start: int, in_extend: bool) -> Field | Group:
        label: str | None = None
        if word in _LABELS:
            label = word
            if label == "required" and self.syntax == "proto3":
                raise self.error("'required' is not allowed in proto3", start)
            type_name = self.data_type(self.word())
        else:
            type_name = self.data_type(word, start)
            if not type_name.startswith("map<") and self.syntax != "proto3":
                raise self.error(
                    f"expected a label (optional, required or repeated) before '{word}': "
                    "proto2 fields need one",
                    start,
                )
        if type_name.startswith("map<"):
            if label is not None:
                raise self.error("a map field cannot have a label", start)
            if in_extend:
                raise self.error("map fields are not allowed in extend blocks", start)
        if type_name == "group":
            return self.group(label, start)
        return self.field(label, type_name)

    def data_type(self, word: str, start: int | None = None) -> str:
        if word == "map" and self.peek() == "<":
            self.expect("<")
            key = self.full_ident("a map key type")
            self.expect(",")
            value = self.full_ident("a map value type")
            self.expect(">")
            return f"map<{key}, {value}>"
        if not _FULL_IDENT.fullmatch(word):
            raise self.error(f"expected a type but found '{word}'", start)
        return word

    def field(self, label: str | None, type_name: str) -> Field:
        name = self.ident("a field name")
        self.expect("=", f" after field name '{name}'")
        number = self.integer(f"the number of field '{name}'")
        options = self.bracket_options()
        self.end_statement()
        f = Field(name, number, type_name, label)
        for option in options:
            if not option.parenthesized and option.sub is None and option.name == "default":
                if option.value.kind in (MAP, LIST):
                    raise self.error(f"the default of field '{name}' must be a scalar")
                f.default = option.value
            elif not option.parenthesized and option.sub is None and option.name == "json_name":
                if option.value.kind != STRING:
                    raise self.error(f"json_name of field '{name}' must be a string")
                f.json_name = option.value.scalar()
            else:
                f.options.append(option)
        return f

    def group(self, label: str | None, start: int) -> Group:
        if self.syntax == "proto3":
            raise self.error("groups are not allowed in proto3", start)
        name = self.ident("a group name")
        if not name[0].isupper():
            raise self.error(f"group name '{name}' must start with a capital letter", start)
        self.expect("=")
        number = self.integer(f"the number of group '{name}'")
        group = Group(name, number, label)
        self.expect("{")
        while not self.accept("}"):
            if self.accept(";"):
                continue
            field_start = self.pos
            item = self.field_or_group(self.word(), field_start, in_extend=False)
            if isinstance(item, Group):
                raise self.error("nested groups are not supported", field_start)
            group.fields.append(item)
        return group

    def oneof(self) -> OneOf:
        oneof = OneOf(self.ident("a oneof name"))
        self.expect("{")
        while not self.accept("}"):
            if self.at_end():
                raise self.error(f"oneof '{oneof.name}' is not closed with '}}'")
            if self.accept(";"):
                continue
            start = self.pos
            word = self.word()
            if word == "option":
                oneof.options.append(self.option("="))
                self.end_statement()
            elif word in _LABELS:
                raise self.error(f"fields in oneof '{oneof.name}' cannot have a label", start)
            elif word == "group":
                oneof.groups.append(self.group(None, start))
            else:
                type_name = self.data_type(word, start)
                if type_name.startswith("map<"):
                    raise self.error(f"oneof '{oneof.name}' cannot hold a map field", start)
                oneof.fields.append(self.field(None, type_name))
        return oneof

    def reserved(self, max_value: int) -> Reserved:
        values: list[Range | str] = []
        while True:
            if self.peek() in ("'", '"'):
                values.append(self.string())
            else:
                start = self.integer("a reserved number or name", allow_negative=True)
                values.append(self.range_end(start, max_value))
            if not self.accept(","):
                break
        self.end_statement()
        return Reserved(values)

    def range_end(self, start: int, max_value: int) -> Range:
        save = self.pos
        if self.peek().isalpha() and self.word() == "to":
            end_start = self.pos
            if self.peek().isalpha() and self.word() == "max":
                return (start, max_value)
            self.pos = end_start
            end = self.integer("the end of the range", allow_negative=True)
            if end < start:
                raise self.error(f"range {start} to {end} ends before it starts", save)
            return (start, end)
        self.pos = save
        return start

    def extensions(self) -> Extensions:
        values: list[Range] = []
        while True:
            start = self.integer("an extension number")
            values.append(self.range_end(start, MAX_FIELD_NUMBER))
            if not self.accept(","):
                break
        options = self.bracket_options()
        self.end_statement()
        return Extensions(values, options)

    def extend(self) -> Extend:
        ext = Extend(self.full_ident("the name of the extended message"))
        self.expect("{")
        while not self.accept("}"):
            if self.at_end():
                raise self.error(f"extend '{ext.name}' is not closed with '}}'")
            if self.accept(";"):
                continue
            start = self.pos
            item = self.field_or_group(self.word(), start, in_extend=True)
            if isinstance(item, Group):
                raise self.error("groups in extend blocks are not supported", start)
            ext.fields.append(item)
        return ext

    # -- enums -----------------------------------------------------------------------------

    def enum(self) -> Enum:
        enum = Enum(self.ident("an enum name"))
        self.expect("{")
        while not self.accept("}"):
            if self.at_end():
                raise self.error(f"enum '{enum.name}' is not closed with '}}'")
            if self.accept(";"):
                continue
            start = self.pos
            word = self.word()
            if word == "option":
                enum.options.append(self.option("="))
                self.end_statement()
            elif word == "reserved":
                enum.reserved.append(self.reserved(2**31 - 1))
            else:
                if not _IDENT.fullmatch(word):
                    raise self.error(f"expected an enum value name but found '{word}'", start)
                self.expect("=", f" after enum value '{word}'")
                number = self.integer(f"the number of enum value '{word}'", allow_negative=True)
                options = self.bracket_options()
                self.end_statement()
                enum.constants.append(EnumConstant(word, number, options))
        return enum

    # -- services --------------------------------------------------------------------------

    def service(self) -> Service:
        service = Service(self.ident("a service name"))
        self.expect("{")
        while not self.accept("}"):
            if self.at_end():
                raise self.error(f"service '{service.name}' is not closed with '}}'")
            if self.accept(";"):
                continue
            start = self.pos
            word = self.word()
            if word == "option":
                service.options.append(self.option("="))
                self.end_statement()
            elif word == "rpc":
                service.rpcs.append(self.rpc())
            else:
                raise self.error(f"unexpected '{word}' in service '{service.name}'", start)
        return service

    def rpc(self) -> Rpc:
        name = self.ident("an rpc name")
        client_streaming, request = self.rpc_type()
        start = self.pos
        if self.word() != "returns":
            raise self.error("expected 'returns'", start)
        server_streaming, response = self.rpc_type()
        rpc = Rpc(name, request, response, client_streaming, server_streaming)
        if self.accept("{"):
            while not self.accept("}"):
                if self.accept(";"):
                    continue
                start = self.pos
                if self.word() != "option":
                    raise self.error(f"expected 'option' in rpc '{name}'", start)
                rpc.options.append(self.option("="))
                self.end_statement()
        else:
            self.end_statement()
        return rpc

    def rpc_type(self) -> tuple[bool, str]:
        self.expect("(")
        streaming = False
        type_name = self.full_ident("a message type")
        if type_name == "stream" and self.peek() != ")":
            streaming = True
            type_name = self.full_ident("a message type")
        self.expect(")")
        return streaming, type_name


def parse_proto(text: str) -> ProtoFile:
    """Parses `.proto` text; raises `ProtoError` naming the line and column of a mistake."""
    return _Parser(text).parse_file()
