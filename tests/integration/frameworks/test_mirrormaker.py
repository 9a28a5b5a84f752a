"""MirrorMaker 2 (dedicated mode, as bin/connect-mirror-maker.sh runs it) between two Strom brokers.

One MirrorMaker process mirrors cluster ``source`` to cluster ``target``: the topic's records
(renamed ``source.<topic>`` by the DefaultReplicationPolicy, same partitions, keys, values,
headers and timestamps), its configs (at creation and when they change), and a consumer group's
offsets, translated through MirrorMaker's offset syncs. The group then fails over to the target
cluster and resumes at the translated offsets: nothing lost, and the records it reads again are
counted and bounded.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from ..broker import BrokerProcess
from .connect import MIRROR_MAKER_MAIN, write_properties
from .jvm import wait_until

PARTITIONS = 2
PER_PHASE = 300  # records per partition produced in each of the two phases
# MirrorMaker writes an offset sync at most offset.lag.max + 1 records after the previous one,
# and a consumer group's offset is translated to one past the newest sync below it: so a group
# that failed over reads again at most this many records per partition.
OFFSET_LAG_MAX = 10


def mm2_settings(source: BrokerProcess, target: BrokerProcess, topic: str) -> dict[str, object]:
    """Kafka's config/connect-mirror-maker.properties for one direction, with short intervals."""
    return {
        "clusters": "source, target",
        "source.bootstrap.servers": source.bootstrap,
        "target.bootstrap.servers": target.bootstrap,
        "source->target.enabled": "true",
        "source->target.topics": re.escape(topic),
        "target->source.enabled": "false",
        # Single brokers: every topic MirrorMaker creates has one replica.
        "replication.factor": 1,
        "checkpoints.topic.replication.factor": 1,
        "heartbeats.topic.replication.factor": 1,
        "offset-syncs.topic.replication.factor": 1,
        "offset.storage.replication.factor": 1,
        "status.storage.replication.factor": 1,
        "config.storage.replication.factor": 1,
        "sync.group.offsets.enabled": "true",
        "emit.checkpoints.interval.seconds": 1,
        "sync.group.offsets.interval.seconds": 1,
        "sync.topic.configs.interval.seconds": 1,
        "refresh.topics.interval.seconds": 1,
        "refresh.groups.interval.seconds": 1,
        "offset.lag.max": OFFSET_LAG_MAX,
        "offset.flush.interval.ms": 1000,
    }


