"""Hostile and broken input over raw sockets.

In every case the broker must keep serving other connections and lose nothing: each test writes a
record before the bad input and one after, and then reads back exactly those two.
"""

from __future__ import annotations

import struct

import pytest

from . import clients as kc
from .wire import (
    API_VERSIONS,
    CORRUPT_MESSAGE,
    INVALID_REQUIRED_ACKS,
    MESSAGE_TOO_LARGE,
    METADATA,
    NONE,
    PRODUCE,
    UNSUPPORTED_VERSION,
    Conn,
    Reader,
    Record,
    build_batch,
    compact_string,
    corrupt_crc,
    frame,
    i8,
    i16,
    i32,
    produce_v3_body,
    records_of,
    request_header_v1,
    request_header_v2,
    simple_batch,
    string,
)

pytestmark = pytest.mark.timeout(60)

MAX_REQUEST = 2 * 1024 * 1024  # socket.request.max.bytes of this module's broker


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker({"socket.request.max.bytes": MAX_REQUEST})


@pytest.fixture
def topic(broker, unique_topic):
    """A topic holding one record, b'before', written before the test's bad input."""
    name = unique_topic()
    kc.create_topic(broker.bootstrap, name)
    with Conn(broker.bootstrap) as conn:
        res = conn.produce(name, 0, simple_batch(b"before"))
        assert (res.error, res.base_offset) == (NONE, 0)
    return name


def assert_intact(broker, topic: str) -> None:
    """A fresh connection can still write and read, and the log holds exactly before + after."""
    with Conn(broker.bootstrap) as conn:
        err, keys = conn.api_versions_v0()
        assert err == NONE and PRODUCE in keys
        res = conn.produce(topic, 0, simple_batch(b"after"))
        assert (res.error, res.base_offset) == (NONE, 1), "the bad input changed the log"
        fetched = conn.fetch(topic, 0, 0)
        assert fetched.error == NONE
        assert [(r.offset, r.value) for r in records_of(fetched.records)] == [
            (0, b"before"),
            (1, b"after"),
        ]
    assert [m.value for m in kc.consume(broker.bootstrap, topic, 2)] == [b"before", b"after"]


def send_and_expect_close(broker, payload: bytes) -> None:
    with Conn(broker.bootstrap) as conn:
        try:
            conn.send_raw(payload)
        except (BrokenPipeError, ConnectionResetError):
            return  # closed while we were still writing: also a close
        assert conn.wait_closed(10), "broker kept the connection open after invalid input"


# --------------------------------------------------------------------------- framing


@pytest.mark.parametrize(
    "size",
    [MAX_REQUEST + 1, 0x7FFFFFFF, -1, -0x80000000],
    ids=["limit+1", "max-int", "-1", "min-int"],
)
def test_oversized_or_negative_size_prefix(broker, topic, size):
    send_and_expect_close(broker, struct.pack(">i", size) + b"\0" * 16)
    assert_intact(broker, topic)


def test_request_just_under_the_limit_is_read(broker, topic):
    """A frame within socket.request.max.bytes is read whole and answered (here: too large a batch)."""
    big = build_batch([Record(None, b"x" * (MAX_REQUEST - 4096))])
    with Conn(broker.bootstrap) as conn:
        res = conn.produce(topic, 0, big)
        assert res.error == MESSAGE_TOO_LARGE
        assert conn.api_versions_v0()[0] == NONE  # same connection still usable
    assert_intact(broker, topic)


@pytest.mark.parametrize(
    "payload",
    [
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        frame(b""),  # empty frame: no header at all
        frame(b"\x00"),  # one byte of header
        frame(b"\xff\xff\xff\xff" + b"\x00" * 20),  # api key -1
        frame(i16(PRODUCE) + i16(3) + i32(1) + i16(500) + b"short"),  # client id longer than frame
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS ClientHello
    ],
    ids=["http", "empty-frame", "1-byte-header", "api-key-minus-1", "bad-client-id", "tls"],
)
def test_garbage(broker, topic, payload):
    send_and_expect_close(broker, payload)
    assert_intact(broker, topic)


def test_truncated_frame_then_close(broker, topic):
    with Conn(broker.bootstrap) as conn:
        conn.send_raw(i32(100) + b"0123456789")
    with Conn(broker.bootstrap) as conn:
        conn.send_raw(i32(20))  # only the size prefix
    assert_intact(broker, topic)


