"""Group configs (KIP-848, KIP-932, KIP-1071): per-group overrides of the broker's group.* configs.

Kafka 4.4's `GroupConfig`: each group config falls back to a broker config (its synonym, e.g.
consumer.session.timeout.ms to group.consumer.session.timeout.ms) or, without one, to its own
default. A new value is checked against the broker's bounds when it is set (Kafka's messages:
"consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."); a value set
earlier is clamped to the bounds in force when it is used, as Kafka's `GroupConfig.evaluate`
does, so lowering a broker bound never leaves a group outside it.

Three group configs are Strom's own (not in Kafka): share.redelivery.delay.ms,
share.redelivery.backoff.multiplier and share.redelivery.max.delay.ms delay the redelivery of
records a share consumer released or whose lock expired. Their defaults (0, 1.0, 60000) redeliver
at once, as Kafka does.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from strom.config.defs import (
    ConfigDef,
    ConfigError,
    ConfigRegistry,
    ConfigSource,
    ConfigType,
    Validator,
    one_of,
)

log = logging.getLogger(__name__)

T = ConfigType
Getter = Callable[[str], Any]

AUTO_OFFSET_RESET_ERROR = ("Invalid value `{value}` for configuration share.auto.offset.reset. "
                           "The value must be either 'earliest', 'latest' or of the format "
                           "'by_duration:<PnDTnHnMn.nS>'.")

# java.time.Duration.parse's grammar: PnDTnHnMn.nS, case-insensitive, each number signed.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_iso_duration_ms(text: str) -> int | None:
    """Milliseconds of an ISO-8601 duration as Java's Duration.parse reads it (days, hours,
    minutes, seconds; no years, months or weeks), or None when it is not one."""
    m = _DURATION.fullmatch(text)
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        return None
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    fraction = m.group(7) or ""
    nanos = int((fraction + "000000000")[:9]) if fraction else 0
    if m.group(6) and m.group(6).startswith("-"):
        nanos = -nanos
    total_ns = ((days * 86400 + hours * 3600 + minutes * 60 + seconds) * 1_000_000_000 + nanos)
    if m.group(1) == "-":
        total_ns = -total_ns
    return total_ns // 1_000_000


def parse_auto_offset_reset(value: str) -> tuple[str, int | None]:
    """('earliest' | 'latest', None) or ('by_duration', milliseconds back from now)."""
    if value in ("earliest", "latest"):
        return value, None
    if value.startswith("by_duration:"):
        ms = parse_iso_duration_ms(value[len("by_duration:"):])
        if ms is not None and ms >= 0:
            return "by_duration", ms
    raise ConfigError(f"Invalid value {value} for configuration share.auto.offset.reset: "
                      + AUTO_OFFSET_RESET_ERROR.format(value=value))


def _auto_offset_reset(name: str, value: Any) -> None:
    parse_auto_offset_reset(value)


def _at_least(minimum: float) -> Validator:
    """Kafka's ConfigDef.Range.atLeast, with its words."""
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise ConfigError(f"Invalid value {value} for configuration {name}: "
                              f"Value must be at least {minimum}")

    return check


def _tags(name: str, value: Any) -> None:
    """Kafka's ValidList.anyNonDuplicateValues(allowEmptyList=true, allowNullValue=false)."""
    if any(not v for v in value):
        raise ConfigError(f"Configuration '{name}' values must not be empty.")


