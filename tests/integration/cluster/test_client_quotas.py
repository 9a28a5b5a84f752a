"""Client quotas on a ZooKeeper cluster: set through one broker, described through the others,
stored in Kafka's layout (/config/users/<user>/clients/<client id>, names sanitized), beside a
user's SCRAM credentials."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient

from ..test_client_quotas import EXACT, NONE, alter, describe, setting
from .conftest import kraft_clusters
from .faults import wait_for

pytestmark = pytest.mark.timeout(180)

USER = "CN=alice,O=x"  # a principal name Kafka sanitizes in znode names
SANITIZED = "CN%3Dalice%2CO%3Dx"


def _quotas(bootstrap: str, *components) -> dict:
    code, message, entries = describe(bootstrap, *components)
    assert (code, message) == (NONE, "")
    return {tuple(sorted(entity)): values for entity, values in entries}


def test_quotas_set_through_one_broker_are_described_by_every_broker(make_cluster):
    cluster = make_cluster(2)
    first, second = cluster.brokers
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    # the controller is elected once both have registered: librdkafka sends the SCRAM change
    # there, and a first Metadata without one can leave it waiting past the test's deadline
    wait_for(lambda: (m := admin.list_topics(timeout=10)).controller_id > 0
             and len(m.brokers) == 2, 30, "a controller and both brokers")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(USER, info, b"secret")]
                                       )[USER].result(30)

    assert alter(first.bootstrap,
                 ([("user", USER)], [setting("producer_byte_rate", 1024)]),
                 ([("user", USER), ("client-id", "my app")], [setting("consumer_byte_rate", 2048)]),
                 ([("client-id", None)], [setting("request_percentage", 25)])) == [
        (NONE, None, [("user", USER)]),
        (NONE, None, [("user", USER), ("client-id", "my app")]),
        (NONE, None, [("client-id", None)])]
    expected = {
        (("user", USER),): {"producer_byte_rate": 1024.0},
        (("client-id", "my app"), ("user", USER)): {"consumer_byte_rate": 2048.0},
        (("client-id", None),): {"request_percentage": 25.0},
    }
    for broker in cluster.brokers:
        wait_for(lambda b=broker: _quotas(b.bootstrap) == expected, 30,
                 f"the quotas described by {broker.name}")

    if not kraft_clusters():  # KRaft: the quotas are records of the metadata log
        _check_zookeeper_layout(cluster.connect)
    other = AdminClient({"bootstrap.servers": second.bootstrap})  # kept alive for its future
    described = other.describe_user_scram_credentials([USER])[USER].result(30)
    assert [c.iterations for c in described.scram_credential_infos] == [4096]

    # a removal through the second broker reaches the first
    assert alter(second.bootstrap, ([("user", USER)], [("producer_byte_rate", 0.0, True)])) == [
        (NONE, None, [("user", USER)])]
    wait_for(lambda: _quotas(first.bootstrap, ("user", EXACT, USER)) == {
        (("client-id", "my app"), ("user", USER)): {"consumer_byte_rate": 2048.0}}, 30,
        "the removal on the first broker")


def _check_zookeeper_layout(connect: str) -> None:
    """Kafka's layout, in the cluster's chroot; the SCRAM credential shares the user's znode."""
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        user_config = json.loads(zk.get(f"/config/users/{SANITIZED}")[0])["config"]
        pair_config = json.loads(
            zk.get(f"/config/users/{SANITIZED}/clients/my%20app")[0])["config"]
        default_client = json.loads(zk.get("/config/clients/<default>")[0])["config"]
    finally:
        zk.stop()
        zk.close()
    assert user_config["producer_byte_rate"] == "1024" and "SCRAM-SHA-256" in user_config
    assert pair_config == {"consumer_byte_rate": "2048"}
    assert default_client == {"request_percentage": "25"}
