"""Kafka's KRaft control records, and the control batches that carry them.

The Raft layer writes its own bookkeeping into the metadata log and into snapshots as control
records, in Kafka's exact bytes, so Kafka's tools (kafka-dump-log, kafka-metadata-shell) and
Kafka's own Raft code read Strom's logs and snapshots:

- a record's key is int16 key version (0) + int16 type (`ControlType`);
- its value is the message (LeaderChangeMessage, SnapshotHeaderRecord, ...) in the flexible
  encoding of Kafka's JSON schemas, always at schema version 0 as Kafka writes and reads them
  (so LeaderChangeMessage carries no directory ids);
- the batch is a v2 batch with the control attribute set, no producer id, CreateTime
  timestamps, uncompressed, and the partition leader epoch of the Raft epoch (the snapshot's
  epoch inside snapshot files).

The values go through Strom's codec over kio's data classes (`entity_codec`); the dataclasses
below are the typed view the Raft code works with.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord as _KioKRaftVersion
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage as _KioLeaderChange
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord as _KioFooter
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord as _KioHeader
from kio.schema.voters_record.v0.data import VotersRecord as _KioVoters

from strom.protocol.codec import Codec, ProtocolError, Struct, entity_codec
from strom.record import (
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    Record,
    build_batch,
    crc_ok,
    decode_records,
    read_header,
)
from strom.record.buffers import Buf

__all__ = [
    "ControlBatch",
    "ControlRecord",
    "ControlType",
    "Endpoint",
    "KRaftVersionRecord",
    "LeaderChangeMessage",
    "SnapshotFooterRecord",
    "SnapshotHeaderRecord",
    "Voter",
    "VotersRecord",
    "build_control_batch",
    "check_batch",
    "control_key",
    "control_type",
    "decode_control",
    "decode_control_body",
    "decoded_controls",
    "encode_control",
    "encode_control_body",
    "encoded_control_batch",
    "parse_control_batch",
]

KEY_VERSION = 0
_KEY = struct.Struct(">hh")
ZERO_UUID = uuid.UUID(int=0)


class ControlType(IntEnum):
    """Control record types (the key's second int16), as Kafka numbers them."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """Written by a new leader as the first batch of its epoch: committing it commits the
    epoch. `voters` and `granting_voters` are node ids."""

    leader_id: int
    voters: tuple[int, ...] = ()
    granting_voters: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotHeaderRecord:
    """First record of every snapshot."""

    last_contained_log_timestamp: int


@dataclass(frozen=True, slots=True)
class SnapshotFooterRecord:
    """Last record of every snapshot: a snapshot without it is incomplete."""


@dataclass(frozen=True, slots=True)
class KRaftVersionRecord:
    """The finalized kraft.version (0 static voters, 1 dynamic voters, KIP-853)."""

    kraft_version: int


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Voter:
    """One voter of a VotersRecord: replica key (id, directory id), endpoints and the
    kraft.version range it supports."""

    voter_id: int
    directory_id: uuid.UUID = ZERO_UUID
    endpoints: tuple[Endpoint, ...] = ()
    min_kraft_version: int = 0
    max_kraft_version: int = 1


@dataclass(frozen=True, slots=True)
class VotersRecord:
    """The whole voter set (kraft.version 1): the latest one in snapshot + log is in force."""

    voters: tuple[Voter, ...]


ControlRecord = (
    LeaderChangeMessage | SnapshotHeaderRecord | SnapshotFooterRecord | KRaftVersionRecord
    | VotersRecord
)

_CODECS: dict[ControlType, Codec] = {
    ControlType.LEADER_CHANGE: entity_codec(_KioLeaderChange),
    ControlType.SNAPSHOT_HEADER: entity_codec(_KioHeader),
    ControlType.SNAPSHOT_FOOTER: entity_codec(_KioFooter),
    ControlType.KRAFT_VERSION: entity_codec(_KioKRaftVersion),
    ControlType.KRAFT_VOTERS: entity_codec(_KioVoters),
}


_TYPES = frozenset(int(k) for k in _CODECS)


def control_key(kind: ControlType) -> bytes:
    return _KEY.pack(KEY_VERSION, kind)


def control_type(key: bytes | None) -> int:
    """The type of a control record from its key. Like Kafka, a newer key version is read as
    version 0; a short key or a negative version is corruption."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} "
                                 f"bytes, expected at least {_KEY.size}")
    version, kind = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version} is negative")
    return int(kind)


