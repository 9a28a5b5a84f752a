"""Hand-tuned Fetch codec (API key 1): request v4-v18, response v4-v18.

The response side never touches record data: each partition's ``records`` is
an opaque object (typically a file slice the server hands to ``sendfile``)
and only its ``records_size`` is written, as the length prefix. The encoder
returns a short list of parts - joined byte chunks interleaved with those
opaque objects - ready for ``writelines``/``sendfile``.

Wire layout (Kafka's FetchRequest.json / FetchResponse.json):

* flexible from v12; topics by ``topic_id`` instead of name from v13;
* request: ``replica_id`` is a plain field up to v14 and moves into the
  tagged ``replica_state`` (tag 1, with ``replica_epoch``) from v15;
  ``cluster_id`` is tag 0 (v12+); per partition ``replica_directory_id``
  (tag 0, v17+) and ``high_watermark`` (tag 1, v18+);
* response: ``diverging_epoch``/``current_leader``/``snapshot_id`` are
  partition tags 0/1/2 (v12+), ``node_endpoints`` top-level tag 0 (v16+).
"""

from __future__ import annotations

import itertools
import struct
import uuid
from codecs import utf_8_decode
from collections.abc import Iterable
from dataclasses import dataclass, field

from strom.protocol.errors import ProtocolError
from strom.protocol.primitives import (
    MAX_ARRAY_ELEMENTS,
    byte_view,
    check_version,
    read_tag_count,
    skip_tagged_fields,
    write_compact_nullable_string,
    write_compact_string,
    write_string,
)
from strom.protocol.primitives import read_uvarint as _read_uvarint
from strom.protocol.primitives import write_uvarint as _uvarint

__all__ = [
    "MAX_VERSION",
    "MIN_VERSION",
    "FetchPartition",
    "FetchPartitionResponse",
    "FetchRequest",
    "FetchTopic",
    "FetchTopicResponse",
    "ProtocolError",
    "decode_fetch_request",
    "encode_fetch_response",
]

MIN_VERSION = 4
MAX_VERSION = 18
_FIRST_FLEXIBLE = 12
_FIRST_TOPIC_ID = 13
_FIRST_REPLICA_STATE = 15
_NO_HIGH_WATERMARK = 2**63 - 1  # Kafka's default: "the feature is not supported"


@dataclass(slots=True)
class FetchPartition:
    partition: int
    current_leader_epoch: int = -1
    fetch_offset: int = 0
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    partition_max_bytes: int = 0
    replica_directory_id: uuid.UUID | None = None
    """Tagged (v17+): the follower's log directory."""
    high_watermark: int = _NO_HIGH_WATERMARK
    """Tagged (v18+): the high watermark the fetching replica knows."""


@dataclass(slots=True)
class FetchTopic:
    topic: str | None
    topic_id: uuid.UUID | None
    partitions: list[FetchPartition]


@dataclass(slots=True)
class FetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten: list[tuple[str | None, uuid.UUID | None, list[int]]]
    rack_id: str = ""
    cluster_id: str | None = None
    replica_epoch: int = -1


