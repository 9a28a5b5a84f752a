"""SASL OAUTHBEARER (RFC 7628) as Kafka's broker speaks it, with two token validators:

- unsecured (Kafka's default, for development): a JWS with ``"alg":"none"`` and no signature,
  checked for its expiry, its principal claim and required scopes, as Kafka's
  OAuthBearerUnsecuredValidatorCallbackHandler;
- signed (Kafka's OAuthBearerValidatorCallbackHandler): a JWT whose signature is checked against
  the keys of a JWKS file, with issuer, audience and expiry checks (PyJWT does the JOSE work).

The client's first message is ``n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[key=value\\x01]*\\x01``.
A token the validator refuses is answered with a JSON challenge (``{"status":"invalid_token"}``),
the client acknowledges it with a single ``\\x01``, and the authentication fails with that JSON
as the message, as in Kafka.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from strom.security.sasl.mechanisms import AuthenticationFailed

_FIRST = re.compile(rb"n,(?:a=(?P<authzid>[^,]*))?,\x01(?P<pairs>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+)[ ]+(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


@dataclass(frozen=True)
class ValidToken:
    principal: str
    lifetime_ms: int  # expiry, epoch ms


class TokenRejected(Exception):
    """The validator refused the token; `status` (and `scope`) go into the JSON challenge."""

    def __init__(self, reason: str, status: str = "invalid_token", scope: str | None = None):
        super().__init__(reason)
        self.status = status
        self.scope = scope


class TokenValidator(Protocol):
    def validate(self, token: str) -> ValidToken: ...


# -- the unsecured validator ------------------------------------------------------------------


def _b64_json(part: str, what: str) -> dict[str, Any]:
    padded = part + "=" * (-len(part) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        value = json.loads(raw)
    except (binascii.Error, ValueError) as e:
        raise TokenRejected(f"malformed {what}: {e}") from None
    if not isinstance(value, dict):
        raise TokenRejected(f"the {what} is not a JSON object")
    return value


def _scopes(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TokenRejected("the scope claim is neither a string nor a list of strings")


@dataclass(frozen=True)
class UnsecuredValidator:
    """Kafka's unsecured JWS checks: `alg` none, no signature, `exp` present and not passed,
    `iat` not in the future, the principal claim a string, every required scope present."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    def validate(self, token: str) -> ValidToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenRejected("Unsecured JWS compact serializations must have 3 dot-separated "
                                "Base64URL-encoded values")
        header, claims, signature = parts
        if signature:
            raise TokenRejected("Unsecured JWS must not contain a digital signature")
        if _b64_json(header, "header").get("alg") != "none":
            raise TokenRejected("Unsecured JWS must have 'none' for an algorithm")
        body = _b64_json(claims, "claims")
        now_ms = time.time() * 1000
        exp = body.get("exp")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            raise TokenRejected("No expiration time in JWT")
        exp_ms = round(exp * 1000)
        if now_ms >= exp_ms + self.clock_skew_ms:
            raise TokenRejected("The indicated time is after the token's expiration time")
        iat = body.get("iat")
        if isinstance(iat, (int, float)) and iat * 1000 > now_ms + self.clock_skew_ms:
            raise TokenRejected("The token was issued in the future")
        principal = body.get(self.principal_claim)
        if not isinstance(principal, str) or not principal:
            raise TokenRejected(f"No principal claim {self.principal_claim!r} in the token")
        missing = [s for s in self.required_scope if s not in _scopes(body.get(self.scope_claim))]
        if missing:
            raise TokenRejected(f"The token lacks the required scope(s) {missing}",
                                status="insufficient_scope",
                                scope="[" + ", ".join(self.required_scope) + "]")
        return ValidToken(principal, exp_ms)


# -- the signed-token validator ---------------------------------------------------------------


