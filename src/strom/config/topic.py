"""Topic-level configs: Kafka's names, types, validators, and the broker configs they default from."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.config.defs import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigRegistry,
    ConfigType,
    at_least,
    between,
    one_of,
)

log = logging.getLogger(__name__)

T = ConfigType


def _throttled_replicas(name: str, value: Any) -> None:
    """``*`` or a list of partition:broker, as Kafka's ThrottledReplicaListValidator."""
    items = [str(v).strip() for v in (value if isinstance(value, list) else [value])]
    items = [i for i in items if i]
    if items == ["*"]:
        return
    for item in items:
        partition, sep, broker = item.partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ConfigError(f"Invalid value {','.join(items)} for configuration {name}: "
                              "must be the list [partitionId]:[brokerId],"
                              "[partitionId]:[brokerId],... or the wildcard '*'")

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_STRATEGIES = "io.confluent.kafka.serializers.subject."
TOPIC_NAME_STRATEGY = _STRATEGIES + "TopicNameStrategy"
_SHORT_STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
# the class names Confluent's configs take, and their short forms
SUBJECT_NAME_STRATEGIES = (*(_STRATEGIES + n for n in _SHORT_STRATEGIES), *_SHORT_STRATEGIES)

TOPIC_CONFIGS = ConfigRegistry()
TOPIC_CONFIGS.add(
    ConfigDef("cleanup.policy", T.LIST, ["delete"], "delete and/or compact old segments",
              one_of("compact", "delete")),
    ConfigDef("compression.type", T.STRING, "producer", "final compression of the topic's data",
              one_of(*COMPRESSION_TYPES)),
    ConfigDef("compression.gzip.level", T.INT, -1, "gzip level when compression.type=gzip", between(-1, 9)),
    ConfigDef("compression.lz4.level", T.INT, 9, "lz4 level when compression.type=lz4", between(1, 17)),
    ConfigDef("compression.zstd.level", T.INT, 3, "zstd level when compression.type=zstd", between(-131072, 22)),
    ConfigDef("delete.retention.ms", T.LONG, 86400000, "how long tombstones are kept on compacted topics",
              at_least(0)),
    ConfigDef("file.delete.delay.ms", T.LONG, 60000, "delay before a deleted segment's files are removed",
              at_least(0)),
    ConfigDef("flush.messages", T.LONG, LONG_MAX, "fsync after this many messages", at_least(1)),
    ConfigDef("flush.ms", T.LONG, LONG_MAX, "fsync after this much time", at_least(0)),
    ConfigDef("follower.replication.throttled.replicas", T.LIST, [],
              "replicas (partition:broker, or *) a follower fetches within "
              "follower.replication.throttled.rate while out of the ISR", _throttled_replicas),
    ConfigDef("leader.replication.throttled.replicas", T.LIST, [],
              "replicas (partition:broker, or *) a leader sends to within "
              "leader.replication.throttled.rate while they are out of the ISR",
              _throttled_replicas),
    ConfigDef("index.interval.bytes", T.INT, 4096, "bytes of log between offset index entries", at_least(0)),
    ConfigDef("max.compaction.lag.ms", T.LONG, LONG_MAX, "max time a message stays uncompacted", at_least(1)),
    ConfigDef("max.message.bytes", T.INT, 1048588, "largest record batch size allowed", at_least(0)),
    ConfigDef("message.timestamp.after.max.ms", T.LONG, 3600000,
              "max allowed amount a timestamp may be ahead of the broker's time", at_least(0)),
    ConfigDef("message.timestamp.before.max.ms", T.LONG, LONG_MAX,
              "max allowed amount a timestamp may be behind the broker's time", at_least(0)),
    ConfigDef("message.timestamp.type", T.STRING, "CreateTime", "CreateTime or LogAppendTime",
              one_of("CreateTime", "LogAppendTime")),
    ConfigDef("min.cleanable.dirty.ratio", T.DOUBLE, 0.5, "dirty ratio that triggers compaction",
              between(0, 1)),
    ConfigDef("min.compaction.lag.ms", T.LONG, 0, "min time a message stays uncompacted", at_least(0)),
    ConfigDef("min.insync.replicas", T.INT, 1, "replicas that must acknowledge acks=all writes", at_least(1)),
    ConfigDef("preallocate", T.BOOLEAN, False,
              "preallocate segment files (Strom never preallocates segment files)", implemented=False),
    ConfigDef("retention.bytes", T.LONG, -1, "max partition size before old segments go (-1: no limit)"),
    ConfigDef("retention.ms", T.LONG, 604800000, "max age of a segment before it goes (-1: no limit)",
              at_least(-1)),
    ConfigDef("segment.bytes", T.INT, 1073741824, "segment file size", at_least(14)),
    ConfigDef("segment.index.bytes", T.INT, 10485760, "offset index size per segment", at_least(4)),
    ConfigDef("segment.jitter.ms", T.LONG, 0, "random jitter subtracted from segment.ms", at_least(0)),
    ConfigDef("segment.ms", T.LONG, 604800000, "time after which a segment is rolled", at_least(1)),
    ConfigDef("unclean.leader.election.enable", T.BOOLEAN, False, "allow out-of-sync replicas to lead"),
    ConfigDef("errors.deadletterqueue.group.enable", T.BOOLEAN, False,
              "whether share groups may use this topic as their dead-letter queue (KIP-1191)"),
    # Broker-side schema validation, with Confluent Server's names (strom.broker.schema_check)
    ConfigDef("confluent.key.schema.validation", T.BOOLEAN, False,
              "Confluent Server's: every non-null key must carry the id of a schema registered "
              "under the topic's key subject"),
    ConfigDef("confluent.value.schema.validation", T.BOOLEAN, False,
              "Confluent Server's: every non-null value must carry the id of a schema registered "
              "under the topic's value subject"),
    ConfigDef("confluent.key.subject.name.strategy", T.STRING, TOPIC_NAME_STRATEGY,
              "Confluent Server's: how the key subject is named (TopicNameStrategy, "
              "RecordNameStrategy, TopicRecordNameStrategy)", one_of(*SUBJECT_NAME_STRATEGIES)),
    ConfigDef("confluent.value.subject.name.strategy", T.STRING, TOPIC_NAME_STRATEGY,
              "Confluent Server's: how the value subject is named", one_of(*SUBJECT_NAME_STRATEGIES)),
    ConfigDef("errors.deadletterqueue.topic.name", T.STRING, "",
              "Strom's own at topic level: with schema validation, invalid records go to this "
              "dead-letter topic (named with the broker's errors.deadletterqueue.topic.name."
              "prefix) instead of failing their batch; in iceberg.mode=value_schema, values "
              "that do not decode go there instead of holding their partition back; empty: "
              "neither"),
    ConfigDef("strom.key.schema.validation.mode", T.STRING, "id",
              "Strom's own: id (the key's schema id is checked, as Confluent Server does) or "
              "decode (the key must also decode under that schema)", one_of("id", "decode")),
    ConfigDef("strom.value.schema.validation.mode", T.STRING, "id",
              "Strom's own: id (the value's schema id is checked, as Confluent Server does) or "
              "decode (the value must also decode under that schema)", one_of("id", "decode")),
    # Iceberg topics (strom.lake): Strom's own
    ConfigDef("iceberg.mode", T.STRING, "disabled",
              "Strom's own: with the broker's iceberg.enable, key_value appends every record "
              "to the Iceberg table <iceberg.namespace>.<topic> (partition, offset, timestamp, "
              "key, value, headers); value_schema decodes the values into the value column "
              "with the schema (Avro, JSON Schema or Protobuf) registered under <topic>-value "
              "(a value that does not decode goes to the topic's "
              "errors.deadletterqueue.topic.name, or holds its partition back, reported); "
              "disabled: no table",
              one_of("disabled", "key_value", "value_schema")),
    ConfigDef("iceberg.commit.interval.ms", T.LONG, 60000,
              "Strom's own: how often the records read from an Iceberg topic are committed to "
              "its table (one snapshot per commit)", at_least(100)),
    ConfigDef("message.downconversion.enable", T.BOOLEAN, True,
              "no-op, as in Kafka 4.0 and newer (no down-conversion)", implemented=False),
    # Tiered storage (KIP-405) is not implemented: remote.storage.enable=true is refused, as Kafka
    # refuses it on a broker without remote.log.storage.system.enable; the rest are accepted.
    ConfigDef("remote.storage.enable", T.BOOLEAN, False,
              "tiered storage (Strom: only false is accepted)", implemented=False),
    ConfigDef("local.retention.ms", T.LONG, -2, "local retention with tiered storage (-2: retention.ms)",
              at_least(-2), implemented=False),
    ConfigDef("local.retention.bytes", T.LONG, -2,
              "local retention with tiered storage (-2: retention.bytes)", at_least(-2),
              implemented=False),
    ConfigDef("remote.log.copy.disable", T.BOOLEAN, False, "stop copying to tiered storage",
              implemented=False),
    ConfigDef("remote.log.delete.on.disable", T.BOOLEAN, False,
              "delete tiered data when tiered storage is disabled", implemented=False),
)

