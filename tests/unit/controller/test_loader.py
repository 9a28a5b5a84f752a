"""MetadataLoader: committed Raft batches and loaded snapshots reach the metadata image on the
event loop, in order, and the loader snapshots the image once enough has been committed.

The Raft client calls the loader in its own thread; here a worker thread (asyncio.to_thread)
stands in for it where it matters, with a real event loop applying the steps."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from strom.cluster import records as rec
from strom.cluster.features import feature_level_record, parse_feature_level_record
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState
from strom.cluster.records import Change
from strom.controller.loader import MetadataLoader, SnapshotPolicy, snapshot_values
from strom.raft.log import SnapshotContent
from strom.raft.types import (
    DataRecord,
    LeaderAndEpoch,
    OffsetAndEpoch,
    RaftBatch,
    leader_change_record,
)

DEADLINE_S = 10.0
CLUSTER = "c-loader"
Record = dict[str, Any]


def run(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(factory(), DEADLINE_S))


def value(record: Record) -> bytes:
    return json.dumps(record).encode()


def data_batch(base: int, *values: bytes, epoch: int = 1) -> RaftBatch:
    return RaftBatch(base, epoch, tuple(DataRecord(v) for v in values))


def topic_records(name: str, partitions: int = 2) -> list[Record]:
    tid = uuid.uuid4()
    return [rec.topic_record(name, tid)] + [
        rec.partition_record(tid, PartitionState(p, [0], [0], 0)) for p in range(partitions)]


class Loader:
    """A loader on the running loop, with what it reported."""

    def __init__(self, policy: SnapshotPolicy | None = None) -> None:
        self.image = MetadataImage(cluster_id=CLUSTER)
        self.loader = MetadataLoader(self.image, asyncio.get_running_loop(), policy=policy)
        self.changes: list[list[Change]] = []
        self.resets = 0
        self.snapshots: list[tuple[int, list[bytes]]] = []
        self.loader.subscribe(self.changes.append)
        self.loader.on_reset(self._reset)

    def _reset(self) -> None:
        self.resets += 1

    async def take_snapshot(self, offset: int, values: list[bytes]) -> None:
        self.snapshots.append((offset, values))

    async def commit(self, *batches: RaftBatch) -> None:
        """Commit as the Raft thread does, and wait until the image has it all."""
        await asyncio.to_thread(self.loader.handle_commit, list(batches))
        assert await self.loader.wait_applied(batches[-1].end_offset, DEADLINE_S)


def test_committed_batches_reach_image_listeners_and_features() -> None:
    async def scenario() -> None:
        h = Loader()
        orders = topic_records("orders", 2)
        batches = [
            RaftBatch(0, 1, (leader_change_record(0, [0], [0]),)),  # the Raft client's own
            data_batch(1, *map(value, orders)),
            data_batch(4, feature_level_record("metadata.version", 33),
                       value(rec.config_record("topic", "orders", "retention.ms", "5"))),
        ]
        h.loader.handle_commit(batches)
        # applied on the loop, not in the caller's (the Raft thread's) call
        assert h.image.topics == {} and h.loader.applied_offset == 0 and h.changes == []
        assert await h.loader.wait_applied(6, DEADLINE_S)
        assert h.loader.applied_offset == 6
        topic = h.image.topics["orders"]
        assert sorted(topic.partitions) == [0, 1] and topic.configs == {"retention.ms": "5"}
        assert h.loader.features == {"metadata.version": 33}
        # one call per commit, every change of it in order
        assert len(h.changes) == 1
        assert [(c.kind, c.partitions) for c in h.changes[0]] == [
            ("topic_created", ()), ("partitions_created", (0,)), ("partitions_created", (1,)),
            ("topic_configs", ())]
        assert all(c.topic is topic for c in h.changes[0])

    run(scenario)


def test_a_control_batch_alone_moves_the_offset_but_reports_no_change() -> None:
    async def scenario() -> None:
        h = Loader()
        await h.commit(RaftBatch(0, 1, (leader_change_record(0, [0], [0]),)))
        assert h.loader.applied_offset == 1
        assert h.changes == [] and h.image.version == 0
        await h.commit(data_batch(1, *map(value, topic_records("t", 1))))
        assert h.loader.applied_offset == 3 and len(h.changes) == 1

    run(scenario)


def test_a_no_op_record_moves_the_offset_and_the_progress_but_not_the_image() -> None:
    """The active controller's no-op records (metadata.max.idle.interval.ms) change nothing:
    no change reported, the image's version (what caches key on) as it was; but the offset
    and KIP-835's progress (the leader's append time of the last record applied) move."""
    async def scenario() -> None:
        h = Loader()
        assert h.loader.progress().last_applied_timestamp_ms == 0
        assert h.loader.progress().lag_ms(10_000) == 0  # nothing applied: no lag to tell
        await h.commit(data_batch(0, *map(value, topic_records("t", 1))))
        version = h.image.version
        noop = value(rec.noop_record())
        await h.commit(RaftBatch(2, 1, (DataRecord(noop), DataRecord(noop)), 1_000_000))
        assert h.loader.applied_offset == 4
        assert h.image.version == version and len(h.changes) == 1
        progress = h.loader.progress()
        assert (progress.last_applied_offset, progress.last_applied_timestamp_ms,
                progress.last_committed_offset) == (3, 1_000_000, 3)
        assert progress.lag_ms(1_000_250) == 250

    run(scenario)


def test_a_record_that_fails_to_apply_is_logged_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    """KIP-835's metadata-apply-error-count: a committed record the image cannot take (here a
    partition record without its fields) is logged at ERROR with its offset and counted; the
    offset still moves on (the step is not applied again)."""
    async def scenario() -> None:
        h = Loader()
        records = topic_records("t", 1)
        broken = {"type": "partition", "topic_id": records[0]["topic_id"], "partition": 1}
        with caplog.at_level(logging.ERROR, logger="strom.controller.loader"):
            await h.commit(data_batch(0, *map(value, [*records, broken])))
        assert h.loader.progress().apply_errors == 1 and h.loader.applied_offset == 3
        assert "applying committed metadata at offset 2 failed" in caplog.text

    run(scenario)


def test_commits_from_the_raft_thread_apply_in_order() -> None:
    async def scenario() -> None:
        h = Loader()
        tid = uuid.uuid4()
        await h.commit(data_batch(0, value(rec.topic_record("t", tid))))
        offset = 1
        for epoch in range(1, 21):
            state = PartitionState(0, [0], [0], 0, leader_epoch=epoch)
            await asyncio.to_thread(h.loader.handle_commit,
                                    [data_batch(offset, value(rec.partition_record(tid, state)))])
            offset += 1
        assert await h.loader.wait_applied(offset, DEADLINE_S)
        assert h.image.topics["t"].partitions[0].leader_epoch == 20
        assert [c.kind for batch in h.changes for c in batch][-1] == "partition_changed"

    run(scenario)


def test_an_unknown_value_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        h = Loader()
        with caplog.at_level(logging.WARNING, logger="strom.controller.loader"):
            await h.commit(data_batch(0, b"\x02\x63\x00\xff\xfe\xfd\xfc",
                                      *map(value, topic_records("after", 1))))
        assert "after" in h.image.topics and h.loader.applied_offset == 3
        assert h.loader.features == {}
        assert "does not know: 026300fffefdfc" in caplog.text

    run(scenario)


def test_a_snapshot_replaces_the_image_in_place() -> None:
    async def scenario() -> None:
        h = Loader()
        h.image.brokers = {0: BrokerInfo(0, "localhost", 9092)}
        h.image.controller_id = 0
        await h.commit(data_batch(0, *map(value, topic_records("old", 1)),
                                  feature_level_record("group.version", 1)))
        image, version = h.image, h.image.version
        changes_before = len(h.changes)

        source = MetadataImage(cluster_id=CLUSTER)
        for r in [*topic_records("new", 3), rec.config_record("broker", "", "a.b", "c"),
                  rec.producer_ids_record(5000)]:
            rec.apply(source, r)
        values = snapshot_values({"metadata.version": 33}, rec.image_records(source))
        snapshot = SnapshotContent(OffsetAndEpoch(40, 3), 0, tuple(values))
        await asyncio.to_thread(h.loader.handle_load_snapshot, snapshot)
        assert await h.loader.wait_applied(40, DEADLINE_S)

        assert h.loader.image is image and h.image is image  # the broker's parts hold it
        assert image.to_snapshot() == source.to_snapshot()
        assert list(image.topics_by_id) == [image.topics["new"].topic_id]
        assert image.brokers == {0: BrokerInfo(0, "localhost", 9092)}  # live state kept
        assert image.controller_id == 0 and image.cluster_id == CLUSTER
        assert image.version > version  # caches keyed on the version see a new image
        assert h.loader.features == {"metadata.version": 33}  # the snapshot's, only
        assert h.loader.applied_offset == 40
        assert h.resets == 1 and len(h.changes) == changes_before

        # commits after the snapshot apply on top of it
        await h.commit(data_batch(40, value(rec.config_record("topic", "new", "x", "y"))))
        assert image.topics["new"].configs == {"x": "y"} and h.loader.applied_offset == 41

    run(scenario)


def test_leader_changes_are_seen_on_the_loop() -> None:
    async def scenario() -> None:
        h = Loader()
        assert h.loader.leader == LeaderAndEpoch(None, 0)
        await asyncio.to_thread(h.loader.handle_leader_change, LeaderAndEpoch(0, 2))
        assert await h.loader.wait_for(lambda: h.loader.leader.leader_id == 0, DEADLINE_S)
        assert h.loader.leader.epoch == 2

    run(scenario)


def test_waits_say_whether_they_were_reached() -> None:
    async def scenario() -> None:
        h = Loader()
        assert await h.loader.wait_for(lambda: True, 0)  # already holds: no waiting
        assert await h.loader.wait_applied(0, 0)
        start = time.monotonic()
        assert not await h.loader.wait_applied(1, 0.05)
        assert not await h.loader.wait_for(lambda: "t" in h.image.topics, 0.05)
        assert time.monotonic() - start < 2.0

        async def later() -> None:
            await asyncio.sleep(0.05)
            await asyncio.to_thread(h.loader.handle_commit, [data_batch(0, value({"type": "x"}))])
            await asyncio.sleep(0.05)
            await asyncio.to_thread(h.loader.handle_commit,
                                    [data_batch(1, *map(value, topic_records("t", 1)))])

        task = asyncio.create_task(later())
        # woken by the first step, which does not satisfy it, and again by the second
        assert await h.loader.wait_for(lambda: "t" in h.image.topics, DEADLINE_S)
        assert await h.loader.wait_applied(3, DEADLINE_S)
        assert not await h.loader.wait_applied(4, 0.05)
        await task

    run(scenario)


def decode_snapshot(values: list[bytes]) -> tuple[dict[str, int], MetadataImage]:
    """What a loader rebuilds from a snapshot's values."""
    features: dict[str, int] = {}
    image = MetadataImage(cluster_id=CLUSTER)
    for v in values:
        if v[:1] == b"{":
            rec.apply(image, json.loads(v))
        else:
            name, level = parse_feature_level_record(v)
            features[name] = level
    return features, image


