"""Streams-group state (KIP-1071): tasks, members, the topology and the group.

Plain data plus the small invariants Kafka keeps on them (static member index, state from the
epochs). A task is (subtopology id, partition); a member owns active, standby and warm-up tasks.
The transitions that need timers, records or responses live in `streams_groups`; these classes
never do I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from typing import Any

STREAMS = "streams"

Tasks = dict[str, frozenset[int]]  # subtopology id -> partitions
Task = tuple[str, int]


def tasks_of(d: dict[str, Any] | None) -> Tasks:
    """A Tasks value without empty subtopologies, from any mapping of iterables."""
    return {s: frozenset(ps) for s, ps in (d or {}).items() if ps}


def task_set(tasks: Tasks) -> set[Task]:
    return {(s, p) for s, ps in tasks.items() for p in ps}


def tasks_from_set(tasks: set[Task]) -> Tasks:
    out: dict[str, set[int]] = {}
    for s, p in tasks:
        out.setdefault(s, set()).add(p)
    return tasks_of(out)


@dataclass(frozen=True)
class TasksTuple:
    """Active, standby and warm-up tasks (Kafka's TasksTuple)."""

    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def contains_any(self, other: TasksTuple) -> bool:
        return any(task_set(a) & task_set(b) for a, b in zip(self.roles(), other.roles(), strict=True))

    def roles(self) -> tuple[Tasks, Tasks, Tasks]:
        return self.active, self.standby, self.warmup

    def is_subset_of(self, other: TasksTuple) -> bool:
        return all(task_set(a) <= task_set(b) for a, b in zip(self.roles(), other.roles(), strict=True))


EMPTY_TASKS = TasksTuple()


class StreamsMemberState(IntEnum):
    STABLE = 0
    UNREVOKED_TASKS = 1
    UNRELEASED_TASKS = 2
    UNKNOWN = 127


class StreamsState(Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class TopicInfo:
    """An internal topic the topology asks for: partitions 0 means "decided by the broker",
    replication factor 0 the broker default."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()

    def fields(self) -> dict[str, Any]:
        return {"name": self.name, "partitions": self.partitions,
                "replication_factor": self.replication_factor,
                "topic_configs": [{"key": k, "value": v} for k, v in self.configs]}

    @classmethod
    def from_fields(cls, v: Any) -> TopicInfo:
        get: Callable[[str], Any] = v.get if isinstance(v, dict) else lambda k: getattr(v, k)
        return cls(get("name"), get("partitions"), get("replication_factor"),
                   tuple((_kv(c, "key"), _kv(c, "value")) for c in get("topic_configs") or ()))


def _kv(entry: Any, name: str) -> Any:
    return entry[name] if isinstance(entry, dict) else getattr(entry, name)


@dataclass(frozen=True)
class CopartitionGroup:
    """Indexes into the subtopology's source topics, regexes and repartition source topics."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True)
class StreamsTopology:
    """The topology a streams group was initialized with (Kafka's StreamsGroupTopologyValue)."""

    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def fields(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "subtopologies": [{
            "subtopology_id": s.subtopology_id, "source_topics": list(s.source_topics),
            "source_topic_regex": list(s.source_topic_regex),
            "state_changelog_topics": [t.fields() for t in s.state_changelog_topics],
            "repartition_sink_topics": list(s.repartition_sink_topics),
            "repartition_source_topics": [t.fields() for t in s.repartition_source_topics],
            "copartition_groups": [{
                "source_topics": list(g.source_topics),
                "source_topic_regex": list(g.source_topic_regex),
                "repartition_source_topics": list(g.repartition_source_topics)}
                for g in s.copartition_groups]} for s in self.subtopologies]}

    @classmethod
    def from_fields(cls, v: Any) -> StreamsTopology:
        """From a heartbeat's Topology (a decoded Struct) or a replayed record (a dict)."""
        def get(o: Any, name: str) -> Any:
            return o[name] if isinstance(o, dict) else getattr(o, name)

        subs = []
        for s in get(v, "subtopologies") or ():
            subs.append(Subtopology(
                get(s, "subtopology_id"), tuple(get(s, "source_topics") or ()),
                tuple(get(s, "source_topic_regex") or ()),
                tuple(TopicInfo.from_fields(t) for t in get(s, "state_changelog_topics") or ()),
                tuple(get(s, "repartition_sink_topics") or ()),
                tuple(TopicInfo.from_fields(t) for t in get(s, "repartition_source_topics") or ()),
                tuple(CopartitionGroup(tuple(get(g, "source_topics") or ()),
                                       tuple(get(g, "source_topic_regex") or ()),
                                       tuple(get(g, "repartition_source_topics") or ()))
                      for g in get(s, "copartition_groups") or ())))
        return cls(get(v, "epoch"), tuple(subs))

    def source_topics(self) -> set[str]:
        """Every topic the topology reads, repartition topics included (the topics whose
        offsets the application commits)."""
        return {t for s in self.subtopologies for t in s.source_topics} | \
            {t.name for s in self.subtopologies for t in s.repartition_source_topics}


@dataclass
class StreamsMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout: int = -1
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: StreamsMemberState = StreamsMemberState.STABLE
    assigned: TasksTuple = EMPTY_TASKS
    pending_revocation: TasksTuple = EMPTY_TASKS
    # what the member last reported (not persisted, shown by StreamsGroupDescribe)
    task_offsets: tuple[tuple[str, int, int], ...] = ()
    task_end_offsets: tuple[tuple[str, int, int], ...] = ()

    def copy(self, **changes: Any) -> StreamsMember:
        return replace(self, **changes)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == StreamsMemberState.STABLE and self.member_epoch == epoch

    def assignment_key(self) -> tuple[object, ...]:
        """What the assignor reads of a member: a change bumps the group epoch."""
        return (self.process_id, self.rack_id, self.client_tags, self.instance_id)

    def metadata_fields(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "rack_id": self.rack_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "rebalance_timeout": self.rebalance_timeout,
                "topology_epoch": self.topology_epoch, "process_id": self.process_id,
                "user_endpoint": None if self.user_endpoint is None else
                {"host": self.user_endpoint[0], "port": self.user_endpoint[1]},
                "client_tags": [{"key": k, "value": v} for k, v in self.client_tags]}


@dataclass
class StreamsGroup:
    group_id: str
    now_ms: int
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, StreamsMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, TasksTuple] = field(default_factory=dict)
    topology: StreamsTopology | None = None
    metadata_hash: int = 0
    validated_topology_epoch: int = -1
    deleted: bool = False
    # not persisted: the topology configured against the topics (streams_topology), the member
    # that asked the application to shut down, the endpoint-information epoch
    configured: Any = None
    shutdown_requested_by: str | None = None
    endpoint_epoch: int = 0
    metadata_version: int | None = None  # the topics-view version `configured` was made at
    delayed_until: int | None = None  # the initial rebalance delay of a group that was empty

    type = STREAMS
    protocol_type = STREAMS

    @property
    def state(self) -> StreamsState:
        if self.deleted:
            return StreamsState.DEAD
        if not self.members:
            return StreamsState.EMPTY
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return StreamsState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return StreamsState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return StreamsState.RECONCILING
        return StreamsState.STABLE

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members

    def static_member(self, instance_id: str | None) -> StreamsMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def put_member(self, member: StreamsMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> StreamsMember | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id is not None and \
                self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        if not self.members:
            self.shutdown_requested_by = None
        return member

    def is_subscribed_to(self, topic: str) -> bool:
        """Offsets of a topic the running topology reads do not expire (Kafka's rule)."""
        return bool(self.members) and self.topology is not None and \
            topic in self.topology.source_topics()
