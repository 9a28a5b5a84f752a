"""Schema validation on produce, as Confluent Server does it (issue 31).

A topic with ``confluent.value.schema.validation=true`` (or the key's) takes a record only when
its value (or key) carries the id of a schema registered, and not deleted, under the subject the
topic's strategy names (``confluent.value.subject.name.strategy``: the topic name, the record's
name, or both). A null value or key passes (a tombstone). The id may be written as Confluent's
serializers write it: magic byte 0 and a 4-byte id; magic byte 1 and the schema's 16-byte guid;
or that guid form in the ``__value_schema_id`` / ``__key_schema_id`` header (Protobuf payloads
also carry message indexes, which name the record for the record-name strategies).

Strom's extension, per topic: ``strom.value.schema.validation.mode=decode`` (or the key's; the
default ``id`` checks only the id, as Confluent Server does) also decodes the data under its
schema: Avro with fastavro (the whole datum, nothing left over), JSON parsed and validated with
jsonschema, Protobuf parsed as the message its indexes name.

A batch with any record that fails is refused as a whole with INVALID_RECORD and one
`record_errors` entry per failing record (KIP-467), so the producer fails only those records and
nothing of the batch is written. Topics without validation are not decoded at all: the check is
two lookups in the topic's configs.
"""

from __future__ import annotations

import functools
import io
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from struct import error as StructError
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from strom.record import CorruptRecordError, read_header, read_varint, records_section
from strom.registry import errors as rerr
from strom.registry.state import RegistryState
from strom.storage.errors import InvalidRecordError

if TYPE_CHECKING:  # the registry's formats load with the registry (strom.broker.wiring)
    from strom.registry.coordinator import RegistryCoordinator
    from strom.registry.service import Registry

KEY_HEADER = "__key_schema_id"
VALUE_HEADER = "__value_schema_id"
MAX_SHOWN = 3  # errors named in the message, as Kafka's LogValidator does


@dataclass(frozen=True)
class Checked:
    """What a topic validates: (field, subject strategy) for key and/or value."""

    key: str | None  # the key's strategy, None: keys are not checked
    value: str | None
    decode_key: bool = False  # Strom's decode mode: the data must decode under its schema
    decode_value: bool = False

    @classmethod
    def of(cls, configs: Mapping[str, str]) -> Checked | None:
        key = configs.get("confluent.key.schema.validation", "false").lower() == "true"
        value = configs.get("confluent.value.schema.validation", "false").lower() == "true"
        if not key and not value:
            return None
        return cls(
            configs.get("confluent.key.subject.name.strategy", "TopicNameStrategy")
            if key else None,
            configs.get("confluent.value.subject.name.strategy", "TopicNameStrategy")
            if value else None,
            configs.get("strom.key.schema.validation.mode", "id") == "decode",
            configs.get("strom.value.schema.validation.mode", "id") == "decode")


def _schema_ref(data: bytes, headers: list[tuple[str, bytes | None]], header: str,
                state: RegistryState) -> tuple[int, int] | str:
    """(schema id, where the payload starts) from the record's framing, or why not."""
    for name, raw in headers:
        if name == header and raw is not None:
            if len(raw) != 17 or raw[0] != 1:
                return f"header {header} is not a schema guid (magic byte 1 and 16 bytes)"
            sid = state.guids.get(str(uuid.UUID(bytes=bytes(raw[1:]))))
            return (sid, 0) if sid is not None else f"unknown schema guid in {header}"
    if len(data) >= 5 and data[0] == 0:
        return int.from_bytes(data[1:5], "big"), 5
    if len(data) >= 17 and data[0] == 1:
        sid = state.guids.get(str(uuid.UUID(bytes=bytes(data[1:17]))))
        return (sid, 17) if sid is not None else "unknown schema guid"
    return "no schema id: the data does not start with Confluent's magic byte"


def _subject(strategy: str, topic: str, field: str, record_name: str | None) -> str | None:
    short = strategy.rsplit(".", 1)[-1]
    if short == "TopicNameStrategy":
        return f"{topic}-{field}"
    if record_name is None:
        return None
    return record_name if short == "RecordNameStrategy" else f"{topic}-{record_name}"


_parsed_cache: dict[tuple[int, int], Any] = {}
_PARSED_CACHE_SIZE = 1024


def _parsed(registry: Registry, sid: int) -> Any:
    """Schema `sid` parsed, cached (an id's content never changes; the cache is per registry
    state, so a reloaded registry starts afresh)."""
    key = (id(registry.state), sid)
    found = _parsed_cache.get(key)
    if found is None:
        content = registry.state.ids[sid]
        found = registry.parse(content.schema_type, content.schema, content.references)
        if len(_parsed_cache) >= _PARSED_CACHE_SIZE:
            _parsed_cache.clear()
        _parsed_cache[key] = found
    return found


