"""The HTTP API's process (issue 32 point 5): HTTP basic authentication with the broker's own
users (SASL PLAIN from the JAAS config, SCRAM from the metadata) and the broker's ACLs through
them; HTTPS with the broker's ssl.* settings; a process the broker restarts when it dies and
that never outlives its broker, even one killed with -9."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from .. import clients as kc
from ..broker import HOST, free_port
from ..registry.test_registry_security import JAAS  # users admin and alice, as there
from .conftest import REST_OVERRIDES, Rest, started_url, wait_answers

T = 20.0


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(p) for p in text]
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def wait_for(check, what: str, timeout: float = T):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # poll interval, not synchronisation


def test_basic_auth_runs_each_request_as_the_http_user(make_broker, unique_topic) -> None:
    sasl_port = free_port()
    broker = make_broker({
        **REST_OVERRIDES,
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_PLAINTEXT://{HOST}:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "rest.authentication.method": "BASIC"})
    url = started_url(broker, "HTTP API")
    anonymous = Rest(url, broker, "")
    assert anonymous.get("/v3/clusters") == (401, {"error_code": 401, "message": "Unauthorized"})
    assert Rest(url, broker, "", auth=("alice", "wrong")).get("/v3/clusters")[0] == 401
    admin_rest = Rest(url, broker, "", auth=("admin", "admin-pw"))
    wait_answers(admin_rest)
    topic = unique_topic("rest-acl")
    kc.create_topic(broker.bootstrap, topic, 1)
    record = {"value": {"type": "STRING", "data": "hello"}}
    status, body = admin_rest.post(f"{admin_rest.v3}/topics/{topic}/records", record)
    assert status == 200, body
    alice = Rest(url, broker, "", auth=("alice", "alice-pw"))
    status, body = alice.post(f"{admin_rest.v3}/topics/{topic}/records", record)
    assert (status, body["error_code"]) == (403, 40301), body
    # the admin grants alice WRITE and DESCRIBE over HTTP (ACLs: Confluent's v3 bodies)
    grant = {"resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL",
             "principal": "User:alice", "host": "*", "permission": "ALLOW"}
    assert alice.post(f"{admin_rest.v3}/acls", {**grant, "operation": "READ"})[0] == 403
    assert admin_rest.post(f"{admin_rest.v3}/acls", {**grant, "operation": "WRITE"}) == \
        (201, None)
    assert admin_rest.post(f"{admin_rest.v3}/acls:batch", {"data": [
        {**grant, "operation": "DESCRIBE"}, {**grant, "operation": "READ"}]}) == (201, None)
    status, body = admin_rest.post(f"{admin_rest.v3}/acls", {**grant, "operation": "ANY"})
    assert status == 400, body
    status, found = admin_rest.get(f"{admin_rest.v3}/acls?principal=User:alice")
    assert status == 200 and found["kind"] == "KafkaAclList", found
    assert sorted(a["operation"] for a in found["data"]) == ["DESCRIBE", "READ", "WRITE"]
    assert {k: found["data"][0][k] for k in grant} == grant
    assert found["data"][0]["kind"] == "KafkaAcl"
    status, gone = admin_rest.delete(f"{admin_rest.v3}/acls?resource_type=TOPIC&"
                                     f"resource_name={topic}&operation=READ")
    assert status == 200 and [a["operation"] for a in gone["data"]] == ["READ"], gone
    wait_for(lambda: alice.post(f"{admin_rest.v3}/topics/{topic}/records", record)[0] == 200,
             "alice may write once the ACL reaches the authorizer")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # a SCRAM user authenticates through the broker too
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-pw")]
    )["carol"].result(T)
    carol = Rest(url, broker, "", auth=("carol", "carol-pw"))
    wait_for(lambda: carol.get("/v3/clusters")[0] == 200, "carol authenticates")
    status, body = carol.post(f"{admin_rest.v3}/topics/{topic}/records", record)
    assert (status, body["error_code"]) == (403, 40301), body
    assert Rest(url, broker, "", auth=("carol", "nope")).get("/v3/clusters")[0] == 401
    # every request has its access log line, with its user (in the broker's log)
    line = re.compile(rf"logger=strom\.http\.access\.rest .*msg=POST /v3/clusters/\S+/topics/"
                      rf"{re.escape(topic)}/records 403 \d+ bytes [\d.]+ ms user=carol ")
    wait_for(lambda: line.search(broker.log_path.read_text(errors="replace")),
             "an access log line for carol's refused produce")


def test_https_with_the_brokers_tls_settings(make_broker, tmp_path) -> None:
    import ssl
    import urllib.request

    from ..security.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("rest", server=True, O="Strom Tests", CN="localhost")
    broker = make_broker({**REST_OVERRIDES, "rest.listeners": "https://127.0.0.1:0",
                          "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.both)})
    url = started_url(broker, "HTTP API")
    assert url.startswith("https://")
    context = ssl.create_default_context(cafile=str(ca.path))
    context.check_hostname = False
    with urllib.request.urlopen(url + "/v3/clusters", context=context, timeout=T) as resp:
        assert resp.status == 200


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_a_broker_with_tls_listeners_only(tmp_path, protocol: str) -> None:
    """No PLAINTEXT listener: the HTTP API reaches its broker over TLS, trusting the broker's
    trust store and presenting the broker's own certificate (client certificates required);
    produce, admin calls and a Kafka request of its own (ListPartitionReassignments) work,
    with SASL_SSL as the basic-auth user (checked by the broker over TLS too)."""
    import base64
    import json
    import urllib.error
    import urllib.request

    from ..broker import BrokerProcess
    from ..security.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("broker", server=True, password="key-secret", O="Strom Tests",
                      CN="localhost")
    broker = BrokerProcess(tmp_path / "tls-only", name="tls-only")
    try:
        sasl = {"sasl.enabled.mechanisms": "PLAIN", "rest.authentication.method": "BASIC",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS} \
            if protocol == "SASL_SSL" else {}
        broker.start({"listeners": f"{protocol}://{HOST}:{broker.port}",
                      "rest.listeners": "http://127.0.0.1:0", "metrics.listener": "",
                      "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.both),
                      "ssl.key.password": "key-secret", "ssl.truststore.type": "PEM",
                      "ssl.truststore.location": str(ca.path), "ssl.client.auth": "required",
                      "num.partitions": "1", **sasl}, wait=False)
        url = started_url(broker, "HTTP API", timeout=30)

        def call(method: str, path: str, body: object = None, password: str = "admin-pw"
                 ) -> tuple[int, dict]:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"}
            if sasl:
                token = base64.b64encode(f"admin:{password}".encode()).decode()
                headers["Authorization"] = f"Basic {token}"
            req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=T) as resp:
                    return resp.status, json.load(resp)
            except urllib.error.HTTPError as e:
                return e.code, json.load(e)

        if sasl:
            assert call("GET", "/v3/clusters", password="wrong")[0] == 401

        status, clusters = call("GET", "/v3/clusters")
        v3 = f"/v3/clusters/{clusters['data'][0]['cluster_id']}"
        assert call("POST", f"{v3}/topics", {"topic_name": "sealed"})[0] == 201
        status, sent = call("POST", f"{v3}/topics/sealed/records",
                            {"value": {"type": "STRING", "data": "over TLS"}})
        assert (status, sent["error_code"], sent["offset"]) == (200, 200, 0), sent
        status, moving = call("GET", f"{v3}/topics/-/partitions/-/reassignment")
        assert (status, moving["data"]) == (200, [])
    finally:
        broker.stop()


def test_the_broker_restarts_its_http_process_and_takes_it_along(make_broker) -> None:
    broker = make_broker(REST_OVERRIDES)
    rest = Rest(started_url(broker, "HTTP API"), broker, "")
    wait_answers(rest)
    assert broker.pid is not None
    first = wait_for(lambda: children(broker.pid), "the HTTP API's process runs")
    assert len(first) == 1
    os.kill(first[0], signal.SIGKILL)
    wait_for(lambda: "HTTP API's process" in broker.log_text(), "an ERROR line says it died")
    assert "level=ERROR" in broker.log_text()
    second = wait_for(lambda: [p for p in children(broker.pid) if p != first[0]],
                      "it is started again")
    wait_answers(rest)
    broker.kill()  # kill -9: the process sees its stdin close and goes too
    wait_for(lambda: not alive(second[0]), "the HTTP API's process exits with its broker")


def test_stalled_http_clients_stall_nobody(rest_broker, rest) -> None:
    """Connections that never finish their request head (and one that sends garbage) neither
    stop the broker's Kafka clients nor other HTTP clients."""
    import socket
    from urllib.parse import urlsplit

    from confluent_kafka import Producer

    parts = urlsplit(rest.url)
    stalled = []
    try:
        for _ in range(50):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
            sock.sendall(b"POST /v3/clusters HTTP/1.1\r\nHost: x\r\n")  # never ends its head
            stalled.append(sock)
        garbage = socket.create_connection((parts.hostname, parts.port), timeout=5)
        garbage.sendall(b"\x16\x03\x01\x02\x00" + bytes(range(256)) * 4)
        stalled.append(garbage)
        producer = Producer({"bootstrap.servers": rest_broker.bootstrap})
        producer.produce("stall-check", b"v")
        assert producer.flush(10) == 0
        status, _ = rest.get("/v3/clusters", timeout=10)
        assert status == 200
    finally:
        for sock in stalled:
            sock.close()
