"""From ZooKeeper to KRaft without stopping the cluster (issue 30): three ZooKeeper-mode
brokers under acks=all load, with a topic config, an ACL, a SCRAM user, a quota and producer
ids, get a KRaft quorum of three controllers in migration mode beside them; each broker
restarts in KRaft mode in turn, then each controller without the migration. No acknowledged
record is lost or doubled, no delivery fails, and everything ZooKeeper held is there."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import (
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

from ..broker import HOST, STROM_BIN, BrokerProcess, free_port
from ..conftest import DEFAULT_OVERRIDES
from ..test_client_quotas import EXACT, NONE, alter, setting
from .conftest import KRAFT_OVERRIDES
from .faults import NumberedProducer, check_exactly_once_in_order, read_all, wait_for
from .test_client_quotas import _quotas
from .test_zookeeper_migration import ACL, SECURED, _producer_id

pytestmark = [pytest.mark.zookeeper_only, pytest.mark.timeout(300)]

CONTROLLER_IDS = (101, 102, 103)
SPLIT = {"controller.listener.names": "CONTROLLER",
         "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}


def _in_sync(bootstrap: str, topic: str, partitions: int) -> bool:
    parts = AdminClient({"bootstrap.servers": bootstrap}).list_topics(
        topic, timeout=5).topics[topic].partitions
    return len(parts) == partitions and all(
        len(p.isrs) == 3 and p.leader > 0 and p.error is None for p in parts.values())


def _controllers(tmp_path, connect: str, cluster_id: str) -> list[BrokerProcess]:
    """Three controller-only nodes migrating the cluster at `connect`, formatted with its id."""
    ports = [free_port() for _ in CONTROLLER_IDS]
    voters = ",".join(f"{i}@{HOST}:{p}" for i, p in zip(CONTROLLER_IDS, ports, strict=True))
    out = []
    for i, port in zip(CONTROLLER_IDS, ports, strict=True):
        c = BrokerProcess(tmp_path / f"c{i}", name=f"roll-c{i}", kraft=False, port=port)
        c.overrides = {k: str(v) for k, v in {
            **DEFAULT_OVERRIDES, **KRAFT_OVERRIDES, **SECURED, **SPLIT, "node.id": i,
            "process.roles": "controller", "listeners": f"CONTROLLER://{HOST}:{port}",
            "controller.quorum.voters": voters, "zookeeper.connect": connect,
            "zookeeper.metadata.migration.enable": "true",
            "zookeeper.session.timeout.ms": 4000}.items()}
        config = c.base_dir / "format.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in {
            "log.dirs": str(c.data_dir), **c.overrides}.items()))
        subprocess.run([str(STROM_BIN), "storage", "format", "-c", str(config), "-t",
                        cluster_id], check=True, capture_output=True, timeout=60)
        out.append(c)
    return out


def _quorum_leader(controllers: list[BrokerProcess]) -> int:
    """The metadata quorum's leader: the controller answering DescribeQuorum (the others
    answer NOT_LEADER_OR_FOLLOWER, as Kafka's do); -1 while none does."""
    async def ask(node: BrokerProcess) -> int:
        client = BrokerClient(HOST, node.port, client_id="rolling-migration-test")
        try:
            r = await client.request(ApiKey.DESCRIBE_QUORUM, 2, {"topics": [{
                "topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
            p = r.topics[0].partitions[0] if r.error_code == 0 and r.topics else None
            return int(p.leader_id) if p is not None and p.error_code == 0 else -1
        finally:
            client.close()

    for node in controllers:
        if node.running:
            leader = asyncio.run(ask(node))
            if leader != -1:
                return leader
    return -1


def test_a_zookeeper_cluster_moves_to_kraft_broker_by_broker_under_load(make_cluster,
                                                                        tmp_path):
    old = make_cluster(3, SECURED)
    admin = AdminClient({"bootstrap.servers": old.bootstrap})
    admin.create_topics([NewTopic("roll", 3, 3, config={"retention.ms": "987654321"})],
                        operation_timeout=30)["roll"].result(40)
    wait_for(lambda: _in_sync(old.bootstrap, "roll", 3), 30, "full ISRs")
    topic_id = str(admin.describe_topics(TopicCollection(["roll"]))["roll"].result(10).topic_id)
    admin.create_acls([ACL])[ACL].result(30)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", info, b"alice-pw")])["alice"].result(30)
    assert alter(old.brokers[0].bootstrap, ([("user", "alice")],
                                            [setting("producer_byte_rate", 4096)])) == [
        (NONE, None, [("user", "alice")])]
    before_pid = _producer_id(old.bootstrap)
    cluster_id = next(line.split("=", 1)[1] for line in (
        old.brokers[0].data_dir / "meta.properties").read_text().splitlines()
        if line.startswith("cluster.id="))
    bootstrap = ",".join(b.bootstrap for b in old.brokers)  # the same ports all along
    producer = NumberedProducer(bootstrap, "roll", 3, rate_per_s=200)
    producer.start()
    controllers = _controllers(tmp_path, old.connect, cluster_id)
    nodes = list(controllers)
    try:
        for c in controllers:
            c.start(wait=False)
        for c in controllers:
            c.wait_ready()
        wait_for(lambda: any("now holds cluster" in c.log_text() for c in controllers), 60,
                 "the quorum's copy of ZooKeeper")
        voters = controllers[0].overrides["controller.quorum.voters"]

        # every broker in turn: stopped (a controlled shutdown), started in KRaft mode on the
        # same log dir and port, back in every ISR before the next one goes
        for i, b in enumerate(old.brokers, 1):
            acked = producer.total_acked()
            b.stop()
            new = BrokerProcess(b.base_dir, data_dir=b.data_dir, port=b.port,
                                name=f"roll-k{i}", kraft=False)
            new.overrides = {k: str(v) for k, v in {
                **DEFAULT_OVERRIDES, **KRAFT_OVERRIDES, **SECURED, **SPLIT, "node.id": i,
                "process.roles": "broker", "controller.quorum.voters": voters}.items()}
            nodes.append(new)
            new.start()
            wait_for(lambda: _in_sync(bootstrap, "roll", 3), 60, f"broker {i} back in sync")
            wait_for(lambda a=acked: producer.total_acked() >= a + 200, 60,
                     f"progress with broker {i} in KRaft mode")
            if i == 1:  # kill -9 of the controller linked to ZooKeeper: another one links
                leader = wait_for(lambda: _quorum_leader(controllers) in CONTROLLER_IDS and
                                  _quorum_leader(controllers), 10, "the quorum's leader")
                victim = controllers[CONTROLLER_IDS.index(leader)]
                victim.kill()
                wait_for(lambda old=leader: _quorum_leader(controllers) not in (old, -1) and
                         sum(c.log_text().count("linked to") for c in controllers) >= 2, 60,
                         "another controller linked to ZooKeeper")
                victim.start()
        kraft_brokers = nodes[3:]
        assert all("stray" not in n.log_text() for n in kraft_brokers)
        # while the controllers still migrate, a change goes through ZooKeeper
        during = AdminClient({"bootstrap.servers": bootstrap})  # kept while its futures resolve
        during.create_topics([NewTopic("during", 2, 3)], operation_timeout=30)["during"].result(40)
        wait_for(lambda: _in_sync(bootstrap, "during", 2), 30, "the topic made while migrating")

        # then each controller without the migration: the first leader finalizes it
        for c in controllers:
            c.overrides = {k: v for k, v in c.overrides.items()
                           if k not in ("zookeeper.connect",
                                        "zookeeper.metadata.migration.enable")}
            c.restart()
        wait_for(lambda: any("move from ZooKeeper is finalized: the KRaft controller decides"
                             in c.log_text() for c in controllers), 60, "the finalization")
        after = AdminClient({"bootstrap.servers": bootstrap})
        after.create_topics([NewTopic("after", 2, 3)], operation_timeout=30)["after"].result(40)
        wait_for(lambda: _in_sync(bootstrap, "after", 2), 30, "a topic made by KRaft alone")

        left = producer.stop()
        assert left == 0, f"{left} records never got a delivery report"
        assert producer.fatal is None and not producer.failed, producer.failed[:5]
        check_exactly_once_in_order(producer.acked, read_all(bootstrap, "roll", 3))
        assert str(after.describe_topics(TopicCollection(["roll"]))["roll"].result(10)
                   .topic_id) == topic_id
        shown = ConfigResource(ConfigResource.Type.TOPIC, "roll")
        assert after.describe_configs([shown])[shown].result(10)["retention.ms"].value == \
            "987654321"
        assert ACL in after.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(10)
        users = after.describe_user_scram_credentials(["alice"])["alice"].result(10)
        assert [c.iterations for c in users.scram_credential_infos] == [4096]
        assert _quotas(kraft_brokers[0].bootstrap, ("user", EXACT, "alice")) == {
            (("user", "alice"),): {"producer_byte_rate": 4096.0}}
        assert _producer_id(bootstrap) > before_pid
    finally:
        producer.stop(5)
        for n in nodes:
            n.kill()
