"""Protobuf schemas for the registry: parsing, canonical and normalized text, compatibility,
message indexes, and the compiled descriptor Confluent's clients read.

A schema arrives as `.proto` text (proto2 or proto3), or as the base64 of a compiled
`FileDescriptorProto` (as confluent-kafka-python's serializer registers it). Its imports resolve
through the references the registry passes (import path -> that file's text) or, without a
reference, to the well-known files Confluent's registry knows (google/protobuf/*.proto,
google/type/*.proto, confluent/meta.proto, confluent/type/*.proto). A schema is checked as
protoc would check it: names resolve, field numbers are valid and distinct, enums are sound, and
the file compiles in the protobuf runtime (which catches bad defaults and clashing symbols).

The registry stores `canonical()`: the file printed back in Confluent's layout. `normalized()`
also qualifies type names and sorts what has no order. `can_read` applies Confluent's Protobuf
rules (see `_protobuf.diff`), with its Difference type names.

Records carry, after the schema id, the index path of their message in the schema
(`encode_message_indexes` / `decode_message_indexes`; `ProtobufSchema.message_indexes` and
`message_name` map it to and from the message's full name). `serialized()` is the schema as
`?format=serialized` returns it, and `check_payload` decodes a record's payload under a message
of the schema, for produce-time validation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib
import json
import threading
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from ._protobuf import diff as _diff
from ._protobuf.model import Message, ProtoError, ProtoFile
from ._protobuf.parser import parse_proto
from ._protobuf.printer import canonical_text, normalized_text
from ._protobuf.types import TypeSpace, check_file
from ._protobuf.wellknown import is_well_known, well_known
from .base import Incompatibility, InvalidSchemaError, ParsedSchema, literal

SCHEMA_TYPE = "PROTOBUF"

COMPATIBLE_DIFFERENCES = _diff.COMPATIBLE
"""Confluent's Difference types that do not make a reader incompatible."""

Difference = _diff.Difference


# -- message indexes ------------------------------------------------------------------------


def _zigzag(n: int) -> int:
    return n << 1 if n >= 0 else ((-n) << 1) - 1


def _write_varint(out: bytearray, value: int) -> None:
    value = _zigzag(value)
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """A zigzag varint of at most 5 bytes (a Java int, as Kafka's ByteUtils reads it)."""
    value = 0
    for i in range(5):
        if offset >= len(data):
            raise ValueError("message indexes: unexpected end of data")
        b = data[offset]
        offset += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            if value > 0xFFFFFFFF:
                raise ValueError("message indexes: varint out of range")
            return (value >> 1) ^ -(value & 1), offset
    raise ValueError("message indexes: varint is too long")


def encode_message_indexes(indexes: Sequence[int]) -> bytes:
    """The message-index array as Confluent's serializers write it after the schema id: a
    zigzag-varint count then each index; the first message ([0], or []) is a single 0 byte."""
    if not indexes or list(indexes) == [0]:
        return b"\x00"
    out = bytearray()
    _write_varint(out, len(indexes))
    for index in indexes:
        if index < 0:
            raise ValueError(f"message index {index} is negative")
        _write_varint(out, index)
    return bytes(out)


