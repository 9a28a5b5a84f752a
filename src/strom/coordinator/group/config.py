"""The broker configs the group coordinator reads, under Kafka's names and defaults.

A module of its own because the group managers (classic, consumer, streams, offsets) and the
shared shard state read it, and none of them should import another just for its settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from strom.coordinator.group.group_configs import ChangeListener, EffectiveGroupConfig

INT_MAX = 2147483647

T = TypeVar("T")


@dataclass
class GroupConfig:
    """The broker configs the coordinator uses (Kafka's names in comments)."""

    offsets_partitions: int = 50  # offsets.topic.num.partitions
    min_session_timeout: int = 6000  # group.min.session.timeout.ms
    max_session_timeout: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay: int = 3000  # group.initial.rebalance.delay.ms
    max_group_size: int = INT_MAX  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval: int = 600000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    commit_timeout_ms: int = 5000  # offsets.commit.timeout.ms: a write waits for its replicas
    consumer_session_timeout: int = 45000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval: int = 5000  # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = INT_MAX  # group.consumer.max.size
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    rebalance_protocols: tuple[str, ...] = ("classic", "consumer", "streams")
    new_member_join_timeout: int = 300000  # Kafka's fixed 5 minutes
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy
    streams_session_timeout: int = 45000  # group.streams.session.timeout.ms
    streams_heartbeat_interval: int = 5000  # group.streams.heartbeat.interval.ms
    streams_max_size: int = INT_MAX  # group.streams.max.size
    streams_num_standby_replicas: int = 0  # group.streams.num.standby.replicas
    streams_initial_rebalance_delay: int = 3000  # group.streams.initial.rebalance.delay.ms
    share_session_timeout: int = 45000  # group.share.session.timeout.ms
    share_heartbeat_interval: int = 5000  # group.share.heartbeat.interval.ms
    share_max_size: int = 200  # group.share.max.size
    share_assignors: tuple[str, ...] = ("simple",)  # group.share.assignors

    def effective_group_config(self) -> EffectiveGroupConfig:
        """Every group's configs when no group sets its own (a coordinator without a broker)."""
        return EffectiveGroupConfig(
            consumer_session_timeout_ms=self.consumer_session_timeout,
            consumer_heartbeat_interval_ms=self.consumer_heartbeat_interval,
            streams_session_timeout_ms=self.streams_session_timeout,
            streams_heartbeat_interval_ms=self.streams_heartbeat_interval,
            streams_num_standby_replicas=self.streams_num_standby_replicas,
            streams_initial_rebalance_delay_ms=self.streams_initial_rebalance_delay)

    @property
    def upgrade_enabled(self) -> bool:
        """A non-empty classic group may become a consumer group (KIP-848 online upgrade)."""
        return self.migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        """A consumer group left with classic members only may become a classic group."""
        return self.migration_policy in ("bidirectional", "downgrade")

    @classmethod
    def from_config(cls, get: Callable[[str], object]) -> GroupConfig:
        def opt(name: str, _default: T) -> T:
            """The registry's value (typed, defaulted there); the second argument only names
            the field's type for the checker."""
            return get(name)  # type: ignore[return-value]  # the registry typed it as _default

        return cls(
            offsets_partitions=opt("offsets.topic.num.partitions", 50),
            min_session_timeout=opt("group.min.session.timeout.ms", 6000),
            max_session_timeout=opt("group.max.session.timeout.ms", 1800000),
            initial_rebalance_delay=opt("group.initial.rebalance.delay.ms", 3000),
            max_group_size=opt("group.max.size", INT_MAX),
            offsets_retention_ms=opt("offsets.retention.minutes", 10080) * 60000,
            offsets_retention_check_interval=opt("offsets.retention.check.interval.ms", 600000),
            offset_metadata_max_bytes=opt("offset.metadata.max.bytes", 4096),
            commit_timeout_ms=opt("offsets.commit.timeout.ms", 5000),
            consumer_session_timeout=opt("group.consumer.session.timeout.ms", 45000),
            consumer_heartbeat_interval=opt("group.consumer.heartbeat.interval.ms", 5000),
            consumer_max_size=opt("group.consumer.max.size", INT_MAX),
            consumer_assignors=tuple(opt("group.consumer.assignors", ["uniform", "range"])),
            rebalance_protocols=tuple(p.lower() for p in opt(
                "group.coordinator.rebalance.protocols", ["classic", "consumer", "streams"])),
            migration_policy=str(opt("group.consumer.migration.policy", "bidirectional")).lower(),
            streams_session_timeout=opt("group.streams.session.timeout.ms", 45000),
            streams_heartbeat_interval=opt("group.streams.heartbeat.interval.ms", 5000),
            streams_max_size=opt("group.streams.max.size", INT_MAX),
            streams_num_standby_replicas=opt("group.streams.num.standby.replicas", 0),
            streams_initial_rebalance_delay=opt("group.streams.initial.rebalance.delay.ms", 3000),
            share_session_timeout=opt("group.share.session.timeout.ms", 45000),
            share_heartbeat_interval=opt("group.share.heartbeat.interval.ms", 5000),
            share_max_size=opt("group.share.max.size", 200),
            share_assignors=tuple(opt("group.share.assignors", ["simple"])),
        )


class BrokerGroupConfigs:
    """`GroupConfigs` without group configs: every group gets the broker's values, read from
    the `GroupConfig` at each call (a coordinator built without a broker, and tests)."""

    def __init__(self, config: GroupConfig) -> None:
        self.config = config

    def for_group(self, group_id: str) -> EffectiveGroupConfig:
        return self.config.effective_group_config()

    def subscribe(self, listener: ChangeListener) -> None:
        """Nothing ever changes."""
