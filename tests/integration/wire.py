"""A small hand-written Kafka wire codec for integration tests.

It is deliberately independent of ``strom.protocol`` (and of kio, which Strom builds on), so a bug in the
broker's codec cannot hide behind the same bug in the test. Only old, non-flexible request versions are
spoken here (plus ApiVersions v3), which keeps every frame easy to build by hand and easy to break on
purpose.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import crc32c

# API keys
PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18

# Error codes (Kafka's numbering)
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


# --------------------------------------------------------------------------- encoding primitives


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def nbytes(b: bytes | None) -> bytes:
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


def array(items: Sequence[bytes] | None) -> bytes:
    if items is None:
        return i32(-1)
    return i32(len(items)) + b"".join(items)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(v: int) -> bytes:
    """Zigzag varint (records use it for every length and delta)."""
    return uvarint((v << 1) ^ (v >> 63))


def compact_string(s: str) -> bytes:
    b = s.encode()
    return uvarint(len(b) + 1) + b


# --------------------------------------------------------------------------- decoding


class Reader:
    """Cursor over a response body; every read is bounds-checked by struct."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def _unpack(self, fmt: str, size: int) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def i8(self) -> int:
        return self._unpack(">b", 1)

    def i16(self) -> int:
        return self._unpack(">h", 2)

    def i32(self) -> int:
        return self._unpack(">i", 4)

    def u32(self) -> int:
        return self._unpack(">I", 4)

    def i64(self) -> int:
        return self._unpack(">q", 8)

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("read past end")
        b = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return b

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.raw(n).decode()

    def nbytes(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.raw(n)

    def array(self, item) -> list | None:
        n = self.i32()
        return None if n < 0 else [item(self) for _ in range(n)]

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def remaining(self) -> int:
        return len(self.data) - self.pos


# --------------------------------------------------------------------------- record batches (magic 2)


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None
    offset: int | None = None


def _encode_record(rec: Record, offset_delta: int, ts_delta: int) -> bytes:
    body = bytearray()
    body += i8(0)  # attributes
    body += varint(ts_delta)
    body += varint(offset_delta)
    for part in (rec.key, rec.value):
        if part is None:
            body += varint(-1)
        else:
            body += varint(len(part)) + part
    body += varint(len(rec.headers))
    for hk, hv in rec.headers:
        kb = hk.encode()
        body += varint(len(kb)) + kb
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + bytes(body)


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    """An uncompressed v2 record batch with a correct CRC32C."""
    recs = list(records)
    now = int(time.time() * 1000)
    stamps = [r.timestamp if r.timestamp is not None else now for r in recs]
    base_ts = stamps[0]
    payload = b"".join(
        _encode_record(r, i, ts - base_ts)
        for i, (r, ts) in enumerate(zip(recs, stamps, strict=True))
    )
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            len(recs) - 1,
            base_ts,
            max(stamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(recs),
        )
        + payload
    )
    crc = crc32c.crc32c(after_crc)
    # batchLength counts from partitionLeaderEpoch to the end.
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, 0, 2, crc) + after_crc


def simple_batch(*values: bytes, key: bytes | None = None) -> bytes:
    return build_batch(Record(key, v) for v in values)


def batch_of_size(total: int) -> bytes:
    """One record whose batch is exactly ``total`` bytes long (12-byte log overhead included)."""
    empty = len(build_batch([Record(None, b"")]))
    # Grow the value until the varint widths settle on the exact size.
    n = total - empty
    for guess in range(max(0, n - 8), n + 1):
        b = build_batch([Record(None, b"x" * guess)])
        if len(b) == total:
            return b
    raise AssertionError(f"cannot build a batch of exactly {total} bytes")


def corrupt_crc(batch: bytes) -> bytes:
    """Flip one bit in the last record byte so the stored CRC no longer matches."""
    b = bytearray(batch)
    b[-1] ^= 0x01
    return bytes(b)


@dataclass
class BatchHeader:
    base_offset: int
    length: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int


