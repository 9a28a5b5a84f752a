"""How this broker connects to other brokers: over the inter-broker listener's security
protocol (TLS, SASL or both), authenticated as the broker's own principal.

The credentials are Kafka's: ``sasl.mechanism.inter.broker.protocol`` names the mechanism, the
inter-broker listener's JAAS config for it holds ``username``/``password`` (PLAIN and SCRAM), and
the listener's TLS settings (its trust store, ``ssl.endpoint.identification.algorithm``) check
the peer's certificate.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from dataclasses import dataclass

from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.config.listeners import (
    SECURITY_PROTOCOLS,
    Listener,
    inter_broker_listener,
    protocol_map,
)
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct, request_codec, response_codec
from strom.protocol.header import decode_response_header, encode_request_header
from strom.security.jaas import JaasError, single_module
from strom.security.listeners import ListenerSettings
from strom.security.tls import client_context

_SIZE = struct.Struct(">i")
SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ClientAuthenticationError(ConnectionError):
    """A peer broker refused this broker's credentials (or spoke no SASL)."""


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str


@dataclass(frozen=True)
class ClientSecurity:
    """What a connection to another broker needs: TLS (with or without host name checks) and
    SASL credentials; both None for PLAINTEXT."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None

    def server_hostname(self, host: str) -> str | None:
        return host if self.ssl_context is not None else None


PLAINTEXT = ClientSecurity()


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """The client side of the inter-broker listener; ConfigError names what is missing."""
    return _listener_security(config, inter_broker_listener(config),
                              "sasl.mechanism.inter.broker.protocol", "inter-broker")


def controller_security(config: BrokerConfig) -> ClientSecurity:
    """The client side of the controllers' listener (the first of controller.listener.names),
    for Raft between voters and for brokers asking the active controller: its protocol from
    listener.security.protocol.map, SASL with sasl.mechanism.controller.protocol."""
    names = config.get("controller.listener.names") or []
    if not names:
        return PLAINTEXT
    name = str(names[0]).upper()
    protocol = protocol_map(config).get(name, name if name in SECURITY_PROTOCOLS else "PLAINTEXT")
    return _listener_security(config, Listener(name, "", 0, protocol),
                              "sasl.mechanism.controller.protocol", "controller")


def _listener_security(config: BrokerConfig, listener: Listener, mechanism_key: str,
                       role: str) -> ClientSecurity:
    settings = ListenerSettings(config, listener)
    context = None
    if listener.tls:
        try:
            context = client_context(settings.get)
        except ConfigError as e:
            raise ConfigError(f"{role} listener {listener.name}: {e}") from None
    credentials = None
    if listener.sasl:
        mechanism = (config.get(mechanism_key) or "").upper()
        if mechanism not in SUPPORTED:
            raise ConfigError(f"{mechanism_key}={mechanism or '(unset)'}: "
                              f"nodes of a Strom cluster authenticate to each other with "
                              f"{', '.join(SUPPORTED)}")
        key = f"{settings.prefix}{mechanism.lower()}.sasl.jaas.config"
        text = settings.get("sasl.jaas.config", mechanism)
        try:
            options = single_module(text, key).options if text else {}
        except JaasError as e:
            raise ConfigError(str(e)) from None
        if not options.get("username") or "password" not in options:
            raise ConfigError(f"{key} needs username=\"...\" password=\"...\": the credentials "
                              f"this node uses to reach the others")
        credentials = SaslCredentials(mechanism, options["username"], options["password"])
    return ClientSecurity(context, credentials)


# -- authenticating a new connection ----------------------------------------------------------


async def authenticate(credentials: SaslCredentials, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, client_id: str, timeout_s: float) -> None:
    """SaslHandshake v1 then SaslAuthenticate v1 on a fresh connection."""
    correlation = 0

    async def call(api_key: int, version: int, body: dict[str, object]) -> Struct:
        nonlocal correlation
        correlation += 1
        payload = encode_request_header(api_key, version, correlation, client_id) + \
            request_codec(api_key, version).encode(body)
        writer.write(_SIZE.pack(len(payload)) + payload)
        await writer.drain()
        (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), timeout_s))
        frame = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        codec = response_codec(api_key, version)
        _, pos = decode_response_header(frame, 0, codec.header_version)
        value, _ = codec.decode(memoryview(frame), pos)
        return value

    handshake = await call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": credentials.mechanism})
    if handshake.error_code:
        raise ClientAuthenticationError(
            f"SASL mechanism {credentials.mechanism} refused (error {handshake.error_code}; "
            f"the peer offers {handshake.mechanisms})")

    async def send(token: bytes) -> bytes:
        reply = await call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        if reply.error_code:
            raise ClientAuthenticationError(
                f"authentication as {credentials.username} with {credentials.mechanism} "
                f"failed: {reply.error_message}")
        return bytes(reply.auth_bytes)

    if credentials.mechanism == "PLAIN":
        await send(b"\0" + credentials.username.encode() + b"\0" + credentials.password.encode())
        return
    import scramp

    client = scramp.ScramClient([credentials.mechanism], credentials.username,
                                credentials.password)
    first = await send(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = await send(client.get_client_final().encode())
    try:
        client.set_server_final(final.decode())
    except scramp.ScramException as e:  # the peer could not prove it knows the credential
        raise ClientAuthenticationError(f"the peer's SCRAM signature is wrong: {e}") from None