def _type_of(rec: ControlRecord) -> ControlType:
    if isinstance(rec, LeaderChangeMessage):
        return ControlType.LEADER_CHANGE
    if isinstance(rec, SnapshotHeaderRecord):
        return ControlType.SNAPSHOT_HEADER
    if isinstance(rec, SnapshotFooterRecord):
        return ControlType.SNAPSHOT_FOOTER
    if isinstance(rec, KRaftVersionRecord):
        return ControlType.KRAFT_VERSION
    return ControlType.KRAFT_VOTERS


def _fields(rec: ControlRecord) -> dict[str, object]:
    """The record as the codec's value (every message's own `version` field is 0)."""
    if isinstance(rec, LeaderChangeMessage):
        return {"version": 0, "leader_id": rec.leader_id,
                "voters": [{"voter_id": v} for v in rec.voters],
                "granting_voters": [{"voter_id": v} for v in rec.granting_voters]}
    if isinstance(rec, SnapshotHeaderRecord):
        return {"version": 0, "last_contained_log_timestamp": rec.last_contained_log_timestamp}
    if isinstance(rec, SnapshotFooterRecord):
        return {"version": 0}
    if isinstance(rec, KRaftVersionRecord):
        return {"version": 0, "k_raft_version": rec.kraft_version}
    return {"version": 0, "voters": [
        {"voter_id": v.voter_id, "voter_directory_id": v.directory_id,
         "endpoints": [{"name": e.name, "host": e.host, "port": e.port} for e in v.endpoints],
         "k_raft_version_feature": {"min_supported_version": v.min_kraft_version,
                                    "max_supported_version": v.max_kraft_version}}
        for v in rec.voters]}


def encode_control(rec: ControlRecord) -> tuple[bytes, bytes]:
    """(key, value) of one control record."""
    kind = _type_of(rec)
    return control_key(kind), _CODECS[kind].encode(_fields(rec))


def _from_struct(kind: ControlType, s: Struct) -> ControlRecord:
    if kind == ControlType.LEADER_CHANGE:
        return LeaderChangeMessage(s.leader_id, tuple(v.voter_id for v in s.voters),
                                   tuple(v.voter_id for v in s.granting_voters))
    if kind == ControlType.SNAPSHOT_HEADER:
        return SnapshotHeaderRecord(s.last_contained_log_timestamp)
    if kind == ControlType.SNAPSHOT_FOOTER:
        return SnapshotFooterRecord()
    if kind == ControlType.KRAFT_VERSION:
        return KRaftVersionRecord(s.k_raft_version)
    return VotersRecord(tuple(
        Voter(v.voter_id, v.voter_directory_id,
              tuple(Endpoint(e.name, e.host, e.port) for e in v.endpoints),
              v.k_raft_version_feature.min_supported_version,
              v.k_raft_version_feature.max_supported_version)
        for v in s.voters))


def decode_control(key: bytes | None, value: bytes | None) -> ControlRecord:
    """One KRaft control record. Transaction markers and unknown types do not belong in the
    metadata log or a snapshot: they raise `CorruptRecordError`, as a bad value does. Bytes after
    the message are ignored, as Kafka ignores them."""
    return _from_struct(*_decode_struct(key, value))