def parse_batches(data: bytes | None) -> list[tuple[BatchHeader, list[Record] | None]]:
    """Split a record set into batches; records are decoded only for uncompressed batches.

    A partial batch at the end (allowed in Fetch responses) is ignored.
    """
    out: list[tuple[BatchHeader, list[Record] | None]] = []
    if not data:
        return out
    pos = 0
    while pos + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        if pos + 12 + length > len(data):
            break
        r = Reader(data[pos + 12 : pos + 12 + length])
        r.i32()  # partition leader epoch
        magic = r.i8()
        if magic != 2:
            raise AssertionError(f"unexpected magic {magic}")
        crc = r.u32()
        if crc32c.crc32c(bytes(r.data[r.pos :])) != crc:
            raise AssertionError(f"bad CRC in batch at offset {base_offset}")
        hdr = BatchHeader(
            base_offset,
            length,
            magic,
            crc,
            r.i16(),
            r.i32(),
            r.i64(),
            r.i64(),
            r.i64(),
            r.i16(),
            r.i32(),
            r.i32(),
        )
        recs: list[Record] | None = None
        if hdr.attributes & 0x7 == 0:
            recs = []
            for _ in range(hdr.count):
                r.varint()  # record length
                r.i8()
                ts = hdr.base_timestamp + r.varint()
                off = base_offset + r.varint()
                kl = r.varint()
                key = None if kl < 0 else r.raw(kl)
                vl = r.varint()
                value = None if vl < 0 else r.raw(vl)
                headers = []
                for _ in range(r.varint()):
                    hk = r.raw(r.varint()).decode()
                    hl = r.varint()
                    headers.append((hk, None if hl < 0 else r.raw(hl)))
                recs.append(Record(key, value, headers, ts, off))
        out.append((hdr, recs))
        pos += 12 + length
    return out


def records_of(data: bytes | None) -> list[Record]:
    recs: list[Record] = []
    for hdr, rs in parse_batches(data):
        if rs is None:
            raise AssertionError(f"compressed batch at {hdr.base_offset}: not decoded here")
        recs.extend(rs)
    return recs


# --------------------------------------------------------------------------- requests


