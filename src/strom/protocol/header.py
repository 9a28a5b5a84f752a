"""Request and response headers.

Request header v0: api_key i16, api_version i16, correlation_id i32; v1 adds client_id (a
nullable *int16-length* string, also in v2, because old brokers must be able to read it);
v2 adds a tagged-field section. Response header v0 is the correlation id; v1 adds an (empty)
tagged-field section. The header is decodable without knowing the API, so a broker can answer
UNSUPPORTED_VERSION or close the connection cleanly.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .errors import ProtocolError
from .primitives import (
    INT32,
    Buf,
    read_nullable_string,
    skip_tagged_fields,
    truncated,
    write_nullable_string,
)
from .schema import is_flexible

API_VERSIONS = 18
CONTROLLED_SHUTDOWN = 7

_PREFIX = struct.Struct(">hhi")
_unpack_prefix = _PREFIX.unpack_from
_pack_prefix = _PREFIX.pack
_RESPONSE_V1 = struct.Struct(">iB")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


def peek_header(buf: Buf) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request."""
    try:
        return _unpack_prefix(buf, 0)
    except struct.error:
        raise truncated("request header") from None


_REQUEST_HEADER_VERSIONS: dict[tuple[int, int], int] = {}


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible versions, 1 otherwise, 0 only for ControlledShutdown v0.

    Versions beyond the known range follow Kafka's open-ended "N+" flexible ranges; unknown
    APIs get 1, enough to read the correlation id and client id.
    """
    key = (api_key, api_version)
    hv = _REQUEST_HEADER_VERSIONS.get(key)
    if hv is None:
        if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
            hv = 0
        else:
            hv = 2 if is_flexible(api_key, api_version) else 1
        if len(_REQUEST_HEADER_VERSIONS) < 10_000:  # hostile keys must not grow it forever
            _REQUEST_HEADER_VERSIONS[key] = hv
    return hv


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible versions, else 0; ApiVersions responses always use 0 (KIP-511)."""
    if api_key == API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def decode_request_header(
    buf: Buf, pos: int = 0, header_version: int | None = None
) -> tuple[RequestHeader, int]:
    """Decode a request header; its version is derived from the API unless given."""
    try:
        api_key, api_version, correlation_id = _unpack_prefix(buf, pos)
    except struct.error:
        raise truncated("request header") from None
    pos += 8
    if header_version is None:
        header_version = request_header_version(api_key, api_version)
    client_id = None
    if header_version >= 1:
        client_id, pos = read_nullable_string(buf, pos)
        if header_version >= 2:
            pos = skip_tagged_fields(buf, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, header_version), pos


def encode_request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None = None,
    header_version: int | None = None,
) -> bytes:
    if header_version is None:
        header_version = request_header_version(api_key, api_version)
    try:
        head = _pack_prefix(api_key, api_version, correlation_id)
    except struct.error as e:
        raise ProtocolError(f"cannot encode request header: {e}") from e
    if header_version == 0:
        return head
    head += write_nullable_string(client_id)
    return head + b"\x00" if header_version >= 2 else head


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    try:
        if header_version == 0:
            return INT32.pack(correlation_id)
        return _RESPONSE_V1.pack(correlation_id, 0)
    except struct.error as e:
        raise ProtocolError(f"cannot encode response header: {e}") from e


def decode_response_header(buf: Buf, pos: int, header_version: int) -> tuple[int, int]:
    """(correlation_id, new_pos); tagged fields (v1) are skipped."""
    try:
        (correlation_id,) = INT32.unpack_from(buf, pos)
    except struct.error:
        raise truncated("response header") from None
    pos += 4
    if header_version >= 1:
        pos = skip_tagged_fields(buf, pos)
    return correlation_id, pos
