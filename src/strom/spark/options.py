"""Option parsing for the ``strom`` Spark source and sink, with the names, defaults and rules of
Spark's own Kafka connector, so a Spark user's existing ``.option(...)`` calls carry over.

Everything here is pure Python (no Spark, no client library): options arrive as the
case-insensitive mapping Spark hands to a Python data source and leave as frozen dataclasses
that pickle cheaply to executors.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("strom.spark")

EARLIEST = -2  # Spark's (and ListOffsets') marker for "the first offset of the partition"
LATEST = -1  # ... and for "the offset after the last record"

# Spark's option names (compared lower-case: Spark's option map is case-insensitive).
ASSIGN = "assign"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribepattern"
STRATEGY_KEYS = (ASSIGN, SUBSCRIBE, SUBSCRIBE_PATTERN)
STRATEGY_NAMES = {ASSIGN: "assign", SUBSCRIBE: "subscribe", SUBSCRIBE_PATTERN: "subscribePattern"}

STARTING_OFFSETS = "startingoffsets"
ENDING_OFFSETS = "endingoffsets"
STARTING_OFFSETS_BY_TIMESTAMP = "startingoffsetsbytimestamp"
ENDING_OFFSETS_BY_TIMESTAMP = "endingoffsetsbytimestamp"
STARTING_TIMESTAMP = "startingtimestamp"
ENDING_TIMESTAMP = "endingtimestamp"
STARTING_BY_TIMESTAMP_STRATEGY = "startingoffsetsbytimestampstrategy"
FAIL_ON_DATA_LOSS = "failondataloss"
MIN_PARTITIONS = "minpartitions"
MAX_RECORDS_PER_PARTITION = "maxrecordsperpartition"
MAX_OFFSETS_PER_TRIGGER = "maxoffsetspertrigger"
MIN_OFFSETS_PER_TRIGGER = "minoffsetspertrigger"
MAX_TRIGGER_DELAY = "maxtriggerdelay"
POLL_TIMEOUT = "kafkaconsumer.polltimeoutms"
FETCH_OFFSET_RETRIES = "fetchoffset.numretries"
FETCH_OFFSET_RETRY_INTERVAL = "fetchoffset.retryintervalms"
GROUP_ID_PREFIX = "groupidprefix"
INCLUDE_HEADERS = "includeheaders"
TOPIC = "topic"
# Strom's own: how often the driver re-reads topic metadata (new topics and partitions).
METADATA_REFRESH = "metadatarefreshms"
# Strom's own: which client executors read with: "native" (Strom's fetcher, decoding batches
# straight into Arrow), "librdkafka" (confluent-kafka), or "auto" (native unless a kafka.*
# setting needs librdkafka).
FETCHER = "fetcher"
FETCHERS = ("auto", "native", "librdkafka")
# Strom's own sink options: exactly-once writes (``transactional`` is an alias).
EXACTLY_ONCE_KEYS = ("exactlyonce", "transactional")
TRANSACTIONAL_ID_PREFIX = "transactionalidprefix"

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark: spark.network.timeout (120 s)
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # "15m"
DEFAULT_METADATA_REFRESH_MS = 500

FAIL_ON_DATA_LOSS_TRUE_HINT = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    "topic was processed. If you don't want your streaming query to fail on such cases, set the "
    'source option "failOnDataLoss" to "false".'
)
FAIL_ON_DATA_LOSS_FALSE_HINT = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    'topic was processed. If you want your streaming query to fail on such cases, set the source '
    'option "failOnDataLoss" to "true".'
)
CUSTOM_GROUP_ID_WARNING = (
    "Kafka option 'kafka.group.id' has been set on this query; it is not recommended: queries or "
    "sources sharing a group id interfere with each other. Strom's source never joins the group "
    "nor commits offsets, so the id is only passed to the client."
)

TopicPartition = tuple[str, int]


class StromOptionError(ValueError):
    """An invalid or contradictory option (Spark raises IllegalArgumentException for these)."""


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (deleted, aged out, topic recreated) and failOnDataLoss."""


# --------------------------------------------------------------------------------------------
# small parsers
# --------------------------------------------------------------------------------------------


