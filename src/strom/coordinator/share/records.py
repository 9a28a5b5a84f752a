"""Keys and values of `__share_group_state` records, byte-compatible with Kafka's.

Kafka's share coordinator writes two record types, each keyed by (group id, topic id,
partition): ShareSnapshot (type 0), the whole state of a share partition, and ShareUpdate
(type 1), the batches that changed since. As for every coordinator record, the key is an int16
record type followed by the key struct at version 0 (not flexible), and the value is an int16
value version (0) followed by the flexible value struct, whose DeliveryCompleteCount (KIP-1226)
is tagged field 0 with default -1. A ShareSnapshot key with a null value is the tombstone that
deletes a share partition's state.

The layouts come from Kafka's share-coordinator message specs (ShareSnapshotKey/Value,
ShareUpdateKey/Value); the codec is the group coordinator's schema codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strom.coordinator.group.records import F, Schema, decode_struct, encode_struct
from strom.coordinator.share.state import SharePartitionKey, StateBatch
from strom.protocol import primitives as p
from strom.protocol.errors import ProtocolError
from strom.protocol.schema import STROM_NOT_BEFORE_TAG

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
VALUE_VERSION = 0

_KEY = Schema("ShareSnapshotKey", (F("group_id", "string"), F("topic_id", "uuid"),
                                   F("partition", "int32")))
# Strom's own tagged field of StateBatch: the redelivery delay's end (`StateBatch.not_before_ms`).
# Written only when set, so the bytes are Kafka's otherwise; a Kafka broker reading the topic
# skips the unknown tag. The tag (the share-state RPCs' too) is far above any Kafka assigns.
NOT_BEFORE_TAG = STROM_NOT_BEFORE_TAG
_STATE_BATCH = Schema("StateBatch", (
    F("first_offset", "int64"), F("last_offset", "int64"), F("delivery_state", "int8"),
    F("delivery_count", "int16"), F("not_before_ms", "int64", default=0, tag=NOT_BEFORE_TAG)),
    flexible_since=0)
SNAPSHOT_VALUE = Schema("ShareSnapshotValue", (
    F("snapshot_epoch", "int32"),
    F("state_epoch", "int32"),
    F("leader_epoch", "int32"),
    F("start_offset", "int64"),
    F("delivery_complete_count", "int32", default=-1, tag=0),
    F("create_timestamp", "int64"),
    F("write_timestamp", "int64"),
    F("state_batches", _STATE_BATCH, array=True),
), flexible_since=0)
UPDATE_VALUE = Schema("ShareUpdateValue", (
    F("snapshot_epoch", "int32"),
    F("leader_epoch", "int32"),
    F("start_offset", "int64"),
    F("delivery_complete_count", "int32", default=-1, tag=0),
    F("state_batches", _STATE_BATCH, array=True),
), flexible_since=0)


class UnknownShareRecordType(ProtocolError):
    """A record type this broker does not know: skipped on load, as Kafka skips it."""


@dataclass(frozen=True)
class ShareSnapshot:
    """ShareSnapshotValue: the complete state of a share partition."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = -1
    create_timestamp: int = 0
    write_timestamp: int = 0
    batches: tuple[StateBatch, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ShareUpdate:
    """ShareUpdateValue: what changed since the snapshot of the same snapshot epoch (a start
    offset of -1 leaves it as it was)."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = -1
    batches: tuple[StateBatch, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ShareRecord:
    """One decoded record; `value` None is a tombstone (only ShareSnapshot keys carry one)."""

    record_type: int
    key: SharePartitionKey
    value: ShareSnapshot | ShareUpdate | None


def encode_key(record_type: int, key: SharePartitionKey) -> bytes:
    return p.write_int16(record_type) + encode_struct(_KEY, 0, {
        "group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition})


def _batches(batches: tuple[StateBatch, ...] | list[StateBatch]) -> list[dict[str, Any]]:
    return [{"first_offset": b.first_offset, "last_offset": b.last_offset,
             "delivery_state": b.delivery_state, "delivery_count": b.delivery_count,
             "not_before_ms": b.not_before_ms} for b in batches]


def encode_snapshot(v: ShareSnapshot) -> bytes:
    return p.write_int16(VALUE_VERSION) + encode_struct(SNAPSHOT_VALUE, VALUE_VERSION, {
        "snapshot_epoch": v.snapshot_epoch, "state_epoch": v.state_epoch,
        "leader_epoch": v.leader_epoch, "start_offset": v.start_offset,
        "delivery_complete_count": v.delivery_complete_count,
        "create_timestamp": v.create_timestamp, "write_timestamp": v.write_timestamp,
        "state_batches": _batches(v.batches)})


def encode_update(v: ShareUpdate) -> bytes:
    return p.write_int16(VALUE_VERSION) + encode_struct(UPDATE_VALUE, VALUE_VERSION, {
        "snapshot_epoch": v.snapshot_epoch, "leader_epoch": v.leader_epoch,
        "start_offset": v.start_offset, "delivery_complete_count": v.delivery_complete_count,
        "state_batches": _batches(v.batches)})


def snapshot_record(key: SharePartitionKey, v: ShareSnapshot) -> tuple[bytes, bytes]:
    return encode_key(SHARE_SNAPSHOT, key), encode_snapshot(v)


def update_record(key: SharePartitionKey, v: ShareUpdate) -> tuple[bytes, bytes]:
    return encode_key(SHARE_UPDATE, key), encode_update(v)


def tombstone(key: SharePartitionKey) -> tuple[bytes, None]:
    """What DeleteShareGroupState writes: the snapshot key with a null value."""
    return encode_key(SHARE_SNAPSHOT, key), None


def _state_batches(rows: list[dict[str, Any]] | None) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(r["first_offset"], r["last_offset"], r["delivery_state"],
                            r["delivery_count"], r["not_before_ms"]) for r in rows or ())


def decode(key: bytes, value: bytes | None) -> ShareRecord:
    """Decode one record; raises `UnknownShareRecordType` or `ProtocolError`."""
    if key is None or len(key) < 2:
        raise ProtocolError("share state record without a key")
    record_type = p.INT16.unpack_from(key, 0)[0]
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise UnknownShareRecordType(f"unknown share state record type {record_type}")
    k, _ = decode_struct(_KEY, 0, key, 2)
    spk = SharePartitionKey(k["group_id"], k["topic_id"], k["partition"])
    if value is None:
        return ShareRecord(record_type, spk, None)
    if len(value) < 2:
        raise ProtocolError("share state value without a version")
    version = p.INT16.unpack_from(value, 0)[0]
    if version != VALUE_VERSION:
        raise ProtocolError(f"unsupported share state value version {version}")
    if record_type == SHARE_SNAPSHOT:
        f, _ = decode_struct(SNAPSHOT_VALUE, version, value, 2)
        return ShareRecord(record_type, spk, ShareSnapshot(
            f["snapshot_epoch"], f["state_epoch"], f["leader_epoch"], f["start_offset"],
            f["delivery_complete_count"], f["create_timestamp"], f["write_timestamp"],
            _state_batches(f["state_batches"])))
    f, _ = decode_struct(UPDATE_VALUE, version, value, 2)
    return ShareRecord(record_type, spk, ShareUpdate(
        f["snapshot_epoch"], f["leader_epoch"], f["start_offset"], f["delivery_complete_count"],
        _state_batches(f["state_batches"])))
