"""The server sides of SASL/PLAIN and SCRAM-SHA-256/512, driven by real client messages."""

from __future__ import annotations

import contextlib

import pytest
import scramp

from strom.security.sasl.mechanisms import (
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    PlainExchange,
    ScramCredential,
    ScramExchange,
    credential_from_password,
    credential_from_salted_password,
    salted_password,
)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
INVALID = "Authentication failed: Invalid username or password"


# -- PLAIN ----------------------------------------------------------------------------------


def test_plain_success() -> None:
    exchange = PlainExchange(USERS)
    assert not exchange.complete
    assert exchange.evaluate(b"\0alice\0alice-secret") == b""
    assert exchange.complete
    assert exchange.authorization_id == "alice"
    assert exchange.lifetime_ms is None
    assert exchange.mechanism == "PLAIN"


def test_plain_authzid_equal_to_the_user_is_accepted() -> None:
    exchange = PlainExchange(USERS)
    exchange.evaluate(b"bob\0bob\0bob-secret")
    assert exchange.authorization_id == "bob"


@pytest.mark.parametrize("token", [b"\0alice\0wrong", b"\0mallory\0alice-secret",
                                   b"\0alice\0bob-secret", b"\0alice\0alice-secret "])
def test_plain_wrong_password_and_unknown_user_give_the_same_message(token: bytes) -> None:
    exchange = PlainExchange(USERS)
    with pytest.raises(AuthenticationFailed) as info:
        exchange.evaluate(token)
    assert str(info.value) == INVALID
    assert info.value.user == token.split(b"\0")[1].decode()
    assert not exchange.complete


def test_plain_authzid_different_from_the_user_is_refused() -> None:
    exchange = PlainExchange(USERS)
    with pytest.raises(AuthenticationFailed, match=r"^Authentication failed: Client requested an "
                                                   r"authorization id that is different from "
                                                   r"username$"):
        exchange.evaluate(b"admin\0alice\0alice-secret")
    assert not exchange.complete


@pytest.mark.parametrize(("token", "parts"), [
    (b"alice\0alice-secret", 2), (b"alice-secret", 1), (b"\0alice\0alice-secret\0", 4),
    (b"", 1)])
def test_plain_malformed_token(token: bytes, parts: int) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        PlainExchange(USERS).evaluate(token)
    assert str(info.value) == (f"Invalid SASL/PLAIN response: expected 3 tokens, got {parts}")


def test_plain_empty_user_or_password() -> None:
    with pytest.raises(AuthenticationFailed, match="username not specified"):
        PlainExchange(USERS).evaluate(b"\0\0alice-secret")
    with pytest.raises(AuthenticationFailed, match="password not specified"):
        PlainExchange(USERS).evaluate(b"\0alice\0")


def test_plain_token_that_is_not_utf8() -> None:
    with pytest.raises(AuthenticationFailed, match="not UTF-8"):
        PlainExchange(USERS).evaluate(b"\0\xffalice\0alice-secret")


def test_plain_failure_message_holds_no_secret() -> None:
    with pytest.raises(AuthenticationFailed) as info:
        PlainExchange(USERS).evaluate(b"\0alice\0hunter2")
    assert "hunter2" not in str(info.value)


# -- SCRAM ----------------------------------------------------------------------------------


class Store:
    """A credential lookup that records what it was asked."""

    def __init__(self, **passwords: str) -> None:
        self.creds: dict[tuple[str, str], ScramCredential] = {}
        self.asked: list[tuple[str, str]] = []
        for user, password in passwords.items():
            self.add(user, password)

    def add(self, user: str, password: str, iterations: int = 4096) -> None:
        for mechanism in SCRAM_MECHANISMS:
            self.creds[user, mechanism] = credential_from_password(mechanism, password,
                                                                   iterations)

    def __call__(self, user: str, mechanism: str) -> ScramCredential | None:
        self.asked.append((user, mechanism))
        return self.creds.get((user, mechanism))


