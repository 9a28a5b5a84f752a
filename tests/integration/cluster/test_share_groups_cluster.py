"""Share groups (KIP-932) on a 3-broker cluster, as Kafka 4.4 spreads them: share partitions
on the topic partition's leader, the group coordinator on the `__consumer_offsets` leader, the
share coordinator on the leader of the key's `__share_group_state` partition (it moves with
that leadership). Java KafkaShareConsumers (compat/java/share's ShareApp) and Kafka's
kafka-share-groups tool drive it; the share coordinator is also asked directly (FindCoordinator
with key type SHARE, ReadShareGroupStateSummary) through Strom's inter-broker client.

Group ids are picked (by hashing, as Kafka does) so that the share coordinator of each share
partition is another broker than its leader: the state travels over the wire
(`RoutingPersister`'s remote path), and killing one broker hits one role at a time.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from strom.cluster.client import BrokerClient
from strom.coordinator.partitioning import partition_for
from strom.coordinator.share.state import SharePartitionKey
from strom.protocol.api_keys import ApiKey

from ..kafka_tools.tools import rows
from ..share.conftest import (
    BROKER_SETTINGS,
    AppStarter,
    ShareAdmin,
    ShareApp,
    kafka_tools,  # noqa: F401  (fixtures)
    share_classes,  # noqa: F401
    share_libs,  # noqa: F401
)
from .faults import wait_for

pytestmark = pytest.mark.timeout(300)

STATE_TOPIC = "__share_group_state"
OFFSETS_TOPIC = "__consumer_offsets"
STATE_PARTITIONS = 3
OFFSETS_PARTITIONS = 6  # CLUSTER_OVERRIDES
SHARE_KEY, GROUP_KEY = 2, 0
NOT_READY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
OVERRIDES = {**BROKER_SETTINGS,
             "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
             "auto.leader.rebalance.enable": "false"}
WAIT = 90.0


# --------------------------------------------------------------------------- requests


def _call(bootstrap: str, api: ApiKey, version: int, body: dict[str, Any]) -> Any:
    host, port = bootstrap.rsplit(":", 1)

    async def run() -> Any:
        client = BrokerClient(host, int(port), client_id="share-cluster-test", timeout_s=15)
        try:
            return await client.request(api, version, body)
        finally:
            client.close()

    return asyncio.run(run())


def _any(cluster) -> str:
    return next(b.bootstrap for b in cluster.brokers if b.running)


def metadata(cluster, topic: str) -> tuple[uuid.UUID, dict[int, int], dict[int, list[int]]]:
    """Topic id, leader and ISR of each partition (Metadata v12 from a live broker)."""
    r = _call(_any(cluster), ApiKey.METADATA, 12, {
        "topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    (t,) = r.topics
    assert t.error_code == 0, f"{topic}: error {t.error_code}"
    return (t.topic_id, {p.partition_index: p.leader_id for p in t.partitions},
            {p.partition_index: sorted(p.isr_nodes) for p in t.partitions})


def live_leaders(cluster, topic: str, count: int, isr: int = 1) -> tuple[uuid.UUID, dict[int, int]]:
    """Wait until each of the topic's `count` partitions has a live leader and `isr` in sync."""
    live = {i + 1 for i, b in enumerate(cluster.brokers) if b.running}

    def ready():
        topic_id, leaders, isrs = metadata(cluster, topic)
        if len(leaders) == count and all(leaders[p] in live and len(isrs[p]) >= isr
                                         for p in leaders):
            return topic_id, leaders
        return None

    return wait_for(ready, WAIT, f"leaders of {topic}")


def find_coordinator(bootstrap: str, key_type: int, key: str) -> int:
    def found():
        r = _call(bootstrap, ApiKey.FIND_COORDINATOR, 6,
                  {"key_type": key_type, "coordinator_keys": [key]})
        c = r.coordinators[0]
        assert c.error_code in NOT_READY | {0}, f"FindCoordinator({key}): {c.error_code}"
        return c.node_id if c.error_code == 0 else None

    return wait_for(found, WAIT, f"the coordinator of {key}")


def summary(cluster, key: SharePartitionKey) -> Any:
    """ReadShareGroupStateSummary of a share partition from its share coordinator."""
    def read():
        node = find_coordinator(_any(cluster), SHARE_KEY, key.coordinator_key())
        r = _call(cluster.broker(node).bootstrap, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1, {
            "group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [
                {"partition": key.partition, "leader_epoch": 0}]}]})
        p = r.results[0].partitions[0]
        return p if p.error_code == 0 else None

    return wait_for(read, WAIT, f"the share state of {key}")


