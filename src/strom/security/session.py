"""One connection's security state: its listener, its principal, and on SASL listeners the
authentication that must finish before any other request is served.

The rules are Kafka's SaslServerAuthenticator's. Before authentication a connection may send
ApiVersions (once, first) and SaslHandshake, then (handshake v1) SaslAuthenticate requests, or
(handshake v0) raw size-prefixed tokens. Any other request closes the connection: with no
reply during the handshake, with an ILLEGAL_SASL_STATE reply once tokens are being exchanged.
A failed authentication is answered after a short delay and the connection is closed. With
``connections.max.reauth.ms`` (or an expiring token) the session ends after its lifetime: the
client must re-authenticate (SaslHandshake again, same principal) or the next request closes
the connection (KIP-368).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from strom.protocol.api_keys import ApiKey
from strom.security.principal import ANONYMOUS, KafkaPrincipal
from strom.security.sasl.mechanisms import AuthenticationFailed, SaslExchange

log = logging.getLogger("strom.security")

_API_VERSIONS, _HANDSHAKE, _AUTHENTICATE = (int(ApiKey.API_VERSIONS), int(ApiKey.SASL_HANDSHAKE),
                                            int(ApiKey.SASL_AUTHENTICATE))


class Gate(Enum):
    """What happens to a request on a connection that is not (or no longer) authenticated."""

    SERVE = "serve"
    CLOSE = "close"  # closed without a reply
    ILLEGAL_STATE = "illegal_state"  # answered with ILLEGAL_SASL_STATE, then closed


class _State(Enum):
    FIRST = "first"  # nothing received yet: ApiVersions or SaslHandshake
    HANDSHAKE = "handshake"  # ApiVersions answered: SaslHandshake next
    AUTHENTICATE = "authenticate"  # SaslAuthenticate requests (handshake v1)
    RAW = "raw"  # raw tokens (handshake v0)
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True)
class SaslSettings:
    """A SASL listener's authentication settings (strom.security.listeners builds them)."""

    mechanisms: Mapping[str, Callable[[], SaslExchange]]  # enabled mechanism -> new exchange
    max_reauth_ms: Mapping[str, int] = field(default_factory=dict)  # 0 / absent: no limit
    max_receive_size: int = 524288
    failure_delay_s: float = 0.1  # connection.failed.authentication.delay.ms


