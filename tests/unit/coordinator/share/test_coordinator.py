"""The share coordinator on a fake clock, persisting to real partition logs."""

from __future__ import annotations

import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from strom.coordinator.share import records as rec
from strom.coordinator.share.config import ShareCoordinatorConfig
from strom.coordinator.share.coordinator import ShareCoordinator
from strom.coordinator.share.persister import LocalPersister
from strom.coordinator.share.state import SharePartitionKey
from strom.coordinator.share.state import StateBatch as B
from strom.coordinator.share.store import ShareStore
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

STATE_TOPIC_ID = uuid.UUID(int=21)
PARTITIONS = 3
TOPIC = uuid.UUID(int=99)
AVAILABLE, ACKED, ARCHIVED = 0, 2, 4
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (no replication to wait for)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine suspended")


class StateTopic:
    """`__share_group_state` over real PartitionLogs in a temp dir."""

    def __init__(self, base: Path, loop: Any) -> None:
        self.base = base
        self.loop = loop
        self.logs: dict[int, PartitionLog] = {p: self._open(p) for p in range(PARTITIONS)}
        self.led = set(range(PARTITIONS))

    def _open(self, p: int) -> PartitionLog:
        return PartitionLog(self.base / f"__share_group_state-{p}", "__share_group_state", p,
                            STATE_TOPIC_ID, LogConfig(cleanup_policy="delete"),
                            clock=lambda: self.loop.now / 1000)

    def num_partitions(self) -> int | None:
        return PARTITIONS

    def create(self) -> int:
        return PARTITIONS

    def log(self, partition: int) -> Any:
        log = self.logs.get(partition) if partition in self.led else None
        if log is not None:
            log.high_watermark = log.log_end_offset  # a single replica: everything committed
        return log

    def leader_epoch(self, partition: int) -> int:
        return 0

    def reopen(self) -> None:
        for p, log in list(self.logs.items()):
            log.close()
            self.logs[p] = self._open(p)

    def records(self, partition: int) -> list[tuple[int, rec.ShareRecord]]:
        return [e for chunk in ShareStore(self, lambda: 0).replay(partition) for e in chunk]


class Topics:
    def __init__(self) -> None:
        self.counts: dict[uuid.UUID, int] = {TOPIC: 4}

    def partition_count(self, topic_id: uuid.UUID) -> int | None:
        return self.counts.get(topic_id)


@dataclass
class Env:
    loop: Any
    topic: StateTopic
    topics: Topics
    config: ShareCoordinatorConfig
    coordinator: ShareCoordinator = field(init=False)

    def __post_init__(self) -> None:
        self.coordinator = self.new()

    def new(self, *, load: bool = True) -> ShareCoordinator:
        c = ShareCoordinator(self.config, self.topic, self.topics, self.loop, self.loop.now_ms)
        c.start()
        for p in self.topic.led:
            c.on_leadership(p, True, 3)
        if load:
            self.loop.advance(0)
        return c

    def restart(self, *, load: bool = True) -> ShareCoordinator:
        self.coordinator.shutdown()
        self.topic.reopen()
        self.coordinator = self.new(load=load)
        return self.coordinator

    def partition(self, key: SharePartitionKey) -> int:
        return self.coordinator.partition_for(key)


@pytest.fixture
def env(tmp_path: Path, h: Any) -> Env:
    loop = h.FakeLoop()
    return Env(loop, StateTopic(tmp_path, loop), Topics(),
               ShareCoordinatorConfig(state_partitions=PARTITIONS, updates_per_snapshot=5,
                                      prune_interval_ms=1000))


KEY = SharePartitionKey("group", TOPIC, 1)


def code_of(coro: Coroutine[Any, Any, Any]) -> int:
    try:
        run(coro)
    except KafkaError as exc:
        return exc.code
    return E.NONE


def test_initialize_write_read(env: Env) -> None:
    c = env.coordinator
    run(c.initialize(KEY, state_epoch=0, start_offset=10))
    run(c.write(KEY, 0, 0, -1, [B(10, 19, ACKED, 1)]))
    run(c.write(KEY, 0, 0, 15, [B(20, 24, ARCHIVED, 2)]))
    state = run(c.read(KEY, 0))
    assert (state.state_epoch, state.start_offset) == (0, 15)
    assert state.batches == [B(15, 19, ACKED, 1), B(20, 24, ARCHIVED, 2)]
    kinds = [r.record_type for _, r in env.topic.records(env.partition(KEY))]
    assert kinds == [rec.SHARE_SNAPSHOT, rec.SHARE_UPDATE, rec.SHARE_UPDATE]


def test_state_survives_a_restart(env: Env) -> None:
    c = env.coordinator
    run(c.initialize(KEY, 2, 0))
    run(c.write(KEY, 2, 4, 5, [B(5, 9, ACKED, 1), B(10, 12, AVAILABLE, 2)]))
    before = c.state(KEY)
    c = env.restart()
    assert c.state(KEY) == before
    assert run(c.read(KEY, 4)).batches == [B(5, 9, ACKED, 1), B(10, 12, AVAILABLE, 2)]
    # the stored epochs still fence after the restart
    assert code_of(c.write(KEY, 1, 4, -1, [])) == E.FENCED_STATE_EPOCH


