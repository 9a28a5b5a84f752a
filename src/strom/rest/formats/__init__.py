"""Embedded formats: how a record's key or value travels inside a JSON request or response.

BINARY is base64 text, JSON any JSON value (its UTF-8 JSON text on the wire), STRING text; AVRO,
JSONSCHEMA and PROTOBUF are JSON values checked against a schema of Strom's schema registry and
written in Confluent's wire format (magic byte 0, the schema id as 4 bytes big-endian, the
encoded payload).

A v3 produce request's ``key``/``value`` object picks its schema as Confluent's REST Proxy does:

- ``type`` BINARY, JSON or STRING: no schema (and no schema field may be given);
- ``type`` AVRO, JSONSCHEMA or PROTOBUF with ``schema`` (the schema's text): the schema is looked
  up under the subject, and registered there when it is not yet;
- no ``type``, with ``schema_id``: that schema (its version looked up under the subject);
  with ``schema_version``: that version of the subject; with neither (``data`` alone): the
  subject's latest version. The format is the schema's.

The subject is ``subject`` when given, else named by ``subject_name_strategy``: TOPIC_NAME
(``<topic>-key`` / ``<topic>-value``, the default), RECORD_NAME (the schema's record: Avro's full
name, JSON Schema's title, Protobuf's first message) or TOPIC_RECORD_NAME (``<topic>-<record>``).
Errors are Confluent's: a request whose fields do not fit together or whose data does not fit its
schema 400, no registry 42206, a registry lookup that fails 42207 (403 when the registry denies
the user), a schema text the registry's parser refuses 42205.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import ssl
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.rest.errors import RestError, unprocessable
from strom.rest.formats._codecs import DataError, SchemaError
from strom.rest.formats._registry import (
    Found,
    RegistryCallError,
    RegistryClient,
    Transport,
    http_transport,
    shared_codec,
)

if TYPE_CHECKING:
    from starlette.requests import Request

    from strom.rest.context import RestContext

__all__ = ["PLAIN", "SCHEMA_FORMATS", "Encoded", "Formats", "decode_plain", "encode_plain",
           "formats_of"]

PLAIN = ("BINARY", "JSON", "STRING")
SCHEMA_FORMATS = ("AVRO", "JSONSCHEMA", "PROTOBUF")
STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")
SCHEMA_FIELDS = ("subject", "subject_name_strategy", "schema_id", "schema_version", "schema")
REGISTRY_TYPE = {"AVRO": "AVRO", "JSONSCHEMA": "JSON", "PROTOBUF": "PROTOBUF"}
FORMAT_OF = {v: k for k, v in REGISTRY_TYPE.items()}

# Confluent REST Proxy's codes
INVALID_SCHEMA = 42205
INVALID_PAYLOAD = 42206  # "Payload error." (no registry for a schema)
SERIALIZATION_ERROR = 42207  # "Error serializing message." (a registry lookup failed)
AUTHORIZATION_ERROR = 40301
DESERIALIZATION_ERROR = 50002

MAGIC = 0
HEADER = struct.Struct(">bI")


@dataclass(frozen=True)
class Encoded:
    data: bytes | None
    type: str | None  # the embedded format used; None for a missing key/value
    size: int
    subject: str | None = None  # for a schema's format: the schema's subject, id and version
    schema_id: int | None = None
    schema_version: int | None = None


@dataclass(frozen=True)
class SchemaSpec:
    """A key's or value's choice of schema, as the request gives it (checked)."""

    format: str | None  # AVRO, JSONSCHEMA or PROTOBUF when `type` names one
    subject: str | None
    strategy: str | None
    schema_id: int | None
    schema_version: int | None
    schema: str | None


def wire(schema_id: int, payload: bytes) -> bytes:
    """Confluent's wire format: magic byte 0, the schema id, the payload."""
    return HEADER.pack(MAGIC, schema_id) + payload


def unwire(raw: bytes) -> tuple[int, bytes]:
    """The schema id and payload of a record in Confluent's wire format (ValueError if not)."""
    if len(raw) < HEADER.size or raw[0] != MAGIC:
        raise ValueError("the record is not in the schema registry's wire format (magic byte 0 "
                         "and a 4-byte schema id)")
    _, schema_id = HEADER.unpack_from(raw)
    return schema_id, raw[HEADER.size:]


