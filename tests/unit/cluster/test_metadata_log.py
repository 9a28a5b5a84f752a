"""MetadataLog: snapshots taken while a loop runs are written in a worker thread from a copy;
a split write + sync makes a batch durable."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from strom.cluster import records as rec
from strom.cluster.image import MetadataImage, PartitionState
from strom.cluster.metadata_log import SNAPSHOT_SUFFIX, MetadataLog, encode_batch
from strom.cluster.metadata_snapshot import read_snapshot_data
from strom.storage.manager import LogManager

DEADLINE_S = 20.0


def open_log(root: Path, snapshot_every: int = 1000) -> tuple[LogManager, MetadataLog]:
    logs = LogManager([root])
    logs.load()
    return logs, MetadataLog(logs, snapshot_every=snapshot_every)


def topic_records(name: str, count: int, configs: dict[str, str]) -> list[dict[str, Any]]:
    topic_id = uuid.uuid4()
    records = [rec.topic_record(name, topic_id)]
    records += [rec.config_record("topic", name, k, v) for k, v in configs.items()]
    records += [rec.partition_record(topic_id, PartitionState(p, [0], [0], 0))
                for p in range(count)]
    return records


def snapshots(ml: MetadataLog) -> list[Path]:
    return sorted(ml.dir.glob(f"*{SNAPSHOT_SUFFIX}"))


async def until(predicate: Any) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)


def test_a_background_snapshot_holds_the_image_of_its_moment(tmp_path: Path) -> None:
    logs, ml = open_log(tmp_path, snapshot_every=10)
    image = ml.load("c")
    started = threading.Event()
    release = threading.Event()
    write = ml._write_snapshot

    def gated(offset: int, data: dict[str, Any]) -> Path:
        started.set()
        assert release.wait(DEADLINE_S)
        return write(offset, data)

    ml._write_snapshot = gated  # type: ignore[method-assign]

    async def scenario() -> None:
        ml.append(image, topic_records("t", 10, {"retention.ms": "1"}))  # a snapshot is due
        await until(started.is_set)
        ml.append(image, [rec.config_record("topic", "t", "retention.ms", "2")])
        assert image.topics["t"].configs == {"retention.ms": "2"}
        release.set()
        await until(lambda: not ml._snapshotting)

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S))
    [path] = snapshots(ml)
    data = read_snapshot_data(path)
    assert [t["configs"] for t in data["topics"]] == [{"retention.ms": "1"}]
    assert int(path.name[:20]) == 12  # the offset after the 12 records it covers
    replayed = MetadataLog(logs).load("c")  # snapshot, then the record after it
    assert replayed.to_snapshot() == image.to_snapshot()


def test_the_two_newest_snapshots_and_the_log_after_the_older_are_kept(tmp_path: Path) -> None:
    logs, ml = open_log(tmp_path, snapshot_every=5)
    image = ml.load("c")

    async def scenario() -> None:
        for i in range(4):
            ml.append(image, topic_records(f"t{i}", 5, {}))
            await until(lambda: not ml._snapshotting)

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S))
    assert [int(p.name[:20]) for p in snapshots(ml)] == [18, 24]
    assert ml._log.log_start_offset == 18  # the older one can still be replayed from
    assert MetadataLog(logs).load("c").to_snapshot() == image.to_snapshot()


def test_a_late_background_snapshot_does_not_replace_a_newer_one(tmp_path: Path) -> None:
    logs, ml = open_log(tmp_path, snapshot_every=5)
    image = ml.load("c")
    release = threading.Event()
    write = ml._write_snapshot
    held = threading.Event()

    def first_call_waits(offset: int, data: dict[str, Any]) -> Path:
        if not held.is_set():
            held.set()
            assert release.wait(DEADLINE_S)
        return write(offset, data)

    ml._write_snapshot = first_call_waits  # type: ignore[method-assign]

    async def scenario() -> None:
        ml.append(image, topic_records("a", 5, {}))  # background snapshot at 6, held
        await until(held.is_set)
        ml.append(image, topic_records("b", 5, {}))
        ml.snapshot(image)  # blocking, at 12
        release.set()
        await until(lambda: not ml._snapshotting)

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S))
    assert [int(p.name[:20]) for p in snapshots(ml)] == [6, 12]
    assert MetadataLog(logs).load("c").to_snapshot() == image.to_snapshot()


def test_write_then_sync_makes_a_batch_durable(tmp_path: Path) -> None:
    _logs, ml = open_log(tmp_path)
    ml.load("c")

    async def scenario() -> None:
        end = ml.write(encode_batch(topic_records("t", 3, {}), 0), 0)
        assert end == 4 and ml._log.recovery_point < end
        await ml.sync(end)
        assert ml._log.recovery_point >= end

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S))


def test_without_a_loop_snapshots_are_written_at_once(tmp_path: Path) -> None:
    logs, ml = open_log(tmp_path, snapshot_every=5)
    image = ml.load("c")
    ml.append(image, topic_records("t", 5, {}))
    assert [int(p.name[:20]) for p in snapshots(ml)] == [6]
    assert isinstance(MetadataLog(logs).load("c"), MetadataImage)
