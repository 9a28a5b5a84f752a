"""Hand-tuned Metadata codec (API key 3): request and response v0-v13.

Metadata responses for large clusters are dominated by per-partition
encoding, which rarely changes. So the encoder is split into cacheable
pieces: :func:`encode_metadata_brokers` (the whole broker array) and
:func:`encode_metadata_topic` (one topic entry, without the array length
prefix); :func:`encode_metadata_response_from_parts` assembles a response by
concatenation. A broker can keep per-(version, topic) bytes and only
re-encode topics whose metadata changed.

Wire layout (Kafka's MetadataRequest.json / MetadataResponse.json):

* flexible from v9; request topics carry ``topic_id`` from v10 (names
  nullable from v10); v0 sends an empty array for "all topics", v1+ null;
* ``allow_auto_topic_creation`` v4+; ``include_cluster_authorized_operations``
  v8-v10; ``include_topic_authorized_operations`` v8+;
* response: rack/controller_id/is_internal v1+, cluster_id v2+, throttle v3+,
  offline_replicas v5+, leader_epoch v7+, authorized operations v8+ (cluster
  level only v8-v10), topic_id v10+, nullable topic name v12+, top-level
  error_code v13+.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.protocol.errors import ProtocolError
from strom.protocol.primitives import (
    MAX_ARRAY_ELEMENTS,
    byte_view,
    check_version,
    skip_tagged_fields,
    write_compact_nullable_string,
    write_compact_string,
    write_nullable_string,
    write_string,
)
from strom.protocol.primitives import read_uvarint as _read_uvarint
from strom.protocol.primitives import write_uvarint as _uvarint

__all__ = [
    "MAX_VERSION",
    "MIN_VERSION",
    "MetadataBroker",
    "MetadataPartition",
    "MetadataRequest",
    "MetadataTopic",
    "ProtocolError",
    "decode_metadata_request",
    "encode_metadata_brokers",
    "encode_metadata_response",
    "encode_metadata_response_from_parts",
    "encode_metadata_topic",
]

MIN_VERSION = 0
MAX_VERSION = 13
_FIRST_FLEXIBLE = 9
_FIRST_TOPIC_ID = 10
_NO_AUTHORIZED_OPERATIONS = -(2**31)
_ZERO_UUID = bytes(16)


@dataclass(slots=True)
class MetadataRequest:
    topics: list[tuple[str | None, uuid.UUID | None]] | None
    """(name, topic_id) pairs; None asks for all topics (v0: an empty array)."""
    allow_auto_topic_creation: bool = True
    include_cluster_authorized_operations: bool = False
    include_topic_authorized_operations: bool = False


@dataclass(slots=True)
class MetadataBroker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class MetadataPartition:
    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int = -1
    replica_nodes: list[int] = field(default_factory=list)
    isr_nodes: list[int] = field(default_factory=list)
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class MetadataTopic:
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: list[MetadataPartition]
    topic_authorized_operations: int = _NO_AUTHORIZED_OPERATIONS




# --------------------------------------------------------------------------- decoding

_I32 = struct.Struct(">i").unpack_from


def decode_metadata_request(body: memoryview, version: int) -> MetadataRequest:
    """Parse a Metadata request body (after the request header).

    ``topics`` is None for "all topics" (null array, or an empty one in v0);
    a zero topic id reads as None. Raises :class:`ProtocolError` on malformed
    input.
    """
    check_version(version, MIN_VERSION, MAX_VERSION, "Metadata request")
    buf = byte_view(body)
    try:
        return _decode(buf, version)
    except (struct.error, IndexError) as exc:
        raise ProtocolError(f"truncated Metadata v{version} request: {exc}") from None


def _decode(buf: memoryview, version: int) -> MetadataRequest:
    end = len(buf)
    flexible = version >= _FIRST_FLEXIBLE
    if flexible:
        count, pos = _read_uvarint(buf, 0)
        count -= 1
    else:
        (count,) = _I32(buf, 0)
        pos = 4
        if count < -1 or (count == -1 and version == 0):
            raise ProtocolError(f"invalid topic count {count}")
    topics: list[tuple[str | None, uuid.UUID | None]] | None
    if count < 0:
        topics = None
    else:
        if count > min(end - pos, MAX_ARRAY_ELEMENTS):
            raise ProtocolError(f"invalid topic count {count}")
        topics = []
        by_id = version >= _FIRST_TOPIC_ID
        for _ in range(count):
            topic_id = None
            if by_id:
                raw = buf[pos : pos + 16].tobytes()
                if len(raw) != 16:
                    raise ProtocolError("topic_id overruns the body")
                if raw != _ZERO_UUID:
                    topic_id = uuid.UUID(bytes=raw)
                pos += 16
            if flexible:
                n, pos = _read_uvarint(buf, pos)
                n -= 1  # -1: null name (v10+ only)
                if n < 0 and not by_id:
                    raise ProtocolError("null topic name")
            else:
                n = (buf[pos] << 8) | buf[pos + 1]
                pos += 2
                if n >= 0x8000:
                    raise ProtocolError("null topic name")
            if n < 0:
                name = None
            else:
                if n > end - pos:
                    raise ProtocolError(f"topic name of {n} bytes overruns the body")
                name = str(buf[pos : pos + n], "utf-8", "replace")
                pos += n
            if flexible:
                pos = skip_tagged_fields(buf, pos)
            topics.append((name, topic_id))
        if version == 0 and not topics:
            topics = None
    allow_auto = True
    include_cluster = False
    include_topic = False
    if version >= 4:
        allow_auto = buf[pos] != 0
        pos += 1
    if version >= 8:
        if version <= 10:
            include_cluster = buf[pos] != 0
            pos += 1
        include_topic = buf[pos] != 0
        pos += 1
    if flexible:
        skip_tagged_fields(buf, pos)
    return MetadataRequest(topics, allow_auto, include_cluster, include_topic)


# --------------------------------------------------------------------------- encoding

_P_I32 = struct.Struct(">i").pack
_P_I16 = struct.Struct(">h").pack
_partition_packers: dict[tuple[int, int, int, int], Callable[..., bytes]] = {}


def _partition_packer(kind: int, r: int, i: int, o: int) -> Callable[..., bytes]:
    """Struct.pack for one partition layout; cached, layouts repeat across a cluster."""
    key = (kind, r, i, o)
    packer = _partition_packers.get(key)
    if packer is None:
        if kind == 9:  # flexible: compact arrays (1-byte lengths) + empty tag buffer
            fmt = f">hiiiB{r}iB{i}iB{o}iB"
        elif kind == 7:
            fmt = f">hiiii{r}ii{i}ii{o}i"
        elif kind == 5:
            fmt = f">hiii{r}ii{i}ii{o}i"
        else:
            fmt = f">hiii{r}ii{i}i"
        packer = struct.Struct(fmt).pack
        if len(_partition_packers) < 4096:
            _partition_packers[key] = packer
    return packer


def _int_array(values: list[int], flexible: bool) -> bytes:
    n = len(values)
    head = _uvarint(n + 1) if flexible else _P_I32(n)
    return head + struct.pack(f">{n}i", *values)


def encode_metadata_topic(version: int, topic: MetadataTopic) -> bytes:
    """Encode one topic entry of a Metadata response (no array length prefix).

    Cacheable per (version, topic state); feed the results to
    :func:`encode_metadata_response_from_parts`.
    """
    check_version(version, MIN_VERSION, MAX_VERSION, "Metadata response")
    try:
        return _encode_topic(version, topic)
    except struct.error as exc:
        raise ValueError(f"value out of range for Metadata response v{version}: {exc}") from None


def _encode_topic(version: int, topic: MetadataTopic) -> bytes:
    flexible = version >= _FIRST_FLEXIBLE
    out = [_P_I16(topic.error_code)]
    append = out.append
    name = topic.name
    if name is None and version < 12:
        raise ValueError(f"Metadata response v{version} needs topic names")
    append(write_compact_nullable_string(name) if flexible else write_nullable_string(name))
    if version >= _FIRST_TOPIC_ID:
        append(_ZERO_UUID if topic.topic_id is None else topic.topic_id.bytes)
    if version >= 1:
        append(b"\x01" if topic.is_internal else b"\x00")
    partitions = topic.partitions
    append(_uvarint(len(partitions) + 1) if flexible else _P_I32(len(partitions)))
    if flexible:
        kind = 9
    elif version >= 7:
        kind = 7
    elif version >= 5:
        kind = 5
    else:
        kind = 0
    packers = _partition_packers
    for p in partitions:
        replicas = p.replica_nodes
        isr = p.isr_nodes
        r = len(replicas)
        i = len(isr)
        if kind == 9:
            offline = p.offline_replicas
            o = len(offline)
            pack = packers.get((9, r, i, o))
            if pack is None and r < 127 and i < 127 and o < 127:
                pack = _partition_packer(9, r, i, o)
            if pack is not None:
                append(
                    pack(
                        p.error_code,
                        p.partition_index,
                        p.leader_id,
                        p.leader_epoch,
                        r + 1,
                        *replicas,
                        i + 1,
                        *isr,
                        o + 1,
                        *offline,
                        0,
                    )
                )
            else:  # huge replica lists: generic path
                append(
                    struct.pack(
                        ">hiii", p.error_code, p.partition_index, p.leader_id, p.leader_epoch
                    )
                )
                append(_int_array(replicas, True))
                append(_int_array(isr, True))
                append(_int_array(offline, True))
                append(b"\x00")
        elif kind == 7:
            offline = p.offline_replicas
            o = len(offline)
            append(
                _partition_packer(7, r, i, o)(
                    p.error_code,
                    p.partition_index,
                    p.leader_id,
                    p.leader_epoch,
                    r,
                    *replicas,
                    i,
                    *isr,
                    o,
                    *offline,
                )
            )
        elif kind == 5:
            offline = p.offline_replicas
            o = len(offline)
            append(
                _partition_packer(5, r, i, o)(
                    p.error_code, p.partition_index, p.leader_id, r, *replicas, i, *isr, o, *offline
                )
            )
        else:
            append(
                _partition_packer(0, r, i, 0)(
                    p.error_code, p.partition_index, p.leader_id, r, *replicas, i, *isr
                )
            )
    if version >= 8:
        append(_P_I32(topic.topic_authorized_operations))
    if flexible:
        append(b"\x00")
    return b"".join(out)


def encode_metadata_brokers(version: int, brokers: list[MetadataBroker]) -> bytes:
    """Encode the whole broker array of a Metadata response, length prefix included."""
    check_version(version, MIN_VERSION, MAX_VERSION, "Metadata response")
    flexible = version >= _FIRST_FLEXIBLE
    out = [_uvarint(len(brokers) + 1) if flexible else _P_I32(len(brokers))]
    append = out.append
    try:
        for b in brokers:
            append(_P_I32(b.node_id))
            append(write_compact_string(b.host) if flexible else write_string(b.host))
            append(_P_I32(b.port))
            if version >= 1:
                append(
                    write_compact_nullable_string(b.rack)
                    if flexible
                    else write_nullable_string(b.rack)
                )
            if flexible:
                append(b"\x00")
    except struct.error as exc:
        raise ValueError(f"value out of range for Metadata response v{version}: {exc}") from None
    return b"".join(out)


def encode_metadata_response_from_parts(
    version: int,
    brokers_bytes: bytes,
    cluster_id: str | None,
    controller_id: int,
    topic_parts: list[bytes],
    throttle_time_ms: int = 0,
    cluster_authorized_operations: int = _NO_AUTHORIZED_OPERATIONS,
    error_code: int = 0,
) -> bytes:
    """Assemble a Metadata response body from pre-encoded pieces.

    ``brokers_bytes`` comes from :func:`encode_metadata_brokers` and each of
    ``topic_parts`` from :func:`encode_metadata_topic`, all for this
    ``version``. ``error_code`` is the top-level one (v13+).
    """
    check_version(version, MIN_VERSION, MAX_VERSION, "Metadata response")
    flexible = version >= _FIRST_FLEXIBLE
    out: list[bytes] = []
    append = out.append
    try:
        if version >= 3:
            append(_P_I32(throttle_time_ms))
        append(brokers_bytes)
        if version >= 2:
            append(
                write_compact_nullable_string(cluster_id)
                if flexible
                else write_nullable_string(cluster_id)
            )
        if version >= 1:
            append(_P_I32(controller_id))
        append(_uvarint(len(topic_parts) + 1) if flexible else _P_I32(len(topic_parts)))
        out.extend(topic_parts)
        if 8 <= version <= 10:
            append(_P_I32(cluster_authorized_operations))
        if version >= 13:
            append(_P_I16(error_code))
    except struct.error as exc:
        raise ValueError(f"value out of range for Metadata response v{version}: {exc}") from None
    if flexible:
        append(b"\x00")
    return b"".join(out)


def encode_metadata_response(
    version: int,
    brokers: list[MetadataBroker],
    cluster_id: str | None,
    controller_id: int,
    topics: list[MetadataTopic],
    throttle_time_ms: int = 0,
    cluster_authorized_operations: int = _NO_AUTHORIZED_OPERATIONS,
    error_code: int = 0,
) -> bytes:
    """Serialize a full Metadata response body (without size prefix and header)."""
    check_version(version, MIN_VERSION, MAX_VERSION, "Metadata response")
    try:
        parts = [_encode_topic(version, t) for t in topics]
    except struct.error as exc:
        raise ValueError(f"value out of range for Metadata response v{version}: {exc}") from None
    return encode_metadata_response_from_parts(
        version,
        encode_metadata_brokers(version, brokers),
        cluster_id,
        controller_id,
        parts,
        throttle_time_ms,
        cluster_authorized_operations,
        error_code,
    )
