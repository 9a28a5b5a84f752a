"""Flexible (compact, tagged) versions of Produce, Fetch, ListOffsets and Metadata, by hand.

Like ``wire``, independent of ``strom.protocol`` and kio, so the broker's hand-tuned codecs are
checked against a second reading of Kafka's JSON specs: Produce v9-13 (v13: topic ids), Fetch
v12-18 (v13: topic ids, v18: the replica high watermark tag), ListOffsets v6-11, Metadata v12.
Responses decode into plain dicts including the KIP-951 tags (``current_leader``,
``node_endpoints``) and the KIP-467 fields (``record_errors``, ``error_message``).
"""

from __future__ import annotations

import uuid
from typing import Any

from .wire import (
    FETCH,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    Conn,
    Reader,
    compact_string,
    i8,
    i16,
    i32,
    i64,
    uvarint,
)

NO_HIGH_WATERMARK = 2**63 - 1


def _topic_key(topic: str | uuid.UUID, by_id: bool) -> bytes:
    if by_id:
        assert isinstance(topic, uuid.UUID), "this version names topics by id"
        return topic.bytes
    assert isinstance(topic, str), "this version names topics by name"
    return compact_string(topic)


def _compact_bytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else uvarint(len(b) + 1) + b


def _str(r: Reader) -> str | None:
    n = r.uvarint()
    return None if n == 0 else r.raw(n - 1).decode()


def _tags(r: Reader, known: dict[int, Any] | None = None) -> dict[int, Any]:
    """Read a tag buffer; ``known`` maps a tag to a reader of its payload."""
    out = {}
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        payload = r.raw(size)
        out[tag] = known[tag](Reader(payload)) if known and tag in known else payload
    return out


def _leader(r: Reader) -> tuple[int, int]:
    leader, epoch = r.i32(), r.i32()
    _tags(r)
    return leader, epoch


def _endpoints(r: Reader) -> list[tuple[int, str, int, str | None]]:
    out = []
    for _ in range(r.uvarint() - 1):
        node, host, port, rack = r.i32(), _str(r), r.i32(), _str(r)
        _tags(r)
        out.append((node, host, port, rack))
    return out


# --------------------------------------------------------------------------- Produce v9-13


def produce_body(version: int, topic: str | uuid.UUID, partition: int, records: bytes | None,
                 *, acks: int = -1, timeout_ms: int = 10_000) -> bytes:
    part = i32(partition) + _compact_bytes(records) + b"\x00"
    return (b"\x00" + i16(acks) + i32(timeout_ms) + uvarint(2) + _topic_key(topic, version >= 13)
            + uvarint(2) + part + b"\x00" + b"\x00")


def parse_produce(body: bytes, version: int) -> dict[str, Any]:
    """{"topics": [(name or id, [partition dict])], "node_endpoints": [...]}."""
    r = Reader(body)
    topics = []
    for _ in range(r.uvarint() - 1):
        key = uuid.UUID(bytes=r.raw(16)) if version >= 13 else _str(r)
        parts = []
        for _ in range(r.uvarint() - 1):
            p: dict[str, Any] = {"index": r.i32(), "error": r.i16(), "base_offset": r.i64(),
                                 "log_append_time": r.i64(), "log_start_offset": r.i64()}
            errors = []
            for _ in range(r.uvarint() - 1):
                errors.append((r.i32(), _str(r)))
                _tags(r)
            p["record_errors"] = errors
            p["error_message"] = _str(r)
            p["current_leader"] = _tags(r, {0: _leader}).get(0)
            parts.append(p)
        _tags(r)
        topics.append((key, parts))
    throttle = r.i32()
    endpoints = _tags(r, {0: _endpoints}).get(0, [])
    assert r.remaining() == 0, "trailing bytes after the Produce response"
    return {"topics": topics, "throttle": throttle, "node_endpoints": endpoints}


# --------------------------------------------------------------------------- Fetch v12-18


def fetch_body(version: int, topic: str | uuid.UUID, partition: int, offset: int, *,
               current_leader_epoch: int = -1, max_wait_ms: int = 0, min_bytes: int = 0,
               replica_high_watermark: int | None = None) -> bytes:
    head = i32(-1) if version < 15 else b""  # replica_id moved to a tag in v15
    head += i32(max_wait_ms) + i32(min_bytes) + i32(1 << 20) + i8(0) + i32(0) + i32(-1)
    tags = b"\x00"
    if replica_high_watermark is not None:
        assert version >= 18
        tags = uvarint(1) + uvarint(1) + uvarint(8) + i64(replica_high_watermark)
    part = (i32(partition) + i32(current_leader_epoch) + i64(offset) + i32(-1) + i64(-1)
            + i32(1 << 20) + tags)
    topics = uvarint(2) + _topic_key(topic, version >= 13) + uvarint(2) + part + b"\x00"
    return head + topics + uvarint(1) + compact_string("") + b"\x00"