def test_load_in_progress_and_not_coordinator(env: Env) -> None:
    run(env.coordinator.initialize(KEY, 0, 0))
    c = env.restart(load=False)
    assert code_of(c.initialize(KEY, 0, 0)) == E.COORDINATOR_LOAD_IN_PROGRESS
    env.loop.advance(0)
    assert code_of(c.initialize(KEY, 0, 0)) == E.NONE
    c.on_leadership(env.partition(KEY), False)
    assert code_of(c.initialize(KEY, 0, 0)) == E.NOT_COORDINATOR
    assert code_of(c.write(KEY, 0, 0, 0, [])) == E.NOT_COORDINATOR


class FewReplicas:
    """A cluster's `Replication` whose partitions are below min.insync.replicas (or not)."""

    def __init__(self) -> None:
        self.below = True

    def check(self, topic: str, partition: int) -> int:
        return E.NOT_ENOUGH_REPLICAS if self.below else E.NONE

    def end_offset(self, topic: str, partition: int) -> int | None:
        return None

    async def wait(self, topic: str, partition: int, offset: int, timeout_s: float) -> int:
        return E.NONE


def test_nothing_is_written_or_applied_below_min_insync_replicas(env: Env) -> None:
    c = env.coordinator
    run(c.initialize(KEY, 0, 0))
    replicas = c.store.commits.replication = FewReplicas()
    before, records = c.state(KEY), env.topic.records(env.partition(KEY))
    assert code_of(c.write(KEY, 0, 0, 5, [B(5, 9, ACKED, 1)])) == E.COORDINATOR_NOT_AVAILABLE
    assert code_of(c.initialize(KEY, 1, 7)) == E.COORDINATOR_NOT_AVAILABLE
    assert code_of(c.delete(KEY)) == E.COORDINATOR_NOT_AVAILABLE
    assert c.state(KEY) == before
    assert env.topic.records(env.partition(KEY)) == records
    replicas.below = False
    assert code_of(c.write(KEY, 0, 0, 5, [B(5, 9, ACKED, 1)])) == E.NONE
    assert run(c.read(KEY, 0)).start_offset == 5


def test_state_epoch_fencing(env: Env) -> None:
    c = env.coordinator
    run(c.initialize(KEY, 3, 0))
    assert code_of(c.initialize(KEY, 2, 0)) == E.FENCED_STATE_EPOCH
    assert code_of(c.write(KEY, 2, 0, -1, [])) == E.FENCED_STATE_EPOCH
    assert code_of(c.initialize(KEY, 3, 7)) == E.NONE  # the same epoch may start it again
    assert code_of(c.initialize(KEY, 4, 9)) == E.NONE
    state = c.state(KEY)
    assert state is not None
    assert (state.state_epoch, state.start_offset, state.snapshot_epoch) == (4, 9, 2)


def test_leader_epoch_fencing_and_read_records_a_new_leader(env: Env) -> None:
    c = env.coordinator
    run(c.initialize(KEY, 0, 0))
    run(c.read(KEY, 5))  # a new leader: its epoch is written
    records = env.topic.records(env.partition(KEY))
    assert records[-1][1].value.leader_epoch == 5
    assert code_of(c.read(KEY, 4)) == E.FENCED_LEADER_EPOCH
    assert code_of(c.write(KEY, 0, 4, -1, [])) == E.FENCED_LEADER_EPOCH
    assert code_of(c.write(KEY, 0, 5, -1, [])) == E.NONE
    n = len(env.topic.records(env.partition(KEY)))
    run(c.read(KEY, 5))  # same leader again: nothing written
    assert len(env.topic.records(env.partition(KEY))) == n
    env.restart()
    assert code_of(env.coordinator.read(KEY, 4)) == E.FENCED_LEADER_EPOCH


def test_invalid_requests(env: Env) -> None:
    c = env.coordinator
    assert code_of(c.write(KEY, 0, 0, 0, [])) == E.INVALID_REQUEST  # not initialized
    assert run(LocalPersister(c).read(KEY, 0)) is None  # the persister's "never initialized"
    assert code_of(c.read(KEY, 0)) == E.INVALID_REQUEST
    assert code_of(c.initialize(KEY, -1, 0)) == E.INVALID_REQUEST
    run(c.initialize(KEY, 0, 0))
    assert code_of(c.write(KEY, 0, -1, 0, [])) == E.INVALID_REQUEST
    assert code_of(c.write(KEY, -1, 0, 0, [])) == E.INVALID_REQUEST
    assert code_of(c.read(KEY, -1)) == E.INVALID_REQUEST


def test_unknown_topic_or_partition(env: Env) -> None:
    c = env.coordinator
    assert code_of(c.initialize(SharePartitionKey("group", uuid.uuid4(), 0), 0, 0)) \
        == E.UNKNOWN_TOPIC_OR_PARTITION
    assert code_of(c.initialize(SharePartitionKey("group", TOPIC, 4), 0, 0)) \
        == E.UNKNOWN_TOPIC_OR_PARTITION


