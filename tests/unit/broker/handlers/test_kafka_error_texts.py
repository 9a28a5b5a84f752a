"""Error messages as Kafka 4.4 sends them: Kafka's tools (kafka-topics, kafka-configs) print the
broker's text as it comes, so it carries no error name in front and uses Kafka's wording."""

from __future__ import annotations

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

TOPIC, SET = 2, 0
LEGAL = "ASCII alphanumerics, '.', '_' and '-'"


def _create(h, name: str):
    (t,) = h.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1}],
        "timeout": 5000, "validate_only": False}).topics
    return t.error_code, t.error_message


def test_create_topics_texts(broker_harness) -> None:
    h = broker_harness
    h.create_topic("orders")
    assert _create(h, "orders") == (ErrorCode.TOPIC_ALREADY_EXISTS,
                                    "Topic 'orders' already exists.")
    assert _create(h, "bad/name") == (
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        f"Topic name is invalid: 'bad/name' contains one or more characters other than {LEGAL}")
    assert _create(h, "..") == (ErrorCode.INVALID_TOPIC_EXCEPTION,
                                "Topic name is invalid: '..' is not allowed")
    long = "x" * 250
    assert _create(h, long) == (
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        f"Topic name is invalid: the length of '{long}' is longer than the max allowed length 249")


def test_create_partitions_texts(broker_harness) -> None:
    h = broker_harness
    h.create_topic("orders", 3)
    results = h.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "orders", "count": 2, "assignments": None}], "timeout": 5000,
        "validate_only": False}).results
    assert [(r.error_code, r.error_message) for r in results] == [(
        ErrorCode.INVALID_PARTITIONS,
        "The topic orders currently has 3 partition(s); 2 would not be an increase.")]
    results = h.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "orders", "count": 3, "assignments": None}], "timeout": 5000,
        "validate_only": True}).results
    assert [(r.error_code, r.error_message) for r in results] == [
        (ErrorCode.INVALID_PARTITIONS, "Topic already has 3 partition(s).")]


def test_config_errors_carry_no_error_name(broker_harness) -> None:
    h = broker_harness
    h.create_topic("orders")
    r = h.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": TOPIC, "resource_name": "nosuch",
        "configs": [{"name": "retention.ms", "config_operation": SET, "value": "1"}]}],
        "validate_only": False}).responses[0]
    assert (r.error_code, r.error_message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                               "Topic 'nosuch' does not exist.")
    r = h.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": TOPIC, "resource_name": "orders",
        "configs": [{"name": "no.such.config", "config_operation": SET, "value": "1"}]}],
        "validate_only": False}).responses[0]
    assert r.error_code == ErrorCode.INVALID_CONFIG
    assert r.error_message is not None and not r.error_message.startswith("INVALID_CONFIG")
    assert "no.such.config" in r.error_message


def test_a_bad_value_reads_as_kafkas_parse_error(broker_harness) -> None:
    h = broker_harness
    h.create_topic("orders")
    for key, value, why in (("retention.ms", "soon", "Not a number of type LONG"),
                            ("min.insync.replicas", "two", "Not a number of type INT"),
                            ("preallocate", "yes", "Expected value to be either true or false")):
        r = h.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": TOPIC, "resource_name": "orders",
            "configs": [{"name": key, "config_operation": SET, "value": value}]}],
            "validate_only": False}).responses[0]
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}: {why}")
