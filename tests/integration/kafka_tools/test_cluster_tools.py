"""Kafka's tools on a 3-broker Strom cluster (private ZooKeeper): kafka-reassign-partitions
(--generate, --execute, --verify, --list), kafka-leader-election, kafka-topics'
--under-replicated-partitions, and kafka-log-dirs / kafka-broker-api-versions over every broker."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from .. import clients as kc
from ..broker import BrokerProcess
from ..cluster.conftest import CLUSTER_OVERRIDES, Cluster, ZooKeeper
from ..conftest import DEFAULT_OVERRIDES
from ..test_groups import wait_until
from .tools import rows, unique

pytestmark = pytest.mark.timeout(240)
# No background preferred-leader rebalancing: the election test elects the leader itself.
OVERRIDES = {**DEFAULT_OVERRIDES, **CLUSTER_OVERRIDES, "auto.leader.rebalance.enable": "false"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    zk = ZooKeeper(tmp_path_factory.mktemp("tools-zk"))
    zk.start()
    connect = f"{zk.connect}/strom-tools-{uuid.uuid4().hex[:8]}"
    brokers = []
    for i in (1, 2, 3):
        b = BrokerProcess(tmp_path_factory.mktemp(f"tools-b{i}"), name=f"tools-b{i}")
        b.overrides = {**OVERRIDES, "broker.id": str(i), "zookeeper.connect": connect}
        brokers.append(b)
    c = Cluster(brokers, connect)
    try:
        for b in brokers:
            b.start(wait=False)
        for b in brokers:
            b.wait_ready()
        wait_until(lambda: len(AdminClient({"bootstrap.servers": c.bootstrap})
                               .list_topics(timeout=10).brokers) == 3, 30, "3 brokers registered")
        yield c
    finally:
        try:
            c.stop_all()
        finally:
            zk.stop()


def assignment(bs: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, sorted ISR) as Metadata shows them."""
    t = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10).topics[topic]
    return {n: (p.leader, list(p.replicas), sorted(p.isrs)) for n, p in t.partitions.items()}


def create(kafka_tools, c: Cluster, topic: str, replicas: str, *config: str) -> None:
    kafka_tools.run("kafka-topics", "--bootstrap-server", c.bootstrap, "--create", "--topic",
                    topic, "--replica-assignment", replicas, *config)
    want = [[int(r) for r in part.split(":")] for part in replicas.split(",")]
    wait_until(lambda: {p: (r, i) for p, (_, r, i) in assignment(c.bootstrap, topic).items()}
               == {p: (r, sorted(r)) for p, r in enumerate(want)}, 30, f"{topic} fully in sync")


