"""ACLs with real clients: CreateAcls/DescribeAcls/DeleteAcls, Metadata showing only the
topics a principal may describe, prefixed ACLs, DENY over ALLOW, a group read without a group
ACL, a transactional producer without its transactional-id ACL, OffsetDelete without READ on
the topic, `strom acls`, and ACLs kept across a restart."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import NoError, TopicAuthorizationFailedError

from ..broker import HOST, free_port
from ..wire import Conn

pytestmark = pytest.mark.timeout(180)

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
T = 20.0


@pytest.fixture(scope="module")
def acl_broker(make_module_broker):
    port = free_port()
    broker = make_module_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_PLAINTEXT://{HOST}:{port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": AUTHORIZER,
        # the PLAINTEXT listener is the operator's (and the test harness's readiness check)
        "super.users": "User:admin;User:ANONYMOUS",
    })
    broker.sasl = f"{HOST}:{port}"
    return broker


def conf(broker, user: str, **extra) -> dict:
    return {"bootstrap.servers": broker.sasl, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user],
            **extra}


def _topics(broker, *names: str) -> None:
    admin = AdminClient(conf(broker, "admin"))
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(T)
    deadline = time.monotonic() + T
    while not set(names) <= set(admin.list_topics(timeout=5).topics):
        assert time.monotonic() < deadline
        time.sleep(0.05)  # polling Metadata with a deadline


def _acl(rtype, name, principal, op, permission=AclPermissionType.ALLOW,
         pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def _add(broker, *acls: AclBinding) -> None:
    admin = AdminClient(conf(broker, "admin"))  # kept alive until the futures are done
    for future in admin.create_acls(list(acls)).values():
        future.result(T)


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce_errors(broker, user: str, topic: str, **extra) -> list:
    producer = Producer(conf(broker, user, **extra))
    errors: list = []
    producer.produce(topic, b"v", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(T)
    return errors


def _first(broker, user: str, topic: str, group: str):
    """The first record (or error) a subscribed consumer sees."""
    consumer = Consumer(conf(broker, user, **{"group.id": group, "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + T
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                return m.error() if m.error() else m.value()
        return None
    finally:
        consumer.close()


def test_acl_apis_and_validation(acl_broker) -> None:
    topic = _uid("acl-api")
    admin = AdminClient(conf(acl_broker, "admin"))
    binding = _acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ)
    _add(acl_broker, binding)
    described = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(T)
    assert described == [binding]
    bad = _acl(ResourceType.BROKER, "not-the-cluster", "User:alice", AclOperation.ALTER)
    with pytest.raises(KafkaException) as info:
        next(iter(admin.create_acls([bad]).values())).result(T)
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in str(info.value)
    # only a principal with ALTER on the cluster may change ACLs
    alice = AdminClient(conf(acl_broker, "alice"))
    with pytest.raises(KafkaException) as info:
        next(iter(alice.create_acls([binding]).values())).result(T)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    deleted = next(iter(admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", None,
        AclOperation.ANY, AclPermissionType.ANY)]).values())).result(T)
    assert deleted == [binding]


def test_metadata_shows_only_what_a_principal_may_describe(acl_broker) -> None:
    mine, other = _uid("visible"), _uid("hidden")
    _topics(acl_broker, mine, other)
    _add(acl_broker, _acl(ResourceType.TOPIC, mine, "User:bob", AclOperation.READ))
    seen = AdminClient(conf(acl_broker, "bob")).list_topics(timeout=T).topics
    assert mine in seen and other not in seen  # READ implies DESCRIBE
    named = AdminClient(conf(acl_broker, "bob")).list_topics(other, timeout=T).topics[other]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_prefixed_acls_and_deny_over_allow(acl_broker) -> None:
    prefix = _uid("orders")
    allowed_topic, denied_topic = f"{prefix}-us", f"{prefix}-eu"
    group = _uid("g")
    _topics(acl_broker, allowed_topic, denied_topic)
    _add(acl_broker,
         _acl(ResourceType.TOPIC, prefix, "User:alice", AclOperation.ALL,
              pattern=ResourcePatternType.PREFIXED),
         _acl(ResourceType.TOPIC, denied_topic, "User:alice", AclOperation.WRITE,
              AclPermissionType.DENY),
         _acl(ResourceType.GROUP, group, "User:alice", AclOperation.READ))
    assert _produce_errors(acl_broker, "alice", allowed_topic) == [None]
    [error] = _produce_errors(acl_broker, "alice", denied_topic)
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _first(acl_broker, "alice", allowed_topic, group) == b"v"


def test_a_group_read_without_a_group_acl(acl_broker) -> None:
    topic = _uid("grouped")
    _topics(acl_broker, topic)
    _add(acl_broker, _acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ))
    error = _first(acl_broker, "bob", topic, _uid("no-acl"))
    assert isinstance(error, KafkaError)
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_a_transactional_producer_needs_its_transactional_id_acl(acl_broker) -> None:
    topic, tid = _uid("txn-topic"), _uid("tx")
    _topics(acl_broker, topic)
    _add(acl_broker, _acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE))
    refused = Producer(conf(acl_broker, "bob", **{"transactional.id": tid}))
    with pytest.raises(KafkaException) as info:
        refused.init_transactions(T)
    assert "Transactional Id authorization failed" in str(info.value)
    _add(acl_broker, _acl(ResourceType.TRANSACTIONAL_ID, tid, "User:bob", AclOperation.WRITE))
    producer = Producer(conf(acl_broker, "bob", **{"transactional.id": tid}))
    producer.init_transactions(T)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    producer.commit_transaction(T)


def _committed(broker, group: str, topic: str) -> int:
    admin = AdminClient(conf(broker, "admin"))
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    [result] = admin.list_consumer_group_offsets([request]).values()
    [tp] = result.result(T).topic_partitions
    return tp.offset


def test_offset_delete_needs_read_on_the_topic(acl_broker) -> None:
    """DELETE on the group alone must not let a principal drop offsets of topics it may not
    read: Kafka answers those partitions TOPIC_AUTHORIZATION_FAILED and keeps the offset."""
    topic, group = _uid("od-topic"), _uid("od-group")
    _topics(acl_broker, topic)
    admin = AdminClient(conf(acl_broker, "admin"))
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 7)])
    for future in admin.alter_consumer_group_offsets([request]).values():
        future.result(T)
    _add(acl_broker, _acl(ResourceType.GROUP, group, "User:bob", AclOperation.DELETE))
    bob = KafkaAdminClient(bootstrap_servers=acl_broker.sasl, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="PLAIN", sasl_plain_username="bob",
                           sasl_plain_password=USERS["bob"], request_timeout_ms=int(T * 1000))
    try:
        partition = KafkaTopicPartition(topic, 0)
        refused = bob.delete_group_offsets(group, [partition])
        assert refused == {partition: TopicAuthorizationFailedError}
        assert _committed(acl_broker, group, topic) == 7
        _add(acl_broker, _acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ))
        assert bob.delete_group_offsets(group, [partition]) == {partition: NoError}
        assert _committed(acl_broker, group, topic) < 0  # no committed offset left
    finally:
        bob.close()


def test_strom_acls_command(acl_broker, tmp_path: Path) -> None:
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                     f'required username="admin" password="{USERS["admin"]}";\n')
    topic = _uid("cli")
    strom = Path(sys.executable).with_name("strom")

    def run(*args: str) -> str:
        done = subprocess.run([str(strom), "acls", *args, "-b", acl_broker.sasl,
                               "--command-config", str(props)], capture_output=True, text=True,
                              timeout=60, env={**__import__("os").environ, "COLUMNS": "200"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "Added 2 ACL(s)" in run("add", "--topic", topic, "--allow-principal", "User:bob",
                                   "--operation", "Read", "--operation", "Describe")
    rows = [line.split() for line in run("list", "--topic", topic).splitlines()[1:]]
    assert sorted(r[5] for r in rows) == ["DESCRIBE", "READ"]
    assert "Removed 2 ACL(s)" in run("remove", "--topic", topic, "--principal", "User:bob")


def test_acls_are_kept_across_a_restart(make_broker) -> None:
    port = free_port()
    broker = make_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_PLAINTEXT://{HOST}:{port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": AUTHORIZER, "super.users": "User:admin;User:ANONYMOUS"})
    broker.sasl = f"{HOST}:{port}"
    topic = _uid("kept")
    _topics(broker, topic)
    _add(broker, _acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.DESCRIBE))
    broker.restart()
    assert topic in AdminClient(conf(broker, "bob")).list_topics(timeout=T).topics


def test_no_authorizer_means_security_disabled(strom_broker) -> None:
    # DescribeAcls v1 for every ACL, on the raw wire (librdkafka 2.16 hides this error)
    body = struct.pack(">bhbhhbb", 1, -1, 1, -1, -1, 1, 1)
    with Conn(strom_broker.bootstrap) as wire:
        wire.send(29, 1, body)
        reply = wire.recv_frame()
    (error,) = struct.unpack(">h", reply[8:10])  # after correlation id and throttle time
    assert error == KafkaError.SECURITY_DISABLED


def test_strom_acls_list_without_an_authorizer(strom_broker) -> None:
    """One line and exit 1 instead of an empty table: the list would read as "no ACLs" on a
    broker that enforces none (librdkafka returns DescribeAcls' SECURITY_DISABLED as [])."""
    strom = Path(sys.executable).with_name("strom")
    done = subprocess.run([str(strom), "acls", "list", "-b", strom_broker.bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.strip() == ("Error: no authorizer on this broker: ACLs are not enforced "
                                   "(authorizer.class.name is empty)")


def test_strom_acls_list_with_an_authorizer_and_no_matching_acl(acl_broker) -> None:
    strom = Path(sys.executable).with_name("strom")
    done = subprocess.run([str(strom), "acls", "list", "--topic", _uid("none"),
                           "-b", acl_broker.bootstrap], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST",
                                   "OPERATION", "PERMISSION"]