def wait_start_offsets(cluster, group: str, topic_id: uuid.UUID, want: dict[int, int]) -> None:
    for p, offset in want.items():
        key = SharePartitionKey(group, topic_id, p)
        wait_for(lambda key=key, offset=offset: summary(cluster, key).start_offset == offset,
                 WAIT, f"start offset {offset} of {key} with the share coordinator")


class Roles:
    """Who leads what: topic partitions, `__share_group_state` and `__consumer_offsets`."""

    def __init__(self, cluster, topic: str, partitions: int) -> None:
        self.topic_id, self.leaders = live_leaders(cluster, topic, partitions, isr=3)
        # the internal topics are created on first need, by FindCoordinator as clients do
        probe = SharePartitionKey("probe", self.topic_id, 0).coordinator_key()
        find_coordinator(_any(cluster), SHARE_KEY, probe)
        find_coordinator(_any(cluster), GROUP_KEY, "probe")
        _, self.state = live_leaders(cluster, STATE_TOPIC, STATE_PARTITIONS, isr=3)
        _, self.offsets = live_leaders(cluster, OFFSETS_TOPIC, OFFSETS_PARTITIONS, isr=3)

    def share_coordinator(self, group: str, partition: int) -> int:
        key = SharePartitionKey(group, self.topic_id, partition).coordinator_key()
        return self.state[partition_for(key, STATE_PARTITIONS)]

    def group_coordinator(self, group: str) -> int:
        return self.offsets[partition_for(group, OFFSETS_PARTITIONS)]

    def pick_group(self, prefix: str, ok: Callable[[str], bool]) -> str:
        for i in range(10_000):
            group = f"{prefix}-{i}"
            if ok(group):
                return group
        raise AssertionError(f"no group id {prefix}-N fits")


# --------------------------------------------------------------------------- set-up helpers


