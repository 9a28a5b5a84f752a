"""Brokers of a cluster reach each other over a SASL_SSL inter-broker listener: replication
(acks=all with three replicas in sync), and failover, with every broker authenticating to the
others as the broker principal over TLS. On KRaft the CONTROLLER listener is SASL_SSL too
(sasl.mechanism.controller.protocol=PLAIN): the quorum elects, brokers register and fail over
through it."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.cluster.client import BrokerClient, BrokerConnectionError
from strom.protocol.api_keys import ApiKey

from .. import clients as kc
from ..broker import HOST
from ..security.certs import CertificateAuthority
from .conftest import on_zookeeper
from .faults import wait_for

pytestmark = pytest.mark.timeout(240)

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="broker" password="broker-secret" user_broker="broker-secret";')


async def _plaintext_api_versions(port: int) -> None:
    client = BrokerClient(HOST, port, client_id="plaintext-probe", timeout_s=5.0)
    try:
        await client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "probe",
                                                      "client_software_version": "1"})
    finally:
        client.close()


def _isr(bootstrap: str, topic: str) -> list[int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return sorted(meta.topics[topic].partitions[0].isrs)


def test_replication_over_a_sasl_ssl_inter_broker_listener(make_cluster, tmp_path,
                                                          request) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    server = ca.issue("broker", server=True, CN="localhost")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.both),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.path),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
    }
    kraft = not on_zookeeper(request)
    if kraft:  # the CONTROLLER listener too: Raft between the voters, and the brokers'
        # registrations and heartbeats, authenticate (sasl.mechanism.controller.protocol)
        overrides["listener.security.protocol.map"] += ",CONTROLLER:SASL_SSL"
        overrides["sasl.mechanism.controller.protocol"] = "PLAIN"
        overrides["listener.name.controller.plain.sasl.jaas.config"] = JAAS
    cluster = make_cluster(3, overrides)
    if kraft:  # a client without TLS and SASL gets nothing from a controller listener
        with pytest.raises(BrokerConnectionError):
            asyncio.run(_plaintext_api_versions(cluster.broker(1).controller_port))
    bootstrap = cluster.bootstrap
    topic = "secured-replicas"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[topic].result(40)
    wait_for(lambda: _isr(bootstrap, topic) == [1, 2, 3], 60, "three replicas in sync")

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce(topic, b"r%d" % i)
    assert producer.flush(60) == 0

    leader = AdminClient({"bootstrap.servers": bootstrap}).list_topics(
        topic, timeout=10).topics[topic].partitions[0].leader
    cluster.broker(leader).kill()
    survivors = cluster.bootstrap
    wait_for(lambda: leader not in _isr(survivors, topic), 60, "the dead leader leaves the ISR")
    values = [m.value for m in kc.read_partition(survivors, topic, 0, timeout=60)]
    assert values == [b"r%d" % i for i in range(100)]
    for b in cluster.brokers:  # the followers fetched over the secured listener, no failures
        assert "cannot authenticate" not in b.log_text(0)
        assert "failed authentication" not in b.log_text(0)


def test_a_broker_with_wrong_inter_broker_credentials_cannot_follow(make_cluster, tmp_path):
    ca = CertificateAuthority(tmp_path / "pki")
    server = ca.issue("broker", server=True, CN="localhost")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.both),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.path),
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "replica.lag.time.max.ms": "3000",  # a follower that cannot fetch leaves the ISR soon
    }
    cluster = make_cluster(3, overrides)
    wrong = JAAS.replace('password="broker-secret"', 'password="not-it"')
    cluster.broker(3).restart({"listener.name.internal.plain.sasl.jaas.config": wrong})
    bootstrap = cluster.bootstrap
    topic = "wrong-credentials"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])],  # broker 1 leads
                        operation_timeout=30)[topic].result(40)
    leader = 1
    wait_for(lambda: "cannot authenticate" in cluster.broker(3).log_text(0), 60,
             "broker 3 logs its refused authentication")
    wait_for(lambda: 3 not in _isr(bootstrap, topic), 60, "broker 3 out of the ISR")
    assert _isr(bootstrap, topic) == [1, 2]  # broker 2's credentials are right
    assert "failed authentication of User:broker on listener INTERNAL" in \
        cluster.broker(leader).log_text(0)


def _listener_port(broker, name: str) -> int:
    for line in broker.log_text(0).splitlines():
        if "listening on" in line:
            for part in line.split("listening on ", 1)[1].split(" (")[0].split(", "):
                if part.startswith(f"{name}://"):
                    return int(part.rsplit(":", 1)[1])
    raise AssertionError(f"no {name} listener in {broker.name}'s start-up line")


def test_acls_reach_every_broker(make_cluster) -> None:
    users = 'user_alice="alice-pw"'
    cluster = make_cluster(3, {
        "listeners": "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",  # the brokers (and the test) on PLAINTEXT
    })
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": cluster.broker(1).bootstrap})
    admin.create_topics([NewTopic("shared", 1, 3)], operation_timeout=30)["shared"].result(40)
    for future in admin.create_acls([AclBinding(
            ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW)]).values():
        future.result(30)
    for b in cluster.brokers:  # every broker authorizes alice from the same ACLs
        alice = AdminClient({
            "bootstrap.servers": f"127.0.0.1:{_listener_port(b, 'SASL_PLAINTEXT')}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": "alice-pw"})
        wait_for(lambda alice=alice: "shared" in alice.list_topics(timeout=10).topics, 30,
                 f"alice sees the topic through {b.name}")
