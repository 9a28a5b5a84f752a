"""A cluster without ZooKeeper: KRaft nodes whose brokers register with the quorum's active
controller, which decides leaderships and ISRs (issue 30, stage 6).

Real processes, real clients: combined nodes (broker and controller) on a static quorum of
three, and a broker-only node (an observer of the metadata log). Admin requests sent to any
broker reach the active controller (forwarded in an Envelope); kill -9 of the active
controller under acks=all load elects a new one and loses no acknowledged record.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from .. import clients as kc
from ..broker import HOST, KRAFT_TEST_CLUSTER_ID, STROM_BIN, BrokerProcess
from .conftest import Cluster, _wait_registered, make_kraft_nodes
from .faults import NumberedProducer, check_exactly_once_in_order, read_all, wait_for


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _topic(bootstrap: str, name: str):
    return _admin(bootstrap).list_topics(name, timeout=10).topics.get(name)


def _fully_replicated(bootstrap: str, name: str, partitions: int, rf: int = 3) -> bool:
    t = _topic(bootstrap, name)
    return (t is not None and t.error is None and len(t.partitions) == partitions
            and all(p.leader > 0 and len(p.isrs) == rf for p in t.partitions.values()))


def _active_controller(cluster) -> int:
    """The quorum's leader, as Metadata names it (the active controller)."""
    return _admin(cluster.bootstrap).list_topics(timeout=10).controller_id


