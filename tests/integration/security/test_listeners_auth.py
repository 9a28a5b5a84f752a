"""TLS and SASL with real clients: confluent-kafka (librdkafka), kafka-python and aiokafka,
each producing and consuming over the secured listeners, and the failures Kafka gives for a
wrong password, an unknown user, a missing or foreign client certificate, and requests sent
before authentication."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ..wire import Conn
from .conftest import PLAIN_USERS, SCRAM_USERS, Secured

pytestmark = pytest.mark.timeout(180)

T = 30.0  # seconds for a client operation


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


# -- confluent-kafka --------------------------------------------------------------------------


def confluent_roundtrip(conf: dict[str, str], n: int = 5) -> list[bytes]:
    """Produce n records to a new topic (auto-created) and read them back in a group."""
    topic = _topic()
    p = Producer({**conf, "acks": "all"})
    errors: list = []
    for i in range(n):
        p.produce(topic, b"v%d" % i, on_delivery=lambda e, _m: errors.append(e) if e else None)
    assert p.flush(T) == 0, "records not delivered"
    assert errors == []
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + T
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise AssertionError(m.error())
            got.append(m.value())
    finally:
        c.close()
    return got


def confluent_failure(conf: dict[str, str]) -> KafkaError:
    """The error librdkafka reports when it cannot authenticate (metadata never arrives)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
        except KafkaException:
            pass
        else:
            raise AssertionError("the client got metadata: it was not refused")
        admin.poll(0)
        if errors:
            return errors[0]
    raise AssertionError("no error reported")


EXPECTED = [b"v%d" % i for i in range(5)]


def test_tls_with_server_authentication(secured: Secured) -> None:
    assert confluent_roundtrip(secured.conf("SSL")) == EXPECTED


def test_metadata_names_the_listener_the_client_used(secured: Secured) -> None:
    for listener in ("PLAINTEXT", "SSL"):
        meta = AdminClient(secured.conf(listener)).list_topics(timeout=T)
        assert [(b.host, b.port) for b in meta.brokers.values()] == [
            ("127.0.0.1", secured.ports[listener])]


def test_mutual_tls_needs_a_certificate_from_the_trusted_ca(secured: Secured) -> None:
    own = secured.conf("MTLS", **{"ssl.certificate.location": str(secured.client.cert),
                                  "ssl.key.location": str(secured.client.key)})
    assert confluent_roundtrip(own) == EXPECTED
    for bad in (secured.conf("MTLS"),  # no certificate
                secured.conf("MTLS", **{"ssl.certificate.location": str(secured.stranger.cert),
                                        "ssl.key.location": str(secured.stranger.key)})):
        error = confluent_failure(bad)
        assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT,
                                KafkaError._ALL_BROKERS_DOWN), error


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", PLAIN_USERS["alice"]),
    ("SCRAM-SHA-256", "carol", SCRAM_USERS["carol"]),
    ("SCRAM-SHA-512", "dave", SCRAM_USERS["dave"]),
])
def test_sasl_with_confluent_kafka(secured: Secured, listener: str, mechanism: str, user: str,
                                   password: str) -> None:
    conf = secured.conf(listener, **{"sasl.mechanism": mechanism, "sasl.username": user,
                                     "sasl.password": password})
    assert confluent_roundtrip(conf) == EXPECTED


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "wrong"),
    ("PLAIN", "nobody", "x"),
    ("SCRAM-SHA-256", "carol", "wrong"),
    ("SCRAM-SHA-512", "nobody", "x"),
])
def test_wrong_credentials_fail_with_kafkas_error(secured: Secured, mechanism: str, user: str,
                                                  password: str) -> None:
    before = secured.broker.log_size()
    conf = secured.conf("SASL_PLAINTEXT", **{"sasl.mechanism": mechanism, "sasl.username": user,
                                             "sasl.password": password})
    error = confluent_failure(conf)
    assert error.code() == KafkaError._AUTHENTICATION, error
    expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN"
                else "Authentication failed during authentication due to invalid credentials "
                     f"with SASL mechanism {mechanism}")
    assert expected in error.str()
    log = ""
    deadline = time.monotonic() + T
    while "failed authentication" not in log and time.monotonic() < deadline:
        log = secured.broker.log_text(before)
        time.sleep(0.05)  # polling the log file, with a deadline
    lines = [line for line in log.splitlines() if "failed authentication" in line]
    assert lines, log
    assert f"User:{user}" in lines[0] and "listener SASL_PLAINTEXT" in lines[0]
    assert mechanism in lines[0] and "127.0.0.1:" in lines[0]
    assert password not in log  # never the secret


def test_unsupported_mechanism_is_refused(secured: Secured) -> None:
    conf = secured.conf("SASL_PLAINTEXT", **{"sasl.mechanism": "OAUTHBEARER",
                                             "enable.sasl.oauthbearer.unsecure.jwt": True})
    error = confluent_failure(conf)
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "OAUTHBEARER" in error.str()


# -- kafka-python and aiokafka ----------------------------------------------------------------