class Formats:
    """Encoding and decoding for one HTTP user (the registry is asked with their credentials).

    `transport` replaces the HTTP calls to the registry (tests); `tls` is the context for an
    https registry URL."""

    def __init__(self, registry_url: str | None, auth: tuple[str, str] | None = None, *,
                 tls: ssl.SSLContext | None = None, transport: Transport | None = None) -> None:
        self.registry_url = registry_url
        self.auth = auth
        self.registry: RegistryClient | None = None
        if transport is None and registry_url is not None:
            transport = http_transport(registry_url, auth, tls)
        if transport is not None:
            self.registry = RegistryClient(transport)

    async def encode(self, topic: str, spec: Any, *, is_key: bool) -> Encoded:
        """A v3 produce request's ``key`` or ``value`` object as the record's bytes."""
        what = "key" if is_key else "value"
        if spec is None:
            return Encoded(None, None, 0)
        if not isinstance(spec, dict):
            raise RestError(400, f"The record's {what} must be an object with 'type' and 'data'")
        kind = _kind(spec.get("type"), what)
        data = spec.get("data")
        if kind in PLAIN:
            given = next((f for f in SCHEMA_FIELDS if spec.get(f) is not None), None)
            if given is not None:
                raise RestError(400, f"'type={kind}' cannot be used with '{given}' (the "
                                     f"record's {what})")
            raw = encode_plain(kind, data, what)
            return Encoded(raw, kind, 0 if raw is None else len(raw))
        chosen = schema_spec(kind, spec, what)
        found, subject, version = await self._schema(topic, chosen, is_key)
        fmt = FORMAT_OF.get(found.schema_type, found.schema_type)
        try:
            payload = found.codec.encode(data)
        except DataError as exc:
            raise RestError(400, f"The record's {what} is not valid {fmt} data for schema "
                                 f"{found.id} (subject {subject}): {exc}") from None
        raw = wire(found.id, payload)
        return Encoded(raw, fmt, len(raw), subject, found.id, version)

    async def decode(self, raw: bytes | None, fmt: str) -> Any:
        """A record's key or value as JSON in embedded format `fmt` (a schema's format: the
        JSON form Confluent's v2 consumer returns)."""
        fmt = fmt.upper()
        if fmt not in SCHEMA_FORMATS or raw is None:
            return decode_plain(raw, fmt)
        try:
            schema_id, payload = unwire(raw)
        except ValueError as exc:
            raise RestError(DESERIALIZATION_ERROR, f"Cannot show a record as {fmt}: {exc}",
                            500) from None
        registry = self._registry_for_decode(fmt)
        try:
            found = await registry.by_id(schema_id)
        except RegistryCallError as exc:
            raise _decode_registry_error(schema_id, exc) from None
        except SchemaError as exc:
            raise RestError(DESERIALIZATION_ERROR, f"Schema {schema_id} cannot be parsed: "
                                                   f"{exc}", 500) from None
        if FORMAT_OF.get(found.schema_type) != fmt:
            raise RestError(DESERIALIZATION_ERROR, f"A record's schema {schema_id} is "
                            f"{FORMAT_OF.get(found.schema_type, found.schema_type)}, not {fmt}",
                            500)
        try:
            return found.codec.decode(payload)
        except DataError as exc:
            raise RestError(DESERIALIZATION_ERROR, f"A record is not valid data of its schema "
                                                   f"{schema_id}: {exc}", 500) from None

    def _registry_for_decode(self, fmt: str) -> RegistryClient:
        if self.registry is None:
            raise RestError(DESERIALIZATION_ERROR, f"Cannot show records as {fmt}: this broker "
                                                   "serves no schema registry", 500)
        return self.registry

    async def _schema(self, topic: str, spec: SchemaSpec, is_key: bool
                      ) -> tuple[Found, str, int]:
        """The schema a spec names, its subject and its version there."""
        registry = self.registry
        if registry is None:
            raise unprocessable("Payload error. Schema Registry must be configured when using "
                                "schemas.", INVALID_PAYLOAD)
        if spec.schema_id is not None:
            try:
                found = await registry.by_id(spec.schema_id)
            except RegistryCallError as exc:
                raise _lookup_error(f"Error when fetching schema by id. schemaId = "
                                    f"{spec.schema_id}", exc) from None
            except SchemaError as exc:
                raise _stored_schema_error(spec.schema_id, exc) from None
            subject = spec.subject or subject_name(topic, is_key, spec.strategy,
                                                   found.codec.record_name)
            try:
                version = await registry.version_of(subject, found)
            except RegistryCallError as exc:
                raise _lookup_error(f"Error when fetching schema version. subject = {subject}, "
                                    f"schemaId = {found.id}", exc) from None
            return found, subject, version
        if spec.schema is not None:
            assert spec.format is not None
            return await self._registered(registry, topic, spec, spec.format, spec.schema,
                                          is_key)
        subject = spec.subject or subject_name(topic, is_key, spec.strategy, None)
        wanted = spec.schema_version if spec.schema_version is not None else "latest"
        try:
            found, version = await registry.at_version(subject, wanted)
        except RegistryCallError as exc:
            if spec.schema_version is None:
                raise _lookup_error(f"Error when fetching latest schema version. subject = "
                                    f"{subject}", exc) from None
            if exc.forbidden:
                raise _lookup_error(f"Error when fetching schema version. subject = {subject}, "
                                    f"version = {spec.schema_version}", exc) from None
            raise RestError(400, f"Schema does not exist for subject: {subject}, version: "
                                 f"{spec.schema_version} ({exc.message})") from None
        except SchemaError as exc:
            raise unprocessable(f"Invalid schema: the schema of subject {subject} cannot be "
                                f"parsed: {_one_line(str(exc))}", INVALID_SCHEMA) from None
        return found, subject, version

    async def _registered(self, registry: RegistryClient, topic: str, spec: SchemaSpec,
                          fmt: str, text: str, is_key: bool) -> tuple[Found, str, int]:
        """A schema's text: parsed here (so a bad one answers 42205 at once), then looked up
        under its subject or registered there."""
        schema_type = REGISTRY_TYPE[fmt]
        try:
            codec = await asyncio.to_thread(shared_codec, schema_type, text, {})
        except SchemaError as exc:
            raise unprocessable(f"Invalid schema: Error when parsing raw schema. format = {fmt}: "
                                f"{_one_line(exc.details)}", INVALID_SCHEMA) from None
        subject = spec.subject or subject_name(topic, is_key, spec.strategy, codec.record_name)
        try:
            schema_id, version = await registry.register(subject, schema_type, text)
        except RegistryCallError as exc:
            raise _lookup_error(f"Error when registering schema. format = {fmt}, subject = "
                                f"{subject}", exc) from None
        found = Found(schema_id, schema_type, text, [], codec)
        registry.remember(found)
        return found, subject, version


