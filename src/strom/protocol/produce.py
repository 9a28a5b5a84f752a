"""Hand-tuned Produce codec (API key 0): request v3-v13, response v3-v13.

Produce is the broker's hottest request, so this module skips the generic
schema machinery: the request body is walked with precompiled ``struct``
readers and every record set comes back as a zero-copy ``memoryview`` slice of
the request buffer (no per-record work, no copy of the batches).

Wire layout (Kafka's ProduceRequest.json / ProduceResponse.json):

* flexible (compact strings/arrays + tagged fields) from v9;
* v13 names topics by ``topic_id`` (uuid) instead of ``name`` (KIP-516);
* response: ``log_start_offset`` v5+, ``record_errors``/``error_message`` v8+,
  tagged ``current_leader`` (partition, tag 0) and ``node_endpoints``
  (top level, tag 0) v10+.

Tagged fields a request carries are skipped, as Kafka requires.
"""

from __future__ import annotations

import struct
import uuid
from codecs import utf_8_decode
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
    "ProducePartitionData",
    "ProducePartitionResponse",
    "ProduceRequest",
    "ProduceTopicData",
    "ProduceTopicResponse",
    "ProtocolError",
    "decode_produce_request",
    "encode_produce_response",
]

MIN_VERSION = 3
MAX_VERSION = 13
_FIRST_FLEXIBLE = 9
_FIRST_TOPIC_ID = 13


@dataclass(slots=True)
class ProducePartitionData:
    index: int
    records: memoryview | None
    """Zero-copy slice of the request buffer: keep the buffer alive while it is used."""


@dataclass(slots=True)
class ProduceTopicData:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[ProducePartitionData]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopicData]


@dataclass(slots=True)
class ProducePartitionResponse:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None
    """(leader_id, leader_epoch); tagged field v10+, written only when set and not (-1, -1)."""


@dataclass(slots=True)
class ProduceTopicResponse:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[ProducePartitionResponse]


# --------------------------------------------------------------------------- decoding

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_HI = struct.Struct(">hi").unpack_from
_ZERO_UUID = bytes(16)




