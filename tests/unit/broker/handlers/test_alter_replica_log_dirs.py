"""AlterReplicaLogDirs (34, v1-2) and the future replicas DescribeLogDirs shows meanwhile,
compared with what Kafka 4.4 answers (ReplicaManager.alterReplicaLogDirs)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import CLUSTER_NAME, AclBinding, AclOperation, AclPermission, PatternType
from strom.security.acl import ResourceType as Res
from strom.security.principal import KafkaPrincipal
from strom.storage.move import DirCopy

DEADLINE_S = 20.0
ACLS_ON = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin"}


def _second_dir(h, tmp_path: Path) -> Path:
    """Another log dir, added after the topics exist (new partitions would go to it)."""
    d = tmp_path / "second"
    d.mkdir()
    h.broker.logs.log_dirs.append(d)
    return d


def _alter(h, version: int, moves: list[tuple[str, str, list[int]]]):
    r = h.request(ApiKey.ALTER_REPLICA_LOG_DIRS, version, {"dirs": [
        {"path": path, "topics": [{"name": topic, "partitions": partitions}]}
        for path, topic, partitions in moves]})
    assert r.throttle_time == 0
    return [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in r.results]


def _where(h, topic: str) -> dict[Path, list[tuple[int, bool, int]]]:
    """log dir -> (partition, is_future_key, offset_lag) of the topic, from DescribeLogDirs."""
    r = h.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {Path(d.log_dir): [(p.partition_index, p.is_future_key, p.offset_lag)
                              for t in d.topics if t.name == topic for p in t.partitions]
            for d in r.results}


def _moves_done(h) -> None:
    h.loop.run_until_complete(asyncio.wait_for(h.broker.logs.moves_done(), DEADLINE_S))


@pytest.mark.parametrize("version", [1, 2])
def test_a_partition_moves_and_describe_log_dirs_shows_it_there(broker_harness, tmp_path,
                                                                version) -> None:
    h = broker_harness
    h.create_topic("t", 2)
    assert h.produce("t", 0, h.batch(b"a", b"b")).error_code == 0
    first, second = h.broker.logs.log_dirs[0], _second_dir(h, tmp_path)
    assert _alter(h, version, [(str(second.absolute()), "t", [0])]) == [("t", [(0, 0)])]
    _moves_done(h)
    assert _where(h, "t") == {first.absolute(): [(1, False, 0)],
                              second.absolute(): [(0, False, 0)]}
    moved = h.broker.partitions.get("t", 0)
    assert moved.dir == second / "t-0" and not (first / "t-0").exists()
    produced = h.produce("t", 0, h.batch(b"c"))
    assert (produced.error_code, produced.base_offset) == (0, 2)
    # asked again, it is there already
    assert _alter(h, version, [(str(second.absolute()), "t", [0])]) == [("t", [(0, 0)])]
    assert h.broker.logs.moves() == {}


def test_errors_per_partition_as_kafka_answers_them(broker_harness, tmp_path) -> None:
    h = broker_harness
    h.create_topic("t", 2)
    h.create_topic("u", 1)
    second = str(_second_dir(h, tmp_path).absolute())
    state = h.broker.image.topics["u"].partitions[0]
    state.replicas, state.isr, state.leader = [7], [7], 7
    assert h.broker.logs.set_aside("u", 0)  # as if reassigned to broker 7
    assert _alter(h, 2, [
        (str(tmp_path / "elsewhere"), "t", [0]),  # not one of log.dirs
        (second, "missing", [0]),
        (second, "t", [99]),
        (second, "u", [0]),  # known, but no replica here: Kafka keeps REPLICA_NOT_AVAILABLE
        (second, "__cluster_metadata", [0]),
    ]) == [
        ("t", [(0, ErrorCode.LOG_DIR_NOT_FOUND), (99, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("missing", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("u", [(0, ErrorCode.REPLICA_NOT_AVAILABLE)]),
        ("__cluster_metadata", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
    ]
    h.broker.logs._offline[Path(second)] = "test"  # as a failed write leaves it
    assert _alter(h, 2, [(second, "t", [1])]) == [("t", [(1, ErrorCode.KAFKA_STORAGE_ERROR)])]
    assert h.broker.logs.moves() == {}


def test_a_partition_named_under_two_dirs_goes_to_the_last(broker_harness, tmp_path) -> None:
    h = broker_harness
    h.create_topic("t", 1)
    first, second = h.broker.logs.log_dirs[0], _second_dir(h, tmp_path)
    assert _alter(h, 2, [(str(first.absolute()), "t", [0]),
                         (str(second.absolute()), "t", [0])]) == [("t", [(0, 0)])]
    _moves_done(h)
    assert h.broker.logs.dir_of("t", 0) == second


def test_the_copy_shows_as_a_future_replica_while_it_is_made(broker_harness, tmp_path,
                                                            monkeypatch) -> None:
    h = broker_harness
    h.create_topic("t", 1)
    h.produce("t", 0, h.batch(b"a", b"b"))
    first, second = h.broker.logs.log_dirs[0], _second_dir(h, tmp_path)
    held, release = threading.Event(), threading.Event()
    real = DirCopy.catch_up

    def first_round_then_wait(copy: DirCopy, generation: int) -> int:
        copied = real(copy, generation)
        held.set()
        assert release.wait(DEADLINE_S)
        return copied

    monkeypatch.setattr(DirCopy, "catch_up", first_round_then_wait)
    try:
        assert _alter(h, 2, [(str(second.absolute()), "t", [0])]) == [("t", [(0, 0)])]
        for _ in range(2000):
            if held.is_set():
                break
            h.run(0.01)
        assert held.is_set(), "the first round never ended"
        h.produce("t", 0, h.batch(b"c"))  # the copy lags behind now
        where = _where(h, "t")
        assert where[first.absolute()] == [(0, False, 0)]
        [(index, future, lag)] = where[second.absolute()]
        assert (index, future) == (0, True) and lag > 0
    finally:
        release.set()
    _moves_done(h)
    assert _where(h, "t") == {first.absolute(): [], second.absolute(): [(0, False, 0)]}


@pytest.mark.broker_config(**ACLS_ON)
def test_alter_on_the_cluster_is_needed(broker_harness, tmp_path) -> None:
    h = broker_harness
    h.conn.session.principal = KafkaPrincipal.user("admin")
    h.create_topic("t", 2)
    second = str(_second_dir(h, tmp_path).absolute())
    h.conn.session.principal = KafkaPrincipal.user("alice")
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert _alter(h, 2, [(second, "t", [0, 1]), (second, "missing", [0])]) == [
        ("t", [(0, denied), (1, denied)]), ("missing", [(0, denied)])]
    assert h.broker.logs.moves() == {}
    binding = AclBinding(Res.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:alice", "*",
                         AclOperation.ALTER, AclPermission.ALLOW)
    h.loop.run_until_complete(h.broker.controller.alter_acls([binding], []))
    assert _alter(h, 2, [(second, "t", [0])]) == [("t", [(0, 0)])]
    _moves_done(h)
    assert h.broker.logs.dir_of("t", 0) == Path(second)
