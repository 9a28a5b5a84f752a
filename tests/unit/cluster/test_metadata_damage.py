"""Damaged metadata never becomes an empty or partial image.

A damaged newest snapshot (empty, cut short, garbled, even garbled into other valid JSON) falls
back to the older one plus the log after it, which must rebuild the very same image; when nothing
complete can be loaded the load refuses with one line naming the file. The log is checked as it
is replayed, and records that start-up recovery cut out of the log's middle are noticed; a torn
last batch (a crash mid-write) is not damage.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from strom.cluster import records as rec
from strom.cluster.image import PartitionState
from strom.cluster.metadata_log import MetadataDamagedError, MetadataLog
from strom.cluster.metadata_snapshot import (
    DAMAGED_SUFFIX,
    SnapshotDamaged,
    batches_in,
    check_snapshot,
    read_snapshot,
    snapshot_files,
)
from strom.record import iter_batches
from strom.storage.manager import CLEAN_SHUTDOWN_MARKER, LogManager

DEADLINE_S = 20.0


def topic(name: str, partitions: int = 2) -> list[dict[str, Any]]:
    topic_id = uuid.uuid4()
    return [rec.topic_record(name, topic_id)] + [
        rec.partition_record(topic_id, PartitionState(p, [0], [0], 0)) for p in range(partitions)]


class Store:
    """A metadata log in `root`, written through, closed and opened again like a broker's."""

    def __init__(self, root: Path, snapshot_every: int = 10_000) -> None:
        self.root = root
        self.snapshot_every = snapshot_every
        self.logs, self.ml = self._open()
        self.image = self.ml.load("c")

    def _open(self) -> tuple[LogManager, MetadataLog]:
        logs = LogManager([self.root])
        logs.load()
        return logs, MetadataLog(logs, snapshot_every=self.snapshot_every)

    def append(self, records: list[dict[str, Any]]) -> None:
        self.ml.append(self.image, records)

    def snapshot(self) -> Path:
        self.ml.snapshot(self.image)
        return snapshot_files(self.dir)[-1]

    @property
    def dir(self) -> Path:
        return self.ml.dir

    def close(self, *, clean: bool = True) -> None:
        self.logs.shutdown()
        if not clean:  # as after kill -9: the next load recovers the logs
            (self.root / CLEAN_SHUTDOWN_MARKER).unlink()
            (self.root / "recovery-point-offset-checkpoint").unlink()

    def reopen(self) -> tuple[LogManager, MetadataLog]:
        self.logs, self.ml = self._open()
        return self.logs, self.ml


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Two snapshots, a topic between them and one after the newer (each must survive)."""
    s = Store(tmp_path)
    s.append(topic("before"))
    s.snapshot()
    s.append(topic("between"))
    s.append([rec.config_record("topic", "between", "retention.ms", "5")])
    s.snapshot()
    s.append(topic("after"))
    return s


def garble_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 8] = b"\x00\xff#garb!"
    path.write_bytes(bytes(data))


def rename_a_topic(path: Path) -> None:
    """Valid JSON still, of the same length: only the checksum can tell."""
    path.write_bytes(path.read_bytes().replace(b'"before"', b'"beford"'))


DAMAGE = {
    "empty": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "trailer-cut": lambda p: p.write_bytes(p.read_bytes().rsplit(b"\n", 2)[0]),
    "garbled": garble_middle,
    "other-valid-json": rename_a_topic,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_newest_snapshot_falls_back_to_the_older_one(store: Store, damage: str) -> None:
    want = store.image.to_snapshot()
    store.close()
    older, newest = snapshot_files(store.dir)
    DAMAGE[damage](newest)
    with pytest.raises(SnapshotDamaged):
        read_snapshot(newest)

    _logs, ml = store.reopen()
    image = ml.load("c")

    assert image.to_snapshot() == want
    assert set(image.topics) == {"before", "between", "after"}
    assert image.topics["between"].configs == {"retention.ms": "5"}
    assert ml.unverified is not None and str(newest) in ml.unverified
    assert newest.with_name(newest.name + DAMAGED_SUFFIX).exists()  # kept for inspection
    # two whole snapshots again: the older one and a new one at the log end
    files = snapshot_files(store.dir)
    assert files[0] == older and len(files) == 2
    for path in files:
        check_snapshot(path)
    store.close()
    _logs, ml = store.reopen()
    assert ml.load("c").to_snapshot() == want and ml.unverified is None


def test_both_snapshots_damaged_refuses_naming_the_newest(store: Store) -> None:
    store.close()
    older, newest = snapshot_files(store.dir)
    before = {p.name: p.read_bytes() for p in store.dir.iterdir()}
    garble_middle(newest)
    older.write_bytes(b"")
    _logs, ml = store.reopen()
    with pytest.raises(MetadataDamagedError) as err:
        ml.load("c")
    line = str(err.value)
    assert "\n" not in line and str(newest) in line and str(older) in line
    assert "backup" in line and "docs/operations.md" in line
    # nothing renamed or removed: the operator decides
    assert {p.name for p in store.dir.iterdir()} == set(before)


def test_with_one_damaged_snapshot_and_the_whole_log_the_log_alone_rebuilds(
        tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.append(topic("a"))
    only = s.snapshot()
    s.append(topic("b"))
    want = s.image.to_snapshot()
    s.close()
    assert s.ml._log.log_start_offset == 0  # one snapshot: nothing of the log released
    only.write_bytes(b"{")
    _logs, ml = s.reopen()
    assert ml.load("c").to_snapshot() == want
    assert ml.unverified is not None


def test_the_older_snapshot_is_checked_and_set_aside_when_damaged(store: Store) -> None:
    store.close()
    older, newest = snapshot_files(store.dir)
    garble_middle(older)
    _logs, ml = store.reopen()
    ml.load("c")
    assert ml.unverified is None  # the newest was whole: nothing was missing
    assert snapshot_files(store.dir) == [newest]
    assert older.with_name(older.name + DAMAGED_SUFFIX).exists()


def _batches(segment: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of each batch of a segment file."""
    data = segment.read_bytes()
    return [(pos, h.size, h.base_offset) for pos, h in iter_batches(memoryview(data))]