def scram_login(exchange: ScramExchange, user: str, password: str) -> scramp.ScramClient:
    """A whole exchange with scramp's client; the client checks the server's signature."""
    client = scramp.ScramClient([exchange.mechanism], user, password)
    server_first = exchange.evaluate(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    assert not exchange.complete
    server_final = exchange.evaluate(client.get_client_final().encode())
    client.set_server_final(server_final.decode())
    return client


def failed(mechanism: str) -> str:
    return ("Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}")


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_success(mechanism: str) -> None:
    store = Store(carol="carol-secret")
    exchange = ScramExchange(mechanism, store)
    scram_login(exchange, "carol", "carol-secret")
    assert exchange.complete
    assert exchange.authorization_id == "carol"
    assert exchange.lifetime_ms is None
    assert store.asked == [("carol", mechanism)]


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_server_first_carries_the_stored_salt_and_iterations(mechanism: str) -> None:
    store = Store()
    store.add("carol", "carol-secret", iterations=8192)
    exchange = ScramExchange(mechanism, store)
    client = scramp.ScramClient([mechanism], "carol", "carol-secret")
    first = dict(p.split("=", 1) for p in
                 exchange.evaluate(client.get_client_first().encode()).decode().split(","))
    assert first["i"] == "8192"
    assert scramp.core.Salt.from_str(first["s"]).salt == store.creds["carol", mechanism].salt


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_wrong_password(mechanism: str) -> None:
    exchange = ScramExchange(mechanism, Store(carol="carol-secret"))
    client = scramp.ScramClient([mechanism], "carol", "not-the-secret")
    client.set_server_first(exchange.evaluate(client.get_client_first().encode()).decode())
    with pytest.raises(AuthenticationFailed) as info:
        exchange.evaluate(client.get_client_final().encode())
    assert str(info.value) == failed(mechanism)
    assert info.value.user == "carol"
    assert not exchange.complete


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_unknown_user(mechanism: str) -> None:
    exchange = ScramExchange(mechanism, Store(carol="carol-secret"))
    client = scramp.ScramClient([mechanism], "mallory", "carol-secret")
    with pytest.raises(AuthenticationFailed) as info:
        exchange.evaluate(client.get_client_first().encode())
    assert str(info.value) == failed(mechanism)
    assert info.value.user == "mallory"
    assert not exchange.complete


def test_scram_credentials_are_per_mechanism() -> None:
    store = Store()
    store.creds["carol", "SCRAM-SHA-256"] = credential_from_password("SCRAM-SHA-256", "pw")
    exchange = ScramExchange("SCRAM-SHA-512", store)
    client = scramp.ScramClient(["SCRAM-SHA-512"], "carol", "pw")
    with pytest.raises(AuthenticationFailed, match=r"mechanism SCRAM-SHA-512$"):
        exchange.evaluate(client.get_client_first().encode())


def scram_login_as(mechanism: str, user: str) -> tuple[ScramExchange, Store, str]:
    """Logs `user` in (password 'pw'); the exchange, the store and the client's first message."""
    store = Store()
    store.add(user, "pw")
    exchange = ScramExchange(mechanism, store)
    client = scramp.ScramClient([mechanism], user, "pw")
    client_first = client.get_client_first()
    client.set_server_first(exchange.evaluate(client_first.encode()).decode())
    client.set_server_final(exchange.evaluate(client.get_client_final().encode()).decode())
    return exchange, store, client_first


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_username_with_a_comma(mechanism: str) -> None:
    exchange, store, client_first = scram_login_as(mechanism, "ops,eu")
    assert "n=ops=2Ceu," in client_first  # escaped on the wire (RFC 5802)
    assert exchange.authorization_id == "ops,eu"
    assert store.asked == [("ops,eu", mechanism)]


# scramp 1.5 unescapes the saslname itself (ClientFirstBare -> Username.from_escaped) before it
# calls the credential callback, and ScramExchange._credential unescapes it a second time.
DOUBLE_UNESCAPE = ("ScramExchange._credential unescapes a username scramp has already "
                   "unescaped: a name holding '=' is refused ('auth_fn exception') or looked "
                   "up as another user ('x=2Cy' as 'x,y')")


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_username_with_comma_and_equals(mechanism: str) -> None:
    exchange, store, client_first = scram_login_as(mechanism, "o=u,x")
    assert "n=o=3Du=2Cx," in client_first
    assert exchange.authorization_id == "o=u,x"
    assert store.asked == [("o=u,x", mechanism)]


def test_scram_username_that_looks_escaped_is_not_unescaped_twice() -> None:
    store = Store()
    store.add("x,y", "pw")
    exchange = ScramExchange("SCRAM-SHA-256", store)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "x=2Cy", "pw")  # on the wire: n=x=3D2Cy
    with contextlib.suppress(AuthenticationFailed):  # unknown user: the right outcome
        exchange.evaluate(client.get_client_first().encode())
    assert store.asked == [("x=2Cy", "SCRAM-SHA-256")]


