"""Fuzzing the SASL exchanges: whatever a client sends, an exchange answers with bytes or fails
with AuthenticationFailed (the connection's clean refusal), never with another exception, and
never authenticates without the secret. Seeded with real first messages, then mutated."""

from __future__ import annotations

import base64
import json
import time

import pytest
import scramp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.security.sasl.mechanisms import (
    AuthenticationFailed,
    PlainExchange,
    ScramExchange,
    credential_from_password,
)
from strom.security.sasl.oauthbearer import OAuthBearerExchange, UnsecuredValidator

CRED = credential_from_password("SCRAM-SHA-256", "secret")
FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


def _lookup(user: str, mechanism: str):
    return CRED if user == "alice" and mechanism == "SCRAM-SHA-256" else None


def _token() -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'none'})}.{part({'sub': 'alice', 'exp': time.time() + 60})}."


SEEDS = [
    b"\0alice\0secret",
    scramp.ScramClient(["SCRAM-SHA-256"], "alice", "secret").get_client_first().encode(),
    f"n,,\x01auth=Bearer {_token()}\x01\x01".encode(),
]


def _mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for pos, value in edits:
        if out:
            out[pos % len(out)] = value
    return bytes(out)


def _safe(step, token: bytes) -> bytes | None:
    try:
        return step(token)
    except AuthenticationFailed:
        return None


@FUZZ
@given(seed=st.sampled_from(SEEDS), edits=st.lists(st.tuples(st.integers(0, 4096),
                                                             st.integers(0, 255)), max_size=6),
       tail=st.binary(max_size=64))
def test_first_messages(seed: bytes, edits: list[tuple[int, int]], tail: bytes) -> None:
    token = _mutate(seed, edits) + tail
    for exchange in (PlainExchange({"alice": "secret"}), ScramExchange("SCRAM-SHA-256", _lookup),
                     OAuthBearerExchange(UnsecuredValidator())):
        answer = _safe(exchange.evaluate, token)
        assert answer is None or isinstance(answer, bytes)
        if isinstance(exchange, PlainExchange) and exchange.complete:
            assert token.split(b"\0")[1:] == [b"alice", b"secret"]  # only with the secret


@FUZZ
@given(final=st.binary(max_size=300))
def test_scram_final_messages_never_authenticate_without_the_proof(final: bytes) -> None:
    exchange = ScramExchange("SCRAM-SHA-256", _lookup)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "wrong-password")
    exchange.evaluate(client.get_client_first().encode())
    _safe(exchange.evaluate, final)
    assert not exchange.complete


@FUZZ
@given(claims=st.dictionaries(st.sampled_from(["sub", "exp", "iat", "scope", "x"]),
                              st.one_of(st.none(), st.integers(), st.floats(allow_nan=True),
                                        st.text(max_size=8), st.lists(st.text(max_size=4))),
                              max_size=5),
       header=st.dictionaries(st.sampled_from(["alg", "typ"]),
                              st.sampled_from(["none", "HS256", "", 1]), max_size=2))
def test_unsecured_tokens_with_any_claims(claims: dict, header: dict) -> None:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    token = f"{part(header)}.{part(claims)}."
    exchange = OAuthBearerExchange(UnsecuredValidator(required_scope=("kafka",)))
    answer = _safe(exchange.evaluate, f"n,,\x01auth=Bearer {token}\x01\x01".encode())
    if exchange.complete:
        assert header.get("alg") == "none" and isinstance(claims.get("sub"), str)
    elif answer:  # a challenge: the client's \x01 then fails the exchange
        with pytest.raises(AuthenticationFailed):
            exchange.evaluate(b"\x01")