def decode_produce_request(body: memoryview, version: int) -> ProduceRequest:
    """Parse a Produce request body (after the request header).

    Record sets are returned as slices of ``body`` (no copy). Raises
    :class:`ProtocolError` on truncated or inconsistent input; trailing bytes
    after the last field are ignored, as Kafka does.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ProtocolError(f"unsupported Produce request version {version}")
    buf = body if body.__class__ is memoryview and body.format == "B" else byte_view(body)
    try:
        if version >= _FIRST_FLEXIBLE:
            return _decode_flexible(buf, version)
        return _decode_legacy(buf)
    except (struct.error, IndexError) as exc:
        raise ProtocolError(f"truncated Produce v{version} request: {exc}") from None


def _decode_legacy(buf: memoryview) -> ProduceRequest:
    end = len(buf)
    (n,) = _I16(buf, 0)
    pos = 2
    if n < 0:
        transactional_id = None
    else:
        if n > end - pos:
            raise ProtocolError("transactional_id overruns the body")
        transactional_id = utf_8_decode(buf[pos : pos + n], "replace", True)[0]
        pos += n
    acks, timeout_ms = _HI(buf, pos)
    pos += 6
    (topic_count,) = _I32(buf, pos)
    pos += 4
    if topic_count < 0 or topic_count > min(end - pos, MAX_ARRAY_ELEMENTS):
        raise ProtocolError(f"invalid topic count {topic_count}")
    topics = []
    for _ in range(topic_count):
        (n,) = _I16(buf, pos)
        pos += 2
        if n < 0 or n > end - pos:
            raise ProtocolError(f"invalid topic name length {n}")
        name = utf_8_decode(buf[pos : pos + n], "replace", True)[0]
        pos += n
        (partition_count,) = _I32(buf, pos)
        pos += 4
        if partition_count < 0 or partition_count > min(end - pos, MAX_ARRAY_ELEMENTS):
            raise ProtocolError(f"invalid partition count {partition_count}")
        partitions = []
        for _ in range(partition_count):
            (index,) = _I32(buf, pos)
            (size,) = _I32(buf, pos + 4)
            pos += 8
            if size < 0:
                records = None
            else:
                if size > end - pos:
                    raise ProtocolError(f"records of {size} bytes overrun the body")
                records = buf[pos : pos + size]
                pos += size
            partitions.append(ProducePartitionData(index, records))
        topics.append(ProduceTopicData(name, None, partitions))
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


def _decode_flexible(buf: memoryview, version: int) -> ProduceRequest:
    end = len(buf)
    n = buf[0]
    if n < 0x80:
        pos = 1
    else:
        n, pos = _read_uvarint(buf, 0)
    if n == 0:
        transactional_id = None
    else:
        n -= 1
        if n > end - pos:
            raise ProtocolError("transactional_id overruns the body")
        transactional_id = utf_8_decode(buf[pos : pos + n], "replace", True)[0]
        pos += n
    acks, timeout_ms = _HI(buf, pos)
    pos += 6
    topic_count = buf[pos]
    if topic_count < 0x80:
        pos += 1
    else:
        topic_count, pos = _read_uvarint(buf, pos)
    topic_count -= 1
    if topic_count < 0 or topic_count > min(end - pos, MAX_ARRAY_ELEMENTS):
        raise ProtocolError(f"invalid topic count {topic_count}")
    by_id = version >= _FIRST_TOPIC_ID
    topics = []
    for _ in range(topic_count):
        if by_id:
            view = buf[pos : pos + 16]
            if len(view) != 16:
                raise ProtocolError("topic_id overruns the body")
            raw = view.tobytes()
            name = None
            topic_id = None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)
            pos += 16
        else:
            n = buf[pos]
            if n < 0x80:
                pos += 1
            else:
                n, pos = _read_uvarint(buf, pos)
            n -= 1
            if n < 0 or n > end - pos:
                raise ProtocolError(f"invalid topic name length {n}")
            name = utf_8_decode(buf[pos : pos + n], "replace", True)[0]
            topic_id = None
            pos += n
        partition_count = buf[pos]
        if partition_count < 0x80:
            pos += 1
        else:
            partition_count, pos = _read_uvarint(buf, pos)
        partition_count -= 1
        if partition_count < 0 or partition_count > min(end - pos, MAX_ARRAY_ELEMENTS):
            raise ProtocolError(f"invalid partition count {partition_count}")
        partitions = []
        for _ in range(partition_count):
            (index,) = _I32(buf, pos)
            size, pos = _read_uvarint(buf, pos + 4)
            if size == 0:
                records = None
            else:
                size -= 1
                if size > end - pos:
                    raise ProtocolError(f"records of {size} bytes overrun the body")
                records = buf[pos : pos + size]
                pos += size
            if buf[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(buf, pos)
            partitions.append(ProducePartitionData(index, records))
        if buf[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(buf, pos)
        topics.append(ProduceTopicData(name, topic_id, partitions))
    skip_tagged_fields(buf, pos)
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


# --------------------------------------------------------------------------- encoding

_P_I32 = struct.Struct(">i").pack
# Partition prefixes: index, error_code, base_offset, log_append_time_ms[, log_start_offset].
_P_PART_V3 = struct.Struct(">ihqq").pack
_P_PART_V5 = struct.Struct(">ihqqq").pack
# v8 partition without record errors nor message: + empty array + null string.
_P_PART_V8_PLAIN = struct.Struct(">ihqqqih").pack
# v9+ partition without record errors, message nor tags: + empty array + null + no tags.
_P_PART_V9_PLAIN = struct.Struct(">ihqqqBBB").pack
_P_LEADER_TAG = struct.Struct(">BBiiB").pack  # tag 0, size 9, leader_id, epoch, no tags


def _topic_key(topic: ProduceTopicResponse, version: int) -> bytes:
    if version >= _FIRST_TOPIC_ID:
        return _ZERO_UUID if topic.topic_id is None else topic.topic_id.bytes
    if topic.name is None:
        raise ValueError(f"Produce response v{version} needs topic names")
    return (
        write_compact_string(topic.name) if version >= _FIRST_FLEXIBLE else write_string(topic.name)
    )


def encode_produce_response(
    version: int,
    topics: list[ProduceTopicResponse],
    throttle_time_ms: int = 0,
    node_endpoints: list[tuple[int, str, int, str | None]] | None = None,
) -> bytes:
    """Serialize a Produce response body (without size prefix and response header).

    ``node_endpoints`` are (node_id, host, port, rack) tuples, written (v10+)
    only when non-empty, like Kafka's generated code.
    """
    check_version(version, MIN_VERSION, MAX_VERSION, "Produce response")
    try:
        if version >= _FIRST_FLEXIBLE:
            return _encode_flexible(version, topics, throttle_time_ms, node_endpoints)
        return _encode_legacy(version, topics, throttle_time_ms)
    except struct.error as exc:
        raise ValueError(f"value out of range for Produce response v{version}: {exc}") from None


def _encode_legacy(
    version: int, topics: list[ProduceTopicResponse], throttle_time_ms: int
) -> bytes:
    out = [_P_I32(len(topics))]
    append = out.append
    for topic in topics:
        append(_topic_key(topic, version))
        append(_P_I32(len(topic.partitions)))
        for p in topic.partitions:
            if version < 5:
                append(_P_PART_V3(p.index, p.error_code, p.base_offset, p.log_append_time_ms))
            elif version < 8:
                append(
                    _P_PART_V5(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                    )
                )
            elif not p.record_errors and p.error_message is None:
                append(
                    _P_PART_V8_PLAIN(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                        0,
                        -1,
                    )
                )
            else:
                append(
                    _P_PART_V5(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                    )
                )
                append(_P_I32(len(p.record_errors)))
                for batch_index, message in p.record_errors:
                    append(_P_I32(batch_index))
                    append(write_nullable_string(message))
                append(write_nullable_string(p.error_message))
    append(_P_I32(throttle_time_ms))
    return b"".join(out)


def _encode_flexible(
    version: int,
    topics: list[ProduceTopicResponse],
    throttle_time_ms: int,
    node_endpoints: list[tuple[int, str, int, str | None]] | None,
) -> bytes:
    leaders = version >= 10
    out = [_uvarint(len(topics) + 1)]
    append = out.append
    for topic in topics:
        append(_topic_key(topic, version))
        append(_uvarint(len(topic.partitions) + 1))
        for p in topic.partitions:
            leader = p.current_leader if leaders else None
            if leader is not None and leader[0] == -1 and leader[1] == -1:
                leader = None  # Kafka omits a tagged field holding its default
            if not p.record_errors and p.error_message is None and leader is None:
                append(
                    _P_PART_V9_PLAIN(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                        1,
                        0,
                        0,
                    )
                )
                continue
            append(
                _P_PART_V5(
                    p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
                )
            )
            append(_uvarint(len(p.record_errors) + 1))
            for batch_index, message in p.record_errors:
                append(_P_I32(batch_index))
                append(write_compact_nullable_string(message))
                append(b"\x00")
            append(write_compact_nullable_string(p.error_message))
            if leader is None:
                append(b"\x00")
            else:
                append(b"\x01")
                append(_P_LEADER_TAG(0, 9, leader[0], leader[1], 0))
        append(b"\x00")  # topic tagged fields
    append(_P_I32(throttle_time_ms))
    if leaders and node_endpoints:
        endpoints = [_uvarint(len(node_endpoints) + 1)]
        for node_id, host, port, rack in node_endpoints:
            endpoints.append(_P_I32(node_id))
            endpoints.append(write_compact_string(host))
            endpoints.append(_P_I32(port))
            endpoints.append(write_compact_nullable_string(rack))
            endpoints.append(b"\x00")
        payload = b"".join(endpoints)
        append(b"\x01\x00")  # one tagged field, tag 0
        append(_uvarint(len(payload)))
        append(payload)
    else:
        append(b"\x00")
    return b"".join(out)
