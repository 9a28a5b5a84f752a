"""DescribeProducers and DescribeLogDirs, compared with what Kafka 4.4 answers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


def _init_pid(h, transactional_id=None) -> tuple[int, int]:
    r = h.request(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": transactional_id, "transaction_timeout": 60000,
        "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def _producers(h, topics):
    r = h.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": name, "partition_indexes": indexes} for name, indexes in topics]})
    return [(t.name, [(p.partition_index, p.error_code, p.error_message,
                       [_state(s) for s in p.active_producers]) for p in t.partitions])
            for t in r.topics]


def _state(s) -> tuple[int, ...]:
    return (s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
            s.coordinator_epoch, s.current_txn_start_offset)


# -- DescribeProducers ----------------------------------------------------------------------


def test_an_idempotent_producer_shows_its_last_sequence_and_timestamp(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", 2)
    pid, epoch = _init_pid(h)
    for seq in (0, 3):
        batch = h.batch(b"a", b"b", b"c", producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, timestamp=1_700_000_000_000 + seq)
        assert h.produce("t", 0, batch).error_code == 0
    assert _producers(h, [("t", [0, 1])]) == [("t", [
        (0, 0, None, [(pid, epoch, 5, 1_700_000_000_005, -1, -1)]),
        (1, 0, None, [])])]


def test_an_open_transaction_shows_its_first_offset_and_the_marker_its_coordinator_epoch(
        broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", 1)
    h.produce("t", 0, h.batch(b"x"))  # offset 0: the transaction starts at 1
    tid = "tx"
    assert h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]}
                     ).coordinators[0].error_code == 0
    pid, epoch = _init_pid(h, tid)
    added = h.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    batch = h.batch(b"t1", b"t2", producer_id=pid, producer_epoch=epoch, base_sequence=0,
                    transactional=True, timestamp=1_700_000_000_100)
    assert h.produce("t", 0, batch, transactional_id=tid).error_code == 0
    [(_, [(_, code, _, [state])])] = _producers(h, [("t", [0])])
    assert (code, state) == (0, (pid, epoch, 1, 1_700_000_000_101, -1, 1))
    ended = h.request(ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": pid,
                                           "producer_epoch": epoch, "committed": True})
    assert ended.error_code == 0

    def closed():
        [(_, [(_, _, _, [s])])] = _producers(h, [("t", [0])])
        return s[5] == -1 and s[4] >= 0

    for _ in range(200):  # the marker is written by the coordinator in the background
        if closed():
            break
        h.run(0.01)
    assert closed()


def test_errors_per_topic_and_partition_as_kafka_answers_them(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", 1)
    assert _producers(h, [("t", [0, 99, 0]), ("missing", [0]), ("bad/name", [0]), ("", [1]),
                          ("t", [0])]) == [
        ("t", [(0, 0, None, []), (99, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, []),
               (0, 0, None, [])]),
        ("missing", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                      "This server does not host this topic-partition.", [])]),
        ("bad/name", [(0, ErrorCode.INVALID_TOPIC_EXCEPTION, _any_message(), [])]),
        ("", [(1, ErrorCode.INVALID_TOPIC_EXCEPTION, _any_message(), [])]),
        ("t", [(0, 0, None, [])])]


def test_a_partition_this_broker_holds_no_replica_of_is_not_leader_or_follower(
        broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", 1)
    state = h.broker.image.topics["t"].partitions[0]
    state.replicas, state.isr, state.leader = [7], [7], 7
    h.broker.partitions._local.pop(("t", 0))  # as if reassigned to broker 7
    assert _producers(h, [("t", [0])]) == [
        ("t", [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER, None, [])])]


def test_a_partition_whose_log_dir_failed_is_kafka_storage_error(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", 1)
    h.broker.partitions.get("t", 0).take_offline("log dir /x is offline: test")
    assert _producers(h, [("t", [0])]) == [
        ("t", [(0, ErrorCode.KAFKA_STORAGE_ERROR, None, [])])]


class _any_message(str):
    """Equal to any non-empty message (Strom's wording of invalid names differs from Kafka's)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    __hash__ = str.__hash__


# -- DescribeLogDirs --------------------------------------------------------------------------


def _log_dirs(h, version, topics):
    return h.request(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": topics})


def _contents(result):
    return [(t.name, [(p.partition_index, p.partition_size > 0, p.offset_lag, p.is_future_key)
                      for p in t.partitions]) for t in result.topics]


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_null_topics_describe_every_partition_of_the_log_dir(broker_harness, version) -> None:
    h = broker_harness
    h.create_topic("b", 2)
    h.create_topic("a", 1)
    h.produce("a", 0, h.batch(b"x", b"y"))
    r = _log_dirs(h, version, None)
    [result] = r.results
    assert result.error_code == 0
    assert Path(result.log_dir) == h.broker.logs.log_dirs[0].absolute()
    assert _contents(result) == [("a", [(0, True, 0, False)]),
                                 ("b", [(0, False, 0, False), (1, False, 0, False)])]
    size = h.broker.partitions.get("a", 0).size_bytes()
    assert result.topics[0].partitions[0].partition_size == size
    if version >= 3:
        assert r.error_code == 0
    if version >= 4:
        fs = os.statvfs(result.log_dir)
        assert result.total_bytes == fs.f_blocks * fs.f_frsize
        assert 0 <= result.usable_bytes <= result.total_bytes
    if version >= 5:
        assert result.is_cordoned is False


def test_named_partitions_only_and_unknown_ones_left_out(broker_harness) -> None:
    h = broker_harness
    h.create_topic("a", 3)
    h.create_topic("b", 1)
    r = _log_dirs(h, 4, [{"topic": "a", "partitions": [0, 2, 0, 99]},
                         {"topic": "missing", "partitions": [0]},
                         {"topic": "b", "partitions": []}])
    assert _contents(r.results[0]) == [("a", [(0, False, 0, False), (2, False, 0, False)])]
    assert _contents(_log_dirs(h, 4, []).results[0]) == []


def test_internal_topics_are_included_and_the_metadata_log_is_not(broker_harness) -> None:
    h = broker_harness
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    names = {t.name for t in _log_dirs(h, 4, None).results[0].topics}
    assert "__consumer_offsets" in names
    assert "__cluster_metadata" not in names


def test_every_configured_log_dir_is_listed(broker_harness, tmp_path) -> None:
    h = broker_harness
    h.broker.logs.log_dirs.append(tmp_path)  # a second, empty log dir
    results = _log_dirs(h, 4, None).results
    assert [Path(r.log_dir) for r in results] == [h.broker.logs.log_dirs[0].absolute(),
                                                 tmp_path.absolute()]
    assert results[1].topics == [] and results[1].error_code == 0


def test_an_offline_log_dir_is_kafka_storage_error_without_partitions(broker_harness,
                                                                       tmp_path) -> None:
    h = broker_harness
    h.create_topic("a", 1)
    h.broker.logs._offline[h.broker.logs.log_dirs[0]] = "test"  # as a failed write leaves it
    [result] = _log_dirs(h, 4, None).results
    assert (result.error_code, result.topics, result.total_bytes, result.usable_bytes) == (
        ErrorCode.KAFKA_STORAGE_ERROR, [], -1, -1)
