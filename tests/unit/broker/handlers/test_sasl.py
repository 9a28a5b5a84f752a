"""SaslHandshake and SaslAuthenticate: the connection's Session answers, the handlers carry
its answers in Kafka's responses."""

from __future__ import annotations

import functools

import pytest
import scramp

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.principal import ANONYMOUS, KafkaPrincipal
from strom.security.sasl.mechanisms import (
    PlainExchange,
    ScramExchange,
    credential_from_password,
)
from strom.security.session import SaslSettings, Session

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
CAROL = credential_from_password("SCRAM-SHA-512", "carol-secret")
MECHANISMS = ["PLAIN", "SCRAM-SHA-512"]


def use_sasl(harness, max_reauth_ms: int = 0) -> Session:
    """Give the harness's connection a SASL_PLAINTEXT session with PLAIN and SCRAM-SHA-512."""
    mechanisms = {
        "PLAIN": functools.partial(PlainExchange, USERS),
        "SCRAM-SHA-512": functools.partial(
            ScramExchange, "SCRAM-SHA-512",
            lambda user, mech: CAROL if (user, mech) == ("carol", "SCRAM-SHA-512") else None),
    }
    reauth = {m: max_reauth_ms for m in mechanisms} if max_reauth_ms else {}
    session = Session("CLIENT", "SASL_PLAINTEXT", harness.conn.peer,
                      sasl=SaslSettings(mechanisms, reauth, failure_delay_s=0.0))
    harness.conn.session = session
    return session


def handshake(h, mechanism: str = "PLAIN", version: int = 1):
    return h.request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(h, token: bytes, version: int = 2):
    return h.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


def test_handshake_on_a_plaintext_connection_is_illegal(broker_harness) -> None:
    r = handshake(broker_harness)
    assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE == 34
    assert list(r.mechanisms) == []


def test_authenticate_on_a_plaintext_connection_is_illegal(broker_harness) -> None:
    r = authenticate(broker_harness, b"\0alice\0alice-secret")
    assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert broker_harness.conn.session.principal == ANONYMOUS


@pytest.mark.parametrize("version", [0, 1])
def test_handshake_lists_the_enabled_mechanisms(broker_harness, version: int) -> None:
    session = use_sasl(broker_harness)
    r = handshake(broker_harness, "PLAIN", version)
    assert r.error_code == ErrorCode.NONE
    assert list(r.mechanisms) == MECHANISMS
    assert session.mechanism == "PLAIN"
    assert session.raw_tokens == (version == 0)


def test_handshake_with_an_unsupported_mechanism(broker_harness) -> None:
    session = use_sasl(broker_harness)
    r = handshake(broker_harness, "GSSAPI")
    assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM == 33
    assert list(r.mechanisms) == MECHANISMS
    assert session.closing


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_authentication(broker_harness, version: int) -> None:
    session = use_sasl(broker_harness)
    handshake(broker_harness)
    r = authenticate(broker_harness, b"\0alice\0alice-secret", version)
    assert r.error_code == ErrorCode.NONE
    assert r.error_message is None
    assert bytes(r.auth_bytes) == b""
    if version >= 1:
        assert r.session_lifetime == 0  # no connections.max.reauth.ms
    assert session.authenticated
    assert session.principal == KafkaPrincipal.user("alice")


def test_a_wrong_password(broker_harness) -> None:
    session = use_sasl(broker_harness)
    handshake(broker_harness)
    r = authenticate(broker_harness, b"\0alice\0not-her-secret")
    assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED == 58
    assert r.error_message == "Authentication failed: Invalid username or password"
    assert session.closing
    assert not session.authenticated
    assert session.principal == ANONYMOUS


def test_a_malformed_plain_token(broker_harness) -> None:
    use_sasl(broker_harness)
    handshake(broker_harness)
    r = authenticate(broker_harness, b"alice-secret")
    assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert r.error_message == "Invalid SASL/PLAIN response: expected 3 tokens, got 1"


def test_authenticate_after_success_is_illegal(broker_harness) -> None:
    session = use_sasl(broker_harness)
    handshake(broker_harness)
    assert authenticate(broker_harness, b"\0alice\0alice-secret").error_code == 0
    r = authenticate(broker_harness, b"\0bob\0bob-secret")
    assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert r.error_message == "SaslAuthenticate request received after successful authentication"
    assert session.principal == KafkaPrincipal.user("alice")


def test_handshake_after_success_without_reauthentication_is_illegal(broker_harness) -> None:
    use_sasl(broker_harness)
    handshake(broker_harness)
    authenticate(broker_harness, b"\0alice\0alice-secret")
    r = handshake(broker_harness)
    assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert list(r.mechanisms) == []


def test_authenticate_before_the_handshake_fails(broker_harness) -> None:
    session = use_sasl(broker_harness)
    r = authenticate(broker_harness, b"\0alice\0alice-secret")
    assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert r.error_message == "Request is not valid given the current SASL state."
    assert session.closing


@pytest.mark.parametrize("version", [1, 2])
def test_session_lifetime_is_sent_to_the_client(broker_harness, version: int) -> None:
    session = use_sasl(broker_harness, max_reauth_ms=3_600_000)
    handshake(broker_harness)
    r = authenticate(broker_harness, b"\0alice\0alice-secret", version)
    assert r.error_code == ErrorCode.NONE
    assert session.session_lifetime_ms == 3_600_000
    assert r.session_lifetime == 3_600_000


def test_reauthentication_as_another_user_fails(broker_harness) -> None:
    session = use_sasl(broker_harness, max_reauth_ms=3_600_000)
    handshake(broker_harness)
    r = authenticate(broker_harness, b"\0alice\0alice-secret")
    assert r.error_code == ErrorCode.NONE
    # KIP-368: the client may re-authenticate at any time within its session
    assert handshake(broker_harness).error_code == ErrorCode.NONE
    r = authenticate(broker_harness, b"\0bob\0bob-secret")
    assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert r.error_message == ("Cannot change principals during re-authentication from "
                               "User.alice: User.bob")
    assert session.closing


def test_scram_authentication(broker_harness) -> None:
    session = use_sasl(broker_harness)
    assert handshake(broker_harness, "SCRAM-SHA-512").error_code == 0
    client = scramp.ScramClient(["SCRAM-SHA-512"], "carol", "carol-secret")
    r = authenticate(broker_harness, client.get_client_first().encode())
    assert r.error_code == ErrorCode.NONE
    assert not session.authenticated
    client.set_server_first(bytes(r.auth_bytes).decode())
    r = authenticate(broker_harness, client.get_client_final().encode())
    assert r.error_code == ErrorCode.NONE
    client.set_server_final(bytes(r.auth_bytes).decode())  # checks the server's signature
    assert session.principal == KafkaPrincipal.user("carol")


def test_scram_wrong_password(broker_harness) -> None:
    use_sasl(broker_harness)
    handshake(broker_harness, "SCRAM-SHA-512")
    client = scramp.ScramClient(["SCRAM-SHA-512"], "carol", "guess")
    r = authenticate(broker_harness, client.get_client_first().encode())
    client.set_server_first(bytes(r.auth_bytes).decode())
    r = authenticate(broker_harness, client.get_client_final().encode())
    assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert r.error_message == ("Authentication failed during authentication due to invalid "
                               "credentials with SASL mechanism SCRAM-SHA-512")
