"""The per-connection SASL state machine (Kafka's SaslServerAuthenticator rules, KIP-368)."""

from __future__ import annotations

import functools

import pytest
import scramp

from strom.protocol.api_keys import ApiKey
from strom.security import session as session_module
from strom.security.principal import ANONYMOUS, KafkaPrincipal
from strom.security.sasl.mechanisms import (
    AuthenticationFailed,
    PlainExchange,
    ScramExchange,
    credential_from_password,
)
from strom.security.session import Gate, SaslSettings, Session

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
API_VERSIONS, HANDSHAKE, AUTHENTICATE = (int(ApiKey.API_VERSIONS), int(ApiKey.SASL_HANDSHAKE),
                                         int(ApiKey.SASL_AUTHENTICATE))
METADATA, PRODUCE = int(ApiKey.METADATA), int(ApiKey.PRODUCE)
SCRAM_CREDS = {"carol": credential_from_password("SCRAM-SHA-256", "carol-secret")}


def settings(max_reauth_ms: int = 0) -> SaslSettings:
    mechanisms = {
        "PLAIN": functools.partial(PlainExchange, USERS),
        "SCRAM-SHA-256": functools.partial(ScramExchange, "SCRAM-SHA-256",
                                           lambda user, mech: SCRAM_CREDS.get(user)),
    }
    reauth = {m: max_reauth_ms for m in mechanisms} if max_reauth_ms else {}
    return SaslSettings(mechanisms, reauth, max_receive_size=1000)


def sasl_session(max_reauth_ms: int = 0) -> Session:
    return Session("CLIENT", "SASL_PLAINTEXT", "10.0.0.1:5555", sasl=settings(max_reauth_ms))


def login(session: Session, user: str = "alice", password: str | None = None) -> None:
    """SaslHandshake v1 PLAIN, then one SaslAuthenticate, through the gate."""
    assert session.gate(HANDSHAKE) is Gate.SERVE
    assert session.handshake("PLAIN", 1) == (True, ["PLAIN", "SCRAM-SHA-256"])
    assert session.gate(AUTHENTICATE) is Gate.SERVE
    token = b"\0" + user.encode() + b"\0" + (password or USERS[user]).encode()
    assert session.authenticate(token, 2) == b""


def login_plain_only(s: Session) -> None:
    assert s.handshake("PLAIN", 1) == (True, ["PLAIN"])
    s.authenticate(b"\0alice\0alice-secret", 2)
    assert s.authenticated


class Clock:
    """time.monotonic as the session sees it, moved by hand."""

    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(session_module.time, "monotonic", c)
    return c


# -- before authentication --------------------------------------------------------------------


def test_a_new_sasl_session_is_not_authenticated() -> None:
    s = sasl_session()
    assert not s.authenticated
    assert s.gated
    assert s.principal == ANONYMOUS
    assert s.max_receive_size == 1000


def test_api_versions_first_then_handshake() -> None:
    s = sasl_session()
    assert s.gate(API_VERSIONS) is Gate.SERVE
    assert s.gate(HANDSHAKE) is Gate.SERVE


def test_handshake_may_come_first() -> None:
    assert sasl_session().gate(HANDSHAKE) is Gate.SERVE


def test_api_versions_only_once() -> None:
    s = sasl_session()
    assert s.gate(API_VERSIONS) is Gate.SERVE
    assert s.gate(API_VERSIONS) is Gate.CLOSE


@pytest.mark.parametrize("api_key", [METADATA, PRODUCE, AUTHENTICATE])
def test_other_requests_before_the_handshake_close_without_a_reply(api_key: int) -> None:
    assert sasl_session().gate(api_key) is Gate.CLOSE
    s = sasl_session()
    s.gate(API_VERSIONS)
    assert s.gate(api_key) is Gate.CLOSE


def test_after_a_v1_handshake_only_sasl_authenticate_passes() -> None:
    s = sasl_session()
    s.gate(HANDSHAKE)
    assert s.handshake("PLAIN", 1) == (True, ["PLAIN", "SCRAM-SHA-256"])
    assert not s.raw_tokens
    assert s.gate(AUTHENTICATE) is Gate.SERVE
    assert s.gate(METADATA) is Gate.ILLEGAL_STATE
    assert s.gate(HANDSHAKE) is Gate.ILLEGAL_STATE


