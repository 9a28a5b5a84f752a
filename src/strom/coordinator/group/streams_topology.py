"""A streams group's topology against the cluster's topics (Kafka's InternalTopicManager).

`validate` rejects a topology that cannot be right whatever the topics (the heartbeat answers
STREAMS_INVALID_TOPOLOGY). `configure` decides, for the topics as they are now:

- the number of tasks of each subtopology: the largest partition count of its source topics,
  repartition source topics included;
- the partition count of each repartition topic the topology does not fix: the largest task
  count of the subtopologies writing to it, found by iterating until nothing changes (a
  repartition topic may be fed by another one);
- copartition groups: their user topics must have equal partition counts, and the flexible
  repartition topics among them take that count;
- changelog topics get their subtopology's task count.

The result is either ready (task counts known, every internal topic present with the right
partition count) or carries the status to report: MISSING_SOURCE_TOPICS,
INCORRECTLY_PARTITIONED_TOPICS or MISSING_INTERNAL_TOPICS (with the topics to create).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from strom.common.regex import RegexError, compile_regex
from strom.coordinator.group.streams_state import StreamsTopology, Subtopology, TopicInfo
from strom.protocol.errors import ErrorCode, KafkaError

MAX_TOPIC_NAME = 249
_LEGAL = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class Status(IntEnum):
    """StreamsGroupHeartbeat's status codes."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5


class Topics(Protocol):
    """What the topology needs of the cluster's topics (the coordinator's TopicsView fits)."""

    def topic(self, name: str) -> tuple[object, int] | None: ...

    def names(self) -> Iterable[str]: ...


