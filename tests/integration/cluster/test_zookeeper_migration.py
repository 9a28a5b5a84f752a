"""From ZooKeeper to KRaft (issue 30): a ZooKeeper-mode cluster with data, configs, ACLs, a SCRAM
user, client quotas and producer ids is stopped, each broker's log dirs are migrated with
`strom storage migrate-from-zookeeper`, and the same dirs start as three combined KRaft nodes:
topic ids, records, configs, ACLs, users and quotas are all there, and new producer ids
continue past the old ones."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strom.cluster.client import BrokerClient
from strom.protocol.api_keys import ApiKey

from .. import clients as kc
from ..broker import HOST, STROM_BIN, BrokerProcess, free_port
from ..conftest import DEFAULT_OVERRIDES
from ..test_client_quotas import EXACT, NONE, alter, setting
from .conftest import KRAFT_OVERRIDES, Cluster, _wait_registered
from .faults import wait_for
from .test_client_quotas import _quotas

pytestmark = [pytest.mark.zookeeper_only, pytest.mark.timeout(240)]

SECURED = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:ANONYMOUS"}  # the test's clients, on PLAINTEXT
ACL = AclBinding(ResourceType.TOPIC, "mig", ResourcePatternType.LITERAL, "User:alice", "*",
                 AclOperation.READ, AclPermissionType.ALLOW)


def _producer_id(bootstrap: str) -> int:
    """A new idempotent producer id (InitProducerId without a transactional id)."""
    host, port = bootstrap.split(",")[0].split(":")

    async def ask() -> int:
        client = BrokerClient(host, int(port), client_id="migration-test")
        try:
            for _ in range(100):
                r = await client.request(ApiKey.INIT_PRODUCER_ID, 4, {
                    "transactional_id": None, "transaction_timeout_ms": 60000,
                    "producer_id": -1, "producer_epoch": -1})
                if r.error_code == 0:
                    return int(r.producer_id)
                await asyncio.sleep(0.1)  # COORDINATOR_LOAD_IN_PROGRESS: ask again
            raise AssertionError(f"no producer id: error {r.error_code}")
        finally:
            client.close()

    return asyncio.run(ask())


def test_a_zookeeper_cluster_moves_to_kraft_with_everything(make_cluster, tmp_path):
    old = make_cluster(3, SECURED)
    bootstrap = old.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept while its futures resolve
    admin.create_topics([NewTopic("mig", 3, 3, config={"retention.ms": "987654321"})],
                        operation_timeout=30)["mig"].result(40)
    wait_for(lambda: all(len(p.isrs) == 3 for p in admin.list_topics(
        "mig", timeout=10).topics["mig"].partitions.values()), 30, "full ISRs")
    topic_id = str(admin.describe_topics(
        TopicCollection(["mig"]))["mig"].result(10).topic_id)
    admin.create_acls([ACL])[ACL].result(30)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", info, b"alice-pw")])["alice"].result(30)
    assert alter(old.brokers[0].bootstrap, ([("user", "alice")], [setting("producer_byte_rate", 4096)])) == [
        (NONE, None, [("user", "alice")])]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for i in range(300):
        producer.produce("mig", f"r{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    before_pid = _producer_id(bootstrap)
    connect = old.connect
    old.stop_all()

    voters_ports = [free_port() for _ in old.brokers]
    voters = ",".join(f"{i}@{HOST}:{p}" for i, p in enumerate(voters_ports, 1))
    nodes = []
    for i, b in enumerate(old.brokers, 1):
        node = BrokerProcess(b.base_dir, data_dir=b.data_dir, port=b.port, name=f"kraft-{i}",
                             kraft=True)
        node.controller_port = voters_ports[i - 1]
        node.overrides = {k: str(v) for k, v in {
            **DEFAULT_OVERRIDES, **KRAFT_OVERRIDES, **SECURED, "node.id": i,
            "controller.quorum.voters": voters}.items()}
        props = b.base_dir / "kraft.properties"
        settings = {"listeners": f"PLAINTEXT://{HOST}:{b.port}", "log.dirs": str(b.data_dir),
                    **node.overrides}
        settings.update(node.kraft_settings(settings))
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        done = subprocess.run([str(STROM_BIN), "storage", "migrate-from-zookeeper", "-c",
                               str(props), "-z", connect], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"Migrated node {i} of cluster" in done.stdout and "1 topics" in done.stdout
        nodes.append(node)
    new = Cluster(nodes, "", together=True)
    try:
        for n in nodes:
            n.start(wait=False)
        for n in nodes:
            n.wait_ready()
        _wait_registered(nodes)
        bootstrap = new.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for(lambda: all(len(p.isrs) == 3 and p.leader > 0 for p in admin.list_topics(
            "mig", timeout=10).topics["mig"].partitions.values()), 60, "leaders and ISRs")
        assert str(admin.describe_topics(TopicCollection(["mig"]))["mig"].result(10).topic_id) \
            == topic_id
        for p in range(3):
            got = [m.value for m in kc.read_partition(bootstrap, "mig", p)]
            assert got == [f"r{i}".encode() for i in range(p, 300, 3)]
        shown = ConfigResource(ConfigResource.Type.TOPIC, "mig")
        assert admin.describe_configs([shown])[shown].result(10)["retention.ms"].value == \
            "987654321"
        acls = admin.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(10)
        assert ACL in acls
        users = admin.describe_user_scram_credentials(["alice"])["alice"].result(10)
        assert [c.iterations for c in users.scram_credential_infos] == [4096]
        assert _quotas(nodes[1].bootstrap, ("user", EXACT, "alice")) == {
            (("user", "alice"),): {"producer_byte_rate": 4096.0}}
        assert _producer_id(bootstrap) > before_pid
        assert all("stray" not in n.log_text(0) for n in nodes)

        # a broker added later, formatted afresh, learns the migrated metadata from the quorum
        # (its log starts past the migration's snapshot: the leader sends the snapshot)
        late = BrokerProcess(tmp_path / "late", name="kraft-late", kraft=False)
        late.overrides = {**{k: v for k, v in nodes[0].overrides.items() if k != "node.id"},
                          "node.id": "4", "process.roles": "broker",
                          "controller.listener.names": "CONTROLLER",
                          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
                                                            "CONTROLLER:PLAINTEXT"}
        props = late.base_dir / "format.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in {
            "listeners": f"PLAINTEXT://{HOST}:{late.port}", "log.dirs": str(late.data_dir),
            **late.overrides}.items()))
        cluster_id = next(line.split("=", 1)[1] for line in (
            nodes[0].data_dir / "meta.properties").read_text().splitlines()
            if line.startswith("cluster.id="))
        subprocess.run([str(STROM_BIN), "storage", "format", "-c", str(props), "-t", cluster_id],
                       check=True, capture_output=True, timeout=60)
        nodes.append(late)
        late.start()
        seen = AdminClient({"bootstrap.servers": late.bootstrap})
        wait_for(lambda: len(seen.list_topics("mig", timeout=10).topics["mig"].partitions) == 3,
                 30, "the migrated topic in the late broker's metadata")
    finally:
        new.discard()