def test_a_v0_handshake_switches_to_raw_tokens() -> None:
    s = sasl_session()
    assert s.handshake("PLAIN", 0)[0]
    assert s.raw_tokens
    assert s.gate(AUTHENTICATE) is Gate.CLOSE  # tokens come unframed, not as requests
    s.authenticate(b"\0alice\0alice-secret", 0)
    assert s.authenticated
    assert not s.raw_tokens


def test_an_unsupported_mechanism_fails_the_connection() -> None:
    s = sasl_session()
    assert s.handshake("GSSAPI", 1) == (False, ["PLAIN", "SCRAM-SHA-256"])
    assert s.closing
    assert not s.authenticated
    assert s.gate(AUTHENTICATE) is Gate.CLOSE


def test_a_second_handshake_is_refused() -> None:
    s = sasl_session()
    s.handshake("PLAIN", 1)
    assert s.handshake("PLAIN", 1) == (False, [])


def test_authenticate_before_the_handshake_fails() -> None:
    s = sasl_session()
    with pytest.raises(AuthenticationFailed,
                       match=r"^Request is not valid given the current SASL state\.$"):
        s.authenticate(b"\0alice\0alice-secret", 2)
    assert s.closing


# -- authentication ---------------------------------------------------------------------------


def test_successful_plain_authentication() -> None:
    s = sasl_session()
    s.gate(API_VERSIONS)
    login(s)
    assert s.authenticated
    assert not s.closing
    assert s.principal == KafkaPrincipal.user("alice")
    assert str(s.principal) == "User:alice"
    assert s.mechanism == "PLAIN"
    assert s.session_lifetime_ms == 0
    assert not s.gated  # no expiry: the gate is no longer consulted
    assert s.max_receive_size is None
    for api_key in (METADATA, PRODUCE, API_VERSIONS, AUTHENTICATE):
        assert s.gate(api_key) is Gate.SERVE


def test_successful_scram_authentication() -> None:
    s = sasl_session()
    assert s.handshake("SCRAM-SHA-256", 1)[0]
    client = scramp.ScramClient(["SCRAM-SHA-256"], "carol", "carol-secret")
    client.set_server_first(s.authenticate(client.get_client_first().encode(), 2).decode())
    assert not s.authenticated
    assert s.gate(AUTHENTICATE) is Gate.SERVE
    client.set_server_final(s.authenticate(client.get_client_final().encode(), 2).decode())
    assert s.authenticated
    assert s.principal == KafkaPrincipal.user("carol")


def test_failed_authentication_closes() -> None:
    s = sasl_session()
    s.handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailed,
                       match=r"^Authentication failed: Invalid username or password$"):
        s.authenticate(b"\0alice\0wrong", 2)
    assert s.closing
    assert not s.authenticated
    assert s.principal == ANONYMOUS
    assert s.gate(METADATA) is Gate.CLOSE
    assert s.gate(AUTHENTICATE) is Gate.CLOSE
    with pytest.raises(AuthenticationFailed, match="current SASL state"):
        s.authenticate(b"\0alice\0alice-secret", 2)  # no second chance
    assert s.handshake("PLAIN", 1) == (False, [])


def test_a_handshake_after_authentication_without_expiry_is_illegal() -> None:
    s = sasl_session()
    assert not s.illegal_handshake()
    login(s)
    assert s.illegal_handshake()
    assert s.handshake("PLAIN", 1) == (False, [])
    assert s.authenticated  # the session itself is untouched


# -- session expiry and re-authentication (KIP-368) -------------------------------------------


def test_session_lifetime_is_connections_max_reauth_ms(clock: Clock) -> None:
    s = sasl_session(max_reauth_ms=60_000)
    login(s)
    assert s.session_lifetime_ms == 60_000
    assert s.gated
    assert not s.illegal_handshake()
    clock.now += 59.9
    assert s.gate(METADATA) is Gate.SERVE


def test_an_expired_session_closes_on_anything_but_a_handshake(clock: Clock) -> None:
    s = sasl_session(max_reauth_ms=60_000)
    login(s)
    clock.now += 60.0
    assert s.gate(METADATA) is Gate.CLOSE
    assert s.gate(AUTHENTICATE) is Gate.CLOSE
    assert s.gate(HANDSHAKE) is Gate.SERVE