def _kind(value: Any, what: str) -> str | None:
    if value is None:
        return None
    kind = value.upper() if isinstance(value, str) else None
    if kind not in PLAIN + SCHEMA_FORMATS:
        raise RestError(400, f"The record's {what} has type {json.dumps(value)}: it must be one "
                             f"of {', '.join(PLAIN + SCHEMA_FORMATS)}")
    return kind


def schema_spec(kind: str | None, spec: dict[str, Any], what: str) -> SchemaSpec:
    """The schema fields of a key or value object, checked as Confluent checks them (400)."""

    def field(name: str, cls: type) -> Any:
        value = spec.get(name)
        if value is not None and (not isinstance(value, cls) or isinstance(value, bool)):
            kind_name = "an integer" if cls is int else "a string"
            raise RestError(400, f"'{name}' of the record's {what} must be {kind_name}")
        return value

    subject = field("subject", str)
    strategy = field("subject_name_strategy", str)
    schema_id = field("schema_id", int)
    schema_version = field("schema_version", int)
    schema = field("schema", str)
    if strategy is not None:
        strategy = strategy.upper()
        if strategy not in STRATEGIES:
            raise RestError(400, f"'subject_name_strategy' of the record's {what} must be one of "
                                 f"{', '.join(STRATEGIES)}")
    if subject is not None and strategy is not None:
        raise RestError(400, "Only one of 'subject_name_strategy' or 'subject' can be used.")
    if sum(v is not None for v in (schema_id, schema_version, schema)) > 1:
        raise RestError(400, "Only one of 'schema_id', 'schema_version' or 'schema' can be used.")
    if kind is not None:
        if schema_id is not None or schema_version is not None:
            given = "schema_id" if schema_id is not None else "schema_version"
            raise RestError(400, f"'{given}' cannot be used with 'type={kind}': a registered "
                                 "schema decides the format (leave out 'type')")
        if schema is None:
            raise RestError(400, f"'type={kind}' needs 'schema' (the schema's text); for a "
                                 "registered schema leave out 'type' and give 'schema_id', "
                                 "'schema_version' or neither (the subject's latest version)")
    elif schema is not None:
        raise RestError(400, "'schema' needs 'type' (AVRO, JSONSCHEMA or PROTOBUF)")
    return SchemaSpec(kind, subject, strategy, schema_id, schema_version, schema)