def _garble_batch(segment: Path, nth: int) -> int:
    """Flip bytes in the records of the `nth` batch (its CRC no longer matches); its offset."""
    pos, size, base = _batches(segment)[nth]
    data = bytearray(segment.read_bytes())
    for i in range(pos + size - 6, pos + size - 2):
        data[i] ^= 0x5A
    segment.write_bytes(bytes(data))
    return base


def _segment(store: Store) -> Path:
    [segment] = sorted(store.dir.glob("*.log"))
    return segment


def test_a_damaged_batch_to_replay_refuses_naming_the_segment(store: Store) -> None:
    store.append(topic("later"))  # two batches after the newer snapshot
    store.close()
    segment = _segment(store)
    bad = _garble_batch(segment, -2)
    _logs, ml = store.reopen()
    with pytest.raises(MetadataDamagedError) as err:
        ml.load("c")
    line = str(err.value)
    assert str(segment) in line and f"offset {bad}" in line and "\n" not in line


def test_a_damaged_batch_before_the_snapshot_does_not_matter(store: Store) -> None:
    want = store.image.to_snapshot()
    store.close()
    _garble_batch(_segment(store), 0)  # "before": held by both snapshots
    _logs, ml = store.reopen()
    assert ml.load("c").to_snapshot() == want and ml.unverified is None


def test_records_cut_from_the_middle_by_recovery_refuse(store: Store) -> None:
    store.append(topic("later"))
    store.close(clean=False)
    segment = _segment(store)
    _garble_batch(segment, -2)  # recovery cuts here and moves "later" aside too
    _logs, ml = store.reopen()
    with pytest.raises(MetadataDamagedError) as err:
        ml.load("c")
    [side] = list(store.dir.glob("*.corrupt-*"))
    assert str(side) in str(err.value) and "backup" in str(err.value)


def test_a_torn_last_batch_is_crash_recovery_not_damage(store: Store) -> None:
    want = store.image.to_snapshot()
    store.close(clean=False)
    segment = _segment(store)
    torn = bytearray(_batches_bytes(topic("torn")))
    with open(segment, "ab") as f:  # a write the crash interrupted: half a batch
        f.write(torn[: len(torn) // 2])
    _logs, ml = store.reopen()
    assert ml.load("c").to_snapshot() == want and ml.unverified is None
    [side] = list(store.dir.glob("*.corrupt-*"))  # recovery kept the cut bytes aside
    assert batches_in(side) is None


def _batches_bytes(records: list[dict[str, Any]]) -> bytes:
    from strom.cluster.metadata_log import encode_batch

    return encode_batch(records, 0)


def test_a_log_ending_before_the_snapshot_refuses(store: Store) -> None:
    store.close()
    segment = _segment(store)
    segment.write_bytes(b"")  # an emptied segment
    _logs, ml = store.reopen()
    with pytest.raises(MetadataDamagedError) as err:
        ml.load("c")
    assert str(store.dir) in str(err.value) and "ends at offset" in str(err.value)


def test_missing_snapshots_with_a_released_log_refuse(store: Store) -> None:
    store.close()
    for path in snapshot_files(store.dir):
        path.unlink()
    _logs, ml = store.reopen()
    with pytest.raises(MetadataDamagedError) as err:
        ml.load("c")
    assert "no snapshot" in str(err.value)


def test_a_snapshot_of_the_older_format_still_loads(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.append(topic("a"))
    path = s.snapshot()
    data = s.image.to_snapshot()
    s.close()
    path.write_text(json.dumps(data))  # one JSON document, as written before the trailer
    _logs, ml = s.reopen()
    assert ml.load("c").to_snapshot() == data and ml.unverified is None


def test_a_background_snapshot_waits_for_the_log_to_be_durable(tmp_path: Path) -> None:
    """A snapshot past the durable log end would, after a crash, look like a damaged log."""
    s = Store(tmp_path, snapshot_every=3)
    ml = s.ml
    seen: list[tuple[int, int]] = []
    write = ml._write_snapshot
    called = threading.Event()

    def checking(offset: int, data: dict[str, Any]) -> Path:
        seen.append((offset, ml._log.recovery_point))
        called.set()
        return write(offset, data)

    ml._write_snapshot = checking  # type: ignore[method-assign]

    async def scenario() -> None:
        from strom.cluster.metadata_log import encode_batch

        records = topic("t", 5)
        end = ml.write(encode_batch(records, 0), 0)  # written, not yet synced
        ml.applied(s.image, len(records))
        assert ml._log.recovery_point < end
        while not called.is_set() or ml._snapshotting:
            await asyncio.sleep(0.001)

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S))
    [(offset, durable)] = seen
    assert durable >= offset
