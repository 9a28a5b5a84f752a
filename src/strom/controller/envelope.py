"""Envelope (KIP-590): a request forwarded to the active controller, with who sent it.

A broker that is not the active controller forwards admin requests (CreateTopics,
IncrementalAlterConfigs, CreateAcls, ...) as Kafka's brokers do: the whole request, header
and body, inside an Envelope with the client's principal and address. The active controller
handles the inner request as if the client had sent it to it, and returns the inner response,
header and body, in the Envelope's response.

The principal travels in Kafka's DefaultPrincipalData encoding (a version, then the flexible
v0 struct: type, name, token_authenticated), so the bytes are what Kafka's default principal
serde writes.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Any

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData

from strom.protocol.codec import entity_codec
from strom.protocol.errors import ProtocolError
from strom.protocol.header import encode_request_header
from strom.security.principal import KafkaPrincipal

_PRINCIPAL = entity_codec(DefaultPrincipalData)
_VERSION = struct.Struct(">h")


def encode_principal(principal: KafkaPrincipal) -> bytes:
    body = _PRINCIPAL.encode({"type_": principal.type, "name": principal.name,
                              "token_authenticated": False})
    return _VERSION.pack(0) + body


def decode_principal(data: bytes) -> KafkaPrincipal:
    """Raises ValueError for bytes that are not a principal (Envelope then answers
    PRINCIPAL_DESERIALIZATION_FAILURE)."""
    if len(data) < _VERSION.size:
        raise ValueError(f"principal data of {len(data)} bytes")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != 0:
        raise ValueError(f"principal data version {version} is not known")
    try:
        value, _ = _PRINCIPAL.decode(memoryview(data), 2)
    except (struct.error, IndexError, ProtocolError) as exc:
        raise ValueError(f"malformed principal data: {exc}") from exc
    return KafkaPrincipal(value.type_, value.name)


def client_address(peer: str) -> bytes:
    """A peer "host:port" (or "[v6]:port") as the address bytes Envelope carries."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return ipaddress.ip_address("127.0.0.1").packed


def envelope_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                     body: bytes | memoryview, principal: KafkaPrincipal,
                     peer: str) -> dict[str, Any]:
    """The Envelope around one request (its body as the client encoded it)."""
    inner = encode_request_header(api_key, version, correlation_id, client_id) + bytes(body)
    return {"request_data": inner, "request_principal": encode_principal(principal),
            "client_host_address": client_address(peer)}
