"""Keys and values of `__transaction_state` records, byte-compatible with Kafka's.

Kafka's `TransactionLogKey` (an int16 key version 0, then the transactional id) and
`TransactionLogValue` (an int16 value version; Strom writes version 0 as Kafka does for clients
on transaction versions 0/1 and version 1, with its tagged fields, for transaction version 2;
reads 0-1). A tombstone (null value) removes an expired id.
The layouts come from Kafka's transaction-coordinator message specs; the tiny schema codec is
the group coordinator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strom.coordinator.group.records import F, Schema, decode_struct, encode_struct
from strom.protocol import primitives as p
from strom.protocol.errors import ProtocolError

KEY_VERSION = 0
VALUE_VERSION = 0  # what Kafka writes for transaction versions 0 and 1
TV2_VALUE_VERSION = 1  # flexible: carries the tagged next producer id and client version
READABLE_VALUE_VERSIONS = (0, 1)

TRANSACTION_LOG_KEY = Schema("TransactionLogKey", (F("transactional_id", "string"),))
_PARTITIONS = Schema("PartitionsSchema", (F("topic", "string"),
                                          F("partition_ids", "int32", array=True)),
                     flexible_since=1)
TRANSACTION_LOG_VALUE = Schema("TransactionLogValue", (
    F("producer_id", "int64"),
    F("previous_producer_id", "int64", default=-1, tag=0),
    F("next_producer_id", "int64", default=-1, tag=1),
    F("producer_epoch", "int16"),
    F("transaction_timeout_ms", "int32"),
    F("transaction_status", "int8"),
    F("transaction_partitions", _PARTITIONS, array=True, nullable=True),
    F("transaction_last_update_timestamp_ms", "int64"),
    F("transaction_start_timestamp_ms", "int64"),
    F("client_transaction_version", "int16", default=0, tag=2),
), flexible_since=1)


class UnknownKeyVersion(ProtocolError):
    """A key this broker cannot read (a newer record type): skipped on load."""


@dataclass(frozen=True)
class TxnLogEntry:
    """One decoded `__transaction_state` record; `value` None is a tombstone."""

    transactional_id: str
    value: dict[str, Any] | None


def encode_key(transactional_id: str) -> bytes:
    return p.write_int16(KEY_VERSION) + encode_struct(
        TRANSACTION_LOG_KEY, 0, {"transactional_id": transactional_id})


def encode_value(fields: dict[str, Any], version: int = VALUE_VERSION) -> bytes:
    return p.write_int16(version) + encode_struct(TRANSACTION_LOG_VALUE, version, fields)


def partitions_field(partitions: set[tuple[str, int]] | None) -> list[dict[str, Any]] | None:
    """Kafka's grouping of a transaction's partitions by topic (None writes a null array)."""
    if partitions is None:
        return None
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": t, "partition_ids": ps} for t, ps in by_topic.items()]


def decode(key: bytes, value: bytes | None) -> TxnLogEntry:
    """Decode one record; raises `UnknownKeyVersion` or `ProtocolError`."""
    if key is None or len(key) < 2:
        raise ProtocolError("transaction log record without a key")
    version = p.INT16.unpack_from(key, 0)[0]
    if version != KEY_VERSION:
        raise UnknownKeyVersion(f"unknown transaction log key version {version}")
    fields, _ = decode_struct(TRANSACTION_LOG_KEY, 0, key, 2)
    tid = fields["transactional_id"]
    if value is None:
        return TxnLogEntry(tid, None)
    if len(value) < 2:
        raise ProtocolError("transaction log value without a version")
    vv = p.INT16.unpack_from(value, 0)[0]
    if vv not in READABLE_VALUE_VERSIONS:
        raise ProtocolError(f"unsupported TransactionLogValue version {vv}")
    decoded, _ = decode_struct(TRANSACTION_LOG_VALUE, vv, value, 2)
    return TxnLogEntry(tid, decoded)
