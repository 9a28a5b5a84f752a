"""The parsed form of a `.proto` file.

It keeps what the text said, in the order it said it (labels as written, type names as written,
options as written), because the registry's canonical text is printed back from it, and message
indexes count messages in declaration order. Comments are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_FIELD_NUMBER = 536_870_911  # 2**29 - 1
"""The largest field number; also what `max` stands for in reserved and extension ranges."""

SCALAR_TYPES = frozenset(
    {
        "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
        "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
    }
)  # fmt: skip
MAP_KEY_TYPES = frozenset(SCALAR_TYPES - {"double", "float", "bytes"})


class ProtoError(Exception):
    """A `.proto` text (or descriptor) that cannot be used as a schema; the message says why."""


# Option value kinds, as the text spelled them.
STRING = "string"
BOOL = "bool"
NUMBER = "number"
ENUM = "enum"
MAP = "map"
LIST = "list"


@dataclass
class OptionValue:
    """An option's value: a scalar kept as written, a text-format map or a list."""

    kind: str
    # str for STRING/BOOL/NUMBER/ENUM; dict[str, OptionValue] for MAP; list[OptionValue] for LIST.
    value: object

    def scalar(self) -> str:
        assert isinstance(self.value, str)
        return self.value

    def entries(self) -> dict[str, OptionValue]:
        assert isinstance(self.value, dict)
        return self.value

    def items(self) -> list[OptionValue]:
        assert isinstance(self.value, list)
        return self.value


@dataclass
class Option:
    """`name = value`, `(ext.name) = value` or `(ext.name).sub.path = value`."""

    name: str
    value: OptionValue
    parenthesized: bool = False
    sub: str | None = None


Range = int | tuple[int, int]  # a single number, or an inclusive (start, end)


@dataclass
class Field:
    name: str
    number: int
    type: str  # scalar name, (qualified) type name as written, or "map<K, V>"
    label: str | None = None  # "optional" | "required" | "repeated" | None
    options: list[Option] = field(default_factory=list)
    default: OptionValue | None = None  # the `default` pseudo-option, out of options
    json_name: str | None = None  # the `json_name` pseudo-option, taken out of options

    @property
    def is_map(self) -> bool:
        return self.type.startswith("map<")

    def map_types(self) -> tuple[str, str]:
        key, value = self.type[4:-1].split(",", 1)
        return key.strip(), value.strip()


@dataclass
class Group:
    """A proto2 group: a field and a nested message declared at once."""

    name: str
    number: int
    label: str | None
    fields: list[Field] = field(default_factory=list)
    _message: Message | None = field(default=None, init=False, repr=False, compare=False)

    def as_message(self) -> Message:
        """The message type the group declares (its fields, under the group's name)."""
        if self._message is None:
            self._message = Message(self.name, fields=self.fields)
        return self._message


@dataclass
class OneOf:
    name: str
    fields: list[Field] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)


@dataclass
class Reserved:
    values: list[Range | str]


@dataclass
class Extensions:
    values: list[Range]
    options: list[Option] = field(default_factory=list)


@dataclass
class Extend:
    name: str
    fields: list[Field] = field(default_factory=list)


@dataclass
class EnumConstant:
    name: str
    number: int
    options: list[Option] = field(default_factory=list)


@dataclass
class Enum:
    name: str
    constants: list[EnumConstant] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    reserved: list[Reserved] = field(default_factory=list)


@dataclass
class Message:
    name: str
    fields: list[Field] = field(default_factory=list)
    oneofs: list[OneOf] = field(default_factory=list)
    nested: list[Message | Enum] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    reserved: list[Reserved] = field(default_factory=list)
    extensions: list[Extensions] = field(default_factory=list)
    extends: list[Extend] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)

    @property
    def is_map_entry(self) -> bool:
        return any(
            o.name == "map_entry" and not o.parenthesized and o.value.value == "true"
            for o in self.options
        )

    def all_fields(self) -> list[tuple[Field, OneOf | None]]:
        """Every field with the oneof it sits in (None for a field at the message's top level)."""
        out: list[tuple[Field, OneOf | None]] = [(f, None) for f in self.fields]
        for oneof in self.oneofs:
            out.extend((f, oneof) for f in oneof.fields)
        return out

    def messages(self) -> list[Message]:
        return [t for t in self.nested if isinstance(t, Message)]

    def all_groups(self) -> list[Group]:
        return [*self.groups, *(g for o in self.oneofs for g in o.groups)]


@dataclass
class Rpc:
    name: str
    request: str
    response: str
    client_streaming: bool = False
    server_streaming: bool = False
    options: list[Option] = field(default_factory=list)


@dataclass
class Service:
    name: str
    rpcs: list[Rpc] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)


@dataclass
class ProtoFile:
    syntax: str | None = None  # "proto2" | "proto3" | None (no syntax statement: proto2)
    package: str | None = None
    imports: list[str] = field(default_factory=list)
    public_imports: list[str] = field(default_factory=list)
    weak_imports: list[str] = field(default_factory=list)
    types: list[Message | Enum] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    extends: list[Extend] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)

    @property
    def is_proto3(self) -> bool:
        return self.syntax == "proto3"

    def all_imports(self) -> list[str]:
        return [*self.imports, *self.public_imports, *self.weak_imports]

    def messages(self) -> list[Message]:
        return [t for t in self.types if isinstance(t, Message)]