GROUP_CONFIGS = ConfigRegistry()
GROUP_CONFIGS.add(
    ConfigDef("consumer.session.timeout.ms", T.INT, 45000,
              "The timeout to detect client failures when using the consumer group protocol.",
              _at_least(1)),
    ConfigDef("consumer.heartbeat.interval.ms", T.INT, 5000,
              "The heartbeat interval given to the members of a consumer group.", _at_least(1)),
    ConfigDef("consumer.assignment.interval.ms", T.INT, 1000,
              "The interval between assignment updates for a consumer group. (Strom computes "
              "a consumer group's target assignment at once.)", _at_least(0), implemented=False),
    ConfigDef("consumer.assignor.offload.enable", T.BOOLEAN, True,
              "Whether to offload consumer group assignment to a group coordinator background "
              "thread. (Strom assigns on its event loop.)", implemented=False),
    ConfigDef("share.session.timeout.ms", T.INT, 45000,
              "The timeout to detect client failures when using the share group protocol.",
              _at_least(1)),
    ConfigDef("share.heartbeat.interval.ms", T.INT, 5000,
              "The heartbeat interval given to the members of a share group.", _at_least(1)),
    ConfigDef("share.record.lock.duration.ms", T.INT, 30000,
              "The record acquisition lock duration in milliseconds for share groups.",
              _at_least(1000)),
    ConfigDef("share.delivery.count.limit", T.INT, 5,
              "The maximum number of delivery attempts for a record delivered to a share group.",
              _at_least(2)),
    ConfigDef("share.partition.max.record.locks", T.INT, 2000,
              "Share-group record lock limit per share-partition.", _at_least(100)),
    ConfigDef("share.auto.offset.reset", T.STRING, "latest",
              "The strategy to initialize the share-partition start offset: earliest, latest, "
              "or by_duration:<ISO-8601 duration (PnDTnHnMn.nS)> back from now (not negative).",
              _auto_offset_reset),
    ConfigDef("share.isolation.level", T.STRING, "read_uncommitted",
              "Controls how to read records written transactionally: read_committed delivers "
              "only committed records, up to the last stable offset (an open transaction holds "
              "delivery there; aborted records are archived, never delivered), read_uncommitted "
              "everything up to the high watermark, aborted records included. Transaction "
              "markers are never delivered.",
              one_of("read_committed", "read_uncommitted")),
    ConfigDef("share.renew.acknowledge.enable", T.BOOLEAN, True,
              "Whether the renew acknowledge type is enabled for the share group."),
    ConfigDef("share.assignment.interval.ms", T.INT, 1000,
              "The interval between assignment updates for a share group.", _at_least(0),
              implemented=False),
    ConfigDef("share.assignor.offload.enable", T.BOOLEAN, True,
              "Whether to offload share group assignment to a group coordinator background "
              "thread. (Strom assigns on its event loop.)", implemented=False),
    ConfigDef("streams.session.timeout.ms", T.INT, 45000,
              "The timeout to detect client failures when using the streams group protocol.",
              _at_least(1)),
    ConfigDef("streams.heartbeat.interval.ms", T.INT, 5000,
              "The heartbeat interval given to the members.", _at_least(1)),
    ConfigDef("streams.num.standby.replicas", T.INT, 0,
              "The number of standby replicas for each task.", _at_least(0)),
    ConfigDef("streams.initial.rebalance.delay.ms", T.INT, 3000,
              "The amount of time the group coordinator will wait for more streams clients to "
              "join a new group before performing the first rebalance.", _at_least(0)),
    ConfigDef("streams.assignment.interval.ms", T.INT, 1000,
              "The interval between assignment updates for a streams group. (Strom computes "
              "a streams group's target assignment at once.)", _at_least(0), implemented=False),
    ConfigDef("streams.rack.aware.assignment.tags", T.LIST, [],
              "List of client tag keys used to distribute standby replicas across Kafka "
              "Streams instances. (Strom's sticky assignor does not use client tags.)", _tags,
              implemented=False),
    ConfigDef("streams.assignor.offload.enable", T.BOOLEAN, True,
              "Whether to offload streams group assignment to a group coordinator background "
              "thread. (Strom assigns on its event loop.)", implemented=False),
    ConfigDef("streams.task.offset.interval.ms", T.INT, 60000,
              "The interval in milliseconds with which Streams clients report their task "
              "offsets.", _at_least(1)),
    ConfigDef("streams.num.warmup.replicas", T.INT, 2,
              "The number of warm-up replicas for each task. (Strom assigns no warm-up "
              "tasks.)", _at_least(0), implemented=False),
    ConfigDef("streams.acceptable.recovery.lag", T.LONG, 10000,
              "The maximum acceptable lag (number of offsets to catch up) for a client to be "
              "considered caught-up enough to receive an active task assignment.",
              _at_least(0)),
    ConfigDef("streams.assignor.name", T.STRING, None,
              "The task assignor to use for this streams group, by short name from the broker's "
              "group.streams.assignors (unset: the first of them)."),
    ConfigDef("errors.deadletterqueue.topic.name", T.STRING, "",
              "The name of the topic to be used as the dead-letter queue (DLQ) topic for this "
              "share group. If blank (the default), the group does not have a DLQ topic."),
    ConfigDef("errors.deadletterqueue.copy.record.enable", T.BOOLEAN, False,
              "When writing onto the dead-letter queue topic, whether to copy the original "
              "record onto the DLQ topic, or just write a record containing the context "
              "information headers."),
    # Strom's own (not in Kafka)
    ConfigDef("share.redelivery.delay.ms", T.LONG, 0,
              "Strom extension (not in Kafka): how long a record released by a share consumer "
              "(or whose acquisition lock expired) waits before it is delivered again; 0 "
              "redelivers at once, as Kafka does.", _at_least(0)),
    ConfigDef("share.redelivery.backoff.multiplier", T.DOUBLE, 1.0,
              "Strom extension (not in Kafka): each further redelivery of a record waits this "
              "many times longer than the one before (1.0: always share.redelivery.delay.ms).",
              _at_least(1.0)),
    ConfigDef("share.redelivery.max.delay.ms", T.LONG, 60000,
              "Strom extension (not in Kafka): the longest a record waits before a "
              "redelivery, however often it was delivered.", _at_least(0)),
)