def jwks_path(url: str) -> Path:
    """The file of a ``file:`` JWKS URL (the only kind Strom reads)."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise ValueError(f"sasl.oauthbearer.jwks.endpoint.url={url}: Strom reads JWKS from a "
                         f"file: URL only (fetch the JWKS into a file)")
    return Path(unquote(parsed.path))


class JwksValidator:
    """Signed JWTs checked with PyJWT against the keys of a JWKS file, which is read again
    when it changes (keys rotate). `alg` none is refused; `exp` and `iat` are required."""

    ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                  "ES512", "EdDSA")

    def __init__(self, path: Path, *, issuer: str | None, audience: Sequence[str],
                 principal_claim: str = "sub", clock_skew_s: int = 30) -> None:
        import jwt

        self._jwt = jwt
        self.path = path
        self.issuer = issuer
        self.audience = list(audience)
        self.principal_claim = principal_claim
        self.clock_skew_s = clock_skew_s
        self._stamp: tuple[int, int] | None = None
        self._keys: dict[str | None, Any] = {}
        self._load()  # a missing or malformed file stops the start-up

    def _load(self) -> None:
        stat = self.path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        try:
            keys = self._jwt.PyJWKSet.from_json(self.path.read_text()).keys
        except self._jwt.PyJWTError as e:
            raise ValueError(f"malformed JWKS {self.path}: {e}") from None
        self._keys = {key.key_id: key for key in keys}
        self._stamp = stamp

    def validate(self, token: str) -> ValidToken:
        jwt = self._jwt
        try:
            self._load()
        except (OSError, ValueError, jwt.PyJWTError) as e:
            raise TokenRejected(f"cannot read the JWKS file {self.path}: {e}") from None
        try:
            header = jwt.get_unverified_header(token)
            key = self._keys.get(header.get("kid"))
            if key is None and len(self._keys) == 1 and header.get("kid") is None:
                key = next(iter(self._keys.values()))
            if key is None:
                raise TokenRejected(f"no key with kid {header.get('kid')!r} in the JWKS")
            claims = jwt.decode(
                token, key, algorithms=list(self.ALGORITHMS), issuer=self.issuer,
                audience=self.audience or None, leeway=self.clock_skew_s,
                options={"require": ["exp", "iat"], "verify_aud": bool(self.audience),
                         "verify_iss": self.issuer is not None})
        except jwt.PyJWTError as e:
            raise TokenRejected(str(e)) from None
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal:
            raise TokenRejected(f"No principal claim {self.principal_claim!r} in the token")
        return ValidToken(principal, int(claims["exp"]) * 1000)


# -- the exchange -----------------------------------------------------------------------------


class OAuthBearerExchange:
    mechanism = "OAUTHBEARER"

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._token: ValidToken | None = None
        self._challenged: str | None = None  # the JSON sent for a refused token
        self._reason: str | None = None  # why, for the broker's log only

    def evaluate(self, token: bytes) -> bytes:
        if self._challenged is not None:  # the client's \x01 after our challenge
            raise AuthenticationFailed(self._challenged, detail=self._reason)
        m = _FIRST.fullmatch(token)
        if m is None:
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        pairs = dict(p.split(b"=", 1) for p in m.group("pairs").split(b"\x01") if p)
        auth = pairs.get(b"auth")
        if auth is None:
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message: 'auth' not "
                                       "specified")
        a = _AUTH.fullmatch(auth.decode("ascii", "replace"))
        if a is None or a.group("scheme").lower() != "bearer":
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message: invalid "
                                       "'auth' format")
        try:
            valid = self._validator.validate(a.group("token"))
        except TokenRejected as e:
            challenge = {"status": e.status}
            if e.scope is not None:
                challenge["scope"] = e.scope
            self._challenged = json.dumps(challenge, separators=(", ", ":"))
            self._reason = f"{e} ({self._challenged})"
            return self._challenged.encode()
        authzid = m.group("authzid")
        if authzid and authzid.decode() != valid.principal:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id "
                f"({authzid.decode()}) that is different from the token's principal name "
                f"({valid.principal})", valid.principal)
        self._token = valid
        return b""

    @property
    def complete(self) -> bool:
        return self._token is not None

    @property
    def authorization_id(self) -> str:
        assert self._token is not None
        return self._token.principal

    @property
    def lifetime_ms(self) -> int | None:
        return self._token.lifetime_ms if self._token is not None else None
