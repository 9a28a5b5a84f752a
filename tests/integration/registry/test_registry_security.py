"""The schema registry's security (issue 31 point 7): HTTP basic authentication with the
broker's own users (SASL/PLAIN from the JAAS config, SCRAM from the metadata), and the broker's
ACLs on a subject's topic."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from ..broker import HOST, free_port
from .test_registry_api import V1, registry_url

USERS = {"admin": "admin-pw", "alice": "alice-pw"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
T = 20.0


def call(url: str, user: str | None, password: str | None, method: str = "GET",
         body: object = None) -> tuple[int, object]:
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=T) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_basic_auth_with_plain_and_scram_users_and_topic_acls(make_broker) -> None:
    sasl_port = free_port()
    broker = make_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_PLAINTEXT://{HOST}:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "schema.registry.listeners": "http://127.0.0.1:0",
        "schema.registry.authentication.method": "BASIC",
        "metrics.listener": ""})
    url = registry_url(broker)
    # anonymous and wrong passwords: 401 with a challenge
    assert call(f"{url}/subjects", None, None) == (401, {"error_code": 401,
                                                          "message": "Unauthorized"})
    assert call(f"{url}/subjects", "alice", "wrong")[0] == 401
    assert call(f"{url}/subjects", "admin", "admin-pw")[0] in (200, 500)  # loading or served
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # a SCRAM user, created as Kafka's tools create one
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-pw")]
    )["carol"].result(T)

    deadline = time.monotonic() + T
    while call(f"{url}/subjects", "admin", "admin-pw")[0] != 200:  # _schemas loaded
        assert time.monotonic() < deadline
        time.sleep(0.05)  # poll interval, not synchronisation
    # the super user may register anything; alice has no ACL on "orders" yet
    assert call(f"{url}/subjects/orders-value/versions", "admin", "admin-pw", "POST",
                {"schema": V1})[0] == 200
    status, body = call(f"{url}/subjects/orders-value/versions", "alice", "alice-pw")
    assert (status, body["error_code"]) == (403, 40301)
    assert call(f"{url}/subjects", "alice", "alice-pw") == (200, [])  # nothing readable
    status, body = call(f"{url}/schemas/ids/1", "alice", "alice-pw")
    assert (status, body["error_code"]) == (404, 40403)  # not found through no readable subject

    for future in admin.create_acls([AclBinding(
            ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW)]).values():
        future.result(T)
    deadline = time.monotonic() + T
    while call(f"{url}/subjects", "alice", "alice-pw") != (200, ["orders-value"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)  # the ACL reaches the authorizer's view: poll with a deadline
    assert call(f"{url}/subjects/orders-value/versions", "alice", "alice-pw") == (200, [1])
    status, body = call(f"{url}/subjects/orders-value/versions", "alice", "alice-pw", "POST",
                        {"schema": '"string"'})
    assert (status, body["error_code"]) == (403, 40301)  # READ is not WRITE
    # the SCRAM user authenticates too (no ACL: sees nothing)
    assert call(f"{url}/subjects", "carol", "carol-pw") == (200, [])
    assert call(f"{url}/subjects", "carol", "wrong")[0] == 401


def test_https_with_the_brokers_tls_settings(make_broker, tmp_path) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from ..security.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("registry", server=True, O="Strom Tests", CN="localhost")
    broker = make_broker({"schema.registry.listeners": "https://127.0.0.1:0",
                          "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.both),
                          "metrics.listener": ""})
    url = registry_url(broker)
    assert url.startswith("https://")
    client = SchemaRegistryClient({"url": url, "ssl.ca.location": str(ca.path)})
    deadline = time.monotonic() + T
    while True:  # _schemas is created and loaded
        try:
            assert client.register_schema("tls-value", Schema(V1, "AVRO")) > 0
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.05)  # poll interval, not synchronisation
    assert client.get_subjects() == ["tls-value"]
    # plain HTTP to the TLS port gets no answer
    try:
        urllib.request.urlopen(url.replace("https://", "http://") + "/subjects", timeout=5)
    except (urllib.error.URLError, ConnectionError) as exc:
        assert exc is not None
    else:
        raise AssertionError("plain HTTP was answered on the TLS port")