def test_snapshot_after_the_configured_number_of_updates(env: Env) -> None:
    c = env.coordinator
    run(c.initialize(KEY, 0, 0))
    for i in range(5):
        run(c.write(KEY, 0, 0, -1, [B(i, i, ACKED, 1)]))
    assert c.update_count(KEY) == 5
    run(c.write(KEY, 0, 0, -1, [B(5, 5, ARCHIVED, 1)]))  # the sixth write is a snapshot
    kinds = [r.record_type for _, r in env.topic.records(env.partition(KEY))]
    assert kinds == [rec.SHARE_SNAPSHOT] + [rec.SHARE_UPDATE] * 5 + [rec.SHARE_SNAPSHOT]
    snapshot = env.topic.records(env.partition(KEY))[-1][1].value
    assert snapshot.snapshot_epoch == 1
    assert snapshot.batches == (B(0, 4, ACKED, 1), B(5, 5, ARCHIVED, 1))
    assert c.update_count(KEY) == 0
    run(c.write(KEY, 0, 0, -1, [B(6, 6, ACKED, 1)]))
    assert env.topic.records(env.partition(KEY))[-1][1].record_type == rec.SHARE_UPDATE
    before = c.state(KEY)
    assert env.restart().state(KEY) == before


def test_delete_writes_a_tombstone(env: Env) -> None:
    c = env.coordinator
    run(c.delete(KEY))  # nothing to delete: no record, no error
    assert env.topic.records(env.partition(KEY)) == []
    run(c.initialize(KEY, 3, 0))
    run(c.delete(KEY))
    last = env.topic.records(env.partition(KEY))[-1][1]
    assert (last.record_type, last.value) == (rec.SHARE_SNAPSHOT, None)
    assert c.state(KEY) is None
    assert code_of(c.initialize(KEY, 0, 0)) == E.NONE  # its epochs are forgotten too
    run(c.delete(KEY))
    assert env.restart().state(KEY) is None


def test_read_summary(env: Env) -> None:
    c = env.coordinator
    summary = c.read_summary(KEY)
    assert (summary.start_offset, summary.state_epoch, summary.delivery_complete_count) \
        == (-1, 0, -1)
    run(c.initialize(KEY, 1, 10))
    run(c.read(KEY, 2))
    run(c.write(KEY, 1, 2, 12, [B(12, 14, ACKED, 1)], delivery_complete_count=3))
    summary = c.read_summary(KEY)
    assert (summary.start_offset, summary.state_epoch, summary.leader_epoch,
            summary.delivery_complete_count, summary.batches) == (12, 1, 2, 3, [])


def test_start_offset_never_moves_back(env: Env) -> None:
    c = env.coordinator
    run(c.initialize(KEY, 0, 10))
    run(c.write(KEY, 0, 0, 5, [B(5, 12, ACKED, 1)]))
    state = c.state(KEY)
    assert state is not None
    assert state.start_offset == 10
    assert state.batches == (B(10, 12, ACKED, 1),)


def test_prune_drops_what_no_key_needs(env: Env) -> None:
    c = env.coordinator
    other = SharePartitionKey("other", TOPIC, 0)
    # find a second key on the same state partition
    n = 0
    while c.partition_for(other) != c.partition_for(KEY):
        n += 1
        other = SharePartitionKey(f"other{n}", TOPIC, 0)
    partition = c.partition_for(KEY)
    run(c.initialize(KEY, 0, 0))  # offset 0
    run(c.initialize(other, 0, 0))  # offset 1
    for i in range(6):  # offsets 2-6 updates, 7 a snapshot of KEY
        run(c.write(KEY, 0, 0, -1, [B(i, i, ACKED, 1)]))
    assert c.prunable_offset(partition) == 1  # `other`'s snapshot is still needed
    run(c.initialize(other, 1, 0))  # offset 8: other's new snapshot
    assert c.prunable_offset(partition) == 7
    env.loop.advance(1000)  # the periodic prune
    assert env.topic.logs[partition].log_start_offset == 7
    before = (c.state(KEY), c.state(other))
    c = env.restart()
    assert (c.state(KEY), c.state(other)) == before


def test_deleted_topics_are_forgotten(env: Env) -> None:
    c = env.coordinator
    run(c.initialize(KEY, 0, 0))
    run(c.on_topics_deleted({TOPIC}))
    assert c.state(KEY) is None
    assert env.restart().state(KEY) is None


def test_partition_for_is_kafkas() -> None:
    key = SharePartitionKey("g1", uuid.UUID("01234567-89ab-cdef-0fed-cba987654321"), 7)
    c = ShareCoordinator(ShareCoordinatorConfig(), _NoTopic(), Topics(), None, lambda: 0)  # type: ignore[arg-type]
    assert c.partition_for(key) == 28  # what Kafka 4.4 computes for this key (50 partitions)


class _NoTopic:
    def num_partitions(self) -> int | None:
        return None