def test_reauthentication_as_the_same_user_extends_the_session(clock: Clock) -> None:
    s = sasl_session(max_reauth_ms=60_000)
    login(s)
    clock.now += 61.0
    login(s)  # handshake again, same mechanism, same user
    assert s.authenticated
    assert s.principal == KafkaPrincipal.user("alice")
    assert s.session_lifetime_ms == 60_000
    clock.now += 59.0
    assert s.gate(METADATA) is Gate.SERVE
    clock.now += 1.0
    assert s.gate(METADATA) is Gate.CLOSE


def test_reauthentication_before_expiry_is_allowed(clock: Clock) -> None:
    s = sasl_session(max_reauth_ms=60_000)
    login(s)
    clock.now += 30.0
    assert s.gate(HANDSHAKE) is Gate.SERVE
    login(s)
    assert s.authenticated
    clock.now += 59.0  # 89 s after the first login, 59 s after the second
    assert s.gate(METADATA) is Gate.SERVE


def test_reauthentication_as_another_user_fails(clock: Clock) -> None:
    s = sasl_session(max_reauth_ms=60_000)
    login(s)
    clock.now += 61.0
    assert s.gate(HANDSHAKE) is Gate.SERVE
    assert s.handshake("PLAIN", 1)[0]
    with pytest.raises(AuthenticationFailed) as info:
        s.authenticate(b"\0bob\0bob-secret", 2)
    assert str(info.value) == ("Cannot change principals during re-authentication from "
                               "User.alice: User.bob")
    assert s.closing
    assert not s.authenticated
    assert s.principal == KafkaPrincipal.user("alice")
    assert s.gate(METADATA) is Gate.CLOSE


def test_reauthentication_with_another_mechanism_fails(clock: Clock) -> None:
    s = sasl_session(max_reauth_ms=60_000)
    login(s)
    clock.now += 61.0
    # Kafka accepts the handshake, then closes the connection
    assert s.handshake("SCRAM-SHA-256", 1) == (True, ["PLAIN", "SCRAM-SHA-256"])
    assert s.closing
    assert s.gate(AUTHENTICATE) is Gate.CLOSE


def test_failed_reauthentication_says_re_authentication(clock: Clock) -> None:
    s = Session("CLIENT", "SASL_PLAINTEXT", "peer", sasl=SaslSettings(
        {"SCRAM-SHA-256": functools.partial(ScramExchange, "SCRAM-SHA-256",
                                            lambda user, mech: SCRAM_CREDS.get(user))},
        {"SCRAM-SHA-256": 1000}))
    for password, ok in (("carol-secret", True), ("wrong", False)):
        assert s.handshake("SCRAM-SHA-256", 1)[0]
        client = scramp.ScramClient(["SCRAM-SHA-256"], "carol", password)
        client.set_server_first(s.authenticate(client.get_client_first().encode(), 2).decode())
        if ok:
            s.authenticate(client.get_client_final().encode(), 2)
            assert s.authenticated
            clock.now += 2.0
            continue
        with pytest.raises(AuthenticationFailed) as info:
            s.authenticate(client.get_client_final().encode(), 2)
        assert str(info.value) == ("Authentication failed during re-authentication due to "
                                   "invalid credentials with SASL mechanism SCRAM-SHA-256")
    assert s.closing


def test_a_mechanism_without_max_reauth_has_no_expiry(clock: Clock) -> None:
    s = Session("CLIENT", "SASL_PLAINTEXT", "peer", sasl=SaslSettings(
        {"PLAIN": functools.partial(PlainExchange, USERS)}, {"SCRAM-SHA-256": 1000}))
    login_plain_only(s)
    assert s.session_lifetime_ms == 0
    clock.now += 10_000.0
    assert s.gate(METADATA) is Gate.SERVE


# -- sessions without SASL ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
def test_a_non_sasl_session_serves_everything(protocol: str) -> None:
    principal = ANONYMOUS if protocol == "PLAINTEXT" else KafkaPrincipal.user("CN=client")
    s = Session(protocol, protocol, "10.0.0.1:5555", principal)
    assert s.authenticated
    assert not s.gated
    assert s.principal == principal
    assert s.max_receive_size is None
    for api_key in (API_VERSIONS, API_VERSIONS, METADATA, HANDSHAKE, AUTHENTICATE, PRODUCE):
        assert s.gate(api_key) is Gate.SERVE
    assert s.handshake("PLAIN", 1) == (False, [])
    assert s.authenticated