# Kafka's internal group configs: DescribeConfigs lists them only when a group sets them.
INTERNAL = frozenset({
    "consumer.assignor.offload.enable", "share.assignor.offload.enable",
    "streams.assignor.offload.enable", "streams.task.offset.interval.ms",
    "streams.num.warmup.replicas", "streams.acceptable.recovery.lag",
})
STROM_EXTENSIONS = ("share.redelivery.delay.ms", "share.redelivery.backoff.multiplier",
                    "share.redelivery.max.delay.ms")

# Group config -> the broker config it falls back to (Kafka's GroupConfig.ALL_GROUP_CONFIG_SYNONYMS).
BROKER_SYNONYMS: dict[str, str] = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
    "consumer.assignment.interval.ms": "group.consumer.assignment.interval.ms",
    "consumer.assignor.offload.enable": "group.consumer.assignor.offload.enable",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.delivery.count.limit": "group.share.delivery.count.limit",
    "share.partition.max.record.locks": "group.share.partition.max.record.locks",
    "share.assignment.interval.ms": "group.share.assignment.interval.ms",
    "share.assignor.offload.enable": "group.share.assignor.offload.enable",
    "streams.session.timeout.ms": "group.streams.session.timeout.ms",
    "streams.heartbeat.interval.ms": "group.streams.heartbeat.interval.ms",
    "streams.num.standby.replicas": "group.streams.num.standby.replicas",
    "streams.initial.rebalance.delay.ms": "group.streams.initial.rebalance.delay.ms",
    "streams.assignment.interval.ms": "group.streams.assignment.interval.ms",
    "streams.assignor.offload.enable": "group.streams.assignor.offload.enable",
    "streams.task.offset.interval.ms": "group.streams.task.offset.interval.ms",
    "streams.num.warmup.replicas": "group.streams.num.warmup.replicas",
    "streams.rack.aware.assignment.tags": "group.streams.rack.aware.assignment.tags",
    "streams.acceptable.recovery.lag": "group.streams.acceptable.recovery.lag",
    "streams.assignor.name": "group.streams.assignors",
}

# Kafka's internal broker configs, which Strom does not define (their built-in values).
INTERNAL_BROKER_DEFAULTS: dict[str, Any] = {
    "group.consumer.assignor.offload.enable": True,
    "group.share.assignor.offload.enable": True,
    "group.streams.assignor.offload.enable": True,
    "group.streams.task.offset.interval.ms": 60000,
    "group.streams.min.task.offset.interval.ms": 15000,
    "group.streams.num.warmup.replicas": 2,
    "group.streams.max.warmup.replicas": 20,
    "group.streams.acceptable.recovery.lag": 10000,
}

# Group config -> the broker bounds it must lie within (None: no bound that side), in the order
# Kafka's GroupConfig.validateValues checks them.
BOUNDS: tuple[tuple[str, str | None, str | None], ...] = (
    ("consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
     "group.consumer.max.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
     "group.consumer.max.session.timeout.ms"),
    ("consumer.assignment.interval.ms", "group.consumer.min.assignment.interval.ms",
     "group.consumer.max.assignment.interval.ms"),
    ("share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
     "group.share.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "group.share.min.session.timeout.ms",
     "group.share.max.session.timeout.ms"),
    ("share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
     "group.share.max.record.lock.duration.ms"),
    ("share.delivery.count.limit", "group.share.min.delivery.count.limit",
     "group.share.max.delivery.count.limit"),
    ("share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
     "group.share.max.partition.max.record.locks"),
    ("share.assignment.interval.ms", "group.share.min.assignment.interval.ms",
     "group.share.max.assignment.interval.ms"),
    ("streams.heartbeat.interval.ms", "group.streams.min.heartbeat.interval.ms",
     "group.streams.max.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "group.streams.min.session.timeout.ms",
     "group.streams.max.session.timeout.ms"),
    ("streams.num.standby.replicas", None, "group.streams.max.standby.replicas"),
    ("streams.assignment.interval.ms", "group.streams.min.assignment.interval.ms",
     "group.streams.max.assignment.interval.ms"),
    ("streams.task.offset.interval.ms", "group.streams.min.task.offset.interval.ms", None),
    ("streams.num.warmup.replicas", None, "group.streams.max.warmup.replicas"),
)