class Session:
    """The security side of one connection. Non-SASL connections are authenticated from the
    start (PLAINTEXT: User:ANONYMOUS; SSL: the certificate's principal)."""

    __slots__ = (
        "_exchange",
        "_expires_at",
        "_raw",
        "_reauth",
        "_state",
        "closing",
        "forwarded",
        "gated",
        "listener",
        "mechanism",
        "peer",
        "principal",
        "protocol",
        "sasl",
        "session_lifetime_ms",
    )

    def __init__(self, listener: str, protocol: str, peer: str,
                 principal: KafkaPrincipal = ANONYMOUS, sasl: SaslSettings | None = None) -> None:
        self.listener = listener
        self.protocol = protocol
        self.peer = peer
        self.principal = principal
        self.sasl = sasl
        self.mechanism: str | None = None
        self.session_lifetime_ms = 0
        self.closing = False  # a failed authentication: reply (after a delay), then close
        # a request another broker forwarded (KRaft: an admin request it sent on to the
        # active controller, in an Envelope carrying the client's principal)
        self.forwarded = False
        self._exchange: SaslExchange | None = None
        self._expires_at: float | None = None
        self._reauth = False
        self._raw = False  # handshake v0: tokens arrive as raw frames
        self._state = _State.FIRST if sasl is not None else _State.COMPLETE
        # True while requests must pass `gate` (SASL not finished, or a session that expires)
        self.gated = sasl is not None

    @property
    def authenticated(self) -> bool:
        return self._state is _State.COMPLETE and not self._reauth

    @property
    def raw_tokens(self) -> bool:
        return self._raw and self._state is _State.AUTHENTICATE

    @property
    def max_receive_size(self) -> int | None:
        """The largest frame accepted now: sasl.server.max.receive.size before authentication."""
        if self.sasl is not None and self._state is not _State.COMPLETE:
            return self.sasl.max_receive_size
        return None

    # -- the gate -----------------------------------------------------------------------------

    def gate(self, api_key: int) -> Gate:
        """May a request with this API key be served now?"""
        state = self._state
        if state is _State.COMPLETE:
            if self._reauth:
                return Gate.SERVE if api_key == _AUTHENTICATE else Gate.CLOSE
            if self._expires_at is not None and time.monotonic() >= self._expires_at:
                if api_key == _HANDSHAKE:
                    return Gate.SERVE  # re-authentication starts
                log.info("closing expired session of %s on %s (%s): re-authentication did not "
                         "happen within session_lifetime_ms", self.principal, self.listener,
                         self.peer)
                return Gate.CLOSE
            return Gate.SERVE
        if state is _State.FIRST:
            if api_key in (_API_VERSIONS, _HANDSHAKE):
                if api_key == _API_VERSIONS:
                    self._state = _State.HANDSHAKE
                return Gate.SERVE
        elif state is _State.HANDSHAKE:
            if api_key == _HANDSHAKE:
                return Gate.SERVE
        elif state is _State.AUTHENTICATE and not self._raw:
            if api_key == _AUTHENTICATE:
                return Gate.SERVE
            log.info("closing connection %s on %s: %s request during SASL authentication",
                     self.peer, self.listener, _name(api_key))
            return Gate.ILLEGAL_STATE
        log.info("closing connection %s on %s: unexpected %s request during SASL handshake",
                 self.peer, self.listener, _name(api_key))
        return Gate.CLOSE

    # -- SaslHandshake ------------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> tuple[bool, list[str]]:
        """(accepted, enabled mechanisms). An unsupported mechanism fails the connection; a
        handshake on a session that cannot re-authenticate is ILLEGAL_SASL_STATE (False, [])."""
        sasl = self.sasl
        if sasl is None:
            return False, []
        enabled = list(sasl.mechanisms)
        if self._state is _State.COMPLETE:
            if self._expires_at is None:
                return False, []
            self._reauth = True  # re-authentication (KIP-368)
        elif self._state not in (_State.FIRST, _State.HANDSHAKE):
            return False, []
        factory = sasl.mechanisms.get(mechanism)
        if factory is None:
            log.info("failed authentication of %s on %s: unsupported SASL mechanism %r (enabled: "
                     "%s)", self.peer, self.listener, mechanism, ", ".join(enabled))
            self._fail()
            return False, enabled
        if self._reauth and mechanism != self.mechanism:
            log.info("failed re-authentication of %s on %s: mechanism %s instead of %s",
                     self.principal, self.listener, mechanism, self.mechanism)
            self._fail()
            return True, enabled  # Kafka accepts the handshake, then closes on the next token
        self.mechanism = mechanism
        self._exchange = factory()
        self._state = _State.AUTHENTICATE
        self._raw = version == 0
        return True, enabled

    def illegal_handshake(self) -> bool:
        """SaslHandshake on a connection that is authenticated for good (no session expiry)."""
        return self._state is _State.COMPLETE and self._expires_at is None

    # -- tokens -------------------------------------------------------------------------------

    def authenticate(self, token: bytes, version: int) -> bytes:
        """The server's answer to one token; raises AuthenticationFailed (the connection then
        closes) with the message for the client."""
        exchange = self._exchange
        if self._state is not _State.AUTHENTICATE or exchange is None or self.closing:
            self._fail()
            raise AuthenticationFailed("Request is not valid given the current SASL state.")
        try:
            answer = exchange.evaluate(token)
        except AuthenticationFailed as e:
            self._log_failure(e)
            self._fail()
            if self._reauth:
                raise AuthenticationFailed(str(e).replace("during authentication",
                                                          "during re-authentication"),
                                           e.user) from None
            raise
        if exchange.complete:
            self._complete(exchange, version)
        return answer

    def _complete(self, exchange: SaslExchange, version: int) -> None:
        principal = KafkaPrincipal.user(exchange.authorization_id)
        if self._reauth and principal != self.principal:
            failure = AuthenticationFailed(
                f"Cannot change principals during re-authentication from "
                f"{self.principal.type}.{self.principal.name}: {principal.type}.{principal.name}",
                principal.name)
            self._log_failure(failure)
            self._fail()
            raise failure
        self.principal = principal
        self._state = _State.COMPLETE
        self._reauth = False
        self._exchange = None
        lifetime = self._lifetime_ms(exchange)
        # clients that sent SaslAuthenticate v0 (or raw tokens) cannot re-authenticate: Kafka
        # still ends their session, so they reconnect
        self.session_lifetime_ms = lifetime
        self._expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
        self.gated = self._expires_at is not None
        log.debug("authenticated %s on %s (%s) with %s", principal, self.listener, self.peer,
                  self.mechanism)

    def _lifetime_ms(self, exchange: SaslExchange) -> int:
        assert self.sasl is not None and self.mechanism is not None
        max_reauth = self.sasl.max_reauth_ms.get(self.mechanism, 0)
        expiry = exchange.lifetime_ms
        if expiry is None:
            return max_reauth if max_reauth > 0 else 0
        remaining = max(0, expiry - int(time.time() * 1000))
        return min(remaining, max_reauth) if max_reauth > 0 else remaining

    def _fail(self) -> None:
        self._state = _State.FAILED
        self.closing = True
        self.gated = True

    def _log_failure(self, e: AuthenticationFailed) -> None:
        # one line per failed authentication, never a secret (issue 17)
        user = f"User:{e.user}" if e.user else "unknown principal"
        log.warning("failed %sauthentication of %s on listener %s from %s with %s: %s",
                    "re-" if self._reauth else "", user, self.listener, self.peer,
                    self.mechanism, e.detail or e)


def _name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"