def _decode_struct(key: bytes | None, value: bytes | None) -> tuple[ControlType, Struct]:
    raw = control_type(key)
    if raw not in _TYPES:
        raise CorruptRecordError(f"control record type {raw} is not a KRaft control record")
    kind = ControlType(raw)
    if value is None:
        raise CorruptRecordError(f"{kind.name} control record without a value")
    try:
        s, _ = _CODECS[kind].decode(value)
    except ProtocolError as e:
        raise CorruptRecordError(f"bad {kind.name} control record: {e}") from e
    return kind, s


def encode_control_body(kind: int, body: Mapping[str, object]) -> tuple[bytes, bytes]:
    """(key, value) of a control record given as its message's fields by kio's snake_case
    names (missing ones take their defaults; the message's own `version` is 0)."""
    codec = _CODECS.get(ControlType(kind)) if kind in _TYPES else None
    if codec is None:
        raise ValueError(f"control record type {kind} is not a KRaft control record")
    return control_key(ControlType(kind)), codec.encode({"version": 0, **body})


def decode_control_body(
    key: bytes | None, value: bytes | None,
) -> tuple[ControlType, dict[str, object]]:
    """The type and fields (kio's names, nested structs as dicts) of a KRaft control record;
    the same checks as `decode_control`."""
    kind, s = _decode_struct(key, value)
    return kind, s.to_dict()


def build_control_batch(
    records: Sequence[ControlRecord], *, base_offset: int, leader_epoch: int, timestamp: int,
) -> bytes:
    """One control batch holding `records` at consecutive offsets from `base_offset`, every
    record with `timestamp`. The epoch must be a real one: Kafka refuses control batches
    without a partition leader epoch."""
    return encoded_control_batch([encode_control(r) for r in records], base_offset=base_offset,
                                 leader_epoch=leader_epoch, timestamp=timestamp)


def encoded_control_batch(
    pairs: Sequence[tuple[bytes, bytes]], *, base_offset: int, leader_epoch: int, timestamp: int,
) -> bytes:
    """`build_control_batch` for records already encoded as (key, value)."""
    if not pairs:
        raise ValueError("a control batch needs at least one record")
    if leader_epoch < 0:
        raise ValueError(f"control batches need a leader epoch, not {leader_epoch}")
    recs = [Record(base_offset + i, timestamp, key, value) for i, (key, value) in enumerate(pairs)]
    return build_batch(recs, base_offset=base_offset, control=True,
                       partition_leader_epoch=leader_epoch)


@dataclass(frozen=True, slots=True)
class ControlBatch:
    header: BatchHeader
    records: tuple[ControlRecord, ...]

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def leader_epoch(self) -> int:
        return self.header.partition_leader_epoch


def check_batch(batch: Buf) -> BatchHeader:
    """The header of one whole v2 batch whose framing and CRC are sound."""
    mv = memoryview(batch)
    if len(mv) < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(f"batch of {len(mv)} bytes is shorter than a batch header")
    h = read_header(mv, 0)
    if h.magic != MAGIC_V2:
        raise CorruptRecordError(f"batch at offset {h.base_offset} has magic {h.magic}, not 2")
    if h.size != len(mv):
        raise CorruptRecordError(f"batch at offset {h.base_offset} claims {h.size} bytes but "
                                 f"has {len(mv)}")
    if not crc_ok(mv, 0, h):
        raise CorruptRecordError(f"batch at offset {h.base_offset} fails its CRC")
    return h


def parse_control_batch(batch: Buf) -> ControlBatch:
    """Decode one whole control batch (framing and CRC checked)."""
    h = check_batch(batch)
    if not h.is_control:
        raise CorruptRecordError(f"batch at offset {h.base_offset} is not a control batch")
    return ControlBatch(h, decoded_controls(decode_records(batch)))


def decoded_controls(records: Iterable[Record]) -> tuple[ControlRecord, ...]:
    return tuple(decode_control(r.key, r.value) for r in records)

