"""The broker configs the share coordinator uses: Kafka's ShareCoordinatorConfig names and
defaults (declared for the broker in `strom.config.broker`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ShareCoordinatorConfig:
    state_partitions: int = 50  # share.coordinator.state.topic.num.partitions
    replication_factor: int = 3  # share.coordinator.state.topic.replication.factor
    min_isr: int = 2  # share.coordinator.state.topic.min.isr
    segment_bytes: int = 104857600  # share.coordinator.state.topic.segment.bytes
    updates_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot
    write_timeout_ms: int = 5000  # share.coordinator.write.timeout.ms
    prune_interval_ms: int = 300000  # share.coordinator.state.topic.prune.interval.ms

    @classmethod
    def from_config(cls, get: Callable[[str], Any]) -> ShareCoordinatorConfig:
        def opt(name: str) -> int:
            return int(get(name))  # the registry holds Kafka's default

        return cls(
            state_partitions=opt("share.coordinator.state.topic.num.partitions"),
            replication_factor=opt("share.coordinator.state.topic.replication.factor"),
            min_isr=opt("share.coordinator.state.topic.min.isr"),
            segment_bytes=opt("share.coordinator.state.topic.segment.bytes"),
            updates_per_snapshot=opt("share.coordinator.snapshot.update.records.per.snapshot"),
            write_timeout_ms=opt("share.coordinator.write.timeout.ms"),
            prune_interval_ms=opt("share.coordinator.state.topic.prune.interval.ms"),
        )

    def topic_configs(self) -> dict[str, str]:
        """The configs Kafka creates `__share_group_state` with."""
        return {"cleanup.policy": "delete", "compression.type": "producer",
                "segment.bytes": str(self.segment_bytes), "min.insync.replicas": str(self.min_isr),
                "retention.ms": "-1"}