def _record_name(parsed: Any, schema_type: str, data: bytes, start: int) -> str | None:
    """The record's name under its schema, for the record-name strategies: Avro's record
    name, the Protobuf message the payload's indexes name, JSON Schema's title."""
    if schema_type == "PROTOBUF":
        from strom.registry.formats.protobuf import decode_message_indexes

        indexes, _ = decode_message_indexes(data, start)
        return str(parsed.message_name(indexes))
    if schema_type == "AVRO":
        name = getattr(parsed, "name", None)
        return name if isinstance(name, str) else None
    value = getattr(parsed, "value", None)
    title = value.get("title") if isinstance(value, dict) else None
    return title if isinstance(title, str) else None


@functools.cache
def _decoders() -> tuple[Any, Any, Any]:
    """fastavro's reader, jsonschema's validators and the Protobuf index decoder, imported on
    first use (once, not per record)."""
    import fastavro
    from jsonschema import validators

    from strom.registry.formats.protobuf import decode_message_indexes

    return fastavro.schemaless_reader, validators, decode_message_indexes


def _decode_error(parsed: Any, schema_type: str, data: bytes, start: int) -> str | None:
    """Why the payload is not data of its schema (decode mode), or None."""
    avro_reader, validators, decode_message_indexes = _decoders()
    try:
        if schema_type == "AVRO":
            payload = io.BytesIO(data[start:])
            avro_reader(payload, parsed.fastavro_schema, None)
            if payload.tell() != len(data) - start:
                return f"{len(data) - start - payload.tell()} bytes left after the Avro datum"
            return None
        if schema_type == "PROTOBUF":
            indexes, pos = decode_message_indexes(data, start)
            parsed.check_payload(data[pos:], indexes)
            return None
        doc = json.loads(data[start:])
        error = next(iter(validators.validator_for(parsed.value)(parsed.value).iter_errors(doc)),
                     None)
        return None if error is None else f"not valid JSON for its schema: {error.message}"
    except (ValueError, EOFError, IndexError, TypeError, StructError) as exc:
        return f"not {schema_type} data of its schema: {exc}"


@dataclass(frozen=True)
class IdVerdict:
    """What a record's schema id says: why it fails, or (passing) the schema as the decode
    step needs it and where the payload starts."""

    why: str | None
    parsed: Any = None  # the schema parsed (decode mode, record-name strategies)
    schema_type: str = ""
    start: int = 0


def _check_id(registry: Registry, topic: str, field: str, strategy: str, decode: bool,
              data: bytes, headers: list[tuple[str, bytes | None]]) -> IdVerdict:
    """The id's part of a record's check: registered, under the subject the strategy names.
    Under the topic-name strategy it reads only the id's bytes, so its verdict holds for every
    record starting with them (`find_invalid` keeps it per batch)."""
    state = registry.state
    found = _schema_ref(data, headers, KEY_HEADER if field == "key" else VALUE_HEADER, state)
    if isinstance(found, str):
        return IdVerdict(found)
    sid, start = found
    if sid not in state.ids:
        return IdVerdict(f"schema id {sid} is not registered")
    by_name = strategy.rsplit(".", 1)[-1] != "TopicNameStrategy"
    schema_type = state.ids[sid].schema_type
    try:
        parsed = _parsed(registry, sid) if by_name or decode else None
        name = _record_name(parsed, schema_type, data, start) if by_name else None
    except rerr.RegistryError as exc:
        return IdVerdict(f"schema id {sid} cannot be parsed: {exc.message}")
    except ValueError as exc:
        return IdVerdict(f"invalid Protobuf message indexes: {exc}")
    subject = _subject(strategy, topic, field, name)
    if subject is None:
        return IdVerdict(f"schema id {sid} names no record for {strategy.rsplit('.', 1)[-1]}")
    if subject not in state.live_subjects_of(sid):
        return IdVerdict(f"schema id {sid} is not registered under subject {subject}")
    return IdVerdict(None, parsed, schema_type, start)


def _check_one(registry: Registry, topic: str, field: str, strategy: str, decode: bool,
               data: bytes, headers: list[tuple[str, bytes | None]]) -> str | None:
    verdict = _check_id(registry, topic, field, strategy, decode, data, headers)
    if verdict.why is not None or not decode:
        return verdict.why
    return _decode_error(verdict.parsed, verdict.schema_type, data, verdict.start)


def check_batch(coordinator: RegistryCoordinator | None, topic: str, checked: Checked,
                batch: bytes | bytearray | memoryview) -> None:
    """Raise InvalidRecordError naming every record whose key or value fails (see the module
    doc); a topic that validates while no registry is at hand refuses every record."""
    errors = find_invalid(coordinator, topic, checked, batch)
    if errors:
        raise refusal(errors)


def refusal(errors: list[tuple[int, str]]) -> InvalidRecordError:
    """The INVALID_RECORD answer naming `errors` (KIP-467), the message showing three."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')"
                      for i, m in errors[:MAX_SHOWN])
    return InvalidRecordError(
        f"One or more records have been rejected due to {len(errors)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]",
        record_errors=tuple(errors))


class Scanned(Protocol):
    """A record as a check reads it: aiokafka's record objects, or `ScannedRecord`."""

    @property
    def key(self) -> bytes | memoryview | None: ...

    @property
    def value(self) -> bytes | memoryview | None: ...

    @property
    def headers(self) -> list[tuple[str, bytes | None]]: ...


