"""Request/response headers: versions, round trips, kio byte equality, bad input."""

from __future__ import annotations

import io

import pytest
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioRequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as KioResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as KioResponseHeaderV1
from kio.serial import entity_writer

from strom.protocol import primitives as p
from strom.protocol.errors import ProtocolError
from strom.protocol.header import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    peek_header,
    request_header_version,
    response_header_version,
)


def kio_bytes(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [
        (0, 8, 1),  # Produce: flexible from 9
        (0, 9, 2),
        (1, 11, 1),  # Fetch: flexible from 12
        (1, 12, 2),
        (3, 8, 1),  # Metadata: flexible from 9
        (3, 9, 2),
        (18, 2, 1),  # ApiVersions: flexible from 3
        (18, 3, 2),
        (18, 7, 2),  # above the known range: Kafka's flexible range is open-ended
        (0, 1, 1),  # below the known range: not flexible
        (7, 0, 0),  # ControlledShutdown v0 is the only header v0 user
        (7, 1, 1),
        (7, 3, 2),
        (4, 4, 2),  # removed APIs still get the right version
        (999, 0, 1),  # unknown API: enough to read the correlation id and client id
        (-1, 5, 1),
    ],
)
def test_request_header_version(api_key, version, expected):
    assert request_header_version(api_key, version) == expected


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [(0, 8, 0), (0, 9, 1), (3, 12, 1), (18, 0, 0), (18, 3, 0), (18, 4, 0), (999, 1, 0)],
)
def test_response_header_version(api_key, version, expected):
    assert response_header_version(api_key, version) == expected


@pytest.mark.parametrize("client_id", [None, "", "client-ü", "x" * 300])
def test_request_header_round_trips_and_matches_kio(client_id):
    v1 = encode_request_header(3, 8, 42, client_id)
    assert v1 == kio_bytes(
        KioRequestHeaderV1(
            request_api_key=3, request_api_version=8, correlation_id=42, client_id=client_id
        )
    )
    v2 = encode_request_header(3, 12, -7, client_id)
    assert v2 == kio_bytes(
        KioRequestHeaderV2(
            request_api_key=3, request_api_version=12, correlation_id=-7, client_id=client_id
        )
    )
    # client_id is an int16-length string even in v2.
    assert v2[8:] == p.write_nullable_string(client_id) + b"\x00"

    assert decode_request_header(v1) == (RequestHeader(3, 8, 42, client_id, 1), len(v1))
    assert decode_request_header(v2) == (RequestHeader(3, 12, -7, client_id, 2), len(v2))
    assert decode_request_header(memoryview(b"xx" + v2), 2)[1] == len(v2) + 2


def test_request_header_v0():
    raw = encode_request_header(7, 0, 5, "ignored")
    assert raw == b"\x00\x07\x00\x00\x00\x00\x00\x05"
    assert decode_request_header(raw) == (RequestHeader(7, 0, 5, None, 0), 8)


def test_v2_header_skips_tagged_fields_and_body_follows():
    body = b"BODY"
    raw = (
        encode_request_header(18, 3, 1, "c")[:-1]
        + p.write_tagged_fields({3: b"abc", 10: b""})
        + body
    )
    header, pos = decode_request_header(raw)
    assert header == RequestHeader(18, 3, 1, "c", 2)
    assert raw[pos:] == body


def test_unknown_api_key_header_is_still_decodable():
    raw = encode_request_header(1234, 3, 99, "who", header_version=1) + b"rest"
    assert peek_header(raw) == (1234, 3, 99)
    header, pos = decode_request_header(raw)
    assert (header.correlation_id, header.client_id, raw[pos:]) == (99, "who", b"rest")


def test_explicit_header_version_overrides():
    raw = encode_request_header(3, 12, 1, "c", header_version=1)
    assert decode_request_header(raw, header_version=1)[0].header_version == 1


def test_peek_header():
    raw = encode_request_header(1, 16, 2**31 - 1, "x")
    assert peek_header(raw) == (1, 16, 2**31 - 1)
    assert peek_header(memoryview(raw)) == (1, 16, 2**31 - 1)
    with pytest.raises(ProtocolError):
        peek_header(raw[:7])


@pytest.mark.parametrize("cut", range(17))
def test_truncated_request_header_raises_protocol_error(cut):
    raw = encode_request_header(3, 12, 1, "client")  # 8 + 2 + 6 + 1 = 17 bytes
    with pytest.raises(ProtocolError):
        decode_request_header(raw[:cut])


def test_bad_client_id_length_raises_protocol_error():
    with pytest.raises(ProtocolError):
        decode_request_header(b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xfe")  # length -2
    with pytest.raises(ProtocolError):
        decode_request_header(b"\x00\x03\x00\x0c\x00\x00\x00\x01\x7f\xff" + b"x" * 10)


def test_response_headers_match_kio_and_round_trip():
    assert encode_response_header(42, 0) == kio_bytes(KioResponseHeaderV0(correlation_id=42))
    assert encode_response_header(-3, 1) == kio_bytes(KioResponseHeaderV1(correlation_id=-3))
    for version in (0, 1):
        raw = encode_response_header(7, version) + b"body"
        cid, pos = decode_response_header(raw, 0, version)
        assert (cid, raw[pos:]) == (7, b"body")
    with pytest.raises(ProtocolError):
        decode_response_header(b"\x00\x00", 0, 0)
    with pytest.raises(ProtocolError):
        decode_response_header(b"\x00\x00\x00\x01", 0, 1)  # missing tagged fields
    with pytest.raises(ProtocolError):
        encode_response_header(2**31, 0)
