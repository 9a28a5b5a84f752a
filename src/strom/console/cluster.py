"""What the console shows, as typed snapshots, and the lag arithmetic (no I/O here).

`strom.console.kafka` fills these from admin calls; the pages and the JSON API only read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class NotFound(Exception):
    """An unknown topic or group: the page answers 404."""


class SourceError(Exception):
    """The cluster did not answer (unreachable, timed out, refused): a short message page."""


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    rack: str | None
    controller: bool

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterInfo:
    cluster_id: str | None
    controller_id: int | None
    brokers: tuple[BrokerInfo, ...]


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int | None  # None: no leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    start: int | None  # log-start offset
    end: int | None  # log-end offset (high watermark)
    size: int | None  # bytes of the leader's replica; None: not known

    @property
    def messages(self) -> int | None:
        """Offsets the log spans (records, counting transaction markers and compacted gaps)."""
        return None if self.start is None or self.end is None else max(0, self.end - self.start)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def messages(self) -> int | None:
        return _total(p.messages for p in self.partitions)

    @property
    def size(self) -> int | None:
        return _total(p.size for p in self.partitions)

    @property
    def end_offsets(self) -> int:
        return sum(p.end or 0 for p in self.partitions)


def _total(values: Iterable[int | None]) -> int | None:
    items = list(values)
    return None if any(v is None for v in items) else sum(v or 0 for v in items)


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: tuple[tuple[str, int], ...]

    @property
    def assignment_text(self) -> str:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.assignment:
            by_topic.setdefault(topic, []).append(partition)
        return ", ".join(f"{t} [{', '.join(map(str, sorted(ps)))}]"
                         for t, ps in sorted(by_topic.items()))


def lag_of(committed: int | None, end: int | None) -> int | None:
    """Kafka's consumer lag: log-end minus committed offset, never negative; unknown (None)
    without a committed offset or a log end."""
    if committed is None or committed < 0 or end is None or end < 0:
        return None
    return max(0, end - committed)


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    owner: str | None  # client id of the member assigned the partition

    @property
    def lag(self) -> int | None:
        return lag_of(self.committed, self.end)


def total_lag(lags: list[PartitionLag] | tuple[PartitionLag, ...]) -> int:
    return sum(p.lag or 0 for p in lags)


@dataclass(frozen=True)
class GroupSummary:
    group_id: str
    state: str
    type: str  # classic or consumer
    members: int
    lag: int


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str
    type: str
    assignor: str
    coordinator: str
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionLag, ...]

    @property
    def lag(self) -> int:
        return total_lag(self.partitions)

    def summary(self) -> GroupSummary:
        return GroupSummary(self.group_id, self.state, self.type, len(self.members), self.lag)


def human_bytes(n: int | None) -> str:
    """1536 -> '1.5 KiB' ('-' when unknown)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
