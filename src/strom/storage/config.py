"""Effective per-partition log configuration (Kafka topic-config names in snake_case)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.record import COMPRESSION_CODES

LONG_MAX = 9223372036854775807

COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")


@dataclass
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1  # -1 = unlimited
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    message_timestamp_type: str = "CreateTime"  # or LogAppendTime
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    compression_type: str = "producer"
    compression_gzip_level: int = -1  # -1: codec default (6), as Kafka
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    # compaction (cleanup.policy=compact): read by the log cleaner
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"invalid compression.type {self.compression_type!r}")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"invalid message.timestamp.type {self.message_timestamp_type!r}")

    @property
    def target_compression(self) -> int | None:
        """Codec the broker enforces, or None to keep what the producer sent."""
        if self.compression_type == "producer":
            return None
        return COMPRESSION_CODES[self.compression_type]

    def compression_level(self, codec: int) -> int | None:
        level = {1: self.compression_gzip_level, 3: self.compression_lz4_level,
                 4: self.compression_zstd_level}.get(codec)  # fmt: skip
        return None if level is None or level < 0 else level

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.replace(" ", "").split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.replace(" ", "").split(",")

    @property
    def max_segment_ms(self) -> int:
        """Time-based roll limit: a compacted log also rolls by max.compaction.lag.ms (as Kafka),
        since the active segment is never cleaned."""
        if 0 < self.max_compaction_lag_ms < self.segment_ms and self.compact:
            return self.max_compaction_lag_ms
        return self.segment_ms

    @classmethod
    def from_kafka(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka topic-config names (``segment.bytes`` ...); unknown names are ignored."""
        base = base or cls()
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = f.name.replace("_", ".")
            if name in props and props[name] is not None:
                v = props[name]
                changes[f.name] = v if f.type == "str" else float(v) if f.type == "float" else int(v)
        return dataclasses.replace(base, **changes)

    def to_kafka(self) -> dict[str, str]:
        """Kafka topic-config names and string values (for DescribeConfigs)."""
        return {f.name.replace("_", "."): str(getattr(self, f.name))
                for f in dataclasses.fields(self)}  # fmt: skip
