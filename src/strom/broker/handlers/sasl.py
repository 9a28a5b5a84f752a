"""SaslHandshake and SaslAuthenticate: the connection's `Session` keeps the state (see
strom.security.session); these handlers only carry its answers in Kafka's responses."""

from __future__ import annotations

from typing import Any

from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import SaslAuthenticateRequest, SaslHandshakeRequest
from strom.broker.router import handles
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.sasl.mechanisms import AuthenticationFailed


@handles(ApiKey.SASL_HANDSHAKE, 0, 1)
def sasl_handshake(broker: Broker, ctx: RequestContext,
                   request: SaslHandshakeRequest) -> dict[str, Any]:
    session = ctx.session
    if session.sasl is None or session.illegal_handshake():
        # a PLAINTEXT/SSL listener, or a session that has nothing to re-authenticate
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    accepted, enabled = session.handshake(request.mechanism, ctx.api_version)
    if not accepted:
        code = ErrorCode.UNSUPPORTED_SASL_MECHANISM if enabled else ErrorCode.ILLEGAL_SASL_STATE
        return {"error_code": code, "mechanisms": enabled}
    return {"error_code": ErrorCode.NONE, "mechanisms": enabled}


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
def sasl_authenticate(broker: Broker, ctx: RequestContext,
                      request: SaslAuthenticateRequest) -> dict[str, Any]:
    session = ctx.session
    if session.sasl is None or session.authenticated:
        return _reply(ErrorCode.ILLEGAL_SASL_STATE,
                      "SaslAuthenticate request received after successful authentication")
    try:
        answer = session.authenticate(bytes(request.auth_bytes), ctx.api_version)
    except AuthenticationFailed as e:
        return _reply(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e))
    lifetime = session.session_lifetime_ms if session.authenticated else 0  # v1+
    return _reply(ErrorCode.NONE, None, answer, lifetime)


def _reply(code: ErrorCode, message: str | None, auth_bytes: bytes = b"",
           lifetime_ms: int = 0) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "auth_bytes": auth_bytes,
            "session_lifetime": lifetime_ms}
