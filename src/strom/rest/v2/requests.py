"""Requests of the v2 consumer API: constants, Confluent's errors and the parsing of bodies
(instance configs, topics, partitions, offsets, timestamps), each mistake a one-line error."""

from __future__ import annotations

import re
import uuid
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import (
    KafkaError,
    TopicPartition,
)

from strom.rest.errors import (
    CONSUMER_INSTANCE_NOT_FOUND,
    ILLEGAL_STATE,
    INVALID_CONSUMER_CONFIG,
    V2_JSON,
    RestError,
)

FORMATS = ("BINARY", "JSON", "AVRO", "JSONSCHEMA", "PROTOBUF")
# What GET .../records can answer: media type -> (embedded format, the server's preference).
# The generic v2 type means BINARY, and with no Accept (or */*) BINARY wins, as in Confluent's.
RECORD_TYPES: dict[str, tuple[str, float]] = {
    "application/vnd.kafka.binary.v2+json": ("BINARY", 1.0),
    V2_JSON: ("BINARY", 0.9),
    "application/vnd.kafka.json.v2+json": ("JSON", 0.1),
    "application/vnd.kafka.avro.v2+json": ("AVRO", 0.1),
    "application/vnd.kafka.jsonschema.v2+json": ("JSONSCHEMA", 0.1),
    "application/vnd.kafka.protobuf.v2+json": ("PROTOBUF", 0.1),
}
REQUEST_TIMEOUT_MS = 1000  # Confluent's consumer.request.timeout.ms default
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # Confluent's consumer.request.max.bytes default
FETCH_MIN_BYTES_MAX = 10_000_000  # the range Confluent accepts for fetch.min.bytes
MAX_INSTANCES = 1000  # each holds a librdkafka consumer and threads: bound what clients can pin
PREFETCH_KIB = 16 * 1024  # records an instance's consumer fetches ahead of reads, at most
STEP_S = 0.1  # a waiting read gives its executor back this often
SEEK_WAIT_S = 2.0  # a just-assigned partition accepts seeks once its fetcher started
KAFKA_TIMEOUT_S = 10.0
CLOSE_AT_EXIT_S = 2.0
# consume() errors a Java consumer does not raise either: topics that do not exist (yet)
QUIET_ERRORS = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                KafkaError._UNKNOWN_PARTITION, KafkaError._PARTITION_EOF,
                KafkaError._MAX_POLL_EXCEEDED}