@dataclass(frozen=True)
class NewTopic:
    """An internal topic to create: replication factor -1 is the broker default."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


@dataclass
class ConfiguredTopology:
    epoch: int
    metadata_hash: int
    task_counts: dict[str, int] = field(default_factory=dict)  # subtopology id -> tasks
    # subtopology id -> its source topics, repartition source topics included (regexes resolved)
    source_topics: dict[str, list[str]] = field(default_factory=dict)
    internal_partitions: dict[str, int] = field(default_factory=dict)
    to_create: list[NewTopic] = field(default_factory=list)
    status: tuple[Status, str] | None = None

    @property
    def ready(self) -> bool:
        return self.status is None


class _NotConfigurable(Exception):
    def __init__(self, status: Status, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _valid_name(name: str) -> bool:
    return 0 < len(name) <= MAX_TOPIC_NAME and name not in (".", "..") and set(name) <= _LEGAL


def validate(topology: StreamsTopology) -> None:
    """Raise STREAMS_INVALID_TOPOLOGY for a topology no set of topics could make work."""
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.STREAMS_INVALID_TOPOLOGY, message)

    seen: set[str] = set()
    sinks = {t for s in topology.subtopologies for t in s.repartition_sink_topics}
    for s in topology.subtopologies:
        if s.subtopology_id in seen:
            raise invalid(f"Duplicate subtopology id {s.subtopology_id}.")
        seen.add(s.subtopology_id)
        if not (s.source_topics or s.source_topic_regex or s.repartition_source_topics):
            raise invalid(f"Subtopology {s.subtopology_id} has no source topics.")
        for t in (*s.state_changelog_topics, *s.repartition_source_topics):
            if not _valid_name(t.name):
                raise invalid(f"Internal topic name {t.name!r} is not a valid topic name.")
            if t.partitions < 0:
                raise invalid(f"Internal topic {t.name} has a negative partition count.")
        for t in s.state_changelog_topics:
            if t.partitions != 0:
                raise invalid(f"Changelog topic {t.name} must have an undefined partition "
                              f"count, but it is set to {t.partitions}.")
        for t in s.repartition_source_topics:
            if t.partitions == 0 and t.name not in sinks:
                raise invalid("Failed to compute number of partitions for all repartition "
                              "topics, because a repartition source topic is never used as a "
                              "sink topic.")
        for regex in s.source_topic_regex:
            try:
                compile_regex(regex)
            except RegexError as exc:
                raise invalid(f"Source topic regex {regex} is invalid: {exc}") from None
        sizes = (len(s.source_topics), len(s.source_topic_regex), len(s.repartition_source_topics))
        for g in s.copartition_groups:
            for indexes, size in zip((g.source_topics, g.source_topic_regex,
                                      g.repartition_source_topics), sizes, strict=True):
                if any(i < 0 or i >= size for i in indexes):
                    raise invalid(f"Copartition group of subtopology {s.subtopology_id} refers "
                                  "to a topic that does not exist.")


def _summary(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


class _Configurer:
    def __init__(self, topology: StreamsTopology, topics: Topics) -> None:
        self.topology = topology
        self.topics = topics
        self.internal: dict[str, TopicInfo] = {}
        for s in topology.subtopologies:
            for t in (*s.repartition_source_topics, *s.state_changelog_topics):
                self.internal[t.name] = t
        self.repartition = {t.name: t for s in topology.subtopologies
                            for t in s.repartition_source_topics}
        self.decided: dict[str, int] = {}
        self.sources: dict[str, list[str]] = {}

    def count(self, topic: str) -> int | None:
        found = self.topics.topic(topic)
        if found is not None:
            return found[1]
        return self.decided.get(topic)

    def resolve_sources(self) -> None:
        """User source topics per subtopology (regexes matched against the topics); all must
        exist."""
        missing: set[str] = set()
        names = None
        for s in self.topology.subtopologies:
            topics = [t for t in s.source_topics if t not in self.repartition]
            for t in topics:
                if self.topics.topic(t) is None:
                    missing.add(t)
            for regex in s.source_topic_regex:
                if names is None:
                    names = sorted(self.topics.names())
                pattern = compile_regex(regex)
                matched = [n for n in names if pattern.fullmatch(n)]
                if not matched:
                    missing.add(f"regex {regex}")
                topics += [n for n in matched if n not in topics]
            self.sources[s.subtopology_id] = topics
        if missing:
            raise _NotConfigurable(Status.MISSING_SOURCE_TOPICS,
                                   f"Source topics {_summary(missing)} are missing.")

    def all_sources(self, s: Subtopology) -> list[str]:
        return self.sources[s.subtopology_id] + [t.name for t in s.repartition_source_topics]

    def decide_repartition(self) -> None:
        for name, info in self.repartition.items():
            if info.partitions > 0:
                self.decided[name] = info.partitions
        pending = [n for n in self.repartition if n not in self.decided]
        while pending:
            progress = False
            for name in list(pending):
                counts = [c for s in self.topology.subtopologies
                          if name in s.repartition_sink_topics
                          for t in self.all_sources(s)
                          if (c := self.count(t)) is not None]
                if counts:
                    self.decided[name] = max(counts)
                    pending.remove(name)
                    progress = True
            if not progress:
                raise _NotConfigurable(Status.MISSING_SOURCE_TOPICS,
                                       "Cannot compute the number of partitions of repartition "
                                       f"topics {_summary(pending)}.")

    def enforce_copartitioning(self) -> None:
        for s in self.topology.subtopologies:
            regex_topics = self.sources[s.subtopology_id][len([
                t for t in s.source_topics if t not in self.repartition]):]
            for g in s.copartition_groups:
                group = {s.source_topics[i] for i in g.source_topics}
                group |= {s.repartition_source_topics[i].name for i in g.repartition_source_topics}
                if g.source_topic_regex:
                    group |= set(regex_topics)
                self._copartition(group)

    def _copartition(self, group: set[str]) -> None:
        # (resolve_sources made sure every user source topic exists, so each has a count)
        user = {t: c for t in group
                if t not in self.repartition and (c := self.count(t)) is not None}
        fixed = {t: self.repartition[t].partitions for t in group
                 if t in self.repartition and self.repartition[t].partitions > 0}
        flexible = [t for t in group if t in self.repartition and t not in fixed]
        if len(set(user.values())) > 1:
            raise _NotConfigurable(
                Status.INCORRECTLY_PARTITIONED_TOPICS,
                f"Following topics do not have the same number of partitions: "
                f"[{_summary(f'{t}({n})' for t, n in user.items())}]")
        if user:
            count = next(iter(user.values()))
            wrong = [t for t, n in fixed.items() if n != count]
            if wrong:
                raise _NotConfigurable(
                    Status.INCORRECTLY_PARTITIONED_TOPICS,
                    f"Number of partitions [{count}] of repartition topics {_summary(wrong)} "
                    "does not match the number of partitions of the copartitioned topics.")
        elif fixed:
            if len(set(fixed.values())) > 1:
                raise _NotConfigurable(
                    Status.INCORRECTLY_PARTITIONED_TOPICS,
                    f"Repartition topics {_summary(fixed)} must have the same number of "
                    "partitions.")
            count = next(iter(fixed.values()))
        else:
            counts = [c for t in flexible if (c := self.count(t)) is not None]
            if not counts:
                return
            count = max(counts)
        for t in flexible:
            if self.topics.topic(t) is None:
                self.decided[t] = count

    def task_counts(self) -> dict[str, int]:
        out = {}
        for s in self.topology.subtopologies:
            counts = [c for t in self.all_sources(s) if (c := self.count(t)) is not None]
            out[s.subtopology_id] = max(counts) if counts else 0
        return out

    def missing_internal(self, tasks: dict[str, int]) -> list[NewTopic]:
        for s in self.topology.subtopologies:
            for t in s.state_changelog_topics:
                self.decided[t.name] = tasks[s.subtopology_id]
        out = []
        for name, info in sorted(self.internal.items()):
            want = self.decided[name]
            found = self.topics.topic(name)
            if found is None:
                out.append(NewTopic(name, want, info.replication_factor or -1,
                                    dict(info.configs)))
            elif found[1] != want:
                raise _NotConfigurable(
                    Status.INCORRECTLY_PARTITIONED_TOPICS,
                    f"Existing topic {name} has different number of partitions: expected "
                    f"{want}, found {found[1]}")
        return out


def missing_detail(topics: Iterable[NewTopic]) -> str:
    return f"Internal topics are missing: {_summary(t.name for t in topics)}"


def metadata_hash(topology: StreamsTopology, topics: Topics) -> int:
    """A stable digest of every topic the topology reads or writes (name, id, partitions) and
    the topics its regexes can match: a change means the topology must be configured again."""
    names: set[str] = set()
    for s in topology.subtopologies:
        names.update(s.source_topics)
        names.update(t.name for t in (*s.repartition_source_topics, *s.state_changelog_topics))
    if any(s.source_topic_regex for s in topology.subtopologies):
        names.update(topics.names())
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(names):
        found = topics.topic(name)
        h.update(f"{name}\0{found[0] if found else '-'}\0{found[1] if found else -1}\n".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


def configure(topology: StreamsTopology, topics: Topics) -> ConfiguredTopology:
    out = ConfiguredTopology(topology.epoch, metadata_hash(topology, topics))
    c = _Configurer(topology, topics)
    try:
        c.resolve_sources()
        c.decide_repartition()
        c.enforce_copartitioning()
        out.task_counts = c.task_counts()
        out.to_create = c.missing_internal(out.task_counts)
    except _NotConfigurable as exc:
        out.task_counts = {}
        out.status = (exc.status, exc.detail)
        return out
    out.source_topics = {s.subtopology_id: c.all_sources(s) for s in topology.subtopologies}
    out.internal_partitions = {n: c.decided[n] for n in c.internal}
    if out.to_create:
        out.status = (Status.MISSING_INTERNAL_TOPICS, missing_detail(out.to_create))
    return out