@dataclass(slots=True)
class FetchPartitionResponse:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    """(producer_id, first_offset) pairs; None writes a null array."""
    preferred_read_replica: int = -1
    records: object = None
    """Opaque (file slice) or bytes-like; None writes null records."""
    records_size: int = 0
    """Length written for an opaque ``records``; ignored for bytes-like records."""
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end_offset); tagged v12+, written when set and not (-1, -1)."""
    current_leader: tuple[int, int] | None = None
    """(leader_id, leader_epoch); tagged v12+, written when set and not (-1, -1)."""
    snapshot_id: tuple[int, int] | None = None
    """(end_offset, epoch); tagged v12+, written when set and not (-1, -1)."""


@dataclass(slots=True)
class FetchTopicResponse:
    topic: str | None
    topic_id: uuid.UUID | None
    partitions: list[FetchPartitionResponse] = field(default_factory=list)


# --------------------------------------------------------------------------- decoding

_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_IQ = struct.Struct(">iq").unpack_from
_HEAD_V4 = struct.Struct(">iiiib")  # replica_id, max_wait, min_bytes, max_bytes, isolation
_HEAD_V7 = struct.Struct(">iiiibii")  # + session_id, session_epoch
_HEAD_V15 = struct.Struct(">iiibii")  # v15+: replica_id moved to a tag
# Partition layouts: v4 "iqi" (partition, fetch_offset, partition_max_bytes), v5 adds
# log_start_offset ("iqqi"), v9 current_leader_epoch ("iiqqi"), v12 last_fetched_epoch.
_PART_V12 = struct.Struct(">iiqiqi")
_MINUS_ONE = itertools.repeat(-1)
_batch_structs: dict[tuple[str, int], struct.Struct] = {}


def _batch_struct(unit: str, count: int) -> struct.Struct:
    """One Struct for ``count`` consecutive fixed-size partitions (cached for small counts)."""
    key = (unit, count)
    compiled = _batch_structs.get(key)
    if compiled is None:
        compiled = struct.Struct(">" + unit * count)
        if count <= 256 and len(_batch_structs) < 1024:
            _batch_structs[key] = compiled
    return compiled


_ZERO_UUID = bytes(16)




def _read_uuid(buf: memoryview, pos: int) -> uuid.UUID | None:
    raw = buf[pos : pos + 16].tobytes()
    if len(raw) != 16:
        raise ProtocolError("uuid overruns the body")
    return None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)


def decode_fetch_request(body: memoryview, version: int) -> FetchRequest:
    """Parse a Fetch request body (after the request header).

    From v15 ``replica_id``/``replica_epoch`` come from the tagged
    ``replica_state``; unknown tags are skipped. Raises :class:`ProtocolError`
    on malformed input.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ProtocolError(f"unsupported Fetch request version {version}")
    buf = body if body.__class__ is memoryview and body.format == "B" else byte_view(body)
    try:
        if version >= _FIRST_FLEXIBLE:
            return _decode_flexible(buf, version)
        return _decode_legacy(buf, version)
    except (struct.error, IndexError) as exc:
        raise ProtocolError(f"truncated Fetch v{version} request: {exc}") from None


def _legacy_str(buf: memoryview, pos: int, end: int) -> tuple[str, int]:
    n = (buf[pos] << 8) | buf[pos + 1]
    pos += 2
    if n >= 0x8000 or n > end - pos:
        raise ProtocolError(f"invalid string length {n}")
    return utf_8_decode(buf[pos : pos + n], "replace", True)[0], pos + n


def _compact_str(buf: memoryview, pos: int, end: int) -> tuple[str | None, int]:
    n, pos = _read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    n -= 1
    if n > end - pos:
        raise ProtocolError(f"invalid string length {n}")
    return utf_8_decode(buf[pos : pos + n], "replace", True)[0], pos + n


def _decode_legacy(buf: memoryview, version: int) -> FetchRequest:
    end = len(buf)
    if version >= 7:
        replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = (
            _HEAD_V7.unpack_from(buf, 0)
        )
        pos = 25
    else:
        replica_id, max_wait, min_bytes, max_bytes, isolation = _HEAD_V4.unpack_from(buf, 0)
        session_id, session_epoch = 0, -1
        pos = 17
    (count,) = _I32(buf, pos)
    pos += 4
    if count < 0 or count > min(end - pos, MAX_ARRAY_ELEMENTS):
        raise ProtocolError(f"invalid topic count {count}")
    if version >= 9:
        unit, step = "iiqqi", 28
    elif version >= 5:
        unit, step = "iqqi", 24
    else:
        unit, step = "iqi", 16
    topics = []
    for _ in range(count):
        name, pos = _legacy_str(buf, pos, end)
        (pcount,) = _I32(buf, pos)
        pos += 4
        if pcount < 0 or pcount > MAX_ARRAY_ELEMENTS or pcount * step > end - pos:
            raise ProtocolError(f"invalid partition count {pcount}")
        vals = _batch_struct(unit, pcount).unpack_from(buf, pos)
        pos += step * pcount
        columns: tuple[Iterable[int], ...]
        if version >= 9:
            columns = (vals[0::5], vals[1::5], vals[2::5], _MINUS_ONE, vals[3::5], vals[4::5])
        elif version >= 5:
            columns = (vals[0::4], _MINUS_ONE, vals[1::4], _MINUS_ONE, vals[2::4], vals[3::4])
        else:
            columns = (vals[0::3], _MINUS_ONE, vals[1::3], _MINUS_ONE, _MINUS_ONE, vals[2::3])
        partitions = list(map(FetchPartition, *columns))
        topics.append(FetchTopic(name, None, partitions))
    forgotten: list[tuple[str | None, uuid.UUID | None, list[int]]] = []
    rack_id = ""
    if version >= 7:
        (count,) = _I32(buf, pos)
        pos += 4
        if count < 0 or count > min(end - pos, MAX_ARRAY_ELEMENTS):
            raise ProtocolError(f"invalid forgotten topic count {count}")
        for _ in range(count):
            name, pos = _legacy_str(buf, pos, end)
            (pcount,) = _I32(buf, pos)
            pos += 4
            if pcount < 0 or pcount > MAX_ARRAY_ELEMENTS or pcount * 4 > end - pos:
                raise ProtocolError(f"invalid forgotten partition count {pcount}")
            forgotten.append((name, None, list(struct.unpack_from(f">{pcount}i", buf, pos))))
            pos += 4 * pcount
        if version >= 11:
            rack_id, pos = _legacy_str(buf, pos, end)
    return FetchRequest(
        replica_id,
        max_wait,
        min_bytes,
        max_bytes,
        isolation,
        session_id,
        session_epoch,
        topics,
        forgotten,
        rack_id,
    )