def request_header_v1(
    api_key: int, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    return i16(api_key) + i16(version) + i32(correlation_id) + string(client_id)


def request_header_v2(
    api_key: int, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    return request_header_v1(api_key, version, correlation_id, client_id) + b"\x00"


def frame(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


def produce_v3_body(
    topic: str, partition: int, records: bytes | None, *, acks: int = -1, timeout_ms: int = 10_000
) -> bytes:
    part = i32(partition) + nbytes(records)
    return string(None) + i16(acks) + i32(timeout_ms) + array([string(topic) + array([part])])


def fetch_v4_body(
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 10 * 1024 * 1024,
) -> bytes:
    part = i32(partition) + i64(offset) + i32(partition_max_bytes)
    return (
        i32(-1)
        + i32(max_wait_ms)
        + i32(min_bytes)
        + i32(max_bytes)
        + i8(0)
        + array([string(topic) + array([part])])
    )


def list_offsets_v1_body(topic: str, partition: int, timestamp: int) -> bytes:
    return i32(-1) + array([string(topic) + array([i32(partition) + i64(timestamp)])])


def metadata_v4_body(topics: list[str] | None, allow_auto_create: bool) -> bytes:
    return array(None if topics is None else [string(t) for t in topics]) + i8(
        int(allow_auto_create)
    )


# --------------------------------------------------------------------------- responses


@dataclass
class ProducePartition:
    partition: int
    error: int
    base_offset: int
    log_append_time: int


def parse_produce_v3(body: bytes) -> dict[tuple[str, int], ProducePartition]:
    r = Reader(body)
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            p = ProducePartition(r.i32(), r.i16(), r.i64(), r.i64())
            out[(name, p.partition)] = p
    r.i32()  # throttle
    return out


@dataclass
class FetchPartition:
    partition: int
    error: int
    high_watermark: int
    last_stable_offset: int
    records: bytes | None


def parse_fetch_v4(body: bytes) -> dict[tuple[str, int], FetchPartition]:
    r = Reader(body)
    r.i32()  # throttle
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            pid, err, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
            r.array(lambda rr: (rr.i64(), rr.i64()))
            out[(name, pid)] = FetchPartition(pid, err, hw, lso, r.nbytes())
    return out


def parse_list_offsets_v1(body: bytes) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (error, timestamp, offset)."""
    r = Reader(body)
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            pid = r.i32()
            out[(name, pid)] = (r.i16(), r.i64(), r.i64())
    return out


@dataclass
class MetadataTopic:
    error: int
    name: str
    partitions: dict[int, tuple[int, int]]  # partition -> (error, leader)


def parse_metadata_v4(body: bytes) -> tuple[list[tuple[int, str, int]], dict[str, MetadataTopic]]:
    r = Reader(body)
    r.i32()  # throttle
    brokers = r.array(lambda rr: (rr.i32(), rr.string(), rr.i32(), rr.string())) or []
    r.string()  # cluster id
    r.i32()  # controller
    topics: dict[str, MetadataTopic] = {}
    for _ in range(r.i32()):
        err, name = r.i16(), r.string()
        r.i8()  # is_internal
        parts = {}
        for _ in range(r.i32()):
            perr, pid, leader = r.i16(), r.i32(), r.i32()
            r.array(lambda rr: rr.i32())
            r.array(lambda rr: rr.i32())
            parts[pid] = (perr, leader)
        topics[name] = MetadataTopic(err, name, parts)
    return [(b[0], b[1], b[2]) for b in brokers], topics


# --------------------------------------------------------------------------- connection


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


class Conn:
    """One blocking TCP connection to a broker, speaking framed requests."""

    def __init__(self, bootstrap: str, timeout: float = 15.0) -> None:
        self.sock = socket.create_connection(split_bootstrap(bootstrap), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self._ids = itertools.count(1)

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, body: bytes, *, flexible: bool = False) -> int:
        corr = next(self._ids)
        hdr = (request_header_v2 if flexible else request_header_v1)(
            api_key, version, corr, "strom-it"
        )
        self.sock.sendall(frame(hdr + body))
        return corr

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def recv_response(self, correlation_id: int, *, flexible_header: bool = False) -> bytes:
        """Body of the response to ``correlation_id`` (header v0, or v1 when ``flexible_header``)."""
        data = self.recv_frame()
        (corr,) = struct.unpack_from(">i", data)
        if corr != correlation_id:
            raise AssertionError(f"correlation id {corr} != expected {correlation_id}")
        body = data[4:]
        if flexible_header:
            r = Reader(body)
            for _ in range(r.uvarint()):  # tagged fields
                r.uvarint()
                r.raw(r.uvarint())
            body = body[r.pos :]
        return body

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        return self.recv_response(self.send(api_key, version, body))

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True once the peer has closed (EOF or reset), draining anything it sent first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
        return False

    # --------------------------------------------------------------- convenience

    def api_versions_v0(self) -> tuple[int, dict[int, tuple[int, int]]]:
        r = Reader(self.request(API_VERSIONS, 0, b""))
        err = r.i16()
        keys = r.array(lambda rr: (rr.i16(), rr.i16(), rr.i16())) or []
        return err, {k: (lo, hi) for k, lo, hi in keys}

    def produce(
        self, topic: str, partition: int, records: bytes | None, *, acks: int = -1
    ) -> ProducePartition:
        body = self.request(PRODUCE, 3, produce_v3_body(topic, partition, records, acks=acks))
        return parse_produce_v3(body)[(topic, partition)]

    def fetch(self, topic: str, partition: int, offset: int, **kw: int) -> FetchPartition:
        body = self.request(FETCH, 4, fetch_v4_body(topic, partition, offset, **kw))
        return parse_fetch_v4(body)[(topic, partition)]

    def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int, int]:
        body = self.request(LIST_OFFSETS, 1, list_offsets_v1_body(topic, partition, timestamp))
        return parse_list_offsets_v1(body)[(topic, partition)]

    def metadata(
        self, topics: list[str] | None, allow_auto_create: bool = False
    ) -> tuple[list[tuple[int, str, int]], dict[str, MetadataTopic]]:
        return parse_metadata_v4(
            self.request(METADATA, 4, metadata_v4_body(topics, allow_auto_create))
        )


def api_versions_ok(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when the broker answers ApiVersions v0 without error: the readiness probe."""
    try:
        with Conn(bootstrap, timeout=timeout) as c:
            err, keys = c.api_versions_v0()
            return err == NONE and API_VERSIONS in keys
    except (OSError, EOFError, struct.error, AssertionError, ValueError):
        return False
