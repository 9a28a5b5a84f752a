"""OAUTHBEARER (unsecured tokens, and signed ones checked against a JWKS file) with
confluent-kafka, the exchange on the raw wire (an expired token gets Kafka's JSON challenge),
and re-authentication (KIP-368): a client keeps working across session ends, a connection that
does not re-authenticate is closed."""

from __future__ import annotations

import base64
import json
import socket
import struct
import time
import uuid
from pathlib import Path

import jwt
import pytest
from confluent_kafka import KafkaError, Producer
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from ..broker import HOST, free_port
from .conftest import SCRAM_USERS, add_scram_user
from .test_listeners_auth import confluent_failure, confluent_roundtrip

pytestmark = pytest.mark.timeout(180)

VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
ISSUER, AUDIENCE = "https://issuer.example", "strom"
EXPECTED = [b"v%d" % i for i in range(5)]


@pytest.fixture(scope="module")
def oauth(make_module_broker, tmp_path_factory):
    base: Path = tmp_path_factory.mktemp("jwks")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="k1", alg="RS256", use="sig")
    (base / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    ports = {"UNSECURED": free_port(), "SIGNED": free_port(), "REAUTH": free_port()}
    broker = make_module_broker({
        "listeners": ",".join([f"PLAINTEXT://{HOST}:{{port}}"]
                              + [f"{n}://{HOST}:{p}" for n, p in ports.items()]),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,UNSECURED:SASL_PLAINTEXT,"
                                          "SIGNED:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.reauth.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.reauth.scram-sha-256.connections.max.reauth.ms": "1500",
        "listener.name.signed.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": (base / "jwks.json").as_uri(),
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
    })
    add_scram_user(broker.bootstrap, "carol", SCRAM_USERS["carol"])
    return broker, ports, key


def _conf(ports, listener: str, **extra) -> dict:
    return {"bootstrap.servers": f"{HOST}:{ports[listener]}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER", **extra}


def _signed(key, *, audience: str = AUDIENCE, lifetime: int = 300, subject: str = "svc-1"):
    def token(_config: str) -> tuple[str, float]:
        now = int(time.time())
        claims = {"sub": subject, "aud": audience, "iss": ISSUER, "iat": now,
                  "exp": now + lifetime}
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"}), now + lifetime
    return token


def test_unsecured_tokens(oauth) -> None:
    _, ports, _ = oauth
    conf = _conf(ports, "UNSECURED", **{"enable.sasl.oauthbearer.unsecure.jwt": True,
                                        "sasl.oauthbearer.config": "principal=alice"})
    assert confluent_roundtrip(conf) == EXPECTED


def test_signed_tokens_checked_against_the_jwks(oauth) -> None:
    broker, ports, key = oauth
    assert confluent_roundtrip(_conf(ports, "SIGNED", oauth_cb=_signed(key))) == EXPECTED
    before = broker.log_size()
    error = confluent_failure(_conf(ports, "SIGNED", oauth_cb=_signed(key, audience="other")))
    assert error.code() == KafkaError._AUTHENTICATION
    assert '{"status":"invalid_token"}' in error.str()
    assert "Audience doesn't match" in broker.log_text(before)  # the reason stays in the log
    unsigned = _conf(ports, "SIGNED", **{"enable.sasl.oauthbearer.unsecure.jwt": True,
                                         "sasl.oauthbearer.config": "principal=alice"})
    assert confluent_failure(unsigned).code() == KafkaError._AUTHENTICATION


# -- the raw exchange -------------------------------------------------------------------------


class SaslWire:
    """SaslHandshake v1 and SaslAuthenticate v1 on one socket."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=15)
        self.corr = 0

    def _call(self, api: int, version: int, body: bytes) -> bytes:
        self.corr += 1
        header = struct.pack(">hhih", api, version, self.corr, 2) + b"it"
        self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)[4:]  # without the correlation id

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError("connection closed")
            data += chunk
        return data

    def handshake(self, mechanism: str) -> int:
        reply = self._call(17, 1, struct.pack(">h", len(mechanism)) + mechanism.encode())
        return struct.unpack(">h", reply[:2])[0]

    def authenticate(self, token: bytes) -> tuple[int, str | None, bytes, int]:
        reply = self._call(36, 1, struct.pack(">i", len(token)) + token)
        error, n = struct.unpack(">hh", reply[:4])
        pos = 4
        message = None
        if n >= 0:
            message, pos = reply[4:4 + n].decode(), 4 + n
        (size,) = struct.unpack(">i", reply[pos:pos + 4])
        auth = reply[pos + 4:pos + 4 + size]
        (lifetime,) = struct.unpack(">q", reply[pos + 4 + size:pos + 12 + size])
        return error, message, auth, lifetime

    def metadata(self) -> bytes:
        return self._call(3, 1, struct.pack(">i", -1))

    def close(self) -> None:
        self.sock.close()


def _unsecured_token(claims: dict) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'none'})}.{part(claims)}."


def test_an_expired_token_gets_kafkas_challenge_then_fails(oauth) -> None:
    _, ports, _ = oauth
    wire = SaslWire(ports["UNSECURED"])
    try:
        assert wire.handshake("OAUTHBEARER") == 0
        token = _unsecured_token({"sub": "alice", "exp": time.time() - 60})
        error, _, challenge, _ = wire.authenticate(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        assert (error, json.loads(challenge)) == (0, {"status": "invalid_token"})
        error, message, _, _ = wire.authenticate(b"\x01")
        assert error == 58 and json.loads(message) == {"status": "invalid_token"}
        with pytest.raises((EOFError, ConnectionError)):
            wire.metadata()
    finally:
        wire.close()


def test_a_token_sets_the_session_lifetime(oauth) -> None:
    _, ports, _ = oauth
    wire = SaslWire(ports["UNSECURED"])
    try:
        assert wire.handshake("OAUTHBEARER") == 0
        token = _unsecured_token({"sub": "alice", "exp": time.time() + 60})
        error, _, _, lifetime = wire.authenticate(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        assert error == 0 and 55_000 < lifetime <= 60_001  # exp rounds to the millisecond
        assert wire.metadata()  # authenticated: served
    finally:
        wire.close()


# -- re-authentication ------------------------------------------------------------------------


def _scram_conf(ports) -> dict:
    return {"bootstrap.servers": f"{HOST}:{ports['REAUTH']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
            "sasl.password": SCRAM_USERS["carol"]}


def test_clients_re_authenticate_when_their_session_ends(oauth) -> None:
    broker, ports, _ = oauth
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    errors: list = []
    producer = Producer({**_scram_conf(ports), "acks": "all", "error_cb": errors.append})
    delivered: list = []
    deadline = time.monotonic() + 5  # 3 sessions of 1.5 s
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda e, m: delivered.append(e))
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert all(e is None for e in delivered) and len(delivered) > 20
    assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert "closing expired session" not in broker.log_text(0)  # librdkafka re-authenticated


def test_a_connection_that_does_not_re_authenticate_is_closed(oauth) -> None:
    _, ports, _ = oauth
    import scramp

    wire = SaslWire(ports["REAUTH"])
    try:
        assert wire.handshake("SCRAM-SHA-256") == 0
        client = scramp.ScramClient(["SCRAM-SHA-256"], "carol", SCRAM_USERS["carol"])
        error, _, first, _ = wire.authenticate(client.get_client_first().encode())
        client.set_server_first(first.decode())
        error, _, final, lifetime = wire.authenticate(client.get_client_final().encode())
        client.set_server_final(final.decode())
        assert (error, lifetime) == (0, 1500)
        started = time.monotonic()
        closed_at = None
        while closed_at is None and time.monotonic() - started < 15:
            try:
                wire.metadata()  # served while the session lasts
            except (EOFError, ConnectionError):
                closed_at = time.monotonic() - started
        assert closed_at is not None, "the connection outlived its session"
        assert closed_at >= 1.4  # not before the session's 1.5 s were up
    finally:
        wire.close()