def _kafka_python_settings(secured: Secured, listener: str, mechanism: str, user: str,
                           password: str) -> dict:
    settings = {"bootstrap_servers": secured.bootstrap(listener), "security_protocol": listener,
                "sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": password, "request_timeout_ms": 20000}
    if listener == "SASL_SSL":
        settings["ssl_cafile"] = str(secured.ca.path)
    return settings


@pytest.mark.parametrize(("listener", "mechanism", "user"), [
    ("SASL_PLAINTEXT", "PLAIN", "alice"),
    ("SASL_SSL", "SCRAM-SHA-512", "dave"),
    ("SASL_SSL", "SCRAM-SHA-256", "carol"),
])
def test_sasl_with_kafka_python(secured: Secured, listener: str, mechanism: str,
                                user: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    password = {**PLAIN_USERS, **SCRAM_USERS}[user]
    settings = _kafka_python_settings(secured, listener, mechanism, user, password)
    topic = _topic()
    producer = KafkaProducer(**settings)
    try:
        for i in range(5):
            producer.send(topic, b"v%d" % i).get(timeout=T)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             group_id=f"g-{topic}", **settings)
    try:
        got = [m.value for _, m in zip(range(5), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == EXPECTED


def test_kafka_python_wrong_password(secured: Secured) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError

    before = secured.broker.log_size()
    settings = _kafka_python_settings(secured, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "nope")
    settings["request_timeout_ms"] = 5000
    with pytest.raises(KafkaPythonError):  # kafka-python retries, then gives up
        KafkaProducer(**settings, max_block_ms=5000, bootstrap_timeout_ms=3000).close()
    assert "failed authentication of User:carol on listener SASL_PLAINTEXT" in \
        secured.broker.log_text(before)


@pytest.mark.parametrize(("listener", "mechanism", "user"), [
    ("SASL_SSL", "PLAIN", "alice"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol"),
])
def test_sasl_with_aiokafka(secured: Secured, listener: str, mechanism: str, user: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    password = {**PLAIN_USERS, **SCRAM_USERS}[user]
    settings = {"bootstrap_servers": secured.bootstrap(listener), "security_protocol": listener,
                "sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": password}
    if listener == "SASL_SSL":
        settings["ssl_context"] = create_ssl_context(cafile=str(secured.ca.path))
    topic = _topic()

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**settings)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"v%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", group_id=f"g-{topic}",
                                    **settings)
        await consumer.start()
        try:
            got = []
            while len(got) < 5:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), T)
                got += [m.value for records in batch.values() for m in records]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(run(), 120)) == EXPECTED


# -- bad input --------------------------------------------------------------------------------


def _metadata_v1_all_topics() -> bytes:
    header = struct.pack(">hhih", 3, 1, 7, 1) + b"x"
    body = struct.pack(">i", -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def _closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1024) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_requests_before_authentication_close_the_connection(secured: Secured) -> None:
    sock = socket.create_connection(("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=10)
    with sock:
        sock.sendall(_metadata_v1_all_topics())
        assert _closed(sock)
    # ApiVersions first is allowed (clients learn the SASL versions from it)
    with Conn(secured.bootstrap("SASL_PLAINTEXT")) as conn:
        error, apis = conn.api_versions_v0()
        assert error == 0 and 36 in apis  # SaslAuthenticate is advertised
        conn.send_raw(_metadata_v1_all_topics())
        with pytest.raises(EOFError):
            conn.recv_frame()
    # and the broker still serves everyone else
    assert confluent_roundtrip(secured.conf("PLAINTEXT")) == EXPECTED


def test_oversized_and_garbage_input_closes_only_that_connection(secured: Secured) -> None:
    big = socket.create_connection(("127.0.0.1", secured.ports["SASL_SSL"]), timeout=10)
    context = ssl.create_default_context(cafile=str(secured.ca.path))
    with context.wrap_socket(big, server_hostname="localhost") as tls:
        tls.sendall(struct.pack(">i", 1 << 20) + b"\0" * 1024)  # 1 MiB before authentication
        assert _closed(tls)
    plain_to_tls = socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=10)
    with plain_to_tls:
        plain_to_tls.sendall(_metadata_v1_all_topics())  # plaintext to a TLS port
        assert _closed(plain_to_tls)
    assert confluent_roundtrip(secured.conf("SSL")) == EXPECTED


def test_a_tls_handshake_that_never_finishes_is_closed(make_broker, certs) -> None:
    _ca, _other, server, _client, _stranger = certs
    broker = make_broker({"listeners": "PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:0",
                          "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.both),
                          "ssl.key.password": "key-pass", "connections.max.idle.ms": "2000"})
    port = _ssl_port(broker)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        assert _closed(sock, timeout=15)  # says nothing: closed after the handshake timeout
    assert time.monotonic() - started < 12


def _ssl_port(broker) -> int:
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=T)
    assert meta.brokers  # the PLAINTEXT listener answers; the SSL one's port is in the log
    for line in broker.log_text(0).splitlines():
        if "listening on" in line:
            for part in line.split("listening on ", 1)[1].split(" (")[0].split(", "):
                if part.startswith("SSL://"):
                    return int(part.rsplit(":", 1)[1])
    raise AssertionError("no SSL listener in the broker's start-up line")
