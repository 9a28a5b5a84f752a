"""Keys and values of `__consumer_offsets` records, byte-compatible with Kafka's.

Every key starts with an int16 naming the record type (Kafka's "key version": 0/1 offset commit,
2 classic group metadata, 3-8 consumer-group (KIP-848) records, 10-15 share-group (KIP-932)
records, 17 and 19-23 streams-group (KIP-1071) records); every value starts with an
int16 value version. The fields follow Kafka's coordinator message specs
(group-coordinator/src/main/resources/common/message/*.json), so Kafka's tools can read a
Strom `__consumer_offsets` log and the reverse. A tombstone is a key with a null value.

The schemas are data (a tiny declarative codec below), not hand-written per record.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.protocol import primitives as p
from strom.protocol.errors import ProtocolError

# Record types (the int16 key prefix).
OFFSET_COMMIT_LEGACY = 0
OFFSET_COMMIT = 1
GROUP_METADATA = 2
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
# Streams groups (KIP-1071); 18 was a partition-metadata record Kafka dropped before 4.0.
STREAMS_GROUP_METADATA = 17
STREAMS_GROUP_MEMBER_METADATA = 19
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA = 20
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER = 21
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT = 22
STREAMS_GROUP_TOPOLOGY = 23
STREAMS_RECORDS = frozenset({17, 19, 20, 21, 22, 23})
# Share groups (KIP-932); 9 was a partition-metadata record Kafka dropped before 4.0.
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15
SHARE_RECORDS = frozenset({10, 11, 12, 13, 14, 15})


# --------------------------------------------------------------------------------------------
# A small schema codec: enough for Kafka's coordinator records (ints, strings, bytes, uuids,
# arrays, nested structs, flexible versions with tagged fields).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class F:
    """One field: `kind` is a primitive name or a nested `Schema`; `array` makes it a list."""

    name: str
    kind: Any
    since: int = 0
    until: int | None = None
    nullable: bool = False
    array: bool = False
    default: Any = None
    tag: int | None = None

    def present(self, version: int) -> bool:
        return version >= self.since and (self.until is None or version <= self.until)


@dataclass(frozen=True)
class Schema:
    name: str
    fields: tuple[F, ...]
    flexible_since: int | None = None

    def flexible(self, version: int) -> bool:
        return self.flexible_since is not None and version >= self.flexible_since


_FIXED = {"int8": p.INT8, "int16": p.INT16, "uint16": p.UINT16, "int32": p.INT32,
          "int64": p.INT64, "bool": p.BOOL}


def _default(f: F) -> Any:
    if f.default is not None or f.nullable:
        return f.default
    if f.array:
        return []
    if isinstance(f.kind, Schema):
        return {}
    return {"string": "", "bytes": b"", "uuid": p.ZERO_UUID}.get(f.kind, 0)


def _enc_one(kind: Any, value: Any, version: int, flexible: bool, nullable: bool) -> bytes:
    if isinstance(kind, Schema):
        if value is None:
            if not nullable:
                raise ProtocolError("null struct")
            return p.write_int8(-1)
        body = encode_struct(kind, version, value)
        return p.write_int8(1) + body if nullable else body
    fixed = _FIXED.get(kind)
    if fixed is not None:
        return fixed.pack(value)
    if kind == "string":
        if flexible:
            return (p.write_compact_nullable_string(value) if nullable
                    else p.write_compact_string(value))
        return p.write_nullable_string(value) if nullable else p.write_string(value)
    if kind == "bytes":
        if flexible:
            return (p.write_compact_nullable_bytes(value) if nullable
                    else p.write_compact_bytes(value))
        return p.write_nullable_bytes(value) if nullable else p.write_bytes(value)
    if kind == "uuid":
        return p.uuid_bytes(value)
    raise ValueError(f"unknown field kind {kind!r}")


def _dec_one(
    kind: Any, buf: p.Buf, pos: int, version: int, flexible: bool, nullable: bool
) -> tuple[Any, int]:
    if isinstance(kind, Schema):
        if nullable:
            if pos >= len(buf):
                raise p.truncated("struct")
            if p.INT8.unpack_from(buf, pos)[0] < 0:
                return None, pos + 1
            pos += 1
        return decode_struct(kind, version, buf, pos)
    fixed = _FIXED.get(kind)
    if fixed is not None:
        if pos + fixed.size > len(buf):
            raise p.truncated(kind)
        return fixed.unpack_from(buf, pos)[0], pos + fixed.size
    if kind == "string":
        if flexible:
            return (p.read_compact_nullable_string(buf, pos) if nullable
                    else p.read_compact_string(buf, pos))
        return p.read_nullable_string(buf, pos) if nullable else p.read_string(buf, pos)
    if kind == "bytes":
        if flexible:
            return (p.read_compact_nullable_bytes(buf, pos) if nullable
                    else p.read_compact_bytes(buf, pos))
        return p.read_nullable_bytes(buf, pos) if nullable else p.read_bytes(buf, pos)
    if kind == "uuid":
        return p.read_uuid(buf, pos)
    raise ValueError(f"unknown field kind {kind!r}")


def _enc_field(f: F, value: Any, version: int, flexible: bool) -> bytes:
    if not f.array:
        return _enc_one(f.kind, value, version, flexible, f.nullable)
    if value is None:
        if not f.nullable:
            raise ProtocolError(f"null array {f.name}")
        return p.write_compact_array_length(None) if flexible else p.write_array_length(None)
    head = (p.write_compact_array_length(len(value)) if flexible
            else p.write_array_length(len(value)))
    return head + b"".join(_enc_one(f.kind, v, version, flexible, False) for v in value)


def _dec_field(f: F, buf: p.Buf, pos: int, version: int, flexible: bool) -> tuple[Any, int]:
    if not f.array:
        return _dec_one(f.kind, buf, pos, version, flexible, f.nullable)
    n, pos = p.read_compact_array_length(buf, pos) if flexible else p.read_array_length(buf, pos)
    if n < 0:
        return None, pos
    out: list[Any] = []
    for _ in range(n):
        v, pos = _dec_one(f.kind, buf, pos, version, flexible, False)
        out.append(v)
    return out, pos


def encode_struct(schema: Schema, version: int, values: dict[str, Any]) -> bytes:
    flexible = schema.flexible(version)
    parts = []
    tagged: dict[int, bytes] = {}
    for f in schema.fields:
        if not f.present(version):
            continue
        value = values.get(f.name, _default(f))
        if f.tag is not None:
            if flexible and value is not None and value != _default(f):
                tagged[f.tag] = _enc_field(f, value, version, flexible)
            continue
        parts.append(_enc_field(f, value, version, flexible))
    if flexible:
        parts.append(p.write_tagged_fields(tagged))
    return b"".join(parts)


def decode_struct(schema: Schema, version: int, buf: p.Buf, pos: int = 0) -> tuple[dict[str, Any], int]:
    flexible = schema.flexible(version)
    out: dict[str, Any] = {}
    by_tag: dict[int, F] = {}
    for f in schema.fields:
        if f.tag is not None:
            by_tag[f.tag] = f
            out[f.name] = _default(f)
        elif f.present(version):
            out[f.name], pos = _dec_field(f, buf, pos, version, flexible)
        else:
            out[f.name] = _default(f)
    if flexible:
        tags, pos = p.read_tagged_fields(buf, pos)
        for tag, raw in tags.items():
            tf = by_tag.get(tag)
            if tf is not None and tf.present(version):
                out[tf.name], _ = _dec_field(tf, raw, 0, version, flexible)
    return out, pos


# --------------------------------------------------------------------------------------------
# Kafka's coordinator record schemas.
# --------------------------------------------------------------------------------------------

OFFSET_COMMIT_KEY = Schema("OffsetCommitKey", (
    F("group", "string"), F("topic", "string"), F("partition", "int32")))
OFFSET_COMMIT_VALUE = Schema("OffsetCommitValue", (
    F("offset", "int64"),
    F("leader_epoch", "int32", since=3, default=-1),
    F("metadata", "string"),
    F("commit_timestamp", "int64"),
    F("expire_timestamp", "int64", since=1, until=1, default=-1),
), flexible_since=4)

GROUP_METADATA_KEY = Schema("GroupMetadataKey", (F("group", "string"),))
MEMBER_METADATA = Schema("MemberMetadata", (
    F("member_id", "string"),
    F("group_instance_id", "string", since=3, nullable=True),
    F("client_id", "string"),
    F("client_host", "string"),
    F("rebalance_timeout", "int32", since=1),
    F("session_timeout", "int32"),
    F("subscription", "bytes"),
    F("assignment", "bytes"),
), flexible_since=4)
GROUP_METADATA_VALUE = Schema("GroupMetadataValue", (
    F("protocol_type", "string"),
    F("generation", "int32"),
    F("protocol", "string", nullable=True),
    F("leader", "string", nullable=True),
    F("current_state_timestamp", "int64", since=2, default=-1),
    F("members", MEMBER_METADATA, array=True),
), flexible_since=4)

GROUP_KEY = Schema("ConsumerGroupKey", (F("group_id", "string"),))
GROUP_MEMBER_KEY = Schema("ConsumerGroupMemberKey", (F("group_id", "string"),
                                                     F("member_id", "string")))
CONSUMER_GROUP_METADATA_VALUE = Schema("ConsumerGroupMetadataValue", (F("epoch", "int32"),),
                                       flexible_since=0)
_PARTITION_RACKS = Schema("PartitionMetadata", (F("partition", "int32"),
                                                F("racks", "string", array=True)),
                          flexible_since=0)
_TOPIC_METADATA = Schema("TopicMetadata", (
    F("topic_id", "uuid"), F("topic_name", "string"), F("num_partitions", "int32"),
    F("partition_metadata", _PARTITION_RACKS, array=True)), flexible_since=0)
CONSUMER_GROUP_PARTITION_METADATA_VALUE = Schema(
    "ConsumerGroupPartitionMetadataValue", (F("topics", _TOPIC_METADATA, array=True),),
    flexible_since=0)
_CLASSIC_PROTOCOL = Schema("ClassicProtocol", (F("name", "string"), F("metadata", "bytes")),
                           flexible_since=0)
_CLASSIC_MEMBER_METADATA = Schema("ClassicMemberMetadata", (
    F("session_timeout", "int32"), F("supported_protocols", _CLASSIC_PROTOCOL, array=True)),
    flexible_since=0)
CONSUMER_GROUP_MEMBER_METADATA_VALUE = Schema("ConsumerGroupMemberMetadataValue", (
    F("instance_id", "string", nullable=True),
    F("rack_id", "string", nullable=True),
    F("client_id", "string"),
    F("client_host", "string"),
    F("subscribed_topic_names", "string", array=True),
    F("subscribed_topic_regex", "string", nullable=True),
    F("rebalance_timeout", "int32", default=-1),
    F("server_assignor", "string", nullable=True),
    F("classic_member_metadata", _CLASSIC_MEMBER_METADATA, nullable=True, tag=0),
), flexible_since=0)
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Schema(
    "ConsumerGroupTargetAssignmentMetadataValue", (F("assignment_epoch", "int32"),),
    flexible_since=0)
_TOPIC_PARTITIONS = Schema("TopicPartitions", (F("topic_id", "uuid"),
                                               F("partitions", "int32", array=True)),
                           flexible_since=0)
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Schema(
    "ConsumerGroupTargetAssignmentMemberValue", (F("topic_partitions", _TOPIC_PARTITIONS,
                                                   array=True),), flexible_since=0)
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Schema(
    "ConsumerGroupCurrentMemberAssignmentValue", (
        F("member_epoch", "int32"),
        F("previous_member_epoch", "int32"),
        F("state", "int8"),
        F("assigned_partitions", _TOPIC_PARTITIONS, array=True),
        F("partitions_pending_revocation", _TOPIC_PARTITIONS, array=True),
    ), flexible_since=0)

# -- streams groups (KIP-1071) --
_KEY_VALUE = Schema("KeyValue", (F("key", "string"), F("value", "string")), flexible_since=0)
_TASK_IDS = Schema("TaskIds", (
    F("subtopology_id", "string"), F("partitions", "int32", array=True),
    F("assignment_epochs", "int32", array=True, nullable=True, tag=0)), flexible_since=0)
_ENDPOINT = Schema("Endpoint", (F("host", "string"), F("port", "uint16")), flexible_since=0)
STREAMS_GROUP_METADATA_VALUE = Schema("StreamsGroupMetadataValue", (
    F("epoch", "int32"),
    F("metadata_hash", "int64"),
    F("validated_topology_epoch", "int32", default=-1, tag=0),
    F("last_assignment_configs", _KEY_VALUE, array=True, nullable=True, tag=1),
    F("stored_description_topology_epoch", "int32", default=-1, tag=2),
    F("failed_description_topology_epoch", "int32", default=-1, tag=3),
), flexible_since=0)
STREAMS_GROUP_MEMBER_METADATA_VALUE = Schema("StreamsGroupMemberMetadataValue", (
    F("instance_id", "string", nullable=True),
    F("rack_id", "string", nullable=True),
    F("client_id", "string"),
    F("client_host", "string"),
    F("rebalance_timeout", "int32", default=-1),
    F("topology_epoch", "int32"),
    F("process_id", "string"),
    F("user_endpoint", _ENDPOINT, nullable=True),
    F("client_tags", _KEY_VALUE, array=True),
), flexible_since=0)
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Schema(
    "StreamsGroupTargetAssignmentMetadataValue", (
        F("assignment_epoch", "int32"), F("assignment_timestamp", "int64", tag=0)),
    flexible_since=0)
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Schema(
    "StreamsGroupTargetAssignmentMemberValue", (
        F("active_tasks", _TASK_IDS, array=True), F("standby_tasks", _TASK_IDS, array=True),
        F("warmup_tasks", _TASK_IDS, array=True)), flexible_since=0)
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Schema(
    "StreamsGroupCurrentMemberAssignmentValue", (
        F("member_epoch", "int32"), F("previous_member_epoch", "int32"), F("state", "int8"),
        F("active_tasks", _TASK_IDS, array=True), F("standby_tasks", _TASK_IDS, array=True),
        F("warmup_tasks", _TASK_IDS, array=True),
        F("active_tasks_pending_revocation", _TASK_IDS, array=True),
        F("standby_tasks_pending_revocation", _TASK_IDS, array=True),
        F("warmup_tasks_pending_revocation", _TASK_IDS, array=True)), flexible_since=0)
_TOPIC_INFO = Schema("TopicInfo", (
    F("name", "string"), F("partitions", "int32"), F("replication_factor", "int16"),
    F("topic_configs", _KEY_VALUE, array=True)), flexible_since=0)
_COPARTITION_GROUP = Schema("CopartitionGroup", (
    F("source_topics", "int16", array=True), F("source_topic_regex", "int16", array=True),
    F("repartition_source_topics", "int16", array=True)), flexible_since=0)
_SUBTOPOLOGY = Schema("Subtopology", (
    F("subtopology_id", "string"),
    F("source_topics", "string", array=True),
    F("source_topic_regex", "string", array=True),
    F("state_changelog_topics", _TOPIC_INFO, array=True),
    F("repartition_sink_topics", "string", array=True),
    F("repartition_source_topics", _TOPIC_INFO, array=True),
    F("copartition_groups", _COPARTITION_GROUP, array=True)), flexible_since=0)
STREAMS_GROUP_TOPOLOGY_VALUE = Schema("StreamsGroupTopologyValue", (
    F("epoch", "int32"), F("subtopologies", _SUBTOPOLOGY, array=True)), flexible_since=0)

# -- share groups (KIP-932) --
SHARE_GROUP_METADATA_VALUE = Schema("ShareGroupMetadataValue", (
    F("epoch", "int32"), F("metadata_hash", "int64")), flexible_since=0)
SHARE_GROUP_MEMBER_METADATA_VALUE = Schema("ShareGroupMemberMetadataValue", (
    F("rack_id", "string", nullable=True),
    F("client_id", "string"),
    F("client_host", "string"),
    F("subscribed_topic_names", "string", array=True),
), flexible_since=0)
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Schema(
    "ShareGroupTargetAssignmentMetadataValue", (
        F("assignment_epoch", "int32"), F("assignment_timestamp", "int64", tag=0)),
    flexible_since=0)
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Schema(
    "ShareGroupTargetAssignmentMemberValue", (F("topic_partitions", _TOPIC_PARTITIONS,
                                                array=True),), flexible_since=0)
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Schema(
    "ShareGroupCurrentMemberAssignmentValue", (
        F("member_epoch", "int32"),
        F("previous_member_epoch", "int32"),
        F("state", "int8"),
        F("assigned_partitions", _TOPIC_PARTITIONS, array=True),
    ), flexible_since=0)
_TOPIC_PARTITIONS_INFO = Schema("TopicPartitionsInfo", (
    F("topic_id", "uuid"), F("topic_name", "string"), F("partitions", "int32", array=True)),
    flexible_since=0)
_SHARE_TOPIC_INFO = Schema("TopicInfo", (F("topic_id", "uuid"), F("topic_name", "string")),
                           flexible_since=0)
SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = Schema(
    "ShareGroupStatePartitionMetadataValue", (
        F("initializing_topics", _TOPIC_PARTITIONS_INFO, array=True),
        F("initialized_topics", _TOPIC_PARTITIONS_INFO, array=True),
        F("deleting_topics", _SHARE_TOPIC_INFO, array=True),
    ), flexible_since=0)

# record type -> (key schema, value schema, value version written, readable value versions)
_TYPES: dict[int, tuple[Schema, Schema, int, tuple[int, int]]] = {
    OFFSET_COMMIT_LEGACY: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE, 3, (0, 4)),
    OFFSET_COMMIT: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE, 3, (0, 4)),
    GROUP_METADATA: (GROUP_METADATA_KEY, GROUP_METADATA_VALUE, 3, (0, 4)),
    CONSUMER_GROUP_METADATA: (GROUP_KEY, CONSUMER_GROUP_METADATA_VALUE, 0, (0, 0)),
    CONSUMER_GROUP_PARTITION_METADATA: (GROUP_KEY, CONSUMER_GROUP_PARTITION_METADATA_VALUE, 0,
                                        (0, 0)),
    CONSUMER_GROUP_MEMBER_METADATA: (GROUP_MEMBER_KEY, CONSUMER_GROUP_MEMBER_METADATA_VALUE, 0,
                                     (0, 0)),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (
        GROUP_KEY, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, 0, (0, 0)),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        GROUP_MEMBER_KEY, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, 0, (0, 0)),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        GROUP_MEMBER_KEY, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, 0, (0, 0)),
    SHARE_GROUP_METADATA: (GROUP_KEY, SHARE_GROUP_METADATA_VALUE, 0, (0, 0)),
    SHARE_GROUP_MEMBER_METADATA: (GROUP_MEMBER_KEY, SHARE_GROUP_MEMBER_METADATA_VALUE, 0,
                                  (0, 0)),
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: (
        GROUP_KEY, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, 0, (0, 0)),
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        GROUP_MEMBER_KEY, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, 0, (0, 0)),
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        GROUP_MEMBER_KEY, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, 0, (0, 0)),
    SHARE_GROUP_STATE_PARTITION_METADATA: (
        GROUP_KEY, SHARE_GROUP_STATE_PARTITION_METADATA_VALUE, 0, (0, 0)),
    STREAMS_GROUP_METADATA: (GROUP_KEY, STREAMS_GROUP_METADATA_VALUE, 0, (0, 0)),
    STREAMS_GROUP_MEMBER_METADATA: (GROUP_MEMBER_KEY, STREAMS_GROUP_MEMBER_METADATA_VALUE, 0,
                                    (0, 0)),
    STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA: (
        GROUP_KEY, STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, 0, (0, 0)),
    STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        GROUP_MEMBER_KEY, STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, 0, (0, 0)),
    STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        GROUP_MEMBER_KEY, STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, 0, (0, 0)),
    STREAMS_GROUP_TOPOLOGY: (GROUP_KEY, STREAMS_GROUP_TOPOLOGY_VALUE, 0, (0, 0)),
}


@dataclass(frozen=True)
class CoordinatorRecord:
    """One decoded `__consumer_offsets` record; `value` is None for a tombstone."""

    type: int
    key: dict[str, Any]
    value: dict[str, Any] | None
    value_version: int = -1
    # -- transactions: the producer of a transactional batch (TxnOffsetCommit), else -1 --
    producer_id: int = -1


class UnknownRecordType(ProtocolError):
    """A record type this broker does not know (one of a newer Kafka): skip it."""


def encode_key(record_type: int, fields: dict[str, Any]) -> bytes:
    key_schema = _TYPES[record_type][0]
    return p.write_int16(record_type) + encode_struct(key_schema, 0, fields)


def encode_value(record_type: int, fields: dict[str, Any], version: int | None = None) -> bytes:
    _key, value_schema, default_version, _ = _TYPES[record_type]
    v = default_version if version is None else version
    return p.write_int16(v) + encode_struct(value_schema, v, fields)


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord:
    """Decode a record; raises `UnknownRecordType` or `ProtocolError`."""
    if key is None or len(key) < 2:
        raise ProtocolError("coordinator record without a key")
    record_type = p.INT16.unpack_from(key, 0)[0]
    spec = _TYPES.get(record_type)
    if spec is None:
        raise UnknownRecordType(f"unknown coordinator record type {record_type}")
    key_schema, value_schema, _, (lo, hi) = spec
    key_fields, _ = decode_struct(key_schema, 0, key, 2)
    if value is None:
        return CoordinatorRecord(record_type, key_fields, None)
    if len(value) < 2:
        raise ProtocolError("coordinator record value without a version")
    version = p.INT16.unpack_from(value, 0)[0]
    if not lo <= version <= hi:
        raise ProtocolError(f"unsupported {value_schema.name} version {version}")
    value_fields, _ = decode_struct(value_schema, version, value, 2)
    return CoordinatorRecord(record_type, key_fields, value_fields, version)


# --------------------------------------------------------------------------------------------
# Builders used by the coordinator: (key, value) pairs; value None is a tombstone.
# --------------------------------------------------------------------------------------------

KeyValue = tuple[bytes, bytes | None]


def offset_commit(group: str, topic: str, partition: int, offset: int, leader_epoch: int,
                  metadata: str, commit_ts: int, expire_ts: int = -1) -> KeyValue:
    key = encode_key(OFFSET_COMMIT, {"group": group, "topic": topic, "partition": partition})
    fields = {"offset": offset, "leader_epoch": leader_epoch, "metadata": metadata or "",
              "commit_timestamp": commit_ts, "expire_timestamp": expire_ts}
    # Kafka writes version 1 only when the commit carries an explicit expiry, else version 3.
    return key, encode_value(OFFSET_COMMIT, fields, 1 if expire_ts >= 0 else 3)


def offset_tombstone(group: str, topic: str, partition: int) -> KeyValue:
    return encode_key(OFFSET_COMMIT, {"group": group, "topic": topic,
                                      "partition": partition}), None


def group_metadata(group: str, fields: dict[str, Any]) -> KeyValue:
    return encode_key(GROUP_METADATA, {"group": group}), encode_value(GROUP_METADATA, fields)


def group_tombstone(group: str) -> KeyValue:
    return encode_key(GROUP_METADATA, {"group": group}), None


def consumer_group_record(record_type: int, group: str, member: str | None,
                          fields: dict[str, Any] | None) -> KeyValue:
    """A KIP-848 consumer-group record (types 3-8), a share-group record (10-15) or a
    streams-group record (17, 19-23); fields None writes a tombstone."""
    key_fields: dict[str, Any] = {"group_id": group}
    if member is not None:
        key_fields["member_id"] = member
    key = encode_key(record_type, key_fields)
    return key, None if fields is None else encode_value(record_type, fields)


def topic_partitions(assignment: Mapping[uuid.UUID, Collection[int]]) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in assignment.items() if ps]


def assignment_from(entries: list[dict[str, Any]] | None) -> dict[uuid.UUID, set[int]]:
    return {e["topic_id"]: set(e["partitions"]) for e in entries or () if e["partitions"]}


def member_tombstones(group: str, member: str) -> list[KeyValue]:
    """Tombstones of one consumer-group member: its current and target assignment, metadata."""
    return [consumer_group_record(t, group, member, None)
            for t in (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                      CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, CONSUMER_GROUP_MEMBER_METADATA)]


def consumer_group_tombstones(group: str, members: Iterable[str]) -> list[KeyValue]:
    """Tombstones of a whole consumer group: every member's records, then the group's."""
    records = [r for member in members for r in member_tombstones(group, member)]
    return records + [consumer_group_record(t, group, None, None)
                      for t in (CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                                CONSUMER_GROUP_PARTITION_METADATA, CONSUMER_GROUP_METADATA)]


def streams_member_tombstones(group: str, member: str) -> list[KeyValue]:
    """Tombstones of one streams-group member: current and target assignment, metadata."""
    return [consumer_group_record(t, group, member, None)
            for t in (STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                      STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER, STREAMS_GROUP_MEMBER_METADATA)]


def streams_group_tombstones(group: str, members: Iterable[str]) -> list[KeyValue]:
    """Tombstones of a whole streams group (Kafka's order: members first, topology last)."""
    records = [r for member in members for r in streams_member_tombstones(group, member)]
    return records + [consumer_group_record(t, group, None, None)
                      for t in (STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA,
                                STREAMS_GROUP_METADATA, STREAMS_GROUP_TOPOLOGY)]


def share_member_tombstones(group: str, member: str) -> list[KeyValue]:
    """Tombstones of one share-group member: current and target assignment, metadata."""
    return [consumer_group_record(t, group, member, None)
            for t in (SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                      SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, SHARE_GROUP_MEMBER_METADATA)]


def share_group_tombstones(group: str, members: Iterable[str]) -> list[KeyValue]:
    """Tombstones of a whole share group: members first, then the group's own records."""
    records = [r for member in members for r in share_member_tombstones(group, member)]
    return records + [consumer_group_record(t, group, None, None)
                      for t in (SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
                                SHARE_GROUP_STATE_PARTITION_METADATA, SHARE_GROUP_METADATA)]