# (session timeout, heartbeat interval): the first must exceed the second.
SESSION_HEARTBEAT = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"),
)


def broker_value(get: Getter, name: str) -> Any:
    """A broker config's value in force, or the built-in value of one Kafka keeps internal."""
    try:
        return get(name)
    except KeyError:
        return INTERNAL_BROKER_DEFAULTS[name]


def fallback(get: Getter, name: str) -> Any:
    """What a group config is when the group does not set it."""
    synonym = BROKER_SYNONYMS.get(name)
    if synonym is None:
        return GROUP_CONFIGS[name].default
    value = broker_value(get, synonym)
    if name == "streams.assignor.name":  # the first of group.streams.assignors
        return value[0] if value else None
    return value


def validate_group_configs(configs: Mapping[str, str | None], get: Getter) -> dict[str, Any]:
    """Check a group's whole set of overrides as Kafka 4.4 does (`GroupConfig.validate`):
    names first, then each value's type and range, then the broker's bounds; raise ConfigError
    with Kafka's message. `get` reads a broker config in force. Returns the parsed values."""
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise ConfigError(f"Unknown group config name: {name}")
    tags = configs.get("streams.rack.aware.assignment.tags")
    items: list[str] = []
    if tags is not None and tags.strip():
        items = re.split(r"\s*,\s*", tags.strip())
        while items and not items[-1]:  # Java's String.split drops trailing empty strings
            items.pop()
        if len(set(items)) != len(items):
            raise ConfigError("streams.rack.aware.assignment.tags must not contain duplicate "
                              "tag keys.")
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        if raw is None:
            raise ConfigError(f"Null value not supported for group configs: {name}")
        parsed[name] = GROUP_CONFIGS.parse(name, raw)
        if name == "streams.rack.aware.assignment.tags" and "" in items:
            raise ConfigError(f"Configuration '{name}' values must not be empty.")
    for name, low, high in BOUNDS:
        if name not in parsed:
            continue
        value = parsed[name]
        lo = broker_value(get, low) if low else None
        hi = broker_value(get, high) if high else None
        if lo is not None and hi is not None:
            if not lo <= value <= hi:
                raise ConfigError(f"{name} must be in the range {lo} to {hi} inclusive.")
        elif hi is not None and value > hi:
            raise ConfigError(f"{name} must be less than or equal to {hi}")
        elif lo is not None and value < lo:
            raise ConfigError(f"{name} must be greater than or equal to {lo}")
    assignor = parsed.get("streams.assignor.name")
    if "streams.assignor.name" in parsed:
        registered = list(broker_value(get, "group.streams.assignors"))
        if assignor not in registered:
            raise ConfigError(f"streams.assignor.name '{assignor}' is not a registered task "
                              f"assignor. Registered assignors are: [{', '.join(registered)}].")
    for session, heartbeat in SESSION_HEARTBEAT:
        if session in parsed or heartbeat in parsed:
            s = parsed.get(session, fallback(get, session))
            h = parsed.get(heartbeat, fallback(get, heartbeat))
            if s <= h:
                raise ConfigError(f"{session} must be greater than {heartbeat}")
    dlq = parsed.get("errors.deadletterqueue.topic.name")
    if dlq and dlq.startswith("__"):
        raise ConfigError("errors.deadletterqueue.topic.name: DLQ topic name must not start "
                          "with '__'")
    if "share.redelivery.delay.ms" in parsed or "share.redelivery.max.delay.ms" in parsed:
        delay = parsed.get("share.redelivery.delay.ms", fallback(get, "share.redelivery.delay.ms"))
        most = parsed.get("share.redelivery.max.delay.ms",
                          fallback(get, "share.redelivery.max.delay.ms"))
        if delay > most:
            raise ConfigError("share.redelivery.max.delay.ms must be greater than or equal to "
                              "share.redelivery.delay.ms")
    for name, value in parsed.items():
        definition = GROUP_CONFIGS[name]
        if not definition.implemented and value != definition.default:
            log.warning("group config %s=%s is accepted but has no effect in Strom: %s",
                        name, configs[name], definition.doc)
    return parsed