async def wait_snapshots(h: Loader, count: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while len(h.snapshots) < count:
        assert time.monotonic() < deadline, f"{len(h.snapshots)} snapshots, not {count}"
        await asyncio.sleep(0.005)


def test_the_snapshot_policy_snapshots_once_enough_bytes_are_committed() -> None:
    async def scenario() -> None:
        h = Loader(SnapshotPolicy(max_bytes=400, max_interval_ms=3_600_000))
        h.loader.snapshot = h.take_snapshot
        await h.commit(data_batch(0, feature_level_record("metadata.version", 33)))
        small = [value(r) for r in topic_records("a", 1)]
        assert sum(map(len, small)) < 400
        await h.commit(data_batch(1, *small))
        await asyncio.sleep(0.05)
        assert h.snapshots == []  # under max_bytes, well within the interval

        await h.commit(data_batch(3, *[value(r) for r in topic_records("b", 3)]))
        await wait_snapshots(h, 1)
        offset, values = h.snapshots[0]
        assert offset == 7 == h.loader.applied_offset
        features, image = decode_snapshot(values)
        assert features == {"metadata.version": 33}
        assert image.to_snapshot() == h.image.to_snapshot()

        # the count starts again: one more small commit is not another snapshot
        await h.commit(data_batch(7, value(rec.config_record("topic", "a", "k", "v"))))
        await asyncio.sleep(0.05)
        assert len(h.snapshots) == 1

    run(scenario)


def test_the_snapshot_policy_snapshots_after_the_interval() -> None:
    async def scenario() -> None:
        h = Loader(SnapshotPolicy(max_bytes=1 << 30, max_interval_ms=300))
        h.loader.snapshot = h.take_snapshot
        await h.commit(data_batch(0, *map(value, topic_records("t", 1))))  # the clock starts
        await h.commit(RaftBatch(2, 1, (leader_change_record(0, [0], [0]),)))
        assert h.snapshots == []  # well within the interval
        await asyncio.sleep(0.35)
        await h.commit(data_batch(3, value(rec.config_record("topic", "t", "k", "v"))))
        await wait_snapshots(h, 1)
        assert h.snapshots[0][0] == 4

    run(scenario)


def test_an_interval_of_0_never_snapshots_by_time() -> None:
    async def scenario() -> None:
        h = Loader(SnapshotPolicy(max_bytes=1 << 30, max_interval_ms=0))
        h.loader.snapshot = h.take_snapshot
        await h.commit(data_batch(0, *map(value, topic_records("t", 1))))
        await asyncio.sleep(0.05)
        assert h.snapshots == []

    run(scenario)


def test_a_failed_snapshot_is_tried_again_later(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        h = Loader(SnapshotPolicy(max_bytes=1, max_interval_ms=3_600_000))
        failed: list[int] = []

        async def failing_once(offset: int, values: list[bytes]) -> None:
            if not failed:
                failed.append(offset)
                raise OSError("disk full")
            await h.take_snapshot(offset, values)

        h.loader.snapshot = failing_once
        with caplog.at_level(logging.ERROR, logger="strom.controller.loader"):
            await h.commit(data_batch(0, *map(value, topic_records("a", 1))))
            deadline = time.monotonic() + DEADLINE_S
            while "could not snapshot" not in caplog.text:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)
        assert failed == [2]
        await asyncio.sleep(0.01)  # the failed task's done callback runs
        await h.commit(data_batch(2, *map(value, topic_records("b", 1))))
        await wait_snapshots(h, 1)
        assert h.snapshots[0][0] == 4

    run(scenario)


def test_a_large_commit_is_applied_in_slices_with_the_loop_free_between_them() -> None:
    """A commit of many records (a failover moving 1,000 partitions) reaches the image
    APPLY_SLICE records at a time, other callbacks running between slices; its offset counts
    as applied only once every record is in; a leader change that came after it is applied
    after it."""
    from strom.controller.loader import APPLY_SLICE

    async def scenario() -> None:
        h = Loader()
        records = topic_records("big", 2 * APPLY_SLICE + 10)
        batch = data_batch(0, *map(value, records))
        seen: list[tuple[int, int]] = []  # (partitions in the image, applied offset) between

        def look() -> None:
            topic = h.image.topics.get("big")
            seen.append((len(topic.partitions) if topic else 0, h.loader.applied_offset))

        h.loader.handle_commit([batch])
        h.loader.handle_leader_change(LeaderAndEpoch(7, 3))
        for _ in range(3):  # callbacks queued meanwhile run between the slices
            asyncio.get_running_loop().call_soon(look)
            await asyncio.sleep(0)
        assert await h.loader.wait_applied(batch.end_offset, DEADLINE_S)
        assert len(h.image.topics["big"].partitions) == 2 * APPLY_SLICE + 10
        assert seen[0][0] < len(records) - 1 and seen[0][1] == 0, seen  # partly applied
        assert len(h.changes) >= 3 and sum(len(c) for c in h.changes) >= len(records) - 1
        await h.loader.wait_for(lambda: h.loader.leader.leader_id == 7, DEADLINE_S)
        assert h.loader.leader == LeaderAndEpoch(7, 3)

    run(scenario)


def test_a_large_deletion_is_reported_in_slices_before_later_changes() -> None:
    """Deleting a topic of many partitions reaches listeners APPLY_SLICE partitions at a time
    (the first slice as `topic_deleted`, the rest as `partitions_deleted`), other callbacks
    running between the slices; a change committed after it is reported after every slice."""
    from strom.controller.loader import APPLY_SLICE

    async def scenario() -> None:
        h = Loader()
        count = 2 * APPLY_SLICE + 10
        records = topic_records("big", count)
        await h.commit(data_batch(0, *map(value, records)))
        h.changes.clear()
        tid = uuid.UUID(records[0]["topic_id"])
        after = topic_records("next", 1)
        deletion = data_batch(len(records), value(rec.remove_topic_record(tid)))
        later = data_batch(len(records) + 1, *map(value, after))
        ran_between = []
        h.loader.handle_commit([deletion, later])
        for _ in range(3):
            asyncio.get_running_loop().call_soon(
                lambda: ran_between.append(len(h.changes)))
            await asyncio.sleep(0)
        assert await h.loader.wait_for(
            lambda: any(c.kind == "partitions_created" for cs in h.changes for c in cs),
            DEADLINE_S)
        flat = [c for cs in h.changes for c in cs]
        deleted = [c for c in flat if c.kind in ("topic_deleted", "partitions_deleted")]
        assert [c.kind for c in deleted] == ["topic_deleted"] + ["partitions_deleted"] * 2
        assert sorted(p for c in deleted for p in c.partitions) == list(range(count))
        assert all(len(c.partitions) <= APPLY_SLICE for c in deleted)
        assert flat.index(deleted[-1]) < next(i for i, c in enumerate(flat)
                                              if c.kind == "topic_created")  # in order
        assert any(0 < n < len(h.changes) for n in ran_between), ran_between

    run(scenario)