def create_topic(cluster, name: str, partitions: int = 3, *,
                 replicas: list[list[int]] | None = None, config: dict[str, str] | None = None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    live = sum(b.running for b in cluster.brokers)
    wait_for(lambda: len(admin.list_topics(timeout=10).brokers) == live, WAIT, "every broker")
    config = {"min.insync.replicas": "2", **(config or {})}
    new = (NewTopic(name, len(replicas), replica_assignment=replicas, config=config) if replicas else
           NewTopic(name, partitions, 3, config=config))
    admin.create_topics([new], operation_timeout=30)[name].result(60)


@pytest.fixture
def apps(share_classes, share_libs, tmp_path) -> Iterator[Callable[[Any], AppStarter]]:  # noqa: F811
    """`apps(cluster)`: a starter of ShareApp JVMs bootstrapping from every broker."""
    starters: list[AppStarter] = []

    def make(cluster) -> AppStarter:
        bootstrap = ",".join(b.bootstrap for b in cluster.brokers)
        starter = AppStarter(share_classes, share_libs, bootstrap, tmp_path)
        starters.append(starter)
        return starter

    yield make
    for s in starters:
        s.stop_all()


def keys(app: ShareApp) -> list[tuple[int, int]]:
    return [(d.partition, d.offset) for d in app.deliveries()]


_ACKED = re.compile(r"^ACKED \d+ (\S+)-(\d+) ([\d,]+) (.*)$")


def acked_ok(app: ShareApp, topic: str | None = None) -> set[tuple[int, int]]:
    """(partition, offset) of the records whose acknowledgement succeeded (of `topic`)."""
    out = set()
    for line in app.lines():
        m = _ACKED.match(line)
        if m and m.group(4) == "ok" and topic in (None, m.group(1)):
            out |= {(int(m.group(2)), int(o)) for o in m.group(3).split(",")}
    return out


def never_redelivered_after_ack(app: ShareApp) -> None:
    """No record comes back once its acknowledgement succeeded."""
    done: set[tuple[int, int]] = set()
    for line in app.lines():
        m = _ACKED.match(line)
        if m and m.group(4) == "ok":
            done |= {(int(m.group(2)), int(o)) for o in m.group(3).split(",")}
        r = re.match(r"^RECORD \d+ (\d+) (\d+) ", line)
        if r:
            assert (int(r.group(1)), int(r.group(2))) not in done, f"redelivered: {line}"


def produce(cluster, topic: str, per_partition: dict[int, list[str]]) -> None:
    admin = ShareAdmin(cluster.bootstrap)
    for p, values in per_partition.items():
        admin.produce(topic, values, partition=p)


# --------------------------------------------------------------------------- tests


def test_share_group_across_brokers_and_a_partition_leader_dying(make_cluster, apps):
    """Every record reaches a group of 3 consumers; the acknowledgements reach share
    coordinators on other brokers. Then the leader of a partition is killed while a consumer
    holds records of it unacknowledged: the new leader loads the state from the share
    coordinator and hands out exactly those records again, never an acknowledged one."""
    cluster = make_cluster(3, OVERRIDES)
    topic = "sq"
    create_topic(cluster, topic)
    roles = Roles(cluster, topic, 3)
    assert sorted(roles.leaders.values()) == [1, 2, 3], roles.leaders
    victim_partition = 0
    victim = roles.leaders[victim_partition]
    group = roles.pick_group("sq", lambda g: all(
        roles.share_coordinator(g, p) != roles.leaders[p] for p in range(3))
        and roles.share_coordinator(g, victim_partition) != victim
        and roles.group_coordinator(g) != victim)
    # FindCoordinator(SHARE) gives the same answer on every broker
    for p in range(3):
        key = SharePartitionKey(group, roles.topic_id, p).coordinator_key()
        for b in cluster.brokers:
            assert find_coordinator(b.bootstrap, SHARE_KEY, key) == roles.share_coordinator(group, p)
    ShareAdmin(cluster.bootstrap).set_group_configs(group, {"share.auto.offset.reset": "earliest"})
    first = {p: [f"v{p}-{i}" for i in range(10)] for p in range(3)}
    produce(cluster, topic, first)

    start = apps(cluster)
    app = start("all", group, topic, consumers=3)
    app.wait_for(lambda a: len(a.deliveries()) >= 30, WAIT, "30 records")
    assert sorted(keys(app)) == [(p, o) for p in range(3) for o in range(10)]
    assert {d.value for d in app.deliveries()} == {v for vs in first.values() for v in vs}
    assert {d.delivery_count for d in app.deliveries()} == {1}
    app.wait_for(lambda a: len(acked_ok(a)) == 30, WAIT, "30 acknowledgements")
    wait_start_offsets(cluster, group, roles.topic_id, {0: 10, 1: 10, 2: 10})
    assert app.finish() == 0

    # A consumer takes records of the victim's partition and holds them unacknowledged.
    holder = "holder"
    held = [f"hang:{holder}", "h1", "h2", "h3", "h4"]
    produce(cluster, topic, {victim_partition: held})
    hanging = start(holder, group, topic)
    hanging.wait_line(r"^HANG ", WAIT)
    cluster.broker(victim).kill()
    hanging.stop()  # halts: no acknowledgement, no goodbye; its member expires
    live_leaders(cluster, topic, 3)

    after = start("after", group, topic)
    produce(cluster, topic, {p: [f"end-{p}"] for p in range(3)})
    after.wait_for(lambda a: {d.value for d in a.deliveries()} >= {"end-0", "end-1", "end-2"},
                   WAIT, "the records produced after the failover")
    got = sorted((d.partition, d.offset, d.value) for d in after.deliveries())
    assert got == sorted([(victim_partition, 10 + i, v) for i, v in enumerate(held)]
                         + [(p, 10 + (5 if p == victim_partition else 0), f"end-{p}")
                            for p in range(3)]), got
    assert after.finish() == 0


def test_share_and_group_coordinators_move_with_leadership(make_cluster, apps):
    """The broker leading a share partition's `__share_group_state` partition dies: the new
    leader replays it and the acknowledgements go on; then the group coordinator's broker
    dies: the members carry on with the new one. No acknowledged record comes back, and a
    record in a member's hands when another broker dies stays acquired by it."""
    cluster = make_cluster(3, OVERRIDES)
    topic = "sc"
    create_topic(cluster, topic)
    roles = Roles(cluster, topic, 3)
    group = roles.pick_group("sc", lambda g: len({roles.leaders[0], roles.share_coordinator(g, 0),
                                                  roles.group_coordinator(g)}) == 3)
    share_coordinator = roles.share_coordinator(group, 0)
    group_coordinator = roles.group_coordinator(group)
    ShareAdmin(cluster.bootstrap).set_group_configs(group, {
        "share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "20000"})
    app = apps(cluster)("mover", group, topic, consumers=2)
    admin = ShareAdmin(cluster.bootstrap)
    ends = dict.fromkeys(range(3), 0)

    def send(values: dict[int, list[str]]) -> set[tuple[int, int]]:
        sent = set()
        for p, vs in values.items():
            offsets = admin.produce(topic, vs, partition=p)
            sent |= {(p, o) for o in offsets}
            ends[p] = offsets[-1] + 1
        return sent

    def batch(n: int, extra: set[tuple[int, int]] = frozenset()) -> None:
        want = send({p: [f"b{n}-{p}-{i}" for i in range(10)] for p in range(3)}) | extra
        app.wait_for(lambda a: acked_ok(a) >= want, WAIT, f"batch {n} acknowledged")
        wait_start_offsets(cluster, group, roles.topic_id, ends)

    batch(1)
    # a member works on a record for 8 s while the share coordinator's broker dies (the
    # partition's leader stays, its leader epoch moves as the dead broker leaves the ISR)
    slow = send({0: ["slow:8000:s"]})
    cluster.broker(share_coordinator).kill()
    batch(2, slow)
    assert [d.value for d in app.deliveries()].count("slow:8000:s") == 1
    assert find_coordinator(_any(cluster), SHARE_KEY, SharePartitionKey(
        group, roles.topic_id, 0).coordinator_key()) != share_coordinator

    cluster.broker(share_coordinator).start()
    live_leaders(cluster, topic, 3, isr=3)
    live_leaders(cluster, STATE_TOPIC, STATE_PARTITIONS, isr=3)
    live_leaders(cluster, OFFSETS_TOPIC, OFFSETS_PARTITIONS, isr=3)
    cluster.broker(group_coordinator).kill()
    batch(3)
    assert find_coordinator(_any(cluster), GROUP_KEY, group) != group_coordinator
    never_redelivered_after_ack(app)
    assert sorted(set(keys(app))) == [(p, o) for p in range(3) for o in range(ends[p])]
    assert len(keys(app)) == sum(ends.values()), "every record once"
    assert app.finish() == 0


def test_dead_letters_to_a_leader_on_another_broker(make_cluster, apps):
    """Rejected records go to a dead-letter topic led by another broker (a Produce with
    acks=-1 over the inter-broker client); with no leader for the dead-letter partition the
    writes are retried for a bounded time, then the record is archived with an ERROR line."""
    cluster = make_cluster(3, {**OVERRIDES, "share.coordinator.write.timeout.ms": "2000"})
    topic, dlq, gone = "dq", "dlq.remote", "dlq.gone"
    create_topic(cluster, topic, replicas=[[1, 2, 3]])
    create_topic(cluster, dlq, replicas=[[2, 1, 3]],
                 config={"errors.deadletterqueue.group.enable": "true"})
    create_topic(cluster, gone, replicas=[[3]],
                 config={"errors.deadletterqueue.group.enable": "true", "min.insync.replicas": "1"})
    live_leaders(cluster, topic, 1, isr=3)
    live_leaders(cluster, dlq, 1, isr=3)
    admin = ShareAdmin(cluster.bootstrap)
    group = "dq-group"
    admin.set_group_configs(group, {"share.auto.offset.reset": "earliest",
                                    "errors.deadletterqueue.topic.name": dlq,
                                    "errors.deadletterqueue.copy.record.enable": "true"})
    admin.produce(topic, ["reject:r1", "ok1", "reject:r2"])
    app = apps(cluster)("dlq", group, topic)
    records = admin.read(dlq, 2, WAIT)
    assert [(r.key, r.value) for r in records] == [(b"k-reject:r1", b"reject:r1"),
                                                  (b"k-reject:r2", b"reject:r2")]
    headers = [dict(r.headers) for r in records]
    assert [(h["__dlq.errors.topic"], h["__dlq.errors.offset"]) for h in headers] == [
        (topic.encode(), b"0"), (topic.encode(), b"2")]
    assert all(h["__dlq.errors.group"] == group.encode() for h in headers)

    # The dead-letter partition loses its only replica: bounded retries, then an ERROR.
    admin.set_group_configs(group, {"errors.deadletterqueue.topic.name": gone})
    cluster.broker(3).kill()
    mark = cluster.broker(1).log_size()
    admin.produce(topic, ["reject:r3", "ok2"])
    app.wait_for(lambda a: {"reject:r3", "ok2"} <= {d.value for d in a.deliveries()}, WAIT,
                 "the second rejection")
    wait_for(lambda: re.search(r"ERROR .*records 3-3 of dq-0 .*archived without a dead letter",
                               cluster.broker(1).log_text(mark)), WAIT, "the ERROR line")
    admin.produce(topic, ["ok3"])
    app.wait_for(lambda a: "ok3" in {d.value for d in a.deliveries()}, WAIT, "ok3")
    assert [d.value for d in app.deliveries()].count("reject:r3") == 1, "archived, not redelivered"
    assert app.finish() == 0


def test_kafka_share_groups_tool_in_a_cluster(make_cluster, apps, kafka_tools):  # noqa: F811
    """kafka-share-groups' describe, reset-offsets, delete-offsets and delete: the group
    coordinator reads, replaces and deletes share-partition state held by share coordinators
    on other brokers, and the partition leaders serve the new state."""
    cluster = make_cluster(3, OVERRIDES)
    topic = "tt"
    create_topic(cluster, topic)
    roles = Roles(cluster, topic, 3)
    # the 3 share partitions' coordinators are the 3 brokers (their keys hash to consecutive
    # partitions): the group coordinator reaches two of them over the wire
    group = roles.pick_group("tt", lambda g: all(
        roles.share_coordinator(g, p) != roles.leaders[p] for p in range(3)))
    assert sum(roles.share_coordinator(group, p) != roles.group_coordinator(group)
               for p in range(3)) == 2
    # a topic of which the group coordinator holds no replica: its lag comes from the leader
    lone = "tl"
    create_topic(cluster, lone, replicas=[[1 + roles.group_coordinator(group) % 3]],
                 config={"min.insync.replicas": "1"})
    live_leaders(cluster, lone, 1)
    bootstrap = cluster.bootstrap

    def tool(*args: str, code: int | None = 0):
        return kafka_tools.run("kafka-share-groups", "--bootstrap-server", bootstrap, *args,
                               code=code)

    def offsets() -> dict[tuple[str, str], list[str]]:
        lines = rows(tool("--describe", "--group", group).stdout)
        return {(r[1], r[2]): r[3:] for r in lines[1:] if r[0] == group}

    ShareAdmin(bootstrap).set_group_configs(group, {"share.auto.offset.reset": "earliest"})
    produce(cluster, topic, {p: [f"t{p}-{i}" for i in range(3)] for p in range(3)})
    produce(cluster, lone, {0: ["l0", "l1"]})
    start = apps(cluster)
    app = start("tools", group, topic, consumers=2, extra=["--topic", lone])
    app.wait_for(lambda a: len(acked_ok(a, topic)) + len(acked_ok(a, lone)) == 11, WAIT,
                 "11 acknowledgements")
    done = {(topic, str(p)): ["3", "0"] for p in range(3)} | {(lone, "0"): ["2", "0"]}
    wait_for(lambda: offsets() == done, WAIT, "every record done, lag 0 everywhere")
    assert app.finish() == 0
    wait_for(lambda: rows(tool("--describe", "--group", group, "--state").stdout)[1][3:]
             == ["Empty", "0"], WAIT, "an empty group")
    produce(cluster, lone, {0: ["l2"]})  # not consumed: lag 1 from its leader
    wait_for(lambda: offsets()[(lone, "0")] == ["2", "1"], WAIT, "lag 1")

    reset = rows(tool("--reset-offsets", "--group", group, "--to-earliest", "--topic", topic,
                      "--execute").stdout)
    assert sorted(reset[1:]) == [[group, topic, str(p), "0"] for p in range(3)]
    assert offsets() == {(topic, str(p)): ["0", "3"] for p in range(3)} | {(lone, "0"): ["2", "1"]}
    again = start("again", group, topic)
    again.wait_for(lambda a: len(a.deliveries()) >= 9, WAIT, "the 9 records again")
    assert sorted(keys(again)) == [(p, o) for p in range(3) for o in range(3)]
    again.wait_for(lambda a: len(acked_ok(a)) == 9, WAIT, "9 acknowledgements")
    assert again.finish() == 0
    wait_for(lambda: rows(tool("--describe", "--group", group, "--state").stdout)[1][3:]
             == ["Empty", "0"], WAIT, "an empty group")

    assert rows(tool("--delete-offsets", "--group", group, "--topic", topic).stdout) == [
        ["TOPIC", "STATUS"], [topic, "Successful"]]
    assert offsets() == {(lone, "0"): ["2", "1"]}
    for p in range(3):  # deleted with the share coordinators, wherever they are
        assert summary(cluster, SharePartitionKey(group, roles.topic_id, p)).start_offset == -1
    deleted = tool("--delete", "--group", group)
    assert f"Deletion of requested share groups ('{group}') was successful." in deleted.stdout
    assert group not in tool("--list").stdout.split()
    lone_id = metadata(cluster, lone)[0]
    assert summary(cluster, SharePartitionKey(group, lone_id, 0)).start_offset == -1

