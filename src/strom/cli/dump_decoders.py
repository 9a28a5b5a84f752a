"""Decoders of the internal topics' records for `strom dump-log`: kafka-dump-log's
`--offsets-decoder`, `--transaction-log-decoder` and `--share-group-state-decoder`.

A record is printed as Kafka prints it: the key as ``{"type": "<record type>", "data": {...}}``,
the value as ``{"version": "<value version>", "data": {...}}`` and a tombstone as ``<DELETE>``,
with Kafka's field names (camelCase), topic ids as Kafka's base64 text and bytes as base64. A
record the decoder cannot read gets Kafka's one-line explanation as its key and no payload.
The bytes are decoded by the coordinators' own record codecs, so the dump shows what the
broker reads back.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.coordinator.group import records as group_records
from strom.coordinator.group.records import Schema, decode_struct
from strom.coordinator.share import records as share_records
from strom.coordinator.transaction import records as txn_records
from strom.protocol import primitives as p
from strom.protocol.errors import ProtocolError
from strom.protocol.schema import STROM_NOT_BEFORE_TAG

OFFSETS, TRANSACTION_LOG, SHARE_GROUP_STATE = "offsets", "transaction-log", "share-group-state"
# The internal topic whose partition directories each decoder applies to by default.
TOPIC_DECODERS = {"__consumer_offsets": OFFSETS, "__transaction_state": TRANSACTION_LOG,
                  "__share_group_state": SHARE_GROUP_STATE}
DELETE = "<DELETE>"
_UNKNOWN_TYPE = (group_records.UnknownRecordType, txn_records.UnknownKeyVersion,
                 share_records.UnknownShareRecordType)


@dataclass(frozen=True)
class Decoded:
    """One coordinator record: its key fields and, unless a tombstone, its value fields."""

    record_type: int
    key: dict[str, Any]
    version: int = -1
    value_schema: Schema | None = None
    value: dict[str, Any] | None = None


def decoder_for_dir(name: str) -> str | None:
    """The decoder of a partition directory's records (`__share_group_state-3`), if internal."""
    topic, sep, partition = name.rpartition("-")
    return TOPIC_DECODERS.get(topic) if sep and partition.isdigit() else None


def decode_record(decoder: str, key: bytes | None, value: bytes | None,
                  offset: int) -> dict[str, Any]:
    """``{"key": ..., "payload": ...}`` for one record; only a key (an explanation) when the
    record cannot be decoded."""
    if key is None:
        return {"key": f"Failed to decode message at offset {offset} using the specified "
                       "decoder (message had a missing key)"}
    try:
        d = _DECODERS[decoder](bytes(key), None if value is None else bytes(value))
    except _UNKNOWN_TYPE:
        record_type = p.INT16.unpack_from(key, 0)[0]
        return {"key": f"Unknown record type {record_type} at offset {offset}, skipping."}
    except (ProtocolError, ValueError, UnicodeDecodeError) as e:
        return {"key": f"Error at offset {offset}, skipping. {e}"}
    payload: Any = DELETE
    if d.value is not None and d.value_schema is not None:
        payload = {"version": str(d.version),
                   "data": _json_struct(d.value_schema, d.version, d.value)}
    return {"key": {"type": str(d.record_type), "data": _json(d.key)}, "payload": payload}


def _offsets(key: bytes, value: bytes | None) -> Decoded:
    r = group_records.decode(key, value)
    if r.value is None:
        return Decoded(r.type, r.key)
    value_schema = group_records._TYPES[r.type][1]  # the schema decode() just used
    return Decoded(r.type, r.key, r.value_version, value_schema, r.value)


def _transaction_log(key: bytes, value: bytes | None) -> Decoded:
    entry = txn_records.decode(key, value)
    key_fields = {"transactional_id": entry.transactional_id}
    if entry.value is None or value is None:
        return Decoded(txn_records.KEY_VERSION, key_fields)
    version = p.INT16.unpack_from(value, 0)[0]
    return Decoded(txn_records.KEY_VERSION, key_fields, version,
                   txn_records.TRANSACTION_LOG_VALUE, entry.value)


def _share_group_state(key: bytes, value: bytes | None) -> Decoded:
    r = share_records.decode(key, value)  # checks the type and the value version
    key_fields = {"group_id": r.key.group_id, "topic_id": r.key.topic_id,
                  "partition": r.key.partition}
    if value is None:
        return Decoded(r.record_type, key_fields)
    schema = (share_records.SNAPSHOT_VALUE if r.record_type == share_records.SHARE_SNAPSHOT
              else share_records.UPDATE_VALUE)
    fields, _ = decode_struct(schema, share_records.VALUE_VERSION, value, 2)
    return Decoded(r.record_type, key_fields, share_records.VALUE_VERSION, schema, fields)


_DECODERS: dict[str, Callable[[bytes, bytes | None], Decoded]] = {
    OFFSETS: _offsets, TRANSACTION_LOG: _transaction_log, SHARE_GROUP_STATE: _share_group_state}


def _camel(name: str) -> str:
    """Kafka's JSON field name for a Strom field name: `topic_id` -> `topicId`."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _json(value: Any) -> Any:
    """A decoded value as Kafka's JSON converters write it."""
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {_camel(k): _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def _json_struct(schema: Schema, version: int, fields: dict[str, Any]) -> dict[str, Any]:
    """The fields `version` has, in schema order (tagged ones only in a flexible version);
    Strom's own tagged fields only when set."""
    out: dict[str, Any] = {}
    flexible = schema.flexible(version)
    for f in schema.fields:
        if not f.present(version) or (f.tag is not None and not flexible):
            continue
        value = fields.get(f.name)
        if f.tag is not None and f.tag >= STROM_NOT_BEFORE_TAG and value == f.default:
            continue
        if isinstance(f.kind, Schema) and value is not None:
            value = ([_json_struct(f.kind, version, v) for v in value] if f.array
                     else _json_struct(f.kind, version, value))
        else:
            value = _json(value)
        out[_camel(f.name)] = value
    return out
