"""SCRAM users in a KRaft node's bootstrap snapshot: ``strom storage format --add-scram``.

`kafka-storage format --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'` puts a
user's credential into the metadata a new cluster starts from, so brokers can authenticate
each other with SCRAM at their first start. Strom writes Kafka's own UserScramCredentialRecord
v0 (frame version 1, api key 11), as it writes Kafka's FeatureLevelRecords there
(strom.cluster.features); its controllers read it back as the user's credential, the same user
config `strom users add` or AlterUserScramCredentials would have committed.

The argument's syntax and checks are those of Kafka's ScramParser: ``MECHANISM=[k=v,...]`` with
``name``, and ``password`` or base64 ``salt`` plus ``saltedpassword``; optional base64 ``salt``
and ``iterations`` (default 4096, Kafka's bounds); values may be quoted.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass

from strom.protocol.primitives import write_uvarint
from strom.security.sasl.mechanisms import (
    SCRAM_MAX_ITERATIONS,
    SCRAM_MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted_password,
    salted_password,
)

_API_KEY = 11  # Kafka's UserScramCredentialRecord
_HEADER = bytes([1, _API_KEY, 0])  # frame version 1, api key, version 0 (one-byte varints)
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # Kafka's ScramMechanism.type()
MECHANISM_NAMES = {v: k for k, v in MECHANISM_TYPES.items()}
DEFAULT_ITERATIONS = 4096


class ScramArgumentError(ValueError):
    """An --add-scram argument Kafka's tool would refuse (the message is its wording)."""


@dataclass(frozen=True)
class ScramUser:
    name: str
    mechanism: str
    credential: ScramCredential


def parse_add_scram(argument: str) -> ScramUser:
    """One ``--add-scram`` argument as the credential it stands for (a new random salt when
    none is given)."""
    text = argument.strip()
    mechanism, eq, config = text.partition("=")
    if not eq:
        raise ScramArgumentError(f"Failed to find equals sign in SCRAM argument '{text}'")
    if mechanism not in MECHANISM_TYPES:
        raise ScramArgumentError(f"The add-scram mechanism {mechanism} is not supported.")
    if not config.startswith("["):
        raise ScramArgumentError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise ScramArgumentError("Expected configuration string to end with ]")
    parts: dict[str, str] = {}
    for component in config[1:-1].split(","):
        key, eq, value = component.partition("=")
        if not eq:
            raise ScramArgumentError(f"No equals sign found in SCRAM component: {component}")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        parts[key] = value
    name = parts.pop("name", None)
    if name is None:
        raise ScramArgumentError("You must supply 'name' to add-scram")
    salt = _b64(parts.pop("salt"), "salt") if "salt" in parts else None
    try:
        iterations = int(parts.pop("iterations", DEFAULT_ITERATIONS))
    except ValueError as e:
        raise ScramArgumentError(f"Failed to parse iterations count: {e}") from None
    password = parts.pop("password", None)
    salted_text = parts.pop("saltedpassword", None)
    if password is None and salted_text is None:
        raise ScramArgumentError("You must supply one of 'password' or 'saltedpassword' to "
                                 "add-scram")
    if password is None and salt is None:
        raise ScramArgumentError("You must supply 'salt' with 'saltedpassword' to add-scram")
    if parts:
        raise ScramArgumentError(f"Unknown SCRAM configurations: {', '.join(sorted(parts))}")
    if iterations < SCRAM_MIN_ITERATIONS:
        raise ScramArgumentError(f"The 'iterations' value must be >= {SCRAM_MIN_ITERATIONS} "
                                 f"for add-scram using {mechanism}")
    if iterations > SCRAM_MAX_ITERATIONS:
        raise ScramArgumentError(f"The 'iterations' value must be <= {SCRAM_MAX_ITERATIONS} "
                                 f"for add-scram using {mechanism}")
    salt = salt if salt is not None else os.urandom(32)  # a new random salt
    salted = (salted_password(mechanism, password, salt, iterations) if password is not None
              else _b64(salted_text or "", "saltedPassword"))
    return ScramUser(name, mechanism,
                     credential_from_salted_password(mechanism, salt, salted, iterations))


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramArgumentError(f"Failed to decode given {what}: {text}") from None


def _compact_bytes(raw: bytes) -> bytes:
    return write_uvarint(len(raw) + 1) + raw


def user_scram_credential_record(user: ScramUser) -> bytes:
    """Kafka's UserScramCredentialRecord v0 as a metadata record value."""
    c = user.credential
    return (_HEADER + _compact_bytes(user.name.encode("utf-8"))
            + bytes([MECHANISM_TYPES[user.mechanism]])
            + _compact_bytes(c.salt) + _compact_bytes(c.stored_key) + _compact_bytes(c.server_key)
            + c.iterations.to_bytes(4, "big", signed=True) + write_uvarint(0))


def parse_user_scram_credential_record(value: bytes) -> ScramUser:
    """The inverse of `user_scram_credential_record`; ValueError for anything else."""
    if value[:3] != _HEADER:
        raise ValueError(f"not a UserScramCredentialRecord v0: {value[:8].hex()}")
    pos = 3

    def compact() -> bytes:
        nonlocal pos
        n, shift = 0, 0
        while True:  # an unsigned varint: the length plus one
            b = value[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if n < 1 or pos + n - 1 > len(value):
            raise ValueError("UserScramCredentialRecord: bad field length")
        out = value[pos:pos + n - 1]
        pos += n - 1
        return out

    try:
        name = compact().decode("utf-8")
        mechanism = MECHANISM_NAMES[value[pos]]
        pos += 1
        salt, stored_key, server_key = compact(), compact(), compact()
        iterations = int.from_bytes(value[pos:pos + 4], "big", signed=True)
    except (IndexError, KeyError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed UserScramCredentialRecord: {e!r}") from None
    if pos + 5 != len(value) or value[pos + 4] != 0:
        raise ValueError("UserScramCredentialRecord: unexpected trailing bytes")
    return ScramUser(name, mechanism, ScramCredential(salt, stored_key, server_key, iterations))