def decode_message_indexes(
    data: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[list[int], int]:
    """Reads a message-index array at `offset`; returns the indexes ([0] for the single 0
    byte) and the offset just past them. Raises ValueError on malformed or truncated data."""
    count, offset = _read_varint(data, offset)
    if count == 0:
        return [0], offset
    if count < 0 or count > len(data) - offset:
        raise ValueError(f"message indexes: bad count {count}")
    indexes = []
    for _ in range(count):
        index, offset = _read_varint(data, offset)
        if index < 0:
            raise ValueError(f"message indexes: negative index {index}")
        indexes.append(index)
    return indexes, offset


# -- parsing --------------------------------------------------------------------------------


def _parse_file(text: str) -> ProtoFile:
    """`.proto` text, or the base64 of a serialized FileDescriptorProto."""
    try:
        return parse_proto(text)
    except ProtoError as text_error:
        data = _base64(text)
        if data is None:
            raise
        from ._protobuf.descriptors import parse_descriptor

        try:
            return parse_descriptor(data)
        except ProtoError:
            raise text_error from None


def _base64(text: str) -> bytes | None:
    compact = "".join(text.split())
    if len(compact) < 4 or len(compact) % 4:
        return None
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data or None


def _load_imports(main: ProtoFile, references: Mapping[str, str]) -> dict[str, ProtoFile]:
    """Every file `main` imports, directly or not: from the references, else well-known."""
    files: dict[str, ProtoFile] = {}
    pending = list(main.all_imports())
    while pending:
        path = pending.pop(0)
        if path in files:
            continue
        if path in references:
            try:
                proto = _parse_file(references[path])
            except ProtoError as e:
                raise ProtoError(f"reference '{path}': {e}") from None
        else:
            known = well_known(path) if is_well_known(path) else None
            if known is None:
                raise ProtoError(
                    f"import '{path}' is neither among the schema's references nor a "
                    "well-known file"
                )
            proto = known
        files[path] = proto
        pending.extend(proto.all_imports())
    return files


class ProtobufFormat:
    """The registry's PROTOBUF schema type."""

    schema_type = SCHEMA_TYPE

    def parse(self, text: str, references: Mapping[str, str]) -> ProtobufSchema:
        if not text.strip():
            raise InvalidSchemaError(SCHEMA_TYPE, "Empty schema")
        try:
            main = _parse_file(text)
            space = TypeSpace(main, _load_imports(main, references))
            check_file(space)
            schema = ProtobufSchema(main, space, references)
            schema.compile()
        except ProtoError as e:
            raise InvalidSchemaError(SCHEMA_TYPE, str(e)) from None
        except RecursionError:
            raise InvalidSchemaError(SCHEMA_TYPE, "the schema is nested too deeply") from None
        return schema


FORMAT = ProtobufFormat()


def parse(text: str, references: Mapping[str, str] | None = None) -> ProtobufSchema:
    """Shorthand for `ProtobufFormat().parse`."""
    return FORMAT.parse(text, references or {})


# -- schemas --------------------------------------------------------------------------------


class ProtobufSchema:
    """A parsed, checked Protobuf schema (one `.proto` file and the files it imports)."""

    schema_type = SCHEMA_TYPE

    def __init__(self, proto: ProtoFile, space: TypeSpace, references: Mapping[str, str]) -> None:
        self.proto = proto
        self.space = space
        self.references = dict(references)
        self._lock = threading.Lock()
        self._descriptor_pool: Any = None
        self._classes: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"ProtobufSchema({self.name()!r})"

    # -- texts -----------------------------------------------------------------------------

    @cached_property
    def _canonical(self) -> str:
        return canonical_text(self.proto)

    @cached_property
    def _normalized(self) -> str:
        return normalized_text(self.proto, self.space)

    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> str:
        return self._normalized

    def fingerprint(self) -> str:
        refs = sorted(self.references.items())
        data = json.dumps([self._canonical, refs], separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(data.encode()).hexdigest()

    # -- compatibility ---------------------------------------------------------------------

    def differences(self, writer: ProtobufSchema) -> list[Difference]:
        """Every difference between `writer` and this schema as its reader, compatible ones
        included."""
        return _diff.compare(writer.proto, writer.space, self.proto, self.space)

    def can_read(self, writer: ParsedSchema) -> list[Incompatibility]:
        if not isinstance(writer, ProtobufSchema):
            return [Incompatibility("", "Incompatible because of different schema type", "")]
        out = []
        for d in self.differences(writer):
            if d.compatible:
                continue
            template = _diff.DESCRIPTIONS.get(d.type, d.type + " at '{path}'")
            description = template.replace("{path}", literal(d.path))
            out.append(Incompatibility(d.type, description, d.path, SCHEMA_TYPE))
        return out

    # -- messages --------------------------------------------------------------------------

    def _effective(self) -> ProtoFile:
        """The file whose messages the indexes count: the schema's own, or, for a file that
        only re-exports another (one `import public` and nothing else), that file."""
        p = self.proto
        if (
            not p.types
            and not p.imports
            and not p.weak_imports
            and not p.services
            and not p.extends
            and len(p.public_imports) == 1
        ):
            target = self.space.files.get(p.public_imports[0])
            if target is not None and target.types:
                return target
        return p

    def name(self) -> str:
        """The schema's name as Confluent gives it: its first message (else its first enum),
        package-qualified; "" for a file without types."""
        f = self._effective()
        first = next(iter(f.messages()), None) or next(iter(f.types), None)
        if first is None:
            return ""
        return f"{f.package}.{first.name}" if f.package else first.name

    def message_names(self) -> list[str]:
        """Every message's full name, outer before inner, in declaration order."""
        f = self._effective()
        out: list[str] = []

        def walk(messages: list[Message], prefix: str) -> None:
            for m in messages:
                name = f"{prefix}.{m.name}" if prefix else m.name
                out.append(name)
                walk(m.messages(), name)

        walk(f.messages(), f.package or "")
        return out

    def message_indexes(self, name: str) -> list[int]:
        """The index path of a message (fully qualified, or relative to the package): the
        position of each enclosing message among its siblings' messages, outermost first."""
        f = self._effective()
        relative = name.lstrip(".")
        if f.package and relative.startswith(f.package + "."):
            relative = relative[len(f.package) + 1 :]
        messages = f.messages()
        indexes: list[int] = []
        for part in relative.split("."):
            for i, m in enumerate(messages):
                if m.name == part:
                    indexes.append(i)
                    messages = m.messages()
                    break
            else:
                raise ValueError(f"no message '{name}' in the schema")
        return indexes

    def message_name(self, indexes: Sequence[int]) -> str:
        """The full name of the message at an index path ([] and [0]: the first message)."""
        f = self._effective()
        path = list(indexes) or [0]
        messages = f.messages()
        names: list[str] = []
        for index in path:
            if not 0 <= index < len(messages):
                raise ValueError(f"invalid message indexes {path}: no such message")
            names.append(messages[index].name)
            messages = messages[index].messages()
        local = ".".join(names)
        return f"{f.package}.{local}" if f.package else local

    # -- descriptors -----------------------------------------------------------------------

    def file_descriptor(self, name: str = "default") -> Any:
        """The schema compiled to a `google.protobuf.descriptor_pb2.FileDescriptorProto`."""
        from ._protobuf.descriptors import to_descriptor

        return to_descriptor(self.proto, self.space, name)

    def serialized(self) -> str:
        """The schema as `?format=serialized` returns it: base64 of its FileDescriptorProto."""
        return base64.b64encode(self.file_descriptor().SerializeToString()).decode("ascii")

    def compile(self) -> Any:
        """The schema and its imports built into a protobuf `DescriptorPool` (once), which
        checks what the parser leaves to protoc (defaults, symbol clashes, ...); ProtoError
        when the runtime refuses it."""
        with self._lock:
            if self._descriptor_pool is None:
                try:
                    self._descriptor_pool = self._pool()
                except ProtoError:
                    raise
                except Exception as e:  # the runtime's TypeError, or anything else it raises
                    detail = str(e).removeprefix("Couldn't build proto file into descriptor pool: ")
                    raise ProtoError(detail) from None
            return self._descriptor_pool

    def _pool(self) -> Any:
        """A DescriptorPool holding this schema and every file it imports."""
        from google.protobuf import descriptor_pb2, descriptor_pool

        from ._protobuf.descriptors import to_descriptor

        pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()

        def add(path: str, proto: ProtoFile) -> None:
            if path in added:
                return
            added.add(path)
            for dep in proto.all_imports():
                dep_proto = self.space.files[dep]
                add(dep, dep_proto)
            if path.startswith("google/protobuf/") and path not in self.references:
                # The runtime's own descriptor of a well-known file.
                module = path.rsplit("/", 1)[1].replace(".proto", "_pb2")
                pb2 = importlib.import_module(f"google.protobuf.{module}")
                pool.Add(
                    descriptor_pb2.FileDescriptorProto.FromString(pb2.DESCRIPTOR.serialized_pb)
                )
                return
            files = {p: self.space.files[p] for p in _reachable(proto, self.space.files)}
            space = TypeSpace(proto, files)
            pool.Add(to_descriptor(proto, space, path or "default"))

        add("", self.proto)
        return pool

    def check_payload(self, payload: bytes | memoryview, indexes: Sequence[int]) -> None:
        """Decodes a record's payload (what follows the schema id and message indexes) as the
        message at `indexes`; raises ValueError when it is not one (malformed wire data, or a
        proto2 required field missing)."""
        name = self.message_name(indexes)
        cls = self._classes.get(name)
        if cls is None:
            from google.protobuf import message_factory

            descriptor = self.compile().FindMessageTypeByName(name)
            with self._lock:
                cls = self._classes.setdefault(name, message_factory.GetMessageClass(descriptor))
        from google.protobuf.message import DecodeError

        try:
            message = cls.FromString(bytes(payload))
        except DecodeError as e:
            raise ValueError(f"not a valid {name}: {e}") from None
        if not message.IsInitialized():
            missing = ", ".join(message.FindInitializationErrors())
            raise ValueError(f"not a valid {name}: required fields missing: {missing}")


def _reachable(proto: ProtoFile, files: Mapping[str, ProtoFile]) -> list[str]:
    out: list[str] = []
    pending = list(proto.all_imports())
    while pending:
        path = pending.pop(0)
        if path in out or path not in files:
            continue
        out.append(path)
        pending.extend(files[path].all_imports())
    return out
