"""SCRAM credentials as user configs, in the text form Kafka kept under ``/config/users``:
``SCRAM-SHA-256`` -> ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.

The cluster metadata holds them per user (a single node's metadata log, a cluster's
ZooKeeper), so every broker authenticates every user. Passwords are never stored.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable, Mapping

from strom.security.sasl.mechanisms import SCRAM_MECHANISMS, CredentialLookup, ScramCredential

log = logging.getLogger("strom.security")

UserConfigs = Mapping[str, Mapping[str, str]]


def credential_to_config(cred: ScramCredential) -> str:
    b64 = base64.b64encode
    return (f"salt={b64(cred.salt).decode()},stored_key={b64(cred.stored_key).decode()},"
            f"server_key={b64(cred.server_key).decode()},iterations={cred.iterations}")


def credential_from_config(text: str) -> ScramCredential:
    """Raises ValueError for a malformed value."""
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    try:
        return ScramCredential(base64.b64decode(fields["salt"], validate=True),
                               base64.b64decode(fields["stored_key"], validate=True),
                               base64.b64decode(fields["server_key"], validate=True),
                               int(fields["iterations"]))
    except (KeyError, binascii.Error) as e:
        raise ValueError(f"malformed SCRAM credential: {e}") from None


def credentials_of(user_configs: UserConfigs, user: str) -> dict[str, ScramCredential]:
    """Every SCRAM credential a user has, by mechanism (malformed ones are skipped, logged)."""
    out: dict[str, ScramCredential] = {}
    for mechanism, text in user_configs.get(user, {}).items():
        if mechanism in SCRAM_MECHANISMS:
            try:
                out[mechanism] = credential_from_config(text)
            except ValueError as e:
                log.error("ignoring the %s credential of user %s: %s", mechanism, user, e)
    return out


def lookup_in(user_configs: Callable[[], UserConfigs]) -> CredentialLookup:
    """A credential lookup reading the current user configs on every authentication."""

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        return credentials_of(user_configs(), user).get(mechanism)

    return lookup
