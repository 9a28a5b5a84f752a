"""Server sides of the SASL mechanisms Strom offers: PLAIN and SCRAM-SHA-256/512.

Each exchange is one object per authentication: `evaluate` takes the client's next token and
returns the server's answer, raising `AuthenticationFailed` with the message Kafka sends the
client. Secrets never appear in messages or logs. SCRAM's message handling is the `scramp`
library's (RFC 5802/7677); credentials are looked up salted and hashed, never as passwords.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384


class AuthenticationFailed(Exception):
    """The client's credentials are wrong or its tokens malformed; str() is what Kafka tells
    the client (SASL_AUTHENTICATION_FAILED)."""

    def __init__(self, message: str, user: str | None = None, *,
                 detail: str | None = None) -> None:
        super().__init__(message)
        self.user = user  # who the client claimed to be, for the log line
        self.detail = detail  # why, when the client is told less (the log line only)


class SaslExchange(Protocol):
    mechanism: str

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to the client's token; raises AuthenticationFailed."""
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated identity (the principal's name), once complete."""
        ...

    @property
    def lifetime_ms(self) -> int | None:
        """When the credential itself expires (OAUTHBEARER tokens), as epoch ms; else None."""
        ...


class _PasswordExchange:
    """What PLAIN and SCRAM share: the user they authenticated, credentials that never
    expire by themselves."""

    _user: str | None = None

    @property
    def authorization_id(self) -> str:
        assert self._user is not None
        return self._user

    @property
    def lifetime_ms(self) -> int | None:
        return None


# -- PLAIN (RFC 4616) -----------------------------------------------------------------------


class PlainExchange(_PasswordExchange):
    """One message, ``[authzid] NUL authcid NUL passwd``, checked against the JAAS config's
    ``user_<name>="<password>"`` entries, as Kafka's PlainServerCallbackHandler."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens, got "
                                       f"{len(parts)}")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified", user)
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password",
                                       user)
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization "
                                       "id that is different from username", user)
        self._user = user
        return b""

    @property
    def complete(self) -> bool:
        return self._user is not None


# -- SCRAM (RFC 5802, RFC 7677) -------------------------------------------------------------


@dataclass(frozen=True)
class ScramCredential:
    """What the broker keeps of a SCRAM password (never the password itself)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


# (user, mechanism) -> the stored credential, or None for an unknown user
CredentialLookup = Callable[[str, str], ScramCredential | None]


_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword = Hi(password, salt, i), i.e. PBKDF2-HMAC; the password is
    UTF-8 without SASLprep, as Kafka's ScramFormatter."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """The stored form of a credential whose password the client salted and hashed already
    (AlterUserScramCredentials carries SaltedPassword): StoredKey = H(HMAC(SaltedPassword,
    "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    name = _HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", name)
    stored_key = hashlib.new(name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", name)
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_from_password(mechanism: str, password: str, iterations: int = 4096,
                             salt: bytes | None = None) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(24)
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


class _UnknownUser(Exception):
    pass


class ScramExchange(_PasswordExchange):
    """client-first -> server-first -> client-final -> server-final, as Kafka's ScramSaslServer
    (no channel binding; Kafka's ``tokenauth`` extension is for delegation tokens, which Strom
    does not have)."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        import scramp  # here, not with the broker: 55 ms to import, for SCRAM listeners only

        self.mechanism = mechanism
        self._lookup = lookup
        self._server = scramp.ScramMechanism(mechanism).make_server(self._credential)
        self._scram_error: type[Exception] = scramp.ScramException
        self._user: str | None = None
        self._step = 0
        self._done = False
        self._unknown = False

    def _credential(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        # scramp has turned RFC 5802's "=2C" and "=3D" back into "," and "=" already
        self._user = user
        cred = self._lookup(user, self.mechanism)
        if cred is None:
            self._unknown = True
            raise _UnknownUser(user)
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def _failed(self) -> AuthenticationFailed:
        return AuthenticationFailed(
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {self.mechanism}", self._user)

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8", self._user) from None
        self._step += 1
        try:
            if self._step == 1:
                self._server.set_client_first(text)
                first: str = self._server.get_server_first()
                return first.encode()
            if self._step == 2:
                self._server.set_client_final(text)
                final: str = self._server.get_server_final()
                answer = final.encode()
                self._done = True
                return answer
        except _UnknownUser:
            raise self._failed() from None
        except self._scram_error as e:
            if self._step == 1 and not self._unknown:
                raise AuthenticationFailed(f"Invalid SCRAM client first message: {e}",
                                           self._user) from None
            raise self._failed() from None  # an unknown user, or a proof that does not match
        raise AuthenticationFailed("Unexpected SCRAM message after authentication completed",
                                   self._user)

    @property
    def complete(self) -> bool:
        return self._done