EXCLUSIVE = "Subscription to topics, partitions and pattern are mutually exclusive"
INVALID_CONFIG = "Invalid consumer configuration: "
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def not_found() -> RestError:
    return RestError(CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.", 404)


def illegal_state(message: str) -> RestError:
    return RestError(ILLEGAL_STATE, f"Illegal state: {message}", 409)


def invalid(message: str, error_code: int = 422) -> RestError:
    """A request that parsed but breaks a constraint (Confluent: 422)."""
    return RestError(error_code, message, 422)


def mistyped(message: str) -> RestError:
    """A request body of the wrong shape (Confluent's JSON mapping errors: 400)."""
    return RestError(400, message, 400)


# --------------------------------------------------------------------------- request bodies


@dataclass(frozen=True)
class InstanceConfig:
    name: str
    fmt: str
    auto_offset_reset: str | None
    auto_commit: bool | None
    min_bytes: int  # -1: wait for the whole request timeout
    request_timeout_ms: int


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise mistyped(f"'{key}' must be an integer")
    return value


def instance_config(body: Any) -> InstanceConfig:
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise mistyped("The request body must be a JSON object")
    name = body.get("id") or body.get("name")  # 'id' wins, as in Confluent's
    if name is None:
        name = f"rest-consumer-{uuid.uuid4()}"
    name = text(name, "'name'")
    if not name or "/" in name:
        raise invalid(f"{INVALID_CONFIG}consumer instance names are non-empty and without '/'",
                      INVALID_CONSUMER_CONFIG)
    fmt = body.get("format")
    if fmt is None:
        fmt = "binary"
    if not isinstance(fmt, str) or fmt.upper() not in FORMATS:
        raise invalid("Invalid format type.")
    reset = body.get("auto.offset.reset")
    if reset is not None and (not isinstance(reset, str)
                              or reset.lower() not in ("earliest", "latest", "none")):
        raise invalid(f"{INVALID_CONFIG}Invalid value {reset} for configuration "
                      "auto.offset.reset: String must be one of: latest, earliest, none",
                      INVALID_CONSUMER_CONFIG)
    commit = body.get("auto.commit.enable")
    auto_commit: bool | None = None
    if isinstance(commit, bool):
        auto_commit = commit
    elif isinstance(commit, str) and commit.strip().lower() in ("true", "false"):
        auto_commit = commit.strip().lower() == "true"
    elif commit is not None:
        raise invalid(f"{INVALID_CONFIG}Invalid value {commit} for configuration "
                      "enable.auto.commit: Expected value to be either true or false",
                      INVALID_CONSUMER_CONFIG)
    min_bytes = _optional_int(body, "fetch.min.bytes")
    if min_bytes is not None and not -1 <= min_bytes <= FETCH_MIN_BYTES_MAX:
        raise invalid("Invalid consumer configuration. It does not abide by the constraints: "
                      f"Invalid value {min_bytes} for configuration fetch.min.bytes: Value must "
                      f"be between -1 and {FETCH_MIN_BYTES_MAX}", 40001)
    wait_ms = _optional_int(body, "consumer.request.timeout.ms")
    if wait_ms is not None and not 0 <= wait_ms <= 2**31 - 1:
        raise invalid(f"{INVALID_CONFIG}consumer.request.timeout.ms must be at least 0",
                      INVALID_CONSUMER_CONFIG)
    return InstanceConfig(name, fmt.upper(), reset.lower() if reset else None, auto_commit,
                          -1 if min_bytes is None else min_bytes,
                          REQUEST_TIMEOUT_MS if wait_ms is None else wait_ms)


def _object(body: Any, required: bool = True) -> dict[str, Any]:
    if body is None:
        if required:
            raise invalid("The request body is required")
        return {}
    if not isinstance(body, dict):
        raise mistyped("The request body must be a JSON object")
    return body


def _items(body: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise mistyped(f"'{key}' must be a list of objects")
    return value


def text(value: Any, what: str) -> str:
    """A string librdkafka can take (UTF-8: JSON may carry lone surrogates)."""
    if not isinstance(value, str):
        raise mistyped(f"{what} must be a string")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise mistyped(f"{what} is not valid Unicode") from None
    if "\0" in value:  # librdkafka's C strings would end there
        raise mistyped(f"{what} contains a NUL character")
    return value


def python_regex(pattern: str) -> re.Pattern[str]:
    """The pattern as Python reads it, to list the topics it matches (librdkafka's own
    engine, POSIX-like, does the subscribing: the common syntax means the same in both)."""
    with warnings.catch_warnings():  # e.g. POSIX classes: a FutureWarning in Python
        warnings.simplefilter("ignore")
        return re.compile(pattern)


def topic_name(value: Any) -> str:
    name = text(value, "a topic name")
    if not LEGAL_TOPIC.fullmatch(name):
        raise invalid(f"{name!r} is not a legal topic name")
    return name


def _int(value: Any, what: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise mistyped(f"'{what}' must be an integer")
    if value > high:
        raise mistyped(f"'{what}' {value} is out of range")
    if value < 0:
        raise invalid(f"'{what}' must not be negative")
    return value


def _topic_partition(item: dict[str, Any]) -> tuple[str, int]:
    topic, partition = item.get("topic"), item.get("partition")
    if topic is None or partition is None:
        raise invalid("Each partition needs 'topic' and 'partition'")
    return topic_name(topic), _int(partition, "partition", INT32_MAX)


def _offset(item: dict[str, Any], key: str = "offset") -> int:
    value = item.get(key)
    if value is None:
        raise invalid(f"Each entry needs '{key}'")
    return _int(value, key, INT64_MAX - 1)  # a commit stores the next offset


def _metadata(item: dict[str, Any]) -> str | None:
    value = item.get("metadata")
    return None if value is None else text(value, "'metadata'")


def partitions_of(body: dict[str, Any]) -> list[TopicPartition]:
    return [TopicPartition(*_topic_partition(item)) for item in _items(body, "partitions")]


def _timestamp_ms(item: dict[str, Any]) -> int:
    value = item.get("timestamp")
    if value is None:
        raise invalid("Each entry needs 'timestamp'")
    if isinstance(value, int) and not isinstance(value, bool):
        return _int(value, "timestamp", INT64_MAX)  # Strom also takes epoch milliseconds
    if not isinstance(value, str):
        raise mistyped("'timestamp' must be an ISO-8601 instant")
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise mistyped(f"'timestamp' {value!r} is not an ISO-8601 instant") from None
    if when.tzinfo is None:
        raise mistyped(f"'timestamp' {value!r} has no time zone (e.g. Z)")
    if when.timestamp() < 0:  # Kafka reads -1 and -2 as latest and earliest
        raise invalid(f"'timestamp' {value!r} is before 1970")
    return int(when.timestamp() * 1000)
