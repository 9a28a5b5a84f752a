"""Hostile counts are refused before anything is allocated for them: arrays of more than
MAX_ARRAY_ELEMENTS elements and tagged-field sections of more than MAX_TAGGED_FIELDS fields,
even when the frame holds enough bytes to pass the "no more elements than bytes left" check.
Covers the primitives, the generated codecs and the hand-written Produce/Fetch/Metadata
decoders."""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from strom.protocol import primitives as p
from strom.protocol.codec import request_codec
from strom.protocol.fetch import decode_fetch_request
from strom.protocol.metadata import decode_metadata_request
from strom.protocol.primitives import MAX_ARRAY_ELEMENTS, MAX_TAGGED_FIELDS, ProtocolError
from strom.protocol.produce import decode_produce_request

OVER = MAX_ARRAY_ELEMENTS + 1
DELETE_GROUPS = 42  # v2 is flexible: groups_names is a compact array of compact strings
DESCRIBE_PRODUCERS = 61  # v0: topics [name, partition_indexes [int32]]


def uvarint(n: int) -> bytes:
    return p.write_uvarint(n)


def tags(count: int) -> bytes:
    """A tagged-field section of `count` empty fields with distinct tags."""
    return uvarint(count) + b"".join(uvarint(t) + b"\x00" for t in range(count))


# ------------------------------------------------------------------------------ primitives


def test_array_lengths_at_the_limit_pass_and_above_it_fail():
    room = bytes(OVER)
    assert p.read_array_length(struct.pack(">i", MAX_ARRAY_ELEMENTS) + room, 0) == (
        MAX_ARRAY_ELEMENTS, 4)
    with pytest.raises(ProtocolError, match="limit of 1000000"):
        p.read_array_length(struct.pack(">i", OVER) + room, 0)
    n, _ = p.read_compact_array_length(uvarint(MAX_ARRAY_ELEMENTS + 1) + room, 0)
    assert n == MAX_ARRAY_ELEMENTS
    with pytest.raises(ProtocolError, match="limit of 1000000"):
        p.read_compact_array_length(uvarint(OVER + 1) + room, 0)
    with pytest.raises(ProtocolError, match="limit of 1000000"):
        p.read_fixed_array(bytes(4 * OVER), 0, OVER, "i", 4)
    # the old bound still holds below the cap
    with pytest.raises(ProtocolError, match="bytes left"):
        p.read_array_length(struct.pack(">i", 10) + bytes(9), 0)


def test_tag_counts_at_the_limit_pass_and_above_it_fail():
    fields, end = p.read_tagged_fields(tags(MAX_TAGGED_FIELDS), 0)
    assert len(fields) == MAX_TAGGED_FIELDS and end == len(tags(MAX_TAGGED_FIELDS))
    over = tags(MAX_TAGGED_FIELDS + 1)
    for read in (p.read_tagged_fields, p.skip_tagged_fields, p.read_tag_count):
        with pytest.raises(ProtocolError, match="limit of 10000"):
            read(over, 0)


# ------------------------------------------------------------------------------ generated codecs


def test_generated_array_over_the_limit_is_refused():
    codec = request_codec(DELETE_GROUPS, 2)
    ok = codec.decode(uvarint(3 + 1) + b"\x02a\x02b\x02c" + b"\x00")[0]
    assert ok.groups_names == ["a", "b", "c"]
    body = uvarint(OVER + 1) + b"\x01" * OVER + b"\x00"  # OVER empty names: bytes enough
    with pytest.raises(ProtocolError, match="limit of 1000000"):
        codec.decode(body)


def test_generated_fixed_array_over_the_limit_is_refused():
    codec = request_codec(DESCRIBE_PRODUCERS, 0)
    head = uvarint(1 + 1) + b"\x02t"
    ok = codec.decode(head + uvarint(2 + 1) + struct.pack(">2i", 4, 5) + b"\x00" + b"\x00")[0]
    assert ok.topics[0].partition_indexes == [4, 5]
    body = head + uvarint(OVER + 1) + bytes(4 * OVER) + b"\x00" + b"\x00"
    with pytest.raises(ProtocolError, match="limit of 1000000"):
        codec.decode(body)


def test_generated_tag_section_over_the_limit_is_refused():
    codec = request_codec(DELETE_GROUPS, 2)
    assert codec.decode(uvarint(1) + tags(3))[0].groups_names == []
    with pytest.raises(ProtocolError, match="limit of 10000"):
        codec.decode(uvarint(1) + tags(MAX_TAGGED_FIELDS + 1))


# ------------------------------------------------------------------------------ hand-written


def metadata_v1(count: int) -> bytes:
    return struct.pack(">i", count) + b"\x00\x00" * count  # `count` empty topic names


def test_metadata_topics_over_the_limit_are_refused_before_allocation():
    tracemalloc.start()
    try:
        body = memoryview(metadata_v1(OVER))
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        with pytest.raises(ProtocolError, match="invalid topic count"):
            decode_metadata_request(body, 1)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # a list of a million (name, id) tuples would take well over 50 MB
    assert peak < 1_000_000, f"decoding allocated {peak} bytes before refusing"
    assert len(decode_metadata_request(memoryview(metadata_v1(3)), 1).topics) == 3


def test_produce_counts_over_the_limit_are_refused():
    legacy = struct.pack(">hhi", -1, -1, 1000) + struct.pack(">i", OVER) + bytes(2 * OVER)
    with pytest.raises(ProtocolError, match="invalid topic count"):
        decode_produce_request(memoryview(legacy), 3)
    flexible = b"\x00" + struct.pack(">hi", -1, 1000) + uvarint(OVER + 1) + bytes(2 * OVER)
    with pytest.raises(ProtocolError, match="invalid topic count"):
        decode_produce_request(memoryview(flexible), 9)
    one_topic = (struct.pack(">hhi", -1, -1, 1000) + struct.pack(">i", 1) + b"\x00\x01t"
                 + struct.pack(">i", OVER) + bytes(8 * OVER))
    with pytest.raises(ProtocolError, match="invalid partition count"):
        decode_produce_request(memoryview(one_topic), 3)


def test_fetch_counts_over_the_limit_are_refused():
    head = struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)  # v4: replica, wait, min, max, isolation
    topics = struct.pack(">i", OVER) + bytes(6 * OVER)
    with pytest.raises(ProtocolError, match="invalid topic count"):
        decode_fetch_request(memoryview(head + topics), 4)
    v12 = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
    one_topic = uvarint(2) + b"\x02t" + uvarint(OVER + 1) + bytes(33 * OVER)
    with pytest.raises(ProtocolError, match="invalid partition count"):
        decode_fetch_request(memoryview(v12 + one_topic), 12)
    no_topics = uvarint(1) + uvarint(1) + uvarint(1)  # topics, forgotten, rack
    with pytest.raises(ProtocolError, match="limit of 10000"):
        decode_fetch_request(memoryview(v12 + no_topics + tags(MAX_TAGGED_FIELDS + 1)), 12)
