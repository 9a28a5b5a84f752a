"""Fixtures of the coordinator tests: a fake clock and loop (both coordinators), and a group
coordinator on it writing to real partition logs in a temp dir (`env`, helpers in `h`)."""

from __future__ import annotations

import heapq
import itertools
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from strom.coordinator.group.classic_groups import JoinRequest
from strom.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from strom.coordinator.group.offsets import OffsetManager
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

OFFSETS_TOPIC_ID = uuid.UUID(int=7)


class FakeHandle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """`call_later` on a manual clock; `advance(ms)` runs what falls due, in order."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = float(start_ms)
        self._heap: list[tuple[float, int, FakeHandle, Any, tuple]] = []
        self._seq = itertools.count()

    def call_later(self, delay: float, callback: Any, *args: Any) -> FakeHandle:
        handle = FakeHandle()
        heapq.heappush(self._heap, (self.now + delay * 1000, next(self._seq), handle, callback,
                                    args))
        return handle

    def now_ms(self) -> int:
        return int(self.now)

    def advance(self, ms: float = 0) -> None:
        target = self.now + ms
        while self._heap and self._heap[0][0] <= target:
            when, _, handle, callback, args = heapq.heappop(self._heap)
            self.now = max(self.now, when)
            if not handle.cancelled:
                callback(*args)
        self.now = target

    def pending(self) -> int:
        return sum(1 for e in self._heap if not e[2].cancelled)


class LogsTopic:
    """`OffsetsTopic` over real PartitionLogs (so load/replay reads what append wrote)."""

    def __init__(self, base: Path, partitions: int, loop: FakeLoop) -> None:
        self.base = base
        self.partitions = partitions
        self.loop = loop
        self.logs: dict[int, PartitionLog] = {}
        self.created = False
        self.fail_appends: Exception | None = None

    def _open(self, p: int) -> PartitionLog:
        return PartitionLog(self.base / f"__consumer_offsets-{p}", "__consumer_offsets", p,
                            OFFSETS_TOPIC_ID, LogConfig(cleanup_policy="compact"),
                            clock=lambda: self.loop.now / 1000)

    def num_partitions(self) -> int | None:
        return self.partitions if self.created else None

    def create(self) -> int:
        if not self.created:
            self.created = True
            for p in range(self.partitions):
                self.logs[p] = self._open(p)
        return self.partitions

    def log(self, partition: int) -> Any:
        log = self.logs.get(partition)
        if log is not None and self.fail_appends is not None:
            return _Failing(log, self.fail_appends)
        return log

    def leader_epoch(self, partition: int) -> int:
        return 0

    def reopen(self) -> None:
        """Close and reopen every log from disk (a broker restart)."""
        for p, log in list(self.logs.items()):
            log.close()
            self.logs[p] = self._open(p)

    def record_count(self) -> int:
        return sum(log.log_end_offset for log in self.logs.values())


class _Failing:
    def __init__(self, log: PartitionLog, exc: Exception) -> None:
        self._log, self._exc = log, exc

    def append(self, *a: Any, **k: Any) -> Any:
        raise self._exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


class FakeTopics:
    def __init__(self) -> None:
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        self._version = 0

    def add(self, name: str, partitions: int) -> uuid.UUID:
        old = self.topics.get(name)
        topic_id = old[0] if old else uuid.uuid4()
        self.topics[name] = (topic_id, partitions)
        self._version += 1
        return topic_id

    def version(self) -> int:
        return self._version

    def topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        return self.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for name, (tid, _) in self.topics.items():
            if tid == topic_id:
                return name
        return None

    def names(self) -> list[str]:
        return list(self.topics)


@dataclass
class Env:
    loop: FakeLoop
    offsets: LogsTopic
    topics: FakeTopics
    config: GroupConfig
    coordinator: GroupCoordinator = field(init=False)

    def __post_init__(self) -> None:
        self.coordinator = self.new_coordinator()

    def new_coordinator(self) -> GroupCoordinator:
        c = GroupCoordinator(self.config, self.offsets, self.topics, self.loop, self.loop.now_ms)
        if self.offsets.created:
            for p in range(self.offsets.partitions):
                c.on_leadership(p, True, 0)
            self.loop.advance(0)
        return c

    def restart(self) -> GroupCoordinator:
        """A broker restart: the old coordinator goes away, logs are reopened and replayed."""
        self.coordinator.shutdown()
        self.offsets.reopen()
        self.coordinator = self.new_coordinator()
        return self.coordinator


@pytest.fixture
def env(tmp_path: Path) -> Env:
    loop = FakeLoop()
    offsets = LogsTopic(tmp_path, 3, loop)
    offsets.create()
    config = GroupConfig(offsets_partitions=3, initial_rebalance_delay=0,
                         consumer_heartbeat_interval=1000, consumer_session_timeout=10000)
    return Env(loop, offsets, FakeTopics(), config)


class Reply:
    """Collects what a `respond` callback receives (a JoinReply or a SyncReply)."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> None:
        self.values.append(value)

    @property
    def done(self) -> bool:
        return bool(self.values)

    @property
    def value(self) -> Any:
        assert len(self.values) == 1, self.values
        return self.values[0]