def _partition_tags(buf: memoryview, pos: int, end: int, part: FetchPartition, version: int) -> int:
    count, pos = read_tag_count(buf, pos)
    for _ in range(count):
        tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        if size > end - pos:
            raise ProtocolError(f"tagged field of {size} bytes overruns the body")
        if tag == 0 and version >= 17:
            if size != 16:
                raise ProtocolError("replica_directory_id must be 16 bytes")
            part.replica_directory_id = _read_uuid(buf, pos)
        elif tag == 1 and version >= 18:
            if size != 8:
                raise ProtocolError("high_watermark must be 8 bytes")
            (part.high_watermark,) = _I64(buf, pos)
        pos += size
    return pos


def _decode_flexible(buf: memoryview, version: int) -> FetchRequest:
    # Hot path: single-byte varints and empty tag buffers are read inline
    # (a Python call costs as much as the field itself).
    end = len(buf)
    if version >= _FIRST_REPLICA_STATE:
        max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = (
            _HEAD_V15.unpack_from(buf, 0)
        )
        replica_id = -1
        pos = 21
    else:
        replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = (
            _HEAD_V7.unpack_from(buf, 0)
        )
        pos = 25
    by_id = version >= _FIRST_TOPIC_ID
    count = buf[pos]
    if count < 0x80:
        pos += 1
    else:
        count, pos = _read_uvarint(buf, pos)
    count -= 1
    if count < 0 or count > min(end - pos, MAX_ARRAY_ELEMENTS):
        raise ProtocolError(f"invalid topic count {count}")
    topics = []
    for _ in range(count):
        if by_id:
            name = None
            topic_id = _read_uuid(buf, pos)
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
            pos += n
            topic_id = None
        pcount = buf[pos]
        if pcount < 0x80:
            pos += 1
        else:
            pcount, pos = _read_uvarint(buf, pos)
        pcount -= 1
        if pcount < 0 or pcount > MAX_ARRAY_ELEMENTS or pcount * 33 > end - pos:
            raise ProtocolError(f"invalid partition count {pcount}")
        batch = _batch_structs.get(("iiqiqiB", pcount)) or _batch_struct("iiqiqiB", pcount)
        vals = batch.unpack_from(buf, pos) if batch.size <= end - pos else None
        if vals is not None and vals[6::7].count(0) == pcount:
            # No partition carries tagged fields: one unpack for all of them.
            partitions = list(
                map(
                    FetchPartition,
                    vals[0::7],
                    vals[1::7],
                    vals[2::7],
                    vals[3::7],
                    vals[4::7],
                    vals[5::7],
                )
            )
            pos += batch.size
        else:
            unpack = _PART_V12.unpack_from
            partitions = []
            for _ in range(pcount):
                part = FetchPartition(*unpack(buf, pos))
                pos += 32
                if buf[pos] == 0:
                    pos += 1
                else:
                    pos = _partition_tags(buf, pos, end, part, version)
                partitions.append(part)
        if buf[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(buf, pos)
        topics.append(FetchTopic(name, topic_id, partitions))
    forgotten = []
    if buf[pos] == 1:  # the usual empty array
        pos += 1
    else:
        count, pos = _read_uvarint(buf, pos)
        count -= 1
        if count < 0 or count > min(end - pos, MAX_ARRAY_ELEMENTS):
            raise ProtocolError(f"invalid forgotten topic count {count}")
        for _ in range(count):
            if by_id:
                name = None
                topic_id = _read_uuid(buf, pos)
                pos += 16
            else:
                name, pos = _compact_str(buf, pos, end)
                if name is None:
                    raise ProtocolError("null forgotten topic name")
                topic_id = None
            pcount, pos = _read_uvarint(buf, pos)
            pcount -= 1
            if pcount < 0 or pcount > MAX_ARRAY_ELEMENTS or pcount * 4 > end - pos:
                raise ProtocolError(f"invalid forgotten partition count {pcount}")
            forgotten.append((name, topic_id, list(struct.unpack_from(f">{pcount}i", buf, pos))))
            pos += 4 * pcount
            pos = skip_tagged_fields(buf, pos)
    if buf[pos] == 1:  # the usual empty rack
        rack_id = ""
        pos += 1
    else:
        rack, pos = _compact_str(buf, pos, end)
        if rack is None:
            raise ProtocolError("null rack_id")
        rack_id = rack
    cluster_id = None
    replica_epoch = -1
    if buf[pos] != 0:
        count, pos = read_tag_count(buf, pos)
        for _ in range(count):
            tag, pos = _read_uvarint(buf, pos)
            size, pos = _read_uvarint(buf, pos)
            if size > end - pos:
                raise ProtocolError(f"tagged field of {size} bytes overruns the body")
            if tag == 0:
                cluster_id, stop = _compact_str(buf, pos, pos + size)
                if stop > pos + size:
                    raise ProtocolError("cluster_id overruns its tagged field")
            elif tag == 1 and version >= _FIRST_REPLICA_STATE:
                if size < 13:
                    raise ProtocolError("replica_state tagged field too short")
                replica_id, replica_epoch = _IQ(buf, pos)
                if skip_tagged_fields(buf, pos + 12) > pos + size:
                    raise ProtocolError("replica_state overruns its tagged field")
            pos += size
    return FetchRequest(
        replica_id,
        max_wait,
        min_bytes,
        max_bytes,
        isolation,
        session_id,
        session_epoch,
        topics,
        forgotten,
        rack_id,
        cluster_id,
        replica_epoch,
    )


# --------------------------------------------------------------------------- encoding

_P_I32 = struct.Struct(">i").pack
_P_TOP_V4 = struct.Struct(">ii").pack  # throttle, topic count
_P_TOP_V7 = struct.Struct(">ihii").pack  # throttle, error_code, session_id, topic count
_P_TOP_V12 = struct.Struct(">ihi").pack  # throttle, error_code, session_id
_P_PART_V4 = struct.Struct(">ihqq").pack  # partition, error, hw, lso
_P_PART_V5 = struct.Struct(">ihqqq").pack  # + log_start_offset
_P_PART_V5_NOTXN = struct.Struct(">ihqqqi").pack  # + null aborted_transactions
_P_PART_V11_NOTXN = struct.Struct(">ihqqqii").pack  # + preferred_read_replica
_P_PART_V12_NOTXN = struct.Struct(">ihqqqBi").pack  # compact null array + preferred
_P_TXN = struct.Struct(">qq").pack
_P_TXN_TAGGED = struct.Struct(">qqB").pack
_P_DIVERGING = struct.Struct(">BBiqB").pack  # tag 0, size 13, epoch, end_offset, no tags
_P_LEADER = struct.Struct(">BBiiB").pack  # tag 1, size 9, leader_id, leader_epoch, no tags
_P_SNAPSHOT = struct.Struct(">BBqiB").pack  # tag 2, size 13, end_offset, epoch, no tags
_BYTES_LIKE = (bytes, bytearray, memoryview)


def _if_set(pair: tuple[int, int] | None) -> tuple[int, int] | None:
    """The pair, or None when it is absent or (-1, -1) (the tagged field's default)."""
    return pair if pair is not None and (pair[0] != -1 or pair[1] != -1) else None


def encode_fetch_response(
    version: int,
    topics: list[FetchTopicResponse],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: list[tuple[int, str, int, str | None]] | None = None,
) -> tuple[list[object], int]:
    """Serialize a Fetch response body into ``(parts, total_size)``.

    ``parts`` holds ``bytes`` chunks (consecutive chunks joined) and, untouched,
    every opaque ``records`` object; ``total_size`` is the body length (bytes
    chunks plus ``records_size`` of opaque records). Bytes-like ``records`` are
    copied into the chunks. ``node_endpoints`` (v16+) are (node_id, host,
    port, rack) tuples, written only when non-empty.
    """
    check_version(version, MIN_VERSION, MAX_VERSION, "Fetch response")
    try:
        return _encode(version, topics, throttle_time_ms, error_code, session_id, node_endpoints)
    except struct.error as exc:
        raise ValueError(f"value out of range for Fetch response v{version}: {exc}") from None


def _encode(
    version: int,
    topics: list[FetchTopicResponse],
    throttle_time_ms: int,
    error_code: int,
    session_id: int,
    node_endpoints: list[tuple[int, str, int, str | None]] | None,
) -> tuple[list[object], int]:
    flexible = version >= _FIRST_FLEXIBLE
    by_id = version >= _FIRST_TOPIC_ID
    parts: list[object] = []
    total = 0
    cur: list[bytes | bytearray | memoryview]
    if flexible:
        cur = [_P_TOP_V12(throttle_time_ms, error_code, session_id), _uvarint(len(topics) + 1)]
    elif version >= 7:
        cur = [_P_TOP_V7(throttle_time_ms, error_code, session_id, len(topics))]
    else:
        cur = [_P_TOP_V4(throttle_time_ms, len(topics))]
    append = cur.append
    for topic in topics:
        if by_id:
            append(_ZERO_UUID if topic.topic_id is None else topic.topic_id.bytes)
        elif topic.topic is None:
            raise ValueError(f"Fetch response v{version} needs topic names")
        elif flexible:
            append(write_compact_string(topic.topic))
        else:
            append(write_string(topic.topic))
        partitions = topic.partitions
        append(_uvarint(len(partitions) + 1) if flexible else _P_I32(len(partitions)))
        for p in partitions:
            txns = p.aborted_transactions
            # -- fixed prefix up to (and including) preferred_read_replica
            if txns is None:
                if flexible:
                    append(
                        _P_PART_V12_NOTXN(
                            p.partition,
                            p.error_code,
                            p.high_watermark,
                            p.last_stable_offset,
                            p.log_start_offset,
                            0,
                            p.preferred_read_replica,
                        )
                    )
                elif version >= 11:
                    append(
                        _P_PART_V11_NOTXN(
                            p.partition,
                            p.error_code,
                            p.high_watermark,
                            p.last_stable_offset,
                            p.log_start_offset,
                            -1,
                            p.preferred_read_replica,
                        )
                    )
                elif version >= 5:
                    append(
                        _P_PART_V5_NOTXN(
                            p.partition,
                            p.error_code,
                            p.high_watermark,
                            p.last_stable_offset,
                            p.log_start_offset,
                            -1,
                        )
                    )
                else:
                    append(
                        _P_PART_V4(
                            p.partition, p.error_code, p.high_watermark, p.last_stable_offset
                        )
                    )
                    append(b"\xff\xff\xff\xff")
            else:
                if version >= 5:
                    append(
                        _P_PART_V5(
                            p.partition,
                            p.error_code,
                            p.high_watermark,
                            p.last_stable_offset,
                            p.log_start_offset,
                        )
                    )
                else:
                    append(
                        _P_PART_V4(
                            p.partition, p.error_code, p.high_watermark, p.last_stable_offset
                        )
                    )
                if flexible:
                    append(_uvarint(len(txns) + 1))
                    for producer_id, first_offset in txns:
                        append(_P_TXN_TAGGED(producer_id, first_offset, 0))
                else:
                    append(_P_I32(len(txns)))
                    for producer_id, first_offset in txns:
                        append(_P_TXN(producer_id, first_offset))
                if version >= 11:
                    append(_P_I32(p.preferred_read_replica))
            # -- records: length prefix, then the data (copied or left opaque)
            records = p.records
            if records is None:
                append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            elif isinstance(records, _BYTES_LIKE):
                size = records.nbytes if isinstance(records, memoryview) else len(records)
                append(_uvarint(size + 1) if flexible else _P_I32(size))
                append(records)
            else:
                size = p.records_size
                if size < 0:
                    raise ValueError(f"negative records_size {size}")
                append(_uvarint(size + 1) if flexible else _P_I32(size))
                chunk = b"".join(cur)
                total += len(chunk) + size
                parts.append(chunk)
                parts.append(records)
                cur = []
                append = cur.append
            # -- partition tagged fields
            if flexible:
                diverging = _if_set(p.diverging_epoch)
                leader = _if_set(p.current_leader)
                snapshot = _if_set(p.snapshot_id)
                if diverging is None and leader is None and snapshot is None:
                    append(b"\x00")
                else:
                    append(
                        _UVARINT_SMALL[
                            (diverging is not None) + (leader is not None) + (snapshot is not None)
                        ]
                    )
                    if diverging is not None:
                        append(_P_DIVERGING(0, 13, diverging[0], diverging[1], 0))
                    if leader is not None:
                        append(_P_LEADER(1, 9, leader[0], leader[1], 0))
                    if snapshot is not None:
                        append(_P_SNAPSHOT(2, 13, snapshot[0], snapshot[1], 0))
        if flexible:
            append(b"\x00")  # topic tagged fields
    if flexible:
        if version >= 16 and node_endpoints:
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
    if cur:
        chunk = b"".join(cur)
        total += len(chunk)
        parts.append(chunk)
    return parts, total


_UVARINT_SMALL = (b"\x00", b"\x01", b"\x02", b"\x03")