def test_reassign_generate_execute_verify(kafka_tools, cluster, tools_file):
    bs = cluster.bootstrap
    topic = unique("move")
    create(kafka_tools, cluster, topic, "1:2,2:3,3:1")
    sent = kc.produce(bs, topic, [kc.Msg(None, b"r%d" % i, partition=i % 3) for i in range(30)],
                      acks="all")

    def reassign(*args: str, code: int = 0) -> str:
        return kafka_tools.run("kafka-reassign-partitions", "--bootstrap-server", bs, *args,
                               code=code).stdout

    moving = tools_file("topics.json", json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    out = reassign("--topics-to-move-json-file", str(moving), "--broker-list", "1,2",
                   "--generate").splitlines()
    assert out[0] == "Current partition replica assignment" and \
        out[3] == "Proposed partition reassignment configuration", out
    current, proposed = json.loads(out[1]), json.loads(out[4])
    assert sorted((p["partition"], p["replicas"]) for p in current["partitions"]) == [
        (0, [1, 2]), (1, [2, 3]), (2, [3, 1])]
    plan = {p["partition"]: p["replicas"] for p in proposed["partitions"]}
    assert sorted(plan) == [0, 1, 2] and all(sorted(r) == [1, 2] for r in plan.values()), plan
    assert assignment(bs, topic)[1][1] == [2, 3]  # --generate changes nothing

    plan_file = tools_file("plan.json", out[4])
    out = reassign("--reassignment-json-file", str(plan_file), "--execute")
    assert "Successfully started partition reassignments for " in out, out

    def verified() -> bool:
        text = reassign("--reassignment-json-file", str(plan_file), "--verify")
        return all(f"Reassignment of partition {topic}-{p} is completed." in text for p in plan)

    wait_until(verified, 90, "the reassignment to complete")
    now = assignment(bs, topic)
    assert {p: (r, i) for p, (_, r, i) in now.items()} == {
        p: (r, sorted(r)) for p, r in plan.items()}
    assert reassign("--list").strip() == "No partition reassignments found."
    # Every acknowledged record is still there, read from the new replicas' leaders.
    for p in range(3):
        got = kc.read_partition(bs, topic, p)
        assert [m.value for m in got] == [m.value for m in sent if m.partition == p]
    stale = cluster.broker(3).data_dir
    wait_until(lambda: not any((stale / f"{topic}-{p}").exists() for p in range(3)), 30,
               "broker 3 to delete the replicas it no longer holds")


def test_under_replicated_then_preferred_election(kafka_tools, cluster):
    bs = cluster.bootstrap
    topic = unique("elect")
    create(kafka_tools, cluster, topic, "1:2,2:1", "--config", "min.insync.replicas=2")

    def topics(*args: str) -> list[list[str]]:
        return rows(kafka_tools.run("kafka-topics", "--bootstrap-server", cluster.bootstrap,
                                    "--describe", "--topic", topic, *args).stdout)

    assert topics("--under-replicated-partitions") == []
    cluster.broker(1).stop()
    wait_until(lambda: all(leader == 2 and isr == [2] for leader, _, isr in
                           assignment(cluster.bootstrap, topic).values()),
               30, "broker 2 to lead both partitions alone")
    under = topics("--under-replicated-partitions")
    assert sorted((r[3], r[5], r[7], r[9]) for r in under) == [
        ("0", "2", "1,2", "2"), ("1", "2", "2,1", "2")], under
    assert [r[3] for r in topics("--under-min-isr-partitions")] == ["0", "1"]
    assert topics("--unavailable-partitions") == []

    cluster.broker(1).start()
    wait_until(lambda: all(isr == [1, 2] for _, _, isr in assignment(bs, topic).values()),
               60, "broker 1 back in both ISRs")
    assert assignment(bs, topic)[0][0] == 2  # still led by broker 2: no automatic rebalance
    out = kafka_tools.run("kafka-leader-election", "--bootstrap-server", bs, "--election-type",
                          "preferred", "--topic", topic, "--partition", "0").stdout
    assert out.strip() == ("Successfully completed leader election (PREFERRED) for partitions "
                           f"{topic}-0"), out
    wait_until(lambda: assignment(bs, topic)[0][0] == 1, 30, "broker 1 to lead partition 0")
    out = kafka_tools.run("kafka-leader-election", "--bootstrap-server", bs, "--election-type",
                          "preferred", "--topic", topic, "--partition", "1").stdout
    assert out.strip() == f"Valid replica already elected for partitions {topic}-1", out
    assert topics("--under-replicated-partitions") == []


def test_log_dirs_and_api_versions_of_every_broker(kafka_tools, cluster):
    bs = cluster.bootstrap
    topic = unique("dirs")
    create(kafka_tools, cluster, topic, "1:2:3")
    kc.produce(bs, topic, [kc.Msg(None, b"x" * 100)], acks="all")
    deadline = time.monotonic() + 30
    while True:  # followers copy the record on their next fetch
        out = kafka_tools.run("kafka-log-dirs", "--bootstrap-server", bs, "--describe",
                              "--broker-list", "1,2,3", "--topic-list", topic).stdout
        report = json.loads(out.splitlines()[2])
        sizes = {e["broker"]: [p["size"] for d in e["logDirs"] for p in d["partitions"]]
                 for e in report["brokers"]}
        if len({s[0] for s in sizes.values() if s}) == 1 or time.monotonic() > deadline:
            break
    assert sorted(sizes) == [1, 2, 3]
    assert {e["broker"]: [d["logDir"] for d in e["logDirs"]] for e in report["brokers"]} == {
        i: [str(cluster.broker(i).data_dir)] for i in (1, 2, 3)}
    assert all(len(s) == 1 and s[0] == sizes[1][0] > 0 for s in sizes.values()), sizes

    out = kafka_tools.run("kafka-broker-api-versions", "--bootstrap-server", bs).stdout
    heads = sorted(line for line in out.splitlines() if line.endswith("-> ("))
    assert heads == sorted(f"{cluster.broker(i).bootstrap} (id: {i} rack: null isFenced: false)"
                           " -> (" for i in (1, 2, 3)), out