def join_req(group: str, member_id: str = "", *, instance: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, session: int = 10000,
             rebalance: int = 30000, client: str = "client", protocol_type: str = "consumer",
             v4: bool = True) -> JoinRequest:
    return JoinRequest(group, member_id, instance, protocol_type,
                       protocols if protocols is not None else [("range", b"sub")],
                       session, rebalance, client, "/127.0.0.1", require_known_member_id=v4)


def _offsets(c: GroupCoordinator | OffsetManager) -> OffsetManager:
    return c.offsets if isinstance(c, GroupCoordinator) else c


def commit(c: GroupCoordinator | OffsetManager, group: str, offsets: dict[tuple[str, int], Any], *, generation: int = -1,
           member: str = "", version: int = 8, instance: str | None = None,
           retention: int = -1) -> dict[tuple[str, int], int]:
    """offsets: {(topic, partition): offset} -> {(topic, partition): error code}."""
    by_topic: dict[str, list] = {}
    for (t, p), o in offsets.items():
        meta = o[1] if isinstance(o, tuple) else None
        by_topic.setdefault(t, []).append((p, o[0] if isinstance(o, tuple) else o, 3, meta))
    result = _offsets(c).commit_offsets(group, generation, member, instance, retention,
                                        list(by_topic.items()), version)
    return {(t, p): code for t, rows in result for p, code in rows}


def fetched(c: GroupCoordinator | OffsetManager, group: str,
            topics: list[tuple[str, list[int]]] | None = None, **kw: Any) -> dict[tuple[str, int], int]:
    rows = _offsets(c).fetch_offsets(group, topics, **kw)
    return {(t, p): off for t, parts in rows for p, off, _, _ in parts}


def one_member(env: Env, h: SimpleNamespace, group: str) -> str:
    c = env.coordinator
    first = h.Reply()
    c.classic.join_group(h.join_req(group), first)
    mid = first.value.member_id
    join = h.Reply()
    c.classic.join_group(h.join_req(group, mid), join)
    env.loop.advance(0)
    s = h.Reply()
    c.classic.sync_group(group, 1, mid, None, None, None, [(mid, b"a")], s)
    assert s.value.error_code == 0
    return mid


@pytest.fixture(scope="session")
def h() -> SimpleNamespace:
    """Helpers for the tests (a fixture, so test modules need not import conftest)."""
    return SimpleNamespace(Reply=Reply, join_req=join_req, FakeLoop=FakeLoop, LogsTopic=LogsTopic,
                           FakeTopics=FakeTopics, Env=Env, commit=commit, fetched=fetched,
                           one_member=one_member)