def test_half_sent_frame_does_not_block_others(broker, topic):
    """A client that stalls mid-frame holds only its own connection."""
    stalled = Conn(broker.bootstrap)
    try:
        stalled.send_raw(i32(500) + request_header_v1(API_VERSIONS, 0, 1, "slow")[:5])
        assert_intact(broker, topic)
    finally:
        stalled.close()


def test_pipelined_requests_are_answered_in_order(broker, topic):
    with Conn(broker.bootstrap) as conn:
        payload = b""
        for corr in range(10, 16):
            payload += frame(request_header_v1(API_VERSIONS, 0, corr, "pipe"))
        conn.send_raw(payload)
        seen = [struct.unpack_from(">i", conn.recv_frame())[0] for _ in range(6)]
    assert seen == list(range(10, 16))
    assert_intact(broker, topic)


# --------------------------------------------------------------------------- headers and versions


@pytest.mark.parametrize(
    ("api_key", "version"), [(9999, 0), (-5, 0), (METADATA, 999), (PRODUCE, 1)],
    ids=["unknown-key", "negative-key", "metadata-v999", "produce-v1-removed"],
)  # fmt: skip
def test_unknown_api_or_version_closes(broker, topic, api_key, version):
    send_and_expect_close(broker, frame(request_header_v1(api_key, version, 7, "x") + b"\0" * 8))
    assert_intact(broker, topic)


def test_api_versions_unsupported_version(broker, topic):
    """ApiVersions v999 -> UNSUPPORTED_VERSION in a v0 body; the client can then retry."""
    with Conn(broker.bootstrap) as conn:
        corr = 41
        conn.send_raw(
            frame(request_header_v1(API_VERSIONS, 999, corr, "future-client") + b"\0" * 4)
        )
        data = conn.recv_frame()
        assert struct.unpack_from(">i", data)[0] == corr
        r = Reader(data[4:])
        assert r.i16() == UNSUPPORTED_VERSION
        n = r.i32()
        entries = [(r.i16(), r.i16(), r.i16()) for _ in range(n)]
        assert r.remaining() == 0, "not a v0 body (v0 has only error_code and api_keys)"
        for key, lo, hi in entries:
            if key == API_VERSIONS:
                assert lo == 0 and hi >= 3

        # Retry on the same connection with a version the broker knows: v3 (flexible request).
        body = compact_string("strom-it") + compact_string("1.0") + b"\x00"
        corr = conn.send(API_VERSIONS, 3, body, flexible=True)
        r = Reader(conn.recv_response(corr))  # ApiVersions responses always use header v0
        assert r.i16() == NONE
        keys = {}
        for _ in range(r.uvarint() - 1):
            key, lo, hi = r.i16(), r.i16(), r.i16()
            for _ in range(r.uvarint()):
                r.uvarint()
                r.raw(r.uvarint())
            keys[key] = (lo, hi)
        assert {PRODUCE, 1, 2, METADATA, API_VERSIONS} <= set(keys)
        assert keys[API_VERSIONS][1] >= 3
        r.i32()  # throttle
    assert_intact(broker, topic)


# --------------------------------------------------------------------------- bodies


@pytest.mark.parametrize(
    "body",
    [
        i32(0x7FFFFFFF),  # Metadata topics: 2^31-1 entries, none sent
        i32(-7),  # a negative array length other than -1
        i32(3) + string("a") + i16(32000),  # second topic name claims 32000 bytes
    ],
    ids=["huge-array", "negative-array", "huge-string"],
)
def test_absurd_lengths_in_metadata(broker, topic, body):
    send_and_expect_close(broker, frame(request_header_v1(METADATA, 1, 3, "x") + body))
    assert_intact(broker, topic)


def test_absurd_lengths_in_produce(broker, topic):
    hdr = request_header_v1(PRODUCE, 3, 5, "x")
    # topic array of 2^31-1 entries
    send_and_expect_close(broker, frame(hdr + string(None) + i16(-1) + i32(1000) + i32(0x7FFFFFFF)))
    # records claiming 2^31-1 bytes inside a small frame
    body = string(None) + i16(-1) + i32(1000) + i32(1) + string(topic) + i32(1) + i32(0)
    send_and_expect_close(broker, frame(hdr + body + i32(0x7FFFFFFF) + b"\0" * 10))
    assert_intact(broker, topic)


