"""log.cleaner.threads is a dynamic broker config, checked as Kafka 4.4 checks it.

The expected answers were taken from a Kafka 4.4 broker (log.cleaner.threads 1 at start): every
refusal of a broker config is INVALID_REQUEST there, bad values included."""

from __future__ import annotations

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

BROKER = 4
SET, DELETE = 0, 1
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3
KEY = "log.cleaner.threads"


def _set(h, value: str | None, resource: str = "1", op: int = SET, validate_only: bool = False):
    r = h.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": BROKER, "resource_name": resource,
        "configs": [{"name": KEY, "config_operation": op, "value": value}]}],
        "validate_only": validate_only})
    return r.responses[0].error_code, r.responses[0].error_message


def _described(h) -> tuple[str, int, bool]:
    r = h.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": BROKER, "resource_name": "1", "configuration_keys": [KEY]}],
        "include_synonyms": False, "include_documentation": False})
    (entry,) = r.results[0].configs
    return entry.value, entry.config_source, entry.read_only


class _kafka_message(str):
    """Equal to an error message that ends with Kafka's text for this refusal (Strom's config
    handlers put the error's name in front)."""

    def __new__(cls, text: str) -> _kafka_message:
        return super().__new__(cls, "Invalid value org.apache.kafka.common.config."
                                    f"ConfigException: {text} for configuration Invalid "
                                    "dynamic configuration")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.endswith(str.__str__(self))

    __hash__ = str.__hash__


def test_a_broker_may_double_its_cleaner_threads(broker_harness) -> None:
    h = broker_harness
    assert _described(h)[2] is False  # not read-only: Kafka updates it per broker
    assert _set(h, "2") == (0, None)
    assert _described(h) == ("2", DYNAMIC_BROKER_CONFIG, False)
    assert _set(h, "4") == (0, None)
    assert _described(h)[0] == "4"


def test_more_than_double_is_refused_with_kafkas_message(broker_harness) -> None:
    h = broker_harness
    assert _set(h, "5") == (ErrorCode.INVALID_REQUEST, _kafka_message(
        "Log cleaner threads cannot be increased to more than double the current value 1"))
    assert _set(h, "3", validate_only=True)[0] == ErrorCode.INVALID_REQUEST
    assert _described(h)[0] == "1"


def test_less_than_half_is_refused(broker_harness) -> None:
    h = broker_harness
    assert _set(h, "2") == (0, None)
    assert _set(h, "4") == (0, None)
    assert _set(h, "1") == (ErrorCode.INVALID_REQUEST, _kafka_message(
        "Log cleaner threads cannot be reduced to less than half the current value 4"))
    assert _set(h, "3") == (0, None)


@pytest.mark.parametrize("resource", ["1", ""])
@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_below_one_or_not_a_number_is_invalid_request(broker_harness, resource: str,
                                                      value: str) -> None:
    code, message = _set(broker_harness, value, resource=resource)
    assert code == ErrorCode.INVALID_REQUEST and message
    assert _described(broker_harness)[0] == "1"


def test_a_cluster_default_is_checked_against_this_broker(broker_harness) -> None:
    h = broker_harness
    assert _set(h, "9", resource="") == (ErrorCode.INVALID_REQUEST, _kafka_message(
        "Log cleaner threads cannot be increased to more than double the current value 1"))
    assert _set(h, "2", resource="") == (0, None)
    assert _described(h)[:2] == ("2", DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_a_cluster_default_hidden_by_this_brokers_value_is_not_checked(broker_harness) -> None:
    h = broker_harness
    assert _set(h, "2") == (0, None)
    assert _set(h, "9", resource="") == (0, None)  # this broker keeps its own 2
    assert _described(h)[:2] == ("2", DYNAMIC_BROKER_CONFIG)


def test_deleting_the_broker_value_is_checked_against_the_default_it_falls_back_to(
        broker_harness) -> None:
    h = broker_harness
    assert _set(h, "2") == (0, None)
    assert _set(h, "9", resource="") == (0, None)  # hidden by this broker's 2
    assert _set(h, None, op=DELETE) == (ErrorCode.INVALID_REQUEST, _kafka_message(
        "Log cleaner threads cannot be increased to more than double the current value 2"))
    assert _set(h, "3", resource="") == (0, None)
    assert _set(h, None, op=DELETE) == (0, None)
    assert _described(h)[:2] == ("3", DYNAMIC_DEFAULT_BROKER_CONFIG)
