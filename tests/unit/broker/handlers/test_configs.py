"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs."""

from __future__ import annotations

import logging

import pytest
from tests.unit.broker.handlers.loop_probe import run_beside_a_ticker

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5


def _describe(h, resource_type: int, name: str, keys: list[str] | None = None,
              synonyms: bool = False):
    r = h.request(ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": resource_type, "resource_name": name,
                       "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": False})
    return r.results[0]


def _topic_value(h, topic: str, name: str) -> tuple[str | None, int]:
    (entry,) = _describe(h, TOPIC, topic, [name]).configs
    return entry.value, entry.config_source


def _alter(h, resource_type: int, name: str, configs: dict[str, str | None],
           validate_only: bool = False):
    r = h.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [{
        "resource_type": resource_type, "resource_name": name,
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "validate_only": validate_only})
    return r.responses[0]


def _incremental(h, resource_type: int, name: str, ops: list[tuple[str, int, str | None]],
                 validate_only: bool = False):
    r = h.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": resource_type, "resource_name": name,
        "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}],
        "validate_only": validate_only})
    return r.responses[0]


# -- DescribeConfigs ---------------------------------------------------------------------------


def test_describe_a_topic_with_an_override(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", configs={"retention.ms": "1234"})
    result = _describe(h, TOPIC, "t")
    assert result.error_code == 0
    configs = {c.name: c for c in result.configs}
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == (
        "1234", DYNAMIC_TOPIC_CONFIG)
    assert configs["cleanup.policy"].config_source == DEFAULT_CONFIG


def test_describe_only_the_keys_asked_for(broker_harness) -> None:
    broker_harness.create_topic("t")
    result = _describe(broker_harness, TOPIC, "t", ["segment.bytes", "retention.ms"])
    assert sorted(c.name for c in result.configs) == ["retention.ms", "segment.bytes"]


def test_synonyms_name_the_broker_config_behind_a_topic_default(broker_harness) -> None:
    broker_harness.create_topic("t")
    (entry,) = _describe(broker_harness, TOPIC, "t", ["retention.ms"], synonyms=True).configs
    assert [(s.name, s.source) for s in entry.synonyms][-1] == ("log.retention.hours",
                                                                 DEFAULT_CONFIG)


def test_describe_an_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    result = _describe(broker_harness, TOPIC, "nope")
    assert (result.error_code, result.configs) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


@pytest.mark.broker_config(**{"log.retention.hours": "5"})
def test_describe_this_broker(broker_harness) -> None:
    result = _describe(broker_harness, BROKER, "1", ["log.retention.hours", "broker.id"])
    configs = {c.name: c for c in result.configs}
    assert result.error_code == 0
    assert (configs["log.retention.hours"].value,
            configs["log.retention.hours"].config_source) == ("5", STATIC_BROKER_CONFIG)
    assert configs["broker.id"].read_only


def test_describe_another_broker_is_invalid_request(broker_harness) -> None:
    # Kafka: "Unexpected broker id, expected 1 or empty string, but received 7"
    assert _describe(broker_harness, BROKER, "7").error_code == ErrorCode.INVALID_REQUEST


def test_describe_an_unknown_resource_type_is_invalid_request(broker_harness) -> None:
    assert _describe(broker_harness, 99, "x").error_code == ErrorCode.INVALID_REQUEST


def test_describe_broker_loggers_is_empty(broker_harness) -> None:
    result = _describe(broker_harness, BROKER_LOGGER, "1")
    assert (result.error_code, result.configs) == (0, [])


def test_every_version_round_trips(broker_harness) -> None:
    broker_harness.create_topic("t")
    for version in (1, 2, 3, 4):
        r = broker_harness.request(ApiKey.DESCRIBE_CONFIGS, version, {"resources": [
            {"resource_type": TOPIC, "resource_name": "t", "configuration_keys": None}]})
        assert r.results[0].error_code == 0
        assert len(r.results[0].configs) > 10


# -- AlterConfigs ------------------------------------------------------------------------------


def test_alter_replaces_the_topics_overrides(broker_harness) -> None:
    # AlterConfigs is not incremental: what the request leaves out goes back to its default
    h = broker_harness
    h.create_topic("t", configs={"retention.ms": "1000"})
    assert _alter(h, TOPIC, "t", {"segment.ms": "60000"}).error_code == 0
    assert _topic_value(h, "t", "segment.ms") == ("60000", DYNAMIC_TOPIC_CONFIG)
    assert _topic_value(h, "t", "retention.ms")[1] == DEFAULT_CONFIG


def test_alter_reaches_the_partition_log(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    _alter(h, TOPIC, "t", {"max.message.bytes": "100"})
    assert h.produce("t", 0, h.batch(b"x" * 500)).error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_alter_with_validate_only_changes_nothing(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    assert _alter(h, TOPIC, "t", {"retention.ms": "5"}, validate_only=True).error_code == 0
    assert _topic_value(h, "t", "retention.ms")[1] == DEFAULT_CONFIG


@pytest.mark.parametrize("configs", [{"retention.ms": "soon"}, {"no.such.config": "1"}])
def test_alter_with_an_invalid_config_is_invalid_config(broker_harness, configs: dict) -> None:
    h = broker_harness
    h.create_topic("t", configs={"retention.ms": "1000"})
    assert _alter(h, TOPIC, "t", configs).error_code == ErrorCode.INVALID_CONFIG
    assert _topic_value(h, "t", "retention.ms") == ("1000", DYNAMIC_TOPIC_CONFIG)


def test_alter_an_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    r = _alter(broker_harness, TOPIC, "nope", {"retention.ms": "5"})
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_a_static_broker_config_is_invalid_request(broker_harness) -> None:
    # Kafka (DynamicBrokerConfig.validateConfigs): "Cannot update these configs dynamically",
    # answered with INVALID_REQUEST
    assert _alter(broker_harness, BROKER, "1", {"log.dirs": "/x"}).error_code == \
        ErrorCode.INVALID_REQUEST


def test_alter_a_dynamic_broker_config(broker_harness) -> None:
    h = broker_harness
    assert _alter(h, BROKER, "1", {"log.retention.ms": "5000"}).error_code == 0
    (entry,) = _describe(h, BROKER, "1", ["log.retention.ms"]).configs
    assert (entry.value, entry.config_source) == ("5000", 2)  # DYNAMIC_BROKER_CONFIG


def test_a_broker_config_strom_does_not_act_on_is_refused_by_name(broker_harness) -> None:
    # Kafka applies num.io.threads dynamically; Strom has no such threads, so a change is
    # refused by name instead of being stored and ignored
    r = _alter(broker_harness, BROKER, "1", {"num.io.threads": "16"})
    assert r.error_code == ErrorCode.INVALID_CONFIG
    assert "num.io.threads has no effect in Strom" in r.error_message


def test_a_topic_config_strom_does_not_act_on_is_accepted_with_a_warning(
        broker_harness, caplog) -> None:
    broker_harness.create_topic("pre")
    with caplog.at_level(logging.WARNING, logger="strom.config.topic"):
        assert _alter(broker_harness, TOPIC, "pre", {"preallocate": "true"}).error_code == 0
    assert any("preallocate=true is accepted but has no effect" in r.getMessage()
               for r in caplog.records)


def test_alter_another_broker_is_invalid_request(broker_harness) -> None:
    r = _alter(broker_harness, BROKER, "7", {"log.retention.ms": "5000"})
    assert r.error_code == ErrorCode.INVALID_REQUEST


def test_alter_an_unknown_resource_type_is_invalid_request(broker_harness) -> None:
    assert _alter(broker_harness, 99, "x", {"a": "b"}).error_code == ErrorCode.INVALID_REQUEST


# -- IncrementalAlterConfigs -------------------------------------------------------------------


def test_set_and_delete(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", configs={"retention.ms": "1000"})
    r = _incremental(h, TOPIC, "t", [("segment.ms", SET, "60000"), ("retention.ms", DELETE, None)])
    assert r.error_code == 0
    assert _topic_value(h, "t", "segment.ms") == ("60000", DYNAMIC_TOPIC_CONFIG)
    assert _topic_value(h, "t", "retention.ms")[1] == DEFAULT_CONFIG


def test_append_and_subtract_on_a_list(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    assert _incremental(h, TOPIC, "t", [("cleanup.policy", APPEND, "compact")]).error_code == 0
    assert _topic_value(h, "t", "cleanup.policy")[0] == "delete,compact"
    assert _incremental(h, TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete")]).error_code == 0
    assert _topic_value(h, "t", "cleanup.policy")[0] == "compact"


def test_append_to_a_non_list_is_invalid_config(broker_harness) -> None:
    # Kafka: "Config value append is not allowed for config key: retention.ms"
    broker_harness.create_topic("t")
    r = _incremental(broker_harness, TOPIC, "t", [("retention.ms", APPEND, "5")])
    assert r.error_code == ErrorCode.INVALID_CONFIG


def test_a_key_twice_is_invalid_request(broker_harness) -> None:
    # Kafka: "Error due to duplicate config keys"
    broker_harness.create_topic("t")
    r = _incremental(broker_harness, TOPIC, "t", [("retention.ms", SET, "5"),
                                                  ("retention.ms", SET, "6")])
    assert r.error_code == ErrorCode.INVALID_REQUEST
    assert _topic_value(broker_harness, "t", "retention.ms")[1] == DEFAULT_CONFIG


def test_set_to_null_is_invalid_request(broker_harness) -> None:
    # Kafka: "Null value not supported for : retention.ms"
    broker_harness.create_topic("t")
    r = _incremental(broker_harness, TOPIC, "t", [("retention.ms", SET, None)])
    assert r.error_code == ErrorCode.INVALID_REQUEST


def test_incremental_with_a_bad_value_is_invalid_config(broker_harness) -> None:
    broker_harness.create_topic("t")
    r = _incremental(broker_harness, TOPIC, "t", [("min.insync.replicas", SET, "zero")])
    assert r.error_code == ErrorCode.INVALID_CONFIG


def test_incremental_on_an_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    r = _incremental(broker_harness, TOPIC, "nope", [("retention.ms", SET, "5")])
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_incremental_with_validate_only_changes_nothing(broker_harness) -> None:
    broker_harness.create_topic("t")
    r = _incremental(broker_harness, TOPIC, "t", [("retention.ms", SET, "5")], validate_only=True)
    assert r.error_code == 0
    assert _topic_value(broker_harness, "t", "retention.ms")[1] == DEFAULT_CONFIG


def test_incremental_on_the_default_broker_resource(broker_harness) -> None:
    h = broker_harness
    assert _incremental(h, BROKER, "", [("log.retention.ms", SET, "7000")]).error_code == 0
    (entry,) = _describe(h, BROKER, "", ["log.retention.ms"]).configs
    assert (entry.value, entry.config_source) == ("7000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG


# -- requests with many resources: Kafka's record cap, a loop shared -------------------------


@pytest.mark.parametrize("api_key, version", [(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1),
                                              (ApiKey.ALTER_CONFIGS, 2)])
def test_more_than_10000_config_entries_fail_the_whole_request(broker_harness, api_key,
                                                               version) -> None:
    # Kafka's controller writes at most 10,000 config records per request
    # (MAX_RECORDS_PER_USER_OP) and fails all of it beyond: POLICY_VIOLATION, nothing changed
    h = broker_harness
    h.create_topic("t")
    h.create_topic("u")
    op = {"config_operation": SET} if api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS else {}
    r = h.request(api_key, version, {"resources": [
        {"resource_type": TOPIC, "resource_name": "t",
         "configs": [{"name": "retention.ms", "value": "1234", **op}]},
        {"resource_type": TOPIC, "resource_name": "u",
         "configs": [{"name": f"x{i}", "value": "1", **op} for i in range(10_000)]}],
        "validate_only": False})
    assert [x.error_code for x in r.responses] == [ErrorCode.POLICY_VIOLATION] * 2
    assert _topic_value(h, "t", "retention.ms")[1] == DEFAULT_CONFIG


def test_altering_many_resources_shares_the_loop(broker_harness) -> None:
    h = broker_harness
    names = [f"c{i}" for i in range(100)]
    for name in names:
        h.create_topic(name)
    shared = run_beside_a_ticker(h, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": TOPIC, "resource_name": names[i % 100], "configs": [
            {"name": "retention.ms", "config_operation": SET, "value": str(1000 + i)}]}
        for i in range(1000)], "validate_only": False})
    assert {x.error_code for x in shared.response.responses} == {0}
    assert shared.sliced, shared


def test_describing_many_resources_shares_the_loop(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    shared = run_beside_a_ticker(h, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": TOPIC, "resource_name": "t", "configuration_keys": None}] * 400,
        "include_synonyms": True, "include_documentation": False})
    assert len(shared.response.results) == 400
    # the router encodes the 1.4 MB answer in one step after the handler, and that step may
    # be most of the time (it was 40-60% of it): what is sliced, and checked, is the describing
    assert shared.turns >= 3, shared
