"""AlterReplicaLogDirs against a broker with two log.dirs, through kafka-python's admin client
(3.0 speaks it): a partition holding records in several segments moves to the other log dir,
DescribeLogDirs shows it there, every record reads back, and more go in after the move and
after a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartitionReplica
from kafka.errors import LogDirNotFoundError, NoError

from . import clients as kc
from .clients import Msg

pytestmark = pytest.mark.timeout(180)

SEGMENT_BYTES = 1 << 20  # Kafka's smallest segment.bytes: the partition spans segments


def _where(admin: KafkaAdminClient, topic: str) -> dict[str, list[tuple[int, bool]]]:
    """log dir -> (partition, is_future_key) of the topic's replicas, from DescribeLogDirs."""
    [broker] = admin.describe_log_dirs({topic: [0]})
    return {d["log_dir"]: [(p["partition_index"], p["is_future_key"])
                           for t in d["topics"] if t["name"] == topic for p in t["partitions"]]
            for d in broker["log_dirs"]}


def _wait_for(check, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while (result := check()) is None:
        assert time.monotonic() < deadline, what
        time.sleep(0.1)  # poll interval, not synchronisation
    return result


def _messages(first: int, count: int) -> list[Msg]:
    return [Msg(b"k%d" % i, b"%06d" % i * 170) for i in range(first, first + count)]


def test_a_partition_moves_to_the_other_log_dir_and_serves_from_there(make_broker, tmp_path,
                                                                      unique_topic):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    broker = make_broker({"log.dirs": ",".join(map(str, dirs))})
    bs, topic = broker.bootstrap, unique_topic("move")
    kc.create_topic(bs, topic, 1, config={"segment.bytes": str(SEGMENT_BYTES)})
    written = _messages(0, 3000)  # ~3 MB: three segments
    kc.produce(bs, topic, written, partition=0)
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=30000)
    try:
        node = admin.describe_cluster()["brokers"][0]["broker_id"]
        [source] = [d for d, parts in _where(admin, topic).items() if parts == [(0, False)]]
        [target] = [str(d.absolute()) for d in dirs if str(d.absolute()) != source]
        assert len(list((Path(source) / f"{topic}-0").glob("*.log"))) >= 3

        replica = TopicPartitionReplica(topic, 0, node)
        assert admin.alter_replica_log_dirs({replica: str(tmp_path / "d3")}) == {
            replica: LogDirNotFoundError}
        assert admin.alter_replica_log_dirs({replica: target}) == {replica: NoError}

        def moved():
            where = _where(admin, topic)
            return where if where == {source: [], target: [(0, False)]} else None

        _wait_for(moved, "the partition never showed in the other log dir alone")
        assert kc.contents(kc.read_partition(bs, topic)) == kc.contents(written)
        more = _messages(3000, 100)
        kc.produce(bs, topic, more, partition=0)
        written += more
        assert kc.contents(kc.read_partition(bs, topic)) == kc.contents(written)
        _wait_for(lambda: None if (Path(source) / f"{topic}-0").exists() else True,
                  "the original directory was never removed")
        assert not [p for d in dirs for p in d.iterdir()
                    if p.name.endswith(("-future", "-delete", "-stray"))]
    finally:
        admin.close()

    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=30000)
    try:
        assert _where(admin, topic) == {source: [], target: [(0, False)]}
    finally:
        admin.close()
    assert kc.contents(kc.read_partition(bs, topic)) == kc.contents(written)
    kc.produce(bs, topic, _messages(3100, 10), partition=0)
    assert kc.latest(bs, topic, 0) == 3110