class ScannedRecord(NamedTuple):
    key: bytes | memoryview | None
    value: bytes | memoryview | None
    headers: list[tuple[str, bytes | None]]


def _aiokafka_parser() -> tuple[Any, type[Exception]]:
    """aiokafka's compiled batch reader, or (None, ...) where only its Python one exists."""
    try:
        from aiokafka.errors import KafkaError as AiokafkaError  # type: ignore[import-untyped]
        from aiokafka.record._crecords.default_records import (  # type: ignore[import-untyped]
            DefaultRecordBatch,
        )
    except ImportError:
        return None, LookupError  # never raised by the Python scan
    return DefaultRecordBatch, AiokafkaError


# imported at the first validated batch, not with the broker (aiokafka takes 60 ms to import)
_parser: tuple[Any, type[Exception]] | None = None


def load_parser() -> tuple[Any, type[Exception]]:
    """aiokafka's batch reader, imported once (a broker with a schema registry does it on a
    thread at start: strom.broker.app)."""
    global _parser
    if _parser is None:
        _parser = _aiokafka_parser()
    return _parser


def scan(batch: bytes | bytearray | memoryview) -> list[Scanned]:
    """Each record's key, value and headers: the least a check needs. aiokafka's record parser
    (C, Cython-built) does it in about 0.2 µs per record, ten times `scan_in_python`
    (docs/benchmarks.md, produce-1k-avro); the latter stays for a platform without its wheel."""
    batch_class, parse_error = load_parser()
    if batch_class is None:
        return scan_in_python(batch)
    try:
        return list(batch_class(batch))
    except (parse_error, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"unreadable record: {exc}") from None


def scan_in_python(batch: bytes | bytearray | memoryview) -> list[Scanned]:
    """`scan` in Python: views into the decompressed records, not copies."""
    header = read_header(batch, 0)
    buf = memoryview(records_section(batch))
    out: list[Scanned] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            length, pos = read_varint(buf, pos)
            end = pos + length
            pos += 1  # attributes
            _, pos = read_varint(buf, pos)  # timestamp delta
            _, pos = read_varint(buf, pos)  # offset delta
            n, pos = read_varint(buf, pos)
            key = None if n < 0 else buf[pos:pos + n]
            pos += max(n, 0)
            n, pos = read_varint(buf, pos)
            value = None if n < 0 else buf[pos:pos + n]
            pos += max(n, 0)
            count, pos = read_varint(buf, pos)
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(count):
                n, pos = read_varint(buf, pos)
                name = bytes(buf[pos:pos + n]).decode("utf-8")
                pos += n
                n, pos = read_varint(buf, pos)
                headers.append((name, None if n < 0 else bytes(buf[pos:pos + n])))
                pos += max(n, 0)
            if pos != end:
                raise CorruptRecordError("record length does not match its contents")
            out.append(ScannedRecord(key, value, headers))
    except (IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"unreadable record: {exc}") from None
    return out


def find_invalid(coordinator: RegistryCoordinator | None, topic: str, checked: Checked,
                 batch: bytes | bytearray | memoryview) -> list[tuple[int, str]]:
    """The batch's failing records (batch index, why), in order."""
    try:
        registry = coordinator.registry() if coordinator is not None else None
    except rerr.RegistryError as exc:
        registry, unavailable = None, exc.message
    else:
        unavailable = "this broker serves no schema registry (schema.registry.listeners)"
    try:
        records = scan(batch)
    except CorruptRecordError:
        return []  # the log's own checks refuse it with CORRUPT_MESSAGE
    # what each checked field needs, decided once per batch: (field, strategy, decode, and
    # the id verdicts by the id's bytes when those decide alone -- under the topic-name
    # strategy, where a batch's records mostly share one schema, each id is checked once)
    plan: list[tuple[str, str, bool, dict[bytes, IdVerdict] | None]] = [
        (field, strategy, decode,
         {} if strategy.rsplit(".", 1)[-1] == "TopicNameStrategy" else None)
        for field, strategy, decode in (("key", checked.key, checked.decode_key),
                                        ("value", checked.value, checked.decode_value))
        if strategy is not None]
    errors: list[tuple[int, str]] = []
    for i, record in enumerate(records):
        headers = record.headers
        for field, strategy, decode, by_id in plan:
            data = record.key if field == "key" else record.value
            if data is None:
                continue
            if registry is None:
                why: str | None = f"cannot validate: {unavailable}"
            elif by_id is not None and not headers:
                prefix = bytes(data[:17] if data and data[0] == 1 else data[:5])
                verdict = by_id.get(prefix)
                if verdict is None:
                    verdict = by_id[prefix] = _check_id(registry, topic, field, strategy,
                                                        decode, prefix, [])
                why = verdict.why
                if why is None and decode:
                    why = _decode_error(verdict.parsed, verdict.schema_type, bytes(data),
                                        verdict.start)
            else:
                why = _check_one(registry, topic, field, strategy, decode, bytes(data),
                                 headers)
            if why is not None:
                errors.append((i, f"{field}: {why}"))
                break
    return errors