def parse_bool(value: Any, name: str) -> bool:
    """Scala's ``String.toBoolean``: "true" or "false" in any case, nothing else."""
    text = str(value).strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise StromOptionError(f"option '{name}' must be 'true' or 'false', got {value!r}")


def parse_int(value: Any, name: str, *, positive: bool = False) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise StromOptionError(f"option '{name}' must be an integer, got {value!r}") from None
    if positive and number <= 0:
        raise StromOptionError(f"{name} must be positive")
    return number


_TIME_UNITS_MS = {
    "us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000,
}  # fmt: skip
_TIME_RE = re.compile(r"^\s*(-?\d+)\s*([a-z]*)\s*$")


def parse_time_ms(value: Any, name: str) -> int:
    """Spark's time strings ("15m", "30s", "100ms", "2h"; a bare number means milliseconds)."""
    m = _TIME_RE.match(str(value).lower())
    if not m or m.group(2) not in ("", *_TIME_UNITS_MS):
        raise StromOptionError(f"option '{name}': invalid time string {value!r} (e.g. 15m, 30s)")
    return int(int(m.group(1)) * _TIME_UNITS_MS.get(m.group(2) or "ms", 1))


def _json_object(text: str, example: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise StromOptionError(f"Expected e.g. {example}, got {text}")
    return data


def parse_partitions_json(text: str) -> list[TopicPartition]:
    """``assign``: ``{"topicA":[0,1],"topicB":[2,4]}``."""
    example = '{"topicA":[0,1],"topicB":[0,1]}'
    data = _json_object(text, example)
    result: list[TopicPartition] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(type(p) is int for p in parts):
            raise StromOptionError(f"Expected e.g. {example}, got {text}")
        result.extend((topic, p) for p in parts)
    return result


def parse_partition_offsets_json(text: str) -> dict[TopicPartition, int]:
    """Per-partition offsets or timestamps: ``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}``."""
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    data = _json_object(text, example)
    result: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise StromOptionError(f"Expected e.g. {example}, got {text}")
        for p, off in parts.items():
            try:
                result[(topic, int(p))] = int(off)
            except (TypeError, ValueError):
                raise StromOptionError(f"Expected e.g. {example}, got {text}") from None
    return result


# --------------------------------------------------------------------------------------------
# subscription and offset specifications
# --------------------------------------------------------------------------------------------

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass(frozen=True)
class Subscription:
    """Which partitions a query reads: Spark's assign / subscribe / subscribePattern."""

    kind: str  # one of STRATEGY_KEYS
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def wants_topic(self, topic: str) -> bool:
        if self.kind == SUBSCRIBE:
            return topic in self.topics
        if self.kind == SUBSCRIBE_PATTERN:
            # Java's Pattern.matcher(topic).matches() is a full match; internal topics are
            # excluded as the Java consumer does (exclude.internal.topics=true).
            return topic not in INTERNAL_TOPICS and re.fullmatch(self.pattern or "", topic) is not None
        return any(t == topic for t, _ in self.partitions)

    def describe(self) -> str:
        if self.kind == SUBSCRIBE:
            return f"Subscribe[{', '.join(self.topics)}]"
        if self.kind == SUBSCRIBE_PATTERN:
            return f"SubscribePattern[{self.pattern}]"
        return f"Assign[{', '.join(f'{t}-{p}' for t, p in self.partitions)}]"


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the broker.

    kind: "earliest", "latest", "offsets" (per-partition, with -2/-1 allowed), "timestamps"
    (per-partition timestamps) or "timestamp" (one timestamp for every partition).
    """

    kind: str
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None
    on_no_match: str = "error"  # startingOffsetsByTimestampStrategy: "error" or "latest"

    @property
    def offset_map(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


EARLIEST_SPEC = OffsetSpec("earliest")
LATEST_SPEC = OffsetSpec("latest")


def _offset_spec(opts: Mapping[str, str], ts_key: str, by_ts_key: str, offsets_key: str,
                 default: OffsetSpec) -> OffsetSpec:
    """Spark's precedence: a global timestamp, then per-partition timestamps, then offsets."""
    strategy = str(opts.get(STARTING_BY_TIMESTAMP_STRATEGY, "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise StromOptionError(
            f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', got {strategy!r}")
    if ts_key in opts:
        text = str(opts[ts_key]).strip()
        try:
            return OffsetSpec("timestamp", timestamp=int(text), on_no_match=strategy)
        except ValueError:
            raise StromOptionError(f"Expected a single long value, got {text}") from None
    if by_ts_key in opts:
        parsed = parse_partition_offsets_json(str(opts[by_ts_key]).strip())
        return OffsetSpec("timestamps", offsets=tuple(sorted(parsed.items())), on_no_match=strategy)
    if offsets_key in opts:
        text = str(opts[offsets_key]).strip()
        if text.lower() == "latest":
            return LATEST_SPEC
        if text.lower() == "earliest":
            return EARLIEST_SPEC
        parsed = parse_partition_offsets_json(text)
        return OffsetSpec("offsets", offsets=tuple(sorted(parsed.items())))
    return default


# --------------------------------------------------------------------------------------------
# client configuration (Java names in, librdkafka names out)
# --------------------------------------------------------------------------------------------

_JAAS_PAIR = re.compile(r"""(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"|(\w+)\s*=\s*([^\s;"]+)""")


def kafka_params(opts: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options without their prefix (Spark's convertToSpecifiedParams)."""
    return {k[len("kafka."):]: str(v) for k, v in opts.items() if k.lower().startswith("kafka.")}


# Java client names librdkafka spells differently (None: no librdkafka equivalent, dropped).
JAVA_TO_LIBRDKAFKA: dict[str, str | None] = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "default.api.timeout.ms": None,
}


def librdkafka_config(params: Mapping[str, str]) -> dict[str, str]:
    """Translate the Java client settings a Spark user writes into librdkafka's.

    Most names are shared; a few are renamed (JAVA_TO_LIBRDKAFKA). ``sasl.jaas.config`` with a
    PLAIN/SCRAM login module becomes ``sasl.username``/``sasl.password``, which is all
    librdkafka needs from it. Anything librdkafka does not know fails client creation with its
    own message naming the setting.
    """
    conf: dict[str, str] = {}
    for key, value in params.items():
        target = JAVA_TO_LIBRDKAFKA.get(key, key)
        if target is not None:
            conf.setdefault(target, value)
    jaas = conf.pop("sasl.jaas.config", None)
    if jaas is not None:
        found: dict[str, str] = {}
        for m in _JAAS_PAIR.finditer(jaas):
            if m.group(1):
                found[m.group(1)] = m.group(2).replace('\\"', '"')
            else:
                found[m.group(3)] = m.group(4)
        if "username" in found:
            conf.setdefault("sasl.username", found["username"])
        if "password" in found:
            conf.setdefault("sasl.password", found["password"])
    return conf


# The Java client's settings the native reader (strom.spark.fetcher) implements; its defaults
# are the Java consumer's, except two tuned for reading known ranges (docs/spark.md).
_HANDLED = {
    "bootstrap.servers", "client.id", "isolation.level", "check.crcs", "request.timeout.ms",
    "fetch.max.wait.ms", "fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes",
    "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.keystore.location", "ssl.keystore.type",
    "ssl.keystore.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.key.password", "ssl.endpoint.identification.algorithm", "ssl.enabled.protocols",
    "ssl.cipher.suites",
}
# Settings that only tune a client's sockets, retries, metadata or consumer-group machinery,
# none of which changes what a range read returns: accepted and not needed here.
_NOT_NEEDED = {
    "receive.buffer.bytes", "send.buffer.bytes", "socket.receive.buffer.bytes",
    "socket.send.buffer.bytes", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
    "retry.backoff.ms", "retry.backoff.max.ms", "metadata.max.age.ms",
    "connections.max.idle.ms", "default.api.timeout.ms", "client.dns.lookup",
    "socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms",
    "session.timeout.ms", "heartbeat.interval.ms", "max.poll.records", "max.poll.interval.ms",
    "group.id", "enable.auto.commit", "auto.commit.interval.ms", "partition.assignment.strategy",
    "exclude.internal.topics", "allow.auto.create.topics", "client.rack", "group.instance.id",
    "interceptor.classes", "metrics.recording.level", "metrics.num.samples",
    "metrics.sample.window.ms", "metric.reporters", "auto.include.jmx.reporter",
    "enable.metrics.push",
}
# what strom.security.client authenticates with (a unit test keeps the two equal)
NATIVE_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def native_reader_unsupported(params: Mapping[str, str]) -> str | None:
    """Why the native reader cannot read with these ``kafka.*`` settings (None: it can).

    Here, not in strom.spark.fetcher, so that the driver decides without importing the client."""
    for key in sorted(params):
        if key not in _HANDLED and key not in _NOT_NEEDED:
            return f"kafka.{key} is not implemented by the native reader"
    protocol = params.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        return f"kafka.security.protocol={protocol}"
    if protocol.startswith("SASL"):
        mechanism = params.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in NATIVE_SASL_MECHANISMS:
            return f"kafka.sasl.mechanism={mechanism}"
    if params.get("ssl.truststore.type", "PEM").upper() not in ("PEM", "PKCS12") or \
            params.get("ssl.keystore.type", "PEM").upper() not in ("PEM", "PKCS12"):
        return "JKS key or trust stores"
    return None


# --------------------------------------------------------------------------------------------
# source options
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceOptions:
    """Everything the source needs, validated once on the driver."""

    params: tuple[tuple[str, str], ...]  # kafka.* options, prefix removed
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    streaming: bool
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    group_id_prefix: str = "spark-kafka-source"
    metadata_refresh_ms: int = DEFAULT_METADATA_REFRESH_MS
    fetcher: str = "auto"

    @property
    def kafka(self) -> dict[str, str]:
        return dict(self.params)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    @property
    def read_committed(self) -> bool:
        return self.kafka.get("isolation.level", "read_uncommitted").lower() == "read_committed"


def _validate_kafka_source_params(params: Mapping[str, str]) -> None:
    """The client settings Spark's Kafka source refuses, refused here for the same reasons."""
    if "group.id" in params:
        log.warning(CUSTOM_GROUP_ID_WARNING)
    if "auto.offset.reset" in params:
        raise StromOptionError(
            "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
            "'startingoffsets' to 'earliest' or 'latest' to specify where to start. Structured "
            "Streaming manages which offsets are consumed internally, rather than relying on the "
            "consumer to do it; 'startingoffsets' only applies when a new streaming query is "
            "started, and resuming always picks up from where the query left off.")
    if "key.deserializer" in params:
        raise StromOptionError(
            "Kafka option 'key.deserializer' is not supported as keys are returned as bytes. "
            "Use DataFrame operations to explicitly deserialize the keys.")
    if "value.deserializer" in params:
        raise StromOptionError(
            "Kafka option 'value.deserializer' is not supported as values are returned as "
            "bytes. Use DataFrame operations to explicitly deserialize the values.")
    for key in ("enable.auto.commit", "interceptor.classes"):
        if key in params:
            raise StromOptionError(f"Kafka option '{key}' is not supported")
    if "bootstrap.servers" not in params:
        raise StromOptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in STRATEGY_KEYS if k in opts]
    names = ", ".join(STRATEGY_NAMES[k] for k in STRATEGY_KEYS)
    if not given:
        raise StromOptionError(
            f"One of the following options must be specified for Kafka source: {names}. "
            "See the docs for more details.")
    if len(given) > 1:
        raise StromOptionError(
            f"Only one of the following options can be specified for Kafka source: {names}. "
            "See the docs for more details.")
    key = given[0]
    value = str(opts[key])
    if key == ASSIGN:
        if not value.strip().startswith("{"):
            raise StromOptionError(
                f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
        return Subscription(ASSIGN, partitions=tuple(sorted(set(parse_partitions_json(value)))))
    if key == SUBSCRIBE:
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise StromOptionError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Subscription(SUBSCRIBE, topics=topics)
    pattern = value.strip()
    if not pattern:
        raise StromOptionError(
            "Pattern to subscribe is empty as specified value for option 'subscribePattern' is "
            f"'{value}'")
    try:
        re.compile(pattern)
    except re.error as e:
        raise StromOptionError(f"invalid subscribePattern {pattern!r}: {e}") from None
    return Subscription(SUBSCRIBE_PATTERN, pattern=pattern)


def parse_source_options(opts: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate ``opts`` like Spark's KafkaSourceProvider and return the parsed options.

    ``opts`` is Spark's case-insensitive option map (keys arrive lower-cased).
    """
    opts = {str(k).lower(): v for k, v in opts.items()}
    if streaming:
        if ENDING_OFFSETS in opts:
            raise StromOptionError("ending offset not valid in streaming queries")
        if ENDING_OFFSETS_BY_TIMESTAMP in opts or ENDING_TIMESTAMP in opts:
            raise StromOptionError("ending timestamp not valid in streaming queries")
    subscription = _subscription(opts)

    min_partitions = None
    if MIN_PARTITIONS in opts:
        min_partitions = parse_int(opts[MIN_PARTITIONS], "minPartitions", positive=True)
    max_records = None
    if MAX_RECORDS_PER_PARTITION in opts:
        max_records = parse_int(opts[MAX_RECORDS_PER_PARTITION], "maxRecordsPerPartition",
                                positive=True)
    params = kafka_params(opts)
    _validate_kafka_source_params(params)

    max_per_trigger = min_per_trigger = None
    if MAX_OFFSETS_PER_TRIGGER in opts:
        max_per_trigger = parse_int(opts[MAX_OFFSETS_PER_TRIGGER], "maxOffsetsPerTrigger",
                                    positive=True)
    if MIN_OFFSETS_PER_TRIGGER in opts:
        min_per_trigger = parse_int(opts[MIN_OFFSETS_PER_TRIGGER], "minOffsetsPerTrigger",
                                    positive=True)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise StromOptionError(
            f"The value of minOffsetPerTrigger({min_per_trigger}) is higher than the "
            f"maxOffsetsPerTrigger({max_per_trigger}).")

    default_start = LATEST_SPEC if streaming else EARLIEST_SPEC
    starting = _offset_spec(opts, STARTING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP,
                            STARTING_OFFSETS, default_start)
    ending = LATEST_SPEC
    if not streaming:
        ending = _offset_spec(opts, ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP,
                              ENDING_OFFSETS, LATEST_SPEC)
        _validate_batch_offsets(starting, ending)
        for key in (MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY):
            if key in opts:
                log.warning("%s option ignored in batch queries", key)

    fetcher = str(opts.get(FETCHER, "auto")).strip().lower()
    if fetcher not in FETCHERS:
        raise StromOptionError(f"option 'fetcher' must be one of {', '.join(FETCHERS)}, got "
                               f"{opts[FETCHER]!r}")

    group_prefix = str(opts.get(GROUP_ID_PREFIX,
                                "spark-kafka-source" if streaming else "spark-kafka-relation"))
    return SourceOptions(
        params=tuple(sorted(params.items())),
        subscription=subscription,
        starting=starting,
        ending=ending,
        streaming=streaming,
        fail_on_data_loss=parse_bool(opts.get(FAIL_ON_DATA_LOSS, "true"), "failOnDataLoss"),
        include_headers=parse_bool(opts.get(INCLUDE_HEADERS, "false"), "includeHeaders"),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=parse_time_ms(opts.get(MAX_TRIGGER_DELAY, "15m"), "maxTriggerDelay"),
        min_partitions=min_partitions,
        max_records_per_partition=max_records,
        poll_timeout_ms=parse_int(opts.get(POLL_TIMEOUT, DEFAULT_POLL_TIMEOUT_MS),
                                  "kafkaConsumer.pollTimeoutMs", positive=True),
        fetch_offset_retries=parse_int(opts.get(FETCH_OFFSET_RETRIES, 3), "fetchOffset.numRetries",
                                       positive=True),
        fetch_offset_retry_interval_ms=parse_int(opts.get(FETCH_OFFSET_RETRY_INTERVAL, 10),
                                                 "fetchOffset.retryIntervalMs"),
        group_id_prefix=group_prefix,
        metadata_refresh_ms=parse_int(opts.get(METADATA_REFRESH, DEFAULT_METADATA_REFRESH_MS),
                                      "metadataRefreshMs"),
        fetcher=fetcher,
    )


def _validate_batch_offsets(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Batch reads need a finite range: no "latest" start, no "earliest" end (Spark's rules)."""
    if starting.kind == "latest":
        raise StromOptionError("starting offset can't be latest for batch queries on Kafka")
    if starting.kind == "offsets":
        for (t, p), off in starting.offsets:
            if off == LATEST:
                raise StromOptionError(
                    f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka")
    if ending.kind == "earliest":
        raise StromOptionError("ending offset can't be earliest for batch queries on Kafka")
    if ending.kind == "offsets":
        for (t, p), off in ending.offsets:
            if off == EARLIEST:
                raise StromOptionError(
                    f"ending offset for {t}-{p} can't be earliest for batch queries on Kafka")
    if starting.kind == ending.kind and starting.kind in ("offsets", "timestamps"):
        start, end = starting.offset_map, ending.offset_map
        if set(start) != set(end):
            raise StromOptionError(
                "The start and end offsets must name the same topic partitions: start "
                f"{sorted(start)}, end {sorted(end)}")
        for tp, s in start.items():
            e = end[tp]
            if s >= 0 and e >= 0 and s > e:
                what = "offset" if starting.kind == "offsets" else "timestamp"
                raise StromOptionError(
                    f"The starting {what} ({s}) for {tp[0]}-{tp[1]} is greater than the ending "
                    f"{what} ({e}).")


# --------------------------------------------------------------------------------------------
# sink options
# --------------------------------------------------------------------------------------------

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"


@dataclass(frozen=True)
class SinkOptions:
    params: tuple[tuple[str, str], ...]
    topic: str | None = None
    delivery: str = AT_LEAST_ONCE
    flush_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    transactional_id_prefix: str | None = None

    @property
    def kafka(self) -> dict[str, str]:
        return dict(self.params)

    @property
    def exactly_once(self) -> bool:
        return self.delivery == EXACTLY_ONCE


def parse_sink_options(opts: Mapping[str, str]) -> SinkOptions:
    opts = {str(k).lower(): v for k, v in opts.items()}
    params = kafka_params(opts)
    if "key.serializer" in params:
        raise StromOptionError(
            "Kafka option 'key.serializer' is not supported as keys are written as bytes "
            "(string keys are encoded as UTF-8).")
    if "value.serializer" in params:
        raise StromOptionError(
            "Kafka option 'value.serializer' is not supported as values are written as bytes "
            "(string values are encoded as UTF-8).")
    if "bootstrap.servers" not in params:
        raise StromOptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer")
    if "transactional.id" in params:
        raise StromOptionError(
            "Kafka option 'transactional.id' is not supported: with exactlyOnce=true the sink "
            "derives one transactional id per Spark task (set 'transactionalIdPrefix' to choose "
            "their prefix).")
    delivery = AT_LEAST_ONCE
    for key in EXACTLY_ONCE_KEYS:
        if key in opts and parse_bool(opts[key], key):
            delivery = EXACTLY_ONCE
    prefix = None
    if TRANSACTIONAL_ID_PREFIX in opts:
        prefix = str(opts[TRANSACTIONAL_ID_PREFIX]).strip()
        if not prefix or any(c.isspace() for c in prefix):
            raise StromOptionError(
                f"option 'transactionalIdPrefix' must be a non-empty name without spaces, got "
                f"{opts[TRANSACTIONAL_ID_PREFIX]!r}")
        if delivery != EXACTLY_ONCE:
            raise StromOptionError("option 'transactionalIdPrefix' needs exactlyOnce=true")
    if delivery == EXACTLY_ONCE and params.get("enable.idempotence", "true").lower() == "false":
        raise StromOptionError(
            "exactlyOnce=true writes with a transactional producer, which is idempotent: "
            "drop kafka.enable.idempotence=false")
    topic = opts.get(TOPIC)
    topic = str(topic).strip() if topic is not None else None
    return SinkOptions(
        params=tuple(sorted(params.items())),
        topic=topic or None,
        delivery=delivery,
        flush_timeout_ms=parse_int(opts.get("flushtimeoutms", DEFAULT_POLL_TIMEOUT_MS),
                                   "flushTimeoutMs", positive=True),
        transactional_id_prefix=prefix,
    )
