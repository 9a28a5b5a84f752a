"""CreateTopics, DeleteTopics and CreatePartitions."""

from __future__ import annotations

import uuid

import pytest
from tests.unit.broker.handlers.loop_probe import run_beside_a_ticker

from strom.broker.handlers import topics as topics_handlers
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


def _create(h, *topics: dict, validate_only: bool = False, version: int = 7):
    return h.request(ApiKey.CREATE_TOPICS, version, {
        "topics": [{"num_partitions": 1, "replication_factor": 1, **t} for t in topics],
        "timeout": 5000, "validate_only": validate_only}).topics


def _delete_names(h, *names: str, version: int = 5):
    return h.request(ApiKey.DELETE_TOPICS, version, {"topic_names": list(names),
                                                      "timeout": 5000}).responses


def _grow(h, *topics: dict, validate_only: bool = False):
    return h.request(ApiKey.CREATE_PARTITIONS, 3, {
        "topics": topics, "timeout": 5000, "validate_only": validate_only}).results


# -- CreateTopics ------------------------------------------------------------------------------


def test_create_reports_the_topic_and_its_configs(broker_harness) -> None:
    (t,) = _create(broker_harness, {"name": "orders", "num_partitions": 3,
                                    "configs": [{"name": "retention.ms", "value": "1000"}]})
    assert (t.error_code, t.num_partitions, t.replication_factor) == (0, 3, 1)
    assert t.topic_id == broker_harness.topic_id("orders")
    configs = {c.name: c for c in t.configs}
    assert configs["retention.ms"].value == "1000"
    assert configs["retention.ms"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"].config_source == 5  # DEFAULT_CONFIG


def test_defaults_apply_to_minus_one(broker_harness) -> None:
    (t,) = _create(broker_harness, {"name": "d", "num_partitions": -1, "replication_factor": -1})
    assert (t.error_code, t.num_partitions, t.replication_factor) == (0, 1, 1)


def test_an_existing_topic_is_topic_already_exists(broker_harness) -> None:
    broker_harness.create_topic("dup")
    (t,) = _create(broker_harness, {"name": "dup"})
    assert t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_a_topic_named_twice_in_one_request_is_invalid_request(broker_harness) -> None:
    # Kafka (ControllerApis.createTopics): INVALID_REQUEST "Duplicate topic name.", and the
    # other topics of the request are still created. (Kafka answers once per duplicated name,
    # Strom once per entry.)
    results = _create(broker_harness, {"name": "twice"}, {"name": "twice"}, {"name": "once"})
    codes = [(t.name, t.error_code) for t in results]
    assert codes == [("twice", ErrorCode.INVALID_REQUEST), ("twice", ErrorCode.INVALID_REQUEST),
                     ("once", ErrorCode.NONE)]
    assert "twice" not in broker_harness.broker.image.topics


@pytest.mark.parametrize(("name", "code"), [
    ("", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("..", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("has space", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("x" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION),
])
def test_an_illegal_name_is_invalid_topic(broker_harness, name: str, code: int) -> None:
    (t,) = _create(broker_harness, {"name": name})
    assert t.error_code == code


def test_a_name_colliding_with_another_by_dot_and_underscore_is_invalid_topic(
        broker_harness) -> None:
    broker_harness.create_topic("a.b")
    (t,) = _create(broker_harness, {"name": "a_b"})
    assert t.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize(("partitions", "rf", "code"), [
    (0, 1, ErrorCode.INVALID_PARTITIONS),
    (-2, 1, ErrorCode.INVALID_PARTITIONS),
    (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
    (1, 2, ErrorCode.INVALID_REPLICATION_FACTOR),  # more replicas than brokers
])
def test_bad_partition_counts_and_replication_factors(broker_harness, partitions: int, rf: int,
                                                      code: int) -> None:
    (t,) = _create(broker_harness, {"name": "bad", "num_partitions": partitions,
                                    "replication_factor": rf})
    assert t.error_code == code
    assert "bad" not in broker_harness.broker.image.topics


@pytest.mark.parametrize("config", [
    {"name": "retention.ms", "value": "soon"},
    {"name": "cleanup.policy", "value": "shred"},
    {"name": "no.such.config", "value": "1"},  # Kafka: "Unknown topic config name"
])
def test_an_invalid_config_is_invalid_config(broker_harness, config: dict) -> None:
    (t,) = _create(broker_harness, {"name": "c", "configs": [config]})
    assert t.error_code == ErrorCode.INVALID_CONFIG
    assert "c" not in broker_harness.broker.image.topics


def test_assignments_with_a_partition_count_are_invalid_request(broker_harness) -> None:
    # Kafka: "Both numPartitions or replicationFactor and replicasAssignments were set."
    (t,) = _create(broker_harness, {"name": "a", "num_partitions": 2, "replication_factor": -1,
                                    "assignments": [{"partition_index": 0, "broker_ids": [1]}]})
    assert t.error_code == ErrorCode.INVALID_REQUEST


def test_assignment_to_an_unknown_broker_is_invalid_replica_assignment(broker_harness) -> None:
    (t,) = _create(broker_harness, {"name": "a", "num_partitions": -1, "replication_factor": -1,
                                    "assignments": [{"partition_index": 0, "broker_ids": [9]}]})
    assert t.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_explicit_assignments_create_the_topic(broker_harness) -> None:
    (t,) = _create(broker_harness, {"name": "a", "num_partitions": -1, "replication_factor": -1,
                                    "assignments": [{"partition_index": 0, "broker_ids": [1]},
                                                    {"partition_index": 1, "broker_ids": [1]}]})
    assert (t.error_code, t.num_partitions) == (0, 2)


def test_validate_only_creates_nothing(broker_harness) -> None:
    (t,) = _create(broker_harness, {"name": "v", "num_partitions": 4}, validate_only=True)
    assert (t.error_code, t.num_partitions) == (0, 4)
    assert "v" not in broker_harness.broker.image.topics


def test_validate_only_still_reports_errors(broker_harness) -> None:
    broker_harness.create_topic("v")
    (t,) = _create(broker_harness, {"name": "v"}, validate_only=True)
    assert t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


# -- DeleteTopics ------------------------------------------------------------------------------


def test_delete_by_name(broker_harness) -> None:
    broker_harness.create_topic("gone")
    (r,) = _delete_names(broker_harness, "gone")
    assert (r.name, r.error_code) == ("gone", 0)
    assert "gone" not in broker_harness.broker.image.topics
    assert broker_harness.broker.partitions.get("gone", 0) is None  # the log went with it


def test_delete_by_name_at_v6_reports_the_topic_id(broker_harness) -> None:
    broker_harness.create_topic("gone")
    topic_id = broker_harness.topic_id("gone")
    (r,) = broker_harness.request(ApiKey.DELETE_TOPICS, 6, {
        "topics": [{"name": "gone"}], "timeout": 5000}).responses
    assert (r.name, r.error_code, r.topic_id) == ("gone", 0, topic_id)


def test_delete_by_topic_id(broker_harness) -> None:
    broker_harness.create_topic("gone")
    topic_id = broker_harness.topic_id("gone")
    (r,) = broker_harness.request(ApiKey.DELETE_TOPICS, 6, {
        "topics": [{"name": None, "topic_id": topic_id}], "timeout": 5000}).responses
    assert (r.name, r.error_code) == ("gone", 0)
    assert "gone" not in broker_harness.broker.image.topics


def test_delete_of_an_unknown_name_is_unknown_topic(broker_harness) -> None:
    (r,) = _delete_names(broker_harness, "nope")
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_of_an_unknown_id_is_unknown_topic_id(broker_harness) -> None:
    (r,) = broker_harness.request(ApiKey.DELETE_TOPICS, 6, {
        "topics": [{"name": None, "topic_id": uuid.uuid4()}], "timeout": 5000}).responses
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_ID


@pytest.mark.broker_config(**{"delete.topic.enable": "false"})
def test_delete_when_disabled_is_topic_deletion_disabled(broker_harness) -> None:
    broker_harness.create_topic("kept")
    (r,) = _delete_names(broker_harness, "kept")
    assert r.error_code == ErrorCode.TOPIC_DELETION_DISABLED
    assert "kept" in broker_harness.broker.image.topics


def test_a_topic_named_twice_in_one_delete_is_invalid_request_and_kept(broker_harness) -> None:
    # Kafka (ControllerApis.deleteTopics): every entry of a name given twice gets INVALID_REQUEST
    # "Duplicate topic name." and the topic is not deleted
    broker_harness.create_topic("twice")
    responses = _delete_names(broker_harness, "twice", "twice")
    assert {r.error_code for r in responses} == {ErrorCode.INVALID_REQUEST}
    assert "twice" in broker_harness.broker.image.topics


def test_a_name_given_twice_is_answered_once_and_other_topics_are_deleted(broker_harness) -> None:
    h = broker_harness
    h.create_topic("twice")
    h.create_topic("once")
    responses = _delete_names(h, "twice", "once", "twice")
    assert sorted((r.name, r.error_code) for r in responses) == [
        ("once", 0), ("twice", ErrorCode.INVALID_REQUEST)]
    assert "twice" in h.broker.image.topics and "once" not in h.broker.image.topics


def test_a_topic_id_given_twice_is_invalid_request_and_kept(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    topic_id = h.topic_id("t")
    (r,) = h.request(ApiKey.DELETE_TOPICS, 6, {"topics": [
        {"name": None, "topic_id": topic_id}, {"name": None, "topic_id": topic_id}],
        "timeout": 5000}).responses
    assert (r.error_code, r.error_message, r.topic_id) == (
        ErrorCode.INVALID_REQUEST, "Duplicate topic id.", topic_id)
    assert "t" in h.broker.image.topics


def test_no_more_than_the_controller_cap_is_deleted_per_request(broker_harness, monkeypatch) -> None:
    # Kafka's controller (ReplicationControlManager.deleteTopics) bounds a request's records at
    # 10,000: the topics past it fail with UNKNOWN_SERVER_ERROR and stay; cap lowered to 2 here
    monkeypatch.setattr(topics_handlers, "MAX_RECORDS_PER_USER_OP", 2)
    h = broker_harness
    for name in ("a", "b", "c"):
        h.create_topic(name)
    responses = _delete_names(h, "a", "b", "c")
    assert [(r.name, r.error_code) for r in responses] == [
        ("a", 0), ("b", 0), ("c", ErrorCode.UNKNOWN_SERVER_ERROR)]
    assert "c" in h.broker.image.topics and "a" not in h.broker.image.topics


def test_deleting_many_topics_shares_the_loop(broker_harness) -> None:
    h = broker_harness
    names = [f"d{i}" for i in range(300)]
    for name in names:
        h.create_topic(name)
    shared = run_beside_a_ticker(h, ApiKey.DELETE_TOPICS, 5, {"topic_names": names,
                                                              "timeout": 5000})
    assert {r.error_code for r in shared.response.responses} == {0}
    assert not set(names) & set(h.broker.image.topics)
    assert shared.sliced, shared


def test_a_deleted_topic_can_be_created_again(broker_harness) -> None:
    broker_harness.create_topic("again")
    old = broker_harness.topic_id("again")
    _delete_names(broker_harness, "again")
    (t,) = _create(broker_harness, {"name": "again"})
    assert t.error_code == 0
    assert t.topic_id != old


# -- CreatePartitions --------------------------------------------------------------------------


def test_grow_a_topic(broker_harness) -> None:
    broker_harness.create_topic("g")
    (r,) = _grow(broker_harness, {"name": "g", "count": 3, "assignments": None})
    assert r.error_code == 0
    assert sorted(broker_harness.broker.image.topics["g"].partitions) == [0, 1, 2]
    assert broker_harness.broker.partitions.get("g", 2) is not None  # the new log exists


def test_grow_with_validate_only_changes_nothing(broker_harness) -> None:
    broker_harness.create_topic("g")
    (r,) = _grow(broker_harness, {"name": "g", "count": 3, "assignments": None},
                 validate_only=True)
    assert r.error_code == 0
    assert len(broker_harness.broker.image.topics["g"].partitions) == 1


def test_grow_an_unknown_topic_is_unknown_topic(broker_harness) -> None:
    (r,) = _grow(broker_harness, {"name": "nope", "count": 3, "assignments": None})
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("count", [1, 2])  # same count, fewer
def test_not_growing_is_invalid_partitions(broker_harness, count: int) -> None:
    broker_harness.create_topic("g", partitions=2)
    (r,) = _grow(broker_harness, {"name": "g", "count": count, "assignments": None})
    assert r.error_code == ErrorCode.INVALID_PARTITIONS


def test_assignments_not_matching_the_new_partitions_are_invalid_replica_assignment(
        broker_harness) -> None:
    broker_harness.create_topic("g")
    (r,) = _grow(broker_harness, {"name": "g", "count": 3, "assignments": [{"broker_ids": [1]}]})
    assert r.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_a_topic_named_twice_in_one_grow_is_invalid_request(broker_harness) -> None:
    # Kafka: INVALID_REQUEST "Duplicate topic name.", the topic is left as it is
    broker_harness.create_topic("g")
    results = _grow(broker_harness, {"name": "g", "count": 2, "assignments": None},
                    {"name": "g", "count": 3, "assignments": None})
    assert {r.error_code for r in results} == {ErrorCode.INVALID_REQUEST}
    assert len(broker_harness.broker.image.topics["g"].partitions) == 1


# -- the cap on records per operation (Kafka's MAX_RECORDS_PER_USER_OP) ------------------------


@pytest.mark.parametrize("validate_only", [False, True])
def test_a_million_partitions_is_refused_as_a_whole_before_anything_is_built(
        broker_harness, validate_only: bool) -> None:
    # Kafka (ReplicationControlManager.validateTotalNumberOfPartitions): more than 10,000
    # partitions in one CreateTopics fails every topic of the request with POLICY_VIOLATION.
    results = _create(broker_harness, {"name": "huge", "num_partitions": 1_000_000},
                      {"name": "small"}, validate_only=validate_only)
    assert [(t.name, t.error_code) for t in results] == [
        ("huge", ErrorCode.POLICY_VIOLATION), ("small", ErrorCode.POLICY_VIOLATION)]
    assert "Excessively large number of partitions per request." in results[0].error_message
    assert "small" not in broker_harness.broker.image.topics


def test_the_cap_counts_every_topic_of_the_request(broker_harness) -> None:
    results = _create(broker_harness, {"name": "a", "num_partitions": 5_000},
                      {"name": "b", "num_partitions": 5_001}, validate_only=True)
    assert {t.error_code for t in results} == {ErrorCode.POLICY_VIOLATION}
    results = _create(broker_harness, {"name": "a", "num_partitions": 5_000},
                      {"name": "b", "num_partitions": 5_000}, validate_only=True)
    assert {t.error_code for t in results} == {ErrorCode.NONE}


@pytest.mark.parametrize("validate_only", [False, True])
def test_growing_by_a_million_partitions_is_refused(broker_harness, validate_only: bool) -> None:
    broker_harness.create_topic("grow")
    (r,) = _grow(broker_harness, {"name": "grow", "count": 1_000_001, "assignments": None},
                 validate_only=validate_only)
    assert r.error_code == ErrorCode.POLICY_VIOLATION
    assert "Unable to perform excessively large batch operation." in r.error_message
    assert len(broker_harness.broker.image.topics["grow"].partitions) == 1
