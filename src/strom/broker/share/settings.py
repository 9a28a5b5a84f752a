"""What a share partition is configured with: the group's configs over the broker's.

Kafka's group configs (`share.record.lock.duration.ms`, `share.delivery.count.limit`, ...,
`errors.deadletterqueue.*`) fall back to the broker's `group.share.*` ones; Strom adds
`share.redelivery.delay.ms` and its backoff (documented as a Strom extension).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.broker.share.partition import SharePartitionConfig

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


def broker_settings(get: Callable[[str], object]) -> ShareSettings:
    """The settings of a group with no group configs: the broker's group.share.* values."""
    def opt(name: str, default: object) -> object:
        try:
            value = get(name)
        except KeyError:
            return default
        return default if value is None else value

    return ShareSettings(SharePartitionConfig(
        delivery_count_limit=int(opt("group.share.delivery.count.limit", 5)),  # type: ignore[arg-type]
        max_in_flight_records=int(opt("group.share.partition.max.record.locks", 2000)),  # type: ignore[arg-type]
        lock_duration_ms=int(opt("group.share.record.lock.duration.ms", 30000)),  # type: ignore[arg-type]
    ))