# Topic config -> the broker configs it takes its default from, strongest first (Kafka's synonyms).
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "cleanup.policy": ("log.cleanup.policy",),
    "compression.type": ("compression.type",),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.zstd.level": ("compression.zstd.level",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "max.message.bytes": ("message.max.bytes",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "min.insync.replicas": ("min.insync.replicas",),
    "preallocate": ("log.preallocate",),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.bytes": ("log.segment.bytes",),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
}

# Broker configs given in coarser units than the topic config they back.
UNIT_FACTORS: dict[str, int] = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse and validate topic overrides; unknown names and bad values raise ConfigError.

    Configs Strom does not act on (`implemented=False`) are accepted, since Kafka's tools set
    them, except remote.storage.enable=true: data the user expects tiered would stay local.
    """
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        if name not in TOPIC_CONFIGS:
            raise ConfigError(f"Unknown topic config name: {name}")
        if raw is None:
            raise ConfigError(f"Null value not supported for topic configs: {name}")
        parsed[name] = value = TOPIC_CONFIGS.parse(name, raw)
        definition = TOPIC_CONFIGS[name]
        if not definition.implemented and value != definition.default:
            log.warning("topic config %s=%s is accepted but has no effect in Strom: %s",
                        name, raw, definition.doc)
    if parsed.get("remote.storage.enable"):
        raise ConfigError("Tiered Storage functionality is disabled in the broker. Topic cannot be "
                          "configured with remote log storage. (Strom does not implement tiered "
                          "storage.)")
    return parsed


@dataclass(frozen=True)
class ResolvedValue:
    """A topic config's effective value and where it came from (for DescribeConfigs)."""

    value: Any
    source: int
    synonym: str | None = None