def produce(broker: BrokerProcess, topic: str, phase: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    base = 1_700_000_000_000 + phase * 1_000_000
    for i in range(PER_PHASE):
        for part in range(PARTITIONS):
            n = f"{phase}-{part}-{i}"
            p.produce(topic, key=f"k{n}".encode(), value=f"v{n}".encode(), partition=part,
                      headers=[("phase", str(phase).encode()), ("n", n.encode())],
                      timestamp=base + i)
    assert p.flush(30) == 0


def read_all(broker: BrokerProcess, topic: str, timeout: float = 60.0) -> dict[int, list[tuple]]:
    """Every record of ``topic`` as (key, value, headers, timestamp), per partition, in order."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{time.time_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                done.add(m.partition())
                continue
            out[m.partition()].append((m.key(), m.value(), m.headers(), m.timestamp()[1]))
        assert len(done) == PARTITIONS, f"reading {topic} took over {timeout:.0f} s"
        return out
    finally:
        c.close()


def end_offsets(broker: BrokerProcess, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)]
    except Exception:  # the topic is not there yet
        return [-1] * PARTITIONS
    finally:
        c.close()


def group_offsets(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    try:
        found = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    except Exception:
        return {}
    return {tp.partition: tp.offset for tp in found.topic_partitions
            if tp.topic == topic and tp.offset >= 0}


def topic_config(admin: AdminClient, topic: str, name: str) -> str | None:
    res = ConfigResource("topic", topic)
    try:
        return admin.describe_configs([res])[res].result(timeout=10)[name].value
    except Exception:  # not mirrored yet
        return None


def consume_until_end(broker: BrokerProcess, topic: str, group: str) -> list[Message]:
    """Consume ``topic`` as member of ``group`` from its committed offsets up to the end.

    ``auto.offset.reset=error``: a partition without a committed offset fails the test instead
    of silently starting somewhere.
    """
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "auto.offset.reset": "error", "enable.partition.eof": True,
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got: list[Message] = []
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                done.add(m.partition())
                continue
            got.append(m)
        assert len(done) == PARTITIONS, "the failed-over consumer did not reach the end"
        return got
    finally:
        c.close()


def test_mirror_maker_mirrors_records_configs_and_group_offsets(
        make_broker, connect_classpath: list[Path], jvms, tmp_path: Path, unique_topic) -> None:
    source, target = make_broker(), make_broker()
    topic, group = unique_topic("orders"), unique_topic("billing")
    remote = f"source.{topic}"
    src_admin = AdminClient({"bootstrap.servers": source.bootstrap})
    dst_admin = AdminClient({"bootstrap.servers": target.bootstrap})
    src_admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={
        "retention.ms": "123456789", "max.message.bytes": "500000"})])[topic].result(timeout=30)
    produce(source, topic, phase=1)

    config = write_properties(tmp_path / "connect-mirror-maker.properties",
                              mm2_settings(source, target, topic))
    mm2 = jvms("mirror-maker", connect_classpath, MIRROR_MAKER_MAIN, [str(config)])

    # Records: renamed, same partitions, identical.
    wait_until(lambda: end_offsets(target, remote) == [PER_PHASE] * PARTITIONS, 120,
               f"{remote} to hold phase 1", lambda: f"{end_offsets(target, remote)}")
    # Configs: copied at creation, then kept in step.
    assert topic_config(dst_admin, remote, "retention.ms") == "123456789"
    assert topic_config(dst_admin, remote, "max.message.bytes") == "500000"
    res = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "987654321", incremental_operation=AlterConfigOpType.SET)])
    src_admin.incremental_alter_configs([res])[res].result(timeout=10)
    wait_until(lambda: topic_config(dst_admin, remote, "retention.ms") == "987654321", 60,
               "the changed retention.ms on the remote topic")

    # A consumer group reads phase 1 on the source and commits.
    c = Consumer({"bootstrap.servers": source.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen_on_source: list[bytes] = []
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while len(seen_on_source) < PER_PHASE * PARTITIONS and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            seen_on_source.append(m.value())
            if len(seen_on_source) % 50 == 0:  # 600 is a multiple: the last commit is at the end
                c.commit(asynchronous=False)
    c.close()
    assert len(seen_on_source) == PER_PHASE * PARTITIONS
    assert group_offsets(src_admin, group, topic) == dict.fromkeys(range(PARTITIONS), PER_PHASE)

    # MirrorMaker translates the group's offsets and writes them to the target cluster's group.
    def translated() -> dict[int, int] | None:
        found = group_offsets(dst_admin, group, remote)
        ok = len(found) == PARTITIONS and all(o >= PER_PHASE - OFFSET_LAG_MAX
                                              for o in found.values())
        return found if ok else None

    offsets = wait_until(translated, 60, f"{group}'s offsets on {remote} within "
                         f"{OFFSET_LAG_MAX} of {PER_PHASE}",
                         lambda: f"{group_offsets(dst_admin, group, remote)}")
    print(f"translated offsets: {offsets} (committed {PER_PHASE} per partition)")

    # More records arrive on the source; the group's consumers move to the target cluster.
    produce(source, topic, phase=2)
    wait_until(lambda: end_offsets(target, remote) == [2 * PER_PHASE] * PARTITIONS, 60,
               f"{remote} to hold phase 2", lambda: f"{end_offsets(target, remote)}")
    assert read_all(target, remote) == read_all(source, topic)

    failed_over = consume_until_end(target, remote, group)
    values = [m.value() for m in failed_over]
    again = set(values) & set(seen_on_source)
    everything = {v for part in read_all(source, topic).values() for _, v, _, _ in part}
    assert set(values) | set(seen_on_source) == everything, "records lost in the failover"
    assert len(values) == len(set(values))
    per_partition = {p: sum(1 for m in failed_over if m.partition() == p and m.value() in again)
                     for p in range(PARTITIONS)}
    print(f"records read again after failover: {len(again)} {per_partition}")
    assert all(n <= OFFSET_LAG_MAX for n in per_partition.values()), per_partition

    # ACL syncing (on by default) found no authorizer: DescribeAcls answered SECURITY_DISABLED.
    mm2.wait_for_log(r"No ACL authorizer is configured on the source Kafka cluster", 30)
    # MirrorMaker's own topics on the target: checkpoints and heartbeats.
    names = dst_admin.list_topics(timeout=10).topics
    assert "source.checkpoints.internal" in names and "heartbeats" in names, sorted(names)
    assert mm2.running