def subject_name(topic: str, is_key: bool, strategy: str | None, record: str | None) -> str:
    """The subject a strategy names (`record`: the schema's record name; None before the
    schema is known, which only TOPIC_NAME does without)."""
    strategy = strategy or "TOPIC_NAME"
    if strategy == "TOPIC_NAME":
        return f"{topic}-{'key' if is_key else 'value'}"
    if record is None:
        raise RestError(400, f"Cannot use subject_name_strategy={strategy} without schema_id or "
                             "schema, nor with a schema that names no record (an Avro record, a "
                             "JSON Schema title, a Protobuf message)")
    return record if strategy == "RECORD_NAME" else f"{topic}-{record}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _lookup_error(context: str, exc: RegistryCallError) -> RestError:
    if exc.forbidden:
        return RestError(AUTHORIZATION_ERROR, f"{context}: {exc.message}", 403)
    return unprocessable(f"Error serializing message. {context}: {exc.message}",
                         SERIALIZATION_ERROR)


def _stored_schema_error(schema_id: int, exc: SchemaError) -> RestError:
    return unprocessable(f"Invalid schema: schema {schema_id} cannot be parsed: "
                         f"{exc}", INVALID_SCHEMA)


def _decode_registry_error(schema_id: int, exc: RegistryCallError) -> RestError:
    if exc.forbidden:
        return RestError(AUTHORIZATION_ERROR, f"Schema {schema_id} of a record: {exc.message}",
                         403)
    return RestError(DESERIALIZATION_ERROR, f"Cannot read schema {schema_id} of a record: "
                                            f"{exc.message}", 500)


def encode_plain(kind: str, data: Any, what: str) -> bytes | None:
    if data is None:
        return None
    if kind == "BINARY":
        if not isinstance(data, str):
            raise RestError(400, f"BINARY {what} data must be a base64 string")
        try:
            return binascii.a2b_base64(data, strict_mode=True)  # strict: no stray bytes
        except (binascii.Error, ValueError):
            raise RestError(400, f"The {what}'s BINARY data is not valid base64") from None
    if kind == "STRING":
        if not isinstance(data, str):
            raise RestError(400, f"STRING {what} data must be a string")
        return data.encode()
    return json.dumps(data, separators=(",", ":")).encode()


def decode_plain(raw: bytes | None, fmt: str) -> Any:
    if raw is None:
        return None
    if fmt == "BINARY":
        return base64.b64encode(raw).decode()
    if fmt == "STRING":
        return raw.decode("utf-8", errors="replace")
    if fmt == "JSON":
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise RestError(50002, "A record is not valid JSON: cannot show it as JSON", 500) from None
    raise unprocessable(f"Embedded format {fmt} is not supported")


# -- one Formats per user ------------------------------------------------------------------------

FORMATS_LIMIT = 1024
_formats: dict[tuple[str | None, str | None], tuple[bytes, Formats]] = {}
_tls: dict[str, ssl.SSLContext | None] = {}


def formats_of(ctx: RestContext, request: Request) -> Formats:
    """The Formats of the request's user, kept across requests (its registry answers with
    it): the registry is asked with the user's basic credentials, a new password making new
    Formats."""
    url = ctx.settings.handoff.registry_url
    user = ctx.user(request)
    password = _password(ctx, user)
    secret = hashlib.sha256(f"{url}\0{user}\0{password}".encode()).digest()
    found = _formats.get((url, user))
    if found is not None and found[0] == secret:
        return found[1]
    auth = (user, password) if user is not None and password is not None else None
    tls = _registry_tls(ctx, url) if url is not None and url.startswith("https:") else None
    formats = Formats(url, auth, tls=tls)
    if len(_formats) >= FORMATS_LIMIT:
        _formats.clear()
    _formats[(url, user)] = (secret, formats)
    return formats


def _password(ctx: RestContext, user: str | None) -> str | None:
    return None if user is None else ctx.pool.password_of(user)


def _registry_tls(ctx: RestContext, url: str) -> ssl.SSLContext | None:
    """The context for an https registry: the broker's trust store, as its registry listener
    reads the ssl.* settings (the system's defaults when they do not make one)."""
    if url not in _tls:
        from urllib.parse import urlsplit

        from strom.config.defs import ConfigError
        from strom.config.listeners import Listener
        from strom.security.listeners import ListenerSettings
        from strom.security.tls import client_context

        parts = urlsplit(url)
        listener = Listener("SCHEMA_REGISTRY", parts.hostname or "", parts.port or 443, "SSL")
        try:
            _tls[url] = client_context(ListenerSettings(ctx.settings.config, listener).get)
        except (ConfigError, OSError, ssl.SSLError):
            _tls[url] = None
    return _tls[url]
