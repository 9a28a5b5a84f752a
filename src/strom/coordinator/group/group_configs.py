"""Per-group configs as the group coordinator sees them: the values in force for one group.

Kafka 4.4's group configs (`kafka-configs --entity-type groups`, DescribeConfigs and
IncrementalAlterConfigs on GROUP resources) override, per group, the broker's group.* configs.
The broker resolves them (strom.config.group: overrides clamped to the broker's bounds, else
the broker's values) and hands the coordinators a `GroupConfigs`; the coordinators read
`for_group(group_id)` whenever they need a value, so a change applies from the next heartbeat,
session timer or assignment on, as in Kafka, and may subscribe to be told of changes.

Every coordinator (consumer, streams, share) and its tests can use this module (it needs only
strom.config.group); `StaticGroupConfigs` serves a coordinator built without a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from strom.config.group import parse_auto_offset_reset

# Called with the id of the group whose configs changed, or None when every group's may have
# (a broker config they fall back to changed).
ChangeListener = Callable[[str | None], None]


@dataclass(frozen=True)
class EffectiveGroupConfig:
    """A group's configs in force (Kafka's GroupConfig names, dots as underscores): its own
    overrides, clamped to the broker's bounds, else the broker's group.* values."""

    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_assignment_interval_ms: int = 1000
    consumer_assignor_offload_enable: bool = True
    share_session_timeout_ms: int = 45000
    share_heartbeat_interval_ms: int = 5000
    share_record_lock_duration_ms: int = 30000
    share_delivery_count_limit: int = 5
    share_partition_max_record_locks: int = 2000
    share_auto_offset_reset: str = "latest"  # latest | earliest | by_duration:<ISO-8601>
    share_isolation_level: str = "read_uncommitted"  # read_committed | read_uncommitted
    share_renew_acknowledge_enable: bool = True
    share_assignment_interval_ms: int = 1000
    share_assignor_offload_enable: bool = True
    streams_session_timeout_ms: int = 45000
    streams_heartbeat_interval_ms: int = 5000
    streams_num_standby_replicas: int = 0
    streams_initial_rebalance_delay_ms: int = 3000
    streams_assignment_interval_ms: int = 1000
    streams_rack_aware_assignment_tags: tuple[str, ...] = ()
    streams_assignor_offload_enable: bool = True
    streams_task_offset_interval_ms: int = 60000
    streams_num_warmup_replicas: int = 2
    streams_acceptable_recovery_lag: int = 10000
    streams_assignor_name: str = "sticky"
    errors_deadletterqueue_topic_name: str = ""  # "" = no dead-letter queue
    errors_deadletterqueue_copy_record_enable: bool = False
    # Strom extension (not in Kafka): a delay before a released record is delivered again
    share_redelivery_delay_ms: int = 0
    share_redelivery_backoff_multiplier: float = 1.0
    share_redelivery_max_delay_ms: int = 60000
    # broker-level, the same for every group (errors.deadletterqueue.*)
    errors_deadletterqueue_topic_name_prefix: str = "dlq."
    errors_deadletterqueue_auto_create_topics_enable: bool = False

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> EffectiveGroupConfig:
        """From values keyed by Kafka's config names (`consumer.session.timeout.ms`); names
        this class lacks are ignored, missing ones keep their defaults."""
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, value in values.items():
            attr = name.replace(".", "_")
            if attr in known and value is not None:
                kwargs[attr] = tuple(value) if isinstance(value, list) else value
        return cls(**kwargs)

    def auto_offset_reset(self) -> tuple[str, int | None]:
        """share.auto.offset.reset as ('earliest' | 'latest', None) or ('by_duration', ms);
        the value was validated when it was set."""
        return parse_auto_offset_reset(self.share_auto_offset_reset)

    def redelivery_delay_ms(self, delivery_count: int) -> int:
        """How long a record released after its `delivery_count`-th delivery (1 = first) waits
        before it may be delivered again (Strom's share.redelivery.* configs; 0 = at once)."""
        if self.share_redelivery_delay_ms <= 0 or delivery_count < 1:
            return 0
        delay = self.share_redelivery_delay_ms * (
            self.share_redelivery_backoff_multiplier ** (delivery_count - 1))
        return int(min(delay, self.share_redelivery_max_delay_ms))


class GroupConfigs(Protocol):
    """What the coordinators read per group."""

    def for_group(self, group_id: str) -> EffectiveGroupConfig:
        """The configs in force for this group now (cheap: cached until they change)."""
        ...

    def subscribe(self, listener: ChangeListener) -> None:
        """Call `listener(group_id)` after a group's configs change, `listener(None)` after a
        broker config every group falls back to changed (event loop thread)."""
        ...


class StaticGroupConfigs:
    """The same configs for every group (no per-group overrides): a coordinator built without
    a broker, and tests."""

    def __init__(self, default: EffectiveGroupConfig | None = None) -> None:
        self.default = default or EffectiveGroupConfig()
        self.overrides: dict[str, EffectiveGroupConfig] = {}
        self._listeners: list[ChangeListener] = []

    def for_group(self, group_id: str) -> EffectiveGroupConfig:
        return self.overrides.get(group_id, self.default)

    def subscribe(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def set(self, group_id: str, config: EffectiveGroupConfig) -> None:
        """Give one group its own configs (tests) and tell the listeners."""
        self.overrides[group_id] = config
        for listener in list(self._listeners):
            listener(group_id)
