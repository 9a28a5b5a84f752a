"""A network partition that isolates a partition leader, made with network namespaces: every
broker in its own namespace on a private bridge, ZooKeeper and the test's clients on the hub.

Taking the leader's bridge port down drops its packets both ways — to ZooKeeper, to the other
brokers and to clients — while its process keeps running. Kafka's promise: its ZooKeeper
session expires, the controller elects new leaders from the ISR, producers move over, and no
acknowledged write is lost; when the network heals, the old leader registers again, truncates
what only it had, and rejoins the ISR with identical data.

Where namespaces cannot be created (no CAP_NET_ADMIN, no iproute2) the test is skipped with the
reason shown; test_fault_modes.py's TCP-proxy partition covers that case.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from ..broker import BrokerProcess
from ..conftest import DEFAULT_OVERRIDES
from .conftest import CLUSTER_OVERRIDES, Cluster, ZooKeeper
from .faults import (
    NumberedProducer,
    check_exactly_once_in_order,
    compare_replicas,
    read_all,
    wait_for,
)
from .netns import HUB_ADDRESS, NetnsLab, NetnsUnavailable

PORT = 9092  # every broker has its own namespace, so all use Kafka's port


class NamespacedBroker(BrokerProcess):
    """A broker process run inside a network namespace, listening on its own address there."""

    def __init__(self, base: Path, *, host: str, prefix: tuple[str, ...], name: str) -> None:
        super().__init__(base, port=PORT, name=name)
        self.host = host
        self.prefix = prefix

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [*self.prefix, *super().command()]


def _partitions(bootstrap: str, topic: str):
    t = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics.get(topic)
    return {} if t is None or t.error is not None else t.partitions


def _in_sync(bootstrap: str, topic: str, partitions: int, rf: int) -> bool:
    parts = _partitions(bootstrap, topic)
    return len(parts) == partitions and all(p.leader > 0 and len(p.isrs) == rf
                                            for p in parts.values())


@pytest.fixture
def lab():
    lab = NetnsLab(3)
    try:
        lab.create()
    except NetnsUnavailable as e:
        pytest.skip(f"network namespaces cannot be created here ({e}); the TCP-proxy partition "
                    "test covers this case")
    try:
        yield lab
    finally:
        lab.destroy()


@pytest.mark.timeout(300)
def test_isolated_leader_loses_no_acknowledged_write(lab, tmp_path_factory):
    zk = ZooKeeper(tmp_path_factory.mktemp("zk-netns"), host=HUB_ADDRESS, port=2181,
                   prefix=lab.prefix(lab.hub))
    brokers: list[NamespacedBroker] = []
    with lab.entered():
        try:
            zk.start()
            for i, ns in lab.names.items():
                b = NamespacedBroker(tmp_path_factory.mktemp(f"netns-b{i}"), name=f"netns-b{i}",
                                     host=lab.address(i), prefix=lab.prefix(ns))
                settings: dict[str, object] = dict(DEFAULT_OVERRIDES)
                settings.update(CLUSTER_OVERRIDES)
                settings.update({"broker.id": i, "zookeeper.connect": f"{zk.connect}/strom",
                                 "listeners": f"PLAINTEXT://{lab.address(i)}:{PORT}"})
                b.overrides = {k: str(v) for k, v in settings.items()}
                brokers.append(b)
                b.start(wait=False)
            for b in brokers:
                b.wait_ready()
            cluster = Cluster(brokers, f"{zk.connect}/strom")
            _run_partition_scenario(lab, cluster)
        finally:
            for b in brokers:
                b.kill()
            zk.stop()


def _run_partition_scenario(lab: NetnsLab, cluster: Cluster) -> None:
    wait_for(lambda: len(AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
        timeout=10).brokers) == 3, 30, "every broker registered")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("np", 3, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)["np"].result(40)
    wait_for(lambda: _in_sync(cluster.bootstrap, "np", 3, 3), 30, "full ISRs")
    producer = NumberedProducer(cluster.bootstrap, "np", 3, rate_per_s=300, extra={
        "request.timeout.ms": 10_000, "socket.timeout.ms": 10_000})
    producer.start()
    wait_for(lambda: producer.total_acked() >= 300, 30, "some acknowledged records")

    victim = _partitions(cluster.bootstrap, "np")[0].leader
    others = ",".join(cluster.broker(i).bootstrap for i in (1, 2, 3) if i != victim)
    lab.isolate(victim)
    wait_for(lambda: all(p.leader not in (victim, -1)
                         for p in _partitions(others, "np").values()), 60,
             f"new leaders away from isolated broker {victim}")
    acked = producer.total_acked()
    wait_for(lambda: producer.total_acked() >= acked + 300, 90, "progress during the partition")
    assert cluster.broker(victim).running, "the isolated broker must keep running"

    lab.heal(victim)
    wait_for(lambda: victim in AdminClient({"bootstrap.servers": others}).list_topics(
        timeout=10).brokers, 60, f"broker {victim} registered again")
    wait_for(lambda: _in_sync(cluster.bootstrap, "np", 3, 3), 90,
             f"broker {victim} back in every ISR")
    left = producer.stop()
    assert left == 0 and producer.fatal is None, (left, producer.fatal)
    check_exactly_once_in_order(producer.acked, read_all(cluster.bootstrap, "np", 3))
    wait_for(lambda: _in_sync(cluster.bootstrap, "np", 3, 3), 30, "ISRs still full")
    for b in cluster.brokers:
        b.stop()
    for n in range(3):
        compare_replicas([b.data_dir / f"np-{n}" for b in cluster.brokers])