def _create(bootstrap: str, name: str, partitions: int, rf: int = 3) -> None:
    admin = _admin(bootstrap)  # kept until the future resolves
    admin.create_topics([NewTopic(name, partitions, rf, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[name].result(40)


@pytest.mark.timeout(180)
def test_every_role_works_and_admin_requests_reach_the_active_controller(
        tmp_path_factory, request):
    """Nodes 1 and 2 are combined, node 3 a controller-only voter, node 4 a broker-only
    observer: whichever voter leads, the brokers register with it and it decides."""
    nodes = _nodes(tmp_path_factory, "kraft-roles", combined=[1, 2], controllers=[3],
                   brokers=[4])
    observer = nodes[4]
    brokers = [nodes[1], nodes[2], observer]
    _start(request, list(nodes.values()), brokers)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    assert _admin(bootstrap).list_topics(timeout=10).controller_id in (1, 2, 4)

    # created through the broker-only node: forwarded to the active controller
    _create(observer.bootstrap, "kr-basics", 4, rf=2)
    wait_for(lambda: _fully_replicated(observer.bootstrap, "kr-basics", 4, rf=2), 30,
             "full ISRs")
    other = brokers[1]
    admin = _admin(other.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "kr-basics", incremental_configs=[
        ConfigEntry("retention.ms", "123456789", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    observer_admin = _admin(observer.bootstrap)  # kept while its futures resolve
    shown = ConfigResource(ConfigResource.Type.TOPIC, "kr-basics")
    wait_for(lambda: observer_admin.describe_configs([shown])[shown].result(10)[
        "retention.ms"].value == "123456789", 30, "the config on every broker")

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    errors = []
    for i in range(400):
        producer.produce("kr-basics", f"v{i}".encode(), partition=i % 4,
                         on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(30) == 0 and errors == []

    # a reassignment through the controller moves a partition onto the broker-only node
    t = _topic(bootstrap, "kr-basics")
    moved = next(p for p in sorted(t.partitions) if 4 not in t.partitions[p].replicas)
    target = [4, *t.partitions[moved].replicas[1:]]
    plan = observer.base_dir / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "kr-basics", "partition": moved, "replicas": target}]}))
    done = subprocess.run([str(STROM_BIN), "reassign-partitions", "--execute",
                           "--reassignment-json-file", str(plan), "-b", other.bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    wait_for(lambda: list(_topic(observer.bootstrap, "kr-basics").partitions[moved].replicas)
             == target and sorted(_topic(observer.bootstrap, "kr-basics").partitions[moved].isrs)
             == sorted(target), 60, f"partition {moved} moved to {target}")

    consumer = Consumer({"bootstrap.servers": observer.bootstrap, "group.id": "kr-basics",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.subscribe(["kr-basics"])
    got, eofs = 0, set()
    deadline = time.monotonic() + 60
    while len(eofs) < 4 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            eofs.add(msg.partition())
            continue
        got += 1
    consumer.close()
    assert got == 400

    # a second process with the broker-only node's node.id (a copied config): refused as a
    # duplicate while node 4 heartbeats (Kafka's DUPLICATE_BROKER_REGISTRATION), it gives up
    # after initial.broker.registration.timeout.ms; node 4 keeps its registration and serves
    twin = BrokerProcess(tmp_path_factory.mktemp("kraft-roles-twin"), name="kraft-roles-twin",
                         kraft=False)
    twin.overrides = {**observer.overrides, "initial.broker.registration.timeout.ms": "3000"}
    _format(twin)
    request.addfinalizer(twin.kill)
    registrations_before = observer.log_text().count("registered with the controller")
    twin.start(wait=False)
    assert twin.proc is not None and twin.proc.wait(60) == 1, twin.log_tail()
    text = twin.log_text()
    assert "DUPLICATE_BROKER_REGISTRATION" in text, twin.log_tail()
    assert any(line.startswith("strom broker:") and "initial.broker.registration" in line
               for line in text.splitlines()), twin.log_tail()
    assert observer.log_text().count("registered with the controller") == registrations_before
    assert 4 in {b.id for b in _admin(bootstrap).list_topics(timeout=10).brokers.values()}


@pytest.mark.timeout(180)
def test_brokers_keep_serving_while_every_controller_is_down(tmp_path_factory, request):
    """Three controller-only voters and two broker-only nodes: with every controller killed
    (-9) the brokers keep taking acks=all writes and serving reads on the metadata they have;
    with the controllers back they register again and metadata changes resume."""
    nodes = _nodes(tmp_path_factory, "kraft-down", combined=[], controllers=[1, 2, 3],
                   brokers=[4, 5])
    brokers = [nodes[4], nodes[5]]
    _start(request, list(nodes.values()), brokers)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    _create(bootstrap, "kr-down", 2, rf=2)
    wait_for(lambda: _fully_replicated(bootstrap, "kr-down", 2, rf=2), 30, "full ISRs")
    sent = [kc.Msg(b"k", f"before-{i}".encode()) for i in range(50)]
    kc.produce(bootstrap, "kr-down", sent, partition=0, acks="all")

    for i in (1, 2, 3):
        nodes[i].kill()
    later = [kc.Msg(b"k", f"during-{i}".encode()) for i in range(50)]
    kc.produce(bootstrap, "kr-down", later, partition=0, acks="all")  # the ISR of two
    assert kc.contents(kc.read_partition(bootstrap, "kr-down", 0)) == kc.contents(sent + later)

    for i in (1, 2, 3):
        nodes[i].start(wait=False)
    for i in (1, 2, 3):
        nodes[i].wait_ready()
    _create(bootstrap, "kr-after", 1, rf=2)  # the quorum decides again
    wait_for(lambda: _fully_replicated(bootstrap, "kr-after", 1, rf=2), 30,
             "the new topic's ISR")
    assert _admin(bootstrap).list_topics(timeout=10).controller_id in (4, 5)


@pytest.mark.timeout(180)
def test_five_voters_survive_two_failures(make_kraft_cluster):
    """A quorum of five combined nodes loses two, the active controller among them (kill -9):
    the other three elect a leader and keep deciding; acks=all writes go on."""
    cluster = make_kraft_cluster(5)
    _create(cluster.bootstrap, "kr-five", 3)
    wait_for(lambda: _fully_replicated(cluster.bootstrap, "kr-five", 3), 30, "full ISRs")
    old = _active_controller(cluster)
    victims = [old, next(i for i in range(1, 6) if i != old)]
    for i in victims:
        cluster.broker(i).kill()
    survivors = ",".join(b.bootstrap for b in cluster.brokers if b.running)
    wait_for(lambda: _admin(survivors).list_topics(timeout=5).controller_id
             not in (*victims, -1), 20, "a new active controller among the three")
    # the new controller gives every broker a fresh session: the dead ones count as live
    # (and get replicas) until it ends
    wait_for(lambda: len(_admin(survivors).list_topics(timeout=5).brokers) == 3, 30,
             "the two dead brokers fenced")
    _create(survivors, "kr-five-after", 3)  # needs a leader and a majority of the quorum
    wait_for(lambda: _fully_replicated(survivors, "kr-five-after", 3), 30,
             "the new topic on the three survivors")
    sent = [kc.Msg(b"k", f"v{i}".encode()) for i in range(30)]
    kc.produce(survivors, "kr-five-after", sent, partition=0, acks="all")
    assert kc.contents(kc.read_partition(survivors, "kr-five-after", 0)) == kc.contents(sent)


def _nodes(tmp_path_factory, label: str, *, combined: list[int], controllers: list[int],
           brokers: list[int]) -> dict[int, BrokerProcess]:
    """KRaft nodes by id, not started: combined ones, controller-only voters and broker-only
    observers, on one static quorum of the combined and controller-only nodes."""
    voter_ids = sorted([*combined, *controllers])
    template = make_kraft_nodes(tmp_path_factory, label, len(voter_ids))
    ports = {i: b.controller_port for i, b in zip(voter_ids, template.brokers, strict=True)}
    voters = ",".join(f"{i}@{HOST}:{ports[i]}" for i in voter_ids)
    base = {k: v for k, v in template.brokers[0].overrides.items()
            if k not in ("controller.quorum.voters", "node.id")}
    split = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}
    out: dict[int, BrokerProcess] = {}
    for i, b in zip(voter_ids, template.brokers, strict=True):
        if i in combined:
            b.overrides = {**b.overrides, "node.id": str(i), "controller.quorum.voters": voters}
            out[i] = b
        else:
            c = BrokerProcess(b.base_dir, name=f"{label}-c{i}", kraft=False, port=ports[i])
            c.overrides = {**base, **split, "node.id": str(i), "process.roles": "controller",
                           "listeners": f"CONTROLLER://{HOST}:{ports[i]}"}
            out[i] = c
    for i in brokers:
        b = BrokerProcess(tmp_path_factory.mktemp(f"{label}-b{i}"), name=f"{label}-b{i}",
                          kraft=False)
        b.overrides = {**base, **split, "node.id": str(i), "process.roles": "broker"}
        out[i] = b
    for node in out.values():
        if not node.kraft:  # combined nodes format themselves at their first start
            _format(node)
    return out


def _start(request, nodes: list[BrokerProcess], brokers: list[BrokerProcess]) -> None:
    request.addfinalizer(Cluster(nodes, "").discard)
    for b in nodes:
        b.start(wait=False)
    for b in nodes:
        b.wait_ready()
    _wait_registered(brokers)


def _format(node: BrokerProcess) -> None:
    """Format a controller-only or broker-only node's log dir with the cluster id the combined
    nodes of the tests format themselves with (BrokerProcess.format_storage)."""
    config = node.base_dir / "format.properties"
    settings = {"listeners": f"PLAINTEXT://{HOST}:{node.port}", "log.dirs": str(node.data_dir),
                **node.overrides}
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    subprocess.run([str(STROM_BIN), "storage", "format", "-c", str(config), "-t",
                    KRAFT_TEST_CLUSTER_ID, "--ignore-formatted"], check=True,
                   capture_output=True, timeout=60)


@pytest.mark.timeout(240)
def test_killing_the_active_controller_loses_no_acknowledged_write(make_kraft_cluster):
    cluster = make_kraft_cluster(3)
    name = "kr-kill-controller"
    _create(cluster.bootstrap, name, 3)
    wait_for(lambda: _fully_replicated(cluster.bootstrap, name, 3), 30, "full ISRs")
    producer = NumberedProducer(cluster.bootstrap, name, 3, rate_per_s=300)
    producer.start()
    wait_for(lambda: producer.total_acked() >= 300, 30, "some acknowledged records")
    old = _active_controller(cluster)
    victim = cluster.broker(old)
    victim.kill()
    killed_at = time.monotonic()
    survivors = ",".join(b.bootstrap for b in cluster.brokers if b is not victim)
    # a new leader within the election timeout plus a few seconds
    wait_for(lambda: _admin(survivors).list_topics(timeout=5).controller_id not in (old, -1),
             15, "a new active controller")
    elected_after = time.monotonic() - killed_at
    acked = producer.total_acked()
    wait_for(lambda: producer.total_acked() >= acked + 300, 60, "progress after the kill")
    wait_for(lambda: len(_admin(survivors).list_topics(timeout=5).brokers) == 2, 30,
             "the dead broker fenced")  # until then it counts as live, and may get replicas
    _create(survivors, "kr-after-kill", 2, rf=2)  # topic creation resumes
    wait_for(lambda: _fully_replicated(survivors, "kr-after-kill", 2, rf=2), 30,
             "the new topic's ISRs")
    victim.start()
    wait_for(lambda: _fully_replicated(cluster.bootstrap, name, 3), 60,
             "the old controller back in every ISR")
    left = producer.stop()
    assert left == 0, f"{left} records never got a delivery report"
    assert producer.fatal is None, producer.fatal
    got = read_all(cluster.bootstrap, name, 3)
    check_exactly_once_in_order(producer.acked, got)
    assert elected_after < 15

    # A graceful stop of the active controller: it resigns and hears of its successor on its
    # CONTROLLER listener, which stays open until its Raft node has stopped (closed first, the
    # node waited out the whole shutdown timeout, blind to the election)
    leader = cluster.broker(_active_controller(cluster))
    assert leader.stop() == 0, leader.log_tail()
    stopping = leader.log_text().rsplit("msg=shutting down", 1)[1]
    assert "Resigned(" in stopping and "no successor known" not in stopping, stopping
    assert re.search(r"raft \d+: Follower\(epoch=\d+, leader=\d+", stopping), stopping


def test_a_broker_that_cannot_reach_the_quorum_gives_up_after_the_registration_timeout(
        tmp_path_factory) -> None:
    """initial.broker.registration.timeout.ms, as Kafka's broker: one that cannot catch up with
    the quorum and register within it exits, with one line saying so (its controller is never
    started here)."""
    nodes = _nodes(tmp_path_factory, "kr-noreg", combined=[], controllers=[1], brokers=[2])
    broker = nodes[2]
    broker.overrides["initial.broker.registration.timeout.ms"] = "2000"
    started = time.monotonic()
    broker.start(wait=False)
    try:
        assert broker.proc is not None and broker.proc.wait(60) == 1
    finally:
        broker.kill()
    assert time.monotonic() - started < 50  # not the default 60 s
    errors = [line for line in broker.log_text().splitlines() if line.startswith("strom broker:")]
    assert len(errors) == 1 and "initial.broker.registration.timeout.ms" in errors[0], \
        broker.log_tail()