def effective_values(overrides: Mapping[str, str], get: Getter,
                     group_id: str = "") -> dict[str, Any]:
    """Every group config's value in force for a group with these overrides: the override
    clamped to the broker's bounds in force now (Kafka's `GroupConfig.evaluate`, with its
    warning), else the broker config it falls back to. An override that no longer parses
    (written by another version) is ignored with a warning."""
    values: dict[str, Any] = {}
    for name in GROUP_CONFIGS.names():
        raw = overrides.get(name)
        if raw is not None:
            try:
                values[name] = GROUP_CONFIGS.parse(name, raw)
                continue
            except ConfigError as exc:
                log.warning("group %s: ignoring its config %s: %s", group_id, name, exc)
        values[name] = fallback(get, name)
    for name, low, high in BOUNDS:
        if name not in overrides or not isinstance(values[name], int):
            continue
        value = values[name]
        lo = broker_value(get, low) if low else None
        hi = broker_value(get, high) if high else None
        if lo is not None and value < lo:
            log.warning("The group config '%s' for group '%s' has value %s which is below the "
                        "broker's allowed minimum %s. The effective value will be capped to %s",
                        name, group_id, value, lo, lo)
            values[name] = lo
        elif hi is not None and value > hi:
            log.warning("The group config '%s' for group '%s' has value %s which exceeds the "
                        "broker's allowed maximum %s. The effective value will be capped to %s.",
                        name, group_id, value, hi, hi)
            values[name] = hi
    for session, heartbeat in SESSION_HEARTBEAT:
        if values[session] <= values[heartbeat] and (session in overrides
                                                     or heartbeat in overrides):
            log.warning("The effective %s (%s) for group '%s' is not greater than %s (%s). "
                        "Check that the broker-level min/max bounds for session timeout and "
                        "heartbeat interval are consistent.", session, values[session],
                        group_id, heartbeat, values[heartbeat])
    if values["share.redelivery.delay.ms"] > values["share.redelivery.max.delay.ms"]:
        values["share.redelivery.delay.ms"] = values["share.redelivery.max.delay.ms"]
    return values


def resolve(name: str, overrides: Mapping[str, str], get: Getter,
            source_of: Callable[[str], tuple[Any, ConfigSource]] | None = None,
            ) -> tuple[Any, ConfigSource, list[tuple[str, Any, ConfigSource]]]:
    """A group config as DescribeConfigs shows it: (value, source, synonyms), strongest
    synonym first. A set override is DYNAMIC_GROUP_CONFIG; otherwise the broker synonym's own
    source (DEFAULT_CONFIG, STATIC_BROKER_CONFIG, ...) or, without one, DEFAULT_CONFIG under
    the group config's own name, as Kafka 4.4 reports them. `source_of` gives a broker
    config's value and source (Kafka's internal ones: their built-in value, DEFAULT_CONFIG)."""
    definition = GROUP_CONFIGS[name]
    synonyms: list[tuple[str, Any, ConfigSource]] = []
    raw = overrides.get(name)
    if raw is not None:
        with contextlib.suppress(ConfigError):
            synonyms.append((name, definition.parse(raw), ConfigSource.GROUP_CONFIG))
    synonym = BROKER_SYNONYMS.get(name)
    if synonym is None:
        synonyms.append((name, definition.default, ConfigSource.DEFAULT_CONFIG))
    else:
        try:
            if source_of is None:
                raise KeyError(synonym)
            value, source = source_of(synonym)
        except KeyError:
            value, source = INTERNAL_BROKER_DEFAULTS[synonym], ConfigSource.DEFAULT_CONFIG
        synonyms.append((synonym, value, source))
    top_name, top_value, top_source = synonyms[0]
    if top_name == "group.streams.assignors":
        top_value = top_value[0] if top_value else None
    return top_value, top_source, synonyms


def render(name: str, value: Any) -> str | None:
    """A group config's (or its broker synonym's) value as Kafka shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return None if value is None else str(value)
