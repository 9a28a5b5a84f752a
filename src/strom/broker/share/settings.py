"""What a share partition is configured with: the group's configs over the broker's.

Kafka's group configs (`share.record.lock.duration.ms`, `share.delivery.count.limit`, ...,
`errors.deadletterqueue.*`) fall back to the broker's `group.share.*` ones; Strom adds
`share.redelivery.delay.ms` and its backoff (documented as a Strom extension).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from strom.broker.share.partition import SharePartitionConfig
from strom.coordinator.group.group_configs import EffectiveGroupConfig

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$")


def duration_ms(reset: str) -> int:
    """Milliseconds of `by_duration:<ISO-8601 duration>` (PnDTnHnMn.nS, as Java's Duration)."""
    text = reset.split(":", 1)[1] if ":" in reset else reset
    m = _DURATION.match(text.strip().upper())
    if m is None or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration")
    days, hours, minutes = (int(m.group(g) or 0) for g in "dhm")
    seconds = float(m.group("s") or 0)
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


@dataclass(frozen=True)
class ShareSettings:
    partition: SharePartitionConfig = field(default_factory=SharePartitionConfig)
    auto_offset_reset: str = "latest"  # latest | earliest | by_duration:<ISO-8601>
    read_committed: bool = False  # share.isolation.level
    dlq_topic: str = ""  # errors.deadletterqueue.topic.name (KIP-1191)
    dlq_copy_record: bool = False  # errors.deadletterqueue.copy.record.enable
    dlq_prefix: str = "dlq."  # errors.deadletterqueue.topic.name.prefix (a broker config)


def group_settings(cfg: EffectiveGroupConfig) -> ShareSettings:
    """A group's share settings from its configs in force (group configs over the broker's)."""
    return ShareSettings(
        SharePartitionConfig(
            delivery_count_limit=cfg.share_delivery_count_limit,
            max_in_flight_records=cfg.share_partition_max_record_locks,
            lock_duration_ms=cfg.share_record_lock_duration_ms,
            dead_letter=bool(cfg.errors_deadletterqueue_topic_name),
            redelivery_delay_ms=cfg.share_redelivery_delay_ms,
            redelivery_backoff_multiplier=cfg.share_redelivery_backoff_multiplier,
            redelivery_max_delay_ms=cfg.share_redelivery_max_delay_ms,
            renew_enabled=cfg.share_renew_acknowledge_enable),
        auto_offset_reset=cfg.share_auto_offset_reset,
        read_committed=cfg.share_isolation_level == "read_committed",
        dlq_topic=cfg.errors_deadletterqueue_topic_name,
        dlq_copy_record=cfg.errors_deadletterqueue_copy_record_enable,
        dlq_prefix=cfg.errors_deadletterqueue_topic_name_prefix)
