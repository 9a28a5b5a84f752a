"""The embedded consumer protocol: what classic consumers put in JoinGroup and SyncGroup bytes.

A classic group's coordinator never reads these bytes, but a consumer group that has classic
members (KIP-848's online migration) must: it takes a classic member's subscription (topics,
owned partitions, rack) from its JoinGroup metadata, and hands its assignment back in SyncGroup
bytes. Kafka's ConsumerProtocolSubscription v0-v3 and ConsumerProtocolAssignment v0-v3
(non-flexible); a newer version is read as v3, as Kafka's ConsumerProtocol does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from strom.protocol.errors import ProtocolError

HIGHEST_VERSION = 3

TopicPartitions = dict[str, list[int]]


@dataclass
class Subscription:
    version: int
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = field(default_factory=dict)
    generation: int = -1
    rack_id: str | None = None


@dataclass
class Assignment:
    partitions: TopicPartitions
    user_data: bytes | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.buf = memoryview(data)
        self.pos = 0

    def _unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise ProtocolError("truncated consumer protocol bytes")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return int(value)

    def i16(self) -> int:
        return self._unpack(">h")

    def i32(self) -> int:
        return self._unpack(">i")

    def raw(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.buf):
            raise ProtocolError("truncated consumer protocol bytes")
        out = bytes(self.buf[self.pos:self.pos + size])
        self.pos += size
        return out

    def string(self, nullable: bool = False) -> str | None:
        size = self.i16()
        if size < 0:
            if nullable:
                return None
            raise ProtocolError("null string in consumer protocol bytes")
        try:
            return self.raw(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"bad string in consumer protocol bytes: {exc}") from None

    def nullable_bytes(self) -> bytes | None:
        size = self.i32()
        return None if size < 0 else self.raw(size)

    def count(self) -> int:
        n = self.i32()
        if n < 0 or n > len(self.buf):
            raise ProtocolError("bad array length in consumer protocol bytes")
        return n

    def topic_partitions(self) -> TopicPartitions:
        out: TopicPartitions = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            out.setdefault(topic, []).extend(self.i32() for _ in range(self.count()))
        return out

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos


def parse_subscription(data: bytes) -> Subscription:
    """Decode a ConsumerProtocolSubscription; raises ProtocolError when malformed."""
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise ProtocolError(f"bad consumer protocol subscription version {version}")
    topics = [r.string() or "" for _ in range(r.count())]
    sub = Subscription(version, topics, r.nullable_bytes())
    if version >= 1:
        sub.owned_partitions = r.topic_partitions()
    if version >= 2:
        sub.generation = r.i32()
    if version >= 3:
        sub.rack_id = r.string(nullable=True)
    return sub


def subscription_version(data: bytes) -> int:
    """The version a member wrote its subscription in (0 when unreadable)."""
    return struct.unpack_from(">h", data, 0)[0] if len(data) >= 2 else 0


def parse_assignment(data: bytes) -> Assignment:
    """Decode a ConsumerProtocolAssignment; empty bytes are an empty assignment."""
    if not data:
        return Assignment({})
    r = _Reader(data)
    if r.i16() < 0:
        raise ProtocolError("bad consumer protocol assignment version")
    partitions = r.topic_partitions()
    return Assignment(partitions, r.nullable_bytes() if r.remaining else None)


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def encode_assignment(partitions: TopicPartitions, version: int) -> bytes:
    """A ConsumerProtocolAssignment in the member's subscription version (capped at v3)."""
    version = max(0, min(version, HIGHEST_VERSION))
    out = [struct.pack(">hi", version, len(partitions))]
    for topic, ps in partitions.items():
        out.append(_string(topic))
        out.append(struct.pack(f">i{len(ps)}i", len(ps), *ps))
    out.append(struct.pack(">i", -1))  # no user data
    return b"".join(out)


def encode_subscription(topics: list[str], owned: TopicPartitions | None = None,
                        version: int = HIGHEST_VERSION, rack_id: str | None = None) -> bytes:
    """A ConsumerProtocolSubscription (tests and tools; the broker only reads them)."""
    out = [struct.pack(">hi", version, len(topics)), *(_string(t) for t in topics),
           struct.pack(">i", -1)]
    if version >= 1:
        owned = owned or {}
        out.append(struct.pack(">i", len(owned)))
        for topic, ps in owned.items():
            out.append(_string(topic))
            out.append(struct.pack(f">i{len(ps)}i", len(ps), *ps))
    if version >= 2:
        out.append(struct.pack(">i", -1))
    if version >= 3:
        out.append(struct.pack(">h", -1) if rack_id is None else _string(rack_id))
    return b"".join(out)