@pytest.mark.parametrize("acks", [5, -2, 2])
def test_invalid_required_acks(broker, topic, acks):
    with Conn(broker.bootstrap) as conn:
        res = conn.produce(topic, 0, simple_batch(b"never"), acks=acks)
        assert res.error == INVALID_REQUIRED_ACKS
        assert conn.api_versions_v0()[0] == NONE  # connection still usable
    assert_intact(broker, topic)


def test_corrupt_crc_is_rejected_and_not_written(broker, topic):
    bad = corrupt_crc(build_batch([Record(None, b"one"), Record(None, b"two")]))
    with Conn(broker.bootstrap) as conn:
        assert conn.produce(topic, 0, bad).error == CORRUPT_MESSAGE
        assert conn.list_offset(topic, 0, -1)[2] == 1  # log end unchanged
    assert_intact(broker, topic)


def test_batch_length_disagreeing_with_payload(broker, topic):
    good = build_batch([Record(None, b"one")])
    longer = good[:8] + i32(struct.unpack_from(">i", good, 8)[0] + 50) + good[12:]
    with Conn(broker.bootstrap) as conn:
        res = conn.produce(topic, 0, longer)
        assert res.error != NONE
    assert_intact(broker, topic)


# --------------------------------------------------------------------------- acks=0


@pytest.mark.parametrize("problem", ["corrupt-crc", "unknown-topic", "bad-acks-target"])
def test_error_on_acks0_produce_closes_connection(broker, topic, unique_topic, problem):
    """With acks=0 there is no response to carry an error, so Kafka closes the connection."""
    if problem == "corrupt-crc":
        body = produce_v3_body(topic, 0, corrupt_crc(simple_batch(b"bad")), acks=0)
    elif problem == "unknown-topic":
        body = produce_v3_body(unique_topic("missing"), 0, simple_batch(b"lost"), acks=0)
    else:
        body = produce_v3_body(topic, 99, simple_batch(b"lost"), acks=0)  # no partition 99
    send_and_expect_close(broker, frame(request_header_v1(PRODUCE, 3, 9, "acks0") + body))
    assert_intact(broker, topic)


def test_successful_acks0_produce_gets_no_response(broker, topic):
    with Conn(broker.bootstrap) as conn:
        conn.send(PRODUCE, 3, produce_v3_body(topic, 0, simple_batch(b"after"), acks=0))
        # The next response on this connection belongs to the next request.
        err, _ = conn.api_versions_v0()
        assert err == NONE
        fetched = conn.fetch(topic, 0, 0)
    assert [r.value for r in records_of(fetched.records)] == [b"before", b"after"]
    assert [m.value for m in kc.consume(broker.bootstrap, topic, 2)] == [b"before", b"after"]


def test_many_bad_connections_then_normal_clients(broker, topic):
    """A burst of broken connections leaves the broker healthy for real clients."""
    for i in range(30):
        with Conn(broker.bootstrap) as conn:
            conn.send_raw([i32(-1), b"\xff" * 7, frame(b"\x00"), i8(1) * 3][i % 4])
    assert_intact(broker, topic)


def test_api_versions_malformed_v3_body_closes(broker, topic):
    """The (cached) ApiVersions reply still needs a well-formed request body."""
    truncated = b"\x09strom"  # compact string of 8 bytes, only 5 present
    send_and_expect_close(
        broker, frame(request_header_v2(API_VERSIONS, 3, 5, "x") + truncated)
    )
    assert_intact(broker, topic)


def test_api_versions_replies_keep_their_version_across_connections(broker, topic):
    """Replies are encoded once per version: v0 and v3 asked in turn each get their own format."""
    v3_body = compact_string("strom-it") + compact_string("1.0") + b"\x00"
    replies: dict[int, list[bytes]] = {0: [], 3: []}
    for version in (0, 3, 0, 3):
        with Conn(broker.bootstrap) as conn:
            body = v3_body if version == 3 else b""
            corr = conn.send(API_VERSIONS, version, body, flexible=version == 3)
            replies[version].append(conn.recv_response(corr))
    assert replies[0][0] == replies[0][1] and replies[3][0] == replies[3][1]
    r = Reader(replies[0][0])  # v0: error, int32 count, (key, min, max) each, nothing else
    assert r.i16() == NONE
    keys = {r.i16(): (r.i16(), r.i16()) for _ in range(r.i32())}
    assert r.remaining() == 0 and API_VERSIONS in keys
    r = Reader(replies[3][0])  # v3: compact array with tagged fields, then throttle time
    assert r.i16() == NONE
    count = r.uvarint() - 1
    assert count == len(keys)