def test_scram_a_bad_username_escape_fails_the_first_message() -> None:
    exchange = ScramExchange("SCRAM-SHA-256", Store(carol="pw"))
    with pytest.raises(AuthenticationFailed, match=r"^Invalid SCRAM client first message: "):
        exchange.evaluate(b"n,,n=car=5Dol,r=abcdefghijklmnop")


def test_scram_malformed_first_message() -> None:
    with pytest.raises(AuthenticationFailed, match=r"^Invalid SCRAM client first message: "):
        ScramExchange("SCRAM-SHA-256", Store(carol="pw")).evaluate(b"garbage")


def test_scram_first_message_that_is_not_utf8() -> None:
    with pytest.raises(AuthenticationFailed, match="not UTF-8"):
        ScramExchange("SCRAM-SHA-256", Store(carol="pw")).evaluate(b"n,,n=\xff,r=abc")


def test_scram_final_message_with_another_nonce_fails() -> None:
    exchange = ScramExchange("SCRAM-SHA-256", Store(carol="pw"))
    client = scramp.ScramClient(["SCRAM-SHA-256"], "carol", "pw")
    client.set_server_first(exchange.evaluate(client.get_client_first().encode()).decode())
    final = client.get_client_final()
    nonce = final.split(",r=", 1)[1].split(",", 1)[0]
    with pytest.raises(AuthenticationFailed, match=f"^{failed('SCRAM-SHA-256')}$"):
        exchange.evaluate(final.replace(nonce, nonce[:-1] + ("A" if nonce[-1] != "A" else "B"))
                          .encode())


def test_scram_message_after_completion_is_refused() -> None:
    exchange = ScramExchange("SCRAM-SHA-256", Store(carol="pw"))
    scram_login(exchange, "carol", "pw")
    with pytest.raises(AuthenticationFailed, match="after authentication completed"):
        exchange.evaluate(b"n,,n=carol,r=abc")


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_credential_from_salted_password_equals_credential_from_password(
        mechanism: str) -> None:
    salt = b"0123456789abcdef"
    from_password = credential_from_password(mechanism, "s3cret", 4096, salt=salt)
    from_salted = credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, "s3cret", salt, 4096), 4096)
    assert from_salted == from_password
    assert from_password.salt == salt and from_password.iterations == 4096
    # the same as scramp's own stored form of the password
    assert scramp.ScramMechanism(mechanism).make_auth_info("s3cret", 4096, salt) == (
        salt, from_password.stored_key, from_password.server_key, 4096)


def test_salted_password_lengths_and_salts() -> None:
    assert len(salted_password("SCRAM-SHA-256", "pw", b"salt", 4096)) == 32
    assert len(salted_password("SCRAM-SHA-512", "pw", b"salt", 4096)) == 64
    assert credential_from_password("SCRAM-SHA-256", "pw").salt != (
        credential_from_password("SCRAM-SHA-256", "pw").salt)  # a random salt each time


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_a_credential_from_a_salted_password_authenticates(mechanism: str) -> None:
    salt = b"pepper-and-salt!"
    cred = credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, "dave-secret", salt, 4096), 4096)
    exchange = ScramExchange(mechanism, lambda user, mech: cred if user == "dave" else None)
    scram_login(exchange, "dave", "dave-secret")
    assert exchange.authorization_id == "dave"