def parse_fetch(body: bytes, version: int) -> dict[str, Any]:
    r = Reader(body)
    out: dict[str, Any] = {"throttle": r.i32(), "error": r.i16(), "session_id": r.i32()}
    topics = []
    for _ in range(r.uvarint() - 1):
        key = uuid.UUID(bytes=r.raw(16)) if version >= 13 else _str(r)
        parts = []
        for _ in range(r.uvarint() - 1):
            p: dict[str, Any] = {"index": r.i32(), "error": r.i16(), "high_watermark": r.i64(),
                                 "last_stable_offset": r.i64(), "log_start_offset": r.i64()}
            n = r.uvarint()
            for _ in range(max(n - 1, 0)):
                r.i64(), r.i64()
                _tags(r)
            p["preferred_read_replica"] = r.i32()
            size = r.uvarint()
            p["records"] = None if size == 0 else r.raw(size - 1)
            tags = _tags(r, {1: _leader})
            p["current_leader"] = tags.get(1)
            p["diverging_epoch"] = tags.get(0)
            parts.append(p)
        _tags(r)
        topics.append((key, parts))
    out["topics"] = topics
    out["node_endpoints"] = _tags(r, {0: _endpoints}).get(0, [])
    assert r.remaining() == 0, "trailing bytes after the Fetch response"
    return out


# --------------------------------------------------------------------------- ListOffsets v6-11


def list_offsets_body(version: int, topic: str, partition: int, timestamp: int) -> bytes:
    part = i32(partition) + i32(-1) + i64(timestamp) + b"\x00"
    body = (i32(-1) + i8(0) + uvarint(2) + compact_string(topic) + uvarint(2) + part + b"\x00")
    if version >= 10:
        body += i32(1000)  # timeout_ms
    return body + b"\x00"


def parse_list_offsets(body: bytes) -> dict[tuple[str, int], tuple[int, int, int, int]]:
    """(topic, partition) -> (error, timestamp, offset, leader_epoch)."""
    r = Reader(body)
    r.i32()
    out = {}
    for _ in range(r.uvarint() - 1):
        name = _str(r)
        for _ in range(r.uvarint() - 1):
            index, error, ts, offset, epoch = r.i32(), r.i16(), r.i64(), r.i64(), r.i32()
            _tags(r)
            out[(name, index)] = (error, ts, offset, epoch)
        _tags(r)
    _tags(r)
    return out


# --------------------------------------------------------------------------- Metadata v12


def metadata_v12(conn: Conn, topics: list[str]) -> dict[str, dict[str, Any]]:
    """name -> {"id", "error", "partitions": {index: (error, leader, leader_epoch)}}, and the
    brokers under the key ``None``."""
    body = uvarint(len(topics) + 1) + b"".join(
        bytes(16) + compact_string(t) + b"\x00" for t in topics) + i8(0) + i8(0) + b"\x00"
    r = Reader(request(conn, METADATA, 12, body))
    r.i32()
    brokers = []
    for _ in range(r.uvarint() - 1):
        brokers.append((r.i32(), _str(r), r.i32(), _str(r)))
        _tags(r)
    _str(r)
    r.i32()
    out: dict[Any, Any] = {None: brokers}
    for _ in range(r.uvarint() - 1):
        error, name, topic_id = r.i16(), _str(r), uuid.UUID(bytes=r.raw(16))
        r.i8()
        parts = {}
        for _ in range(r.uvarint() - 1):
            perr, index, leader, epoch = r.i16(), r.i32(), r.i32(), r.i32()
            for _ in range(3):  # replicas, isr, offline
                for _ in range(r.uvarint() - 1):
                    r.i32()
            _tags(r)
            parts[index] = (perr, leader, epoch)
        r.i32()
        _tags(r)
        out[name] = {"id": topic_id, "error": error, "partitions": parts}
    return out


def request(conn: Conn, api_key: int, version: int, body: bytes) -> bytes:
    """A flexible request (header v2) and its body (response header v1)."""
    return conn.recv_response(conn.send(api_key, version, body, flexible=True),
                              flexible_header=True)


def produce(conn: Conn, version: int, topic: str | uuid.UUID, partition: int,
            records: bytes | None, **kw: Any) -> dict[str, Any]:
    return parse_produce(request(conn, PRODUCE, version,
                                 produce_body(version, topic, partition, records, **kw)), version)


def fetch(conn: Conn, version: int, topic: str | uuid.UUID, partition: int, offset: int,
          **kw: Any) -> dict[str, Any]:
    return parse_fetch(request(conn, FETCH, version,
                               fetch_body(version, topic, partition, offset, **kw)), version)


def list_offsets(conn: Conn, version: int, topic: str, partition: int,
                 timestamp: int) -> tuple[int, int, int, int]:
    body = request(conn, LIST_OFFSETS, version,
                   list_offsets_body(version, topic, partition, timestamp))
    return parse_list_offsets(body)[(topic, partition)]
