"""Schema validation on produce, as Confluent Server does it (issue 31).

A topic with ``confluent.value.schema.validation=true`` (or the key's) takes a record only when
its value (or key) carries the id of a schema registered, and not deleted, under the subject the
topic's strategy names (``confluent.value.subject.name.strategy``: the topic name, the record's
name, or both). A null value or key passes (a tombstone). The id may be written as Confluent's
serializers write it: magic byte 0 and a 4-byte id; magic byte 1 and the schema's 16-byte guid;
or that guid form in the ``__value_schema_id`` / ``__key_schema_id`` header (Protobuf payloads
also carry message indexes, which name the record for the record-name strategies).

A batch with any record that fails is refused as a whole with INVALID_RECORD and one
`record_errors` entry per failing record (KIP-467), so the producer fails only those records and
nothing of the batch is written. Topics without validation are not decoded at all: the check is
two lookups in the topic's configs.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from strom.record import CorruptRecordError, decode_records
from strom.registry import errors as rerr
from strom.registry.coordinator import RegistryCoordinator
from strom.registry.formats.protobuf import decode_message_indexes
from strom.registry.service import Registry
from strom.registry.state import RegistryState
from strom.storage.errors import InvalidRecordError

KEY_HEADER = "__key_schema_id"
VALUE_HEADER = "__value_schema_id"
MAX_SHOWN = 3  # errors named in the message, as Kafka's LogValidator does


@dataclass(frozen=True)
class Checked:
    """What a topic validates: (field, subject strategy) for key and/or value."""

    key: str | None  # the key's strategy, None: keys are not checked
    value: str | None

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
            if value else None)


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


def _record_name(registry: Registry, sid: int, data: bytes, start: int) -> str | None:
    """The record's name under schema `sid`, for the record-name strategies: Avro's record
    name, the Protobuf message the payload's indexes name, JSON Schema's title."""
    content = registry.state.ids.get(sid)
    if content is None:
        return None
    try:
        parsed = registry.parse(content.schema_type, content.schema, content.references)
    except rerr.RegistryError:
        return None
    if content.schema_type == "PROTOBUF":
        indexes, _ = decode_message_indexes(data, start)
        return str(parsed.message_name(indexes))  # type: ignore[attr-defined]
    if content.schema_type == "AVRO":
        name = getattr(parsed, "name", None)
        return name if isinstance(name, str) else None
    title = getattr(parsed, "title", None)
    return title if isinstance(title, str) else None


def _check_one(registry: Registry, topic: str, field: str, strategy: str, data: bytes,
               headers: list[tuple[str, bytes | None]]) -> str | None:
    state = registry.state
    found = _schema_ref(data, headers, KEY_HEADER if field == "key" else VALUE_HEADER, state)
    if isinstance(found, str):
        return found
    sid, start = found
    if sid not in state.ids:
        return f"schema id {sid} is not registered"
    try:
        name = (_record_name(registry, sid, data, start)
                if strategy.rsplit(".", 1)[-1] != "TopicNameStrategy" else None)
    except ValueError as exc:
        return f"invalid Protobuf message indexes: {exc}"
    subject = _subject(strategy, topic, field, name)
    if subject is None:
        return f"schema id {sid} names no record for {strategy.rsplit('.', 1)[-1]}"
    if not any(v.subject == subject for v in state.usages(sid)):
        return f"schema id {sid} is not registered under subject {subject}"
    return None


def check_batch(coordinator: RegistryCoordinator | None, topic: str, checked: Checked,
                batch: bytes | bytearray | memoryview) -> None:
    """Raise InvalidRecordError naming every record whose key or value fails (see the module
    doc); a topic that validates while no registry is at hand refuses every record."""
    try:
        registry = coordinator.registry() if coordinator is not None else None
    except rerr.RegistryError as exc:
        registry, unavailable = None, exc.message
    else:
        unavailable = "this broker serves no schema registry (schema.registry.listeners)"
    try:
        records = decode_records(batch)
    except CorruptRecordError:
        return  # the log's own checks refuse it with CORRUPT_MESSAGE
    errors: list[tuple[int, str]] = []
    for i, record in enumerate(records):
        headers = list(record.headers)
        for field, strategy, data in (("key", checked.key, record.key),
                                      ("value", checked.value, record.value)):
            if strategy is None or data is None:
                continue
            if registry is None:
                why: str | None = f"cannot validate: {unavailable}"
            else:
                why = _check_one(registry, topic, field, strategy, bytes(data), headers)
            if why is not None:
                errors.append((i, f"{field}: {why}"))
                break
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')"
                          for i, m in errors[:MAX_SHOWN])
        raise InvalidRecordError(
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]",
            record_errors=tuple(errors))
