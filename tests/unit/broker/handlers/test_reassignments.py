"""AlterPartitionReassignments and ListPartitionReassignments on a single node."""

from __future__ import annotations

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


def _alter(h, moves: dict[tuple[str, int], list[int] | None], version: int = 0):
    topics: dict[str, list] = {}
    for (topic, p), replicas in moves.items():
        topics.setdefault(topic, []).append({"partition_index": p, "replicas": replicas})
    r = h.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, {
        "timeout": 5000, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    assert r.error_code == 0
    return {(t.name, p.partition_index): p.error_code for t in r.responses for p in t.partitions}


def _duplicated(h, topic: str, p: int):
    r = h.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 5000, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "replicas": [1]},
                                       {"partition_index": p, "replicas": [1]}]}]})
    return [p.error_code for t in r.responses for p in t.partitions]


def _list(h, topics: dict[str, list[int]] | None = None):
    r = h.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 5000, "topics": None
                  if topics is None else [{"name": t, "partition_indexes": ps}
                                          for t, ps in topics.items()]})
    assert r.error_code == 0
    return r.topics


def test_reassigning_to_the_only_broker_completes_at_once(broker_harness) -> None:
    broker_harness.create_topic("t")
    assert _alter(broker_harness, {("t", 0): [1]}) == {("t", 0): 0}
    assert _list(broker_harness) == []
    assert broker_harness.broker.image.topics["t"].partitions[0].replicas == [1]


def test_a_broker_that_does_not_exist_is_invalid_replica_assignment(broker_harness) -> None:
    broker_harness.create_topic("t")
    assert _alter(broker_harness, {("t", 0): [2]}) == {("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    assert broker_harness.broker.image.topics["t"].partitions[0].replicas == [1]


def test_an_empty_or_duplicated_replica_list_is_invalid_replica_assignment(broker_harness) -> None:
    broker_harness.create_topic("t", partitions=2)
    assert _alter(broker_harness, {("t", 0): [], ("t", 1): [1, 1]}) == {
        ("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("t", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT}


def test_an_unknown_partition_is_unknown_topic_or_partition(broker_harness) -> None:
    broker_harness.create_topic("t")
    assert _alter(broker_harness, {("t", 4): [1], ("nope", 0): [1]}) == {
        ("t", 4): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_cancelling_when_nothing_moves_is_no_reassignment_in_progress(broker_harness) -> None:
    broker_harness.create_topic("t")
    assert _alter(broker_harness, {("t", 0): None}) == {("t", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}


def test_a_partition_twice_in_one_request_is_invalid_request(broker_harness) -> None:
    broker_harness.create_topic("t")
    assert set(_duplicated(broker_harness, "t", 0)) == {ErrorCode.INVALID_REQUEST}


def test_v1_echoes_allow_replication_factor_change(broker_harness) -> None:
    broker_harness.create_topic("t")
    r = broker_harness.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, {
        "timeout": 5000, "allow_replication_factor_change": False,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]})
    assert (r.error_code, r.allow_replication_factor_change) == (0, False)
    assert r.responses[0].partitions[0].error_code == 0


def test_listing_leaves_out_unknown_and_idle_partitions(broker_harness) -> None:
    broker_harness.create_topic("t")
    assert _list(broker_harness, {"t": [0, 5], "nope": [0]}) == []


def test_more_than_10000_partitions_fail_the_request_as_a_whole(broker_harness) -> None:
    # Kafka's controller writes at most 10,000 records per operation: POLICY_VIOLATION
    broker_harness.create_topic("r")
    r = broker_harness.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {
        "timeout": 5000, "topics": [{"name": "r", "partitions": [
            {"partition_index": p, "replicas": [1]} for p in range(10_001)]}]})
    assert r.error_code == ErrorCode.POLICY_VIOLATION
    assert "excessively large batch" in r.error_message
    assert {p.error_code for p in r.responses[0].partitions} == {ErrorCode.POLICY_VIOLATION}
    assert len(r.responses[0].partitions) == 10_001
