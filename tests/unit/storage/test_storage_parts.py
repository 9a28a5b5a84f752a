"""Building blocks: file budget, indexes, checkpoint files, leader-epoch cache."""

import uuid

import pytest

from strom.storage import checkpoints as ck
from strom.storage.epochs import LeaderEpochCache
from strom.storage.errors import StorageError
from strom.storage.files import FileBudget, FileSlice, SegmentFile
from strom.storage.index import IndexCorruptError, OffsetIndex, TimeIndex


def test_budget_evicts_lru_but_never_pinned(tmp_path):
    budget = FileBudget(max_open=2)
    files = []
    for i in range(4):
        p = tmp_path / f"f{i}"
        p.write_bytes(bytes([i]) * 10)
        files.append(SegmentFile(p, budget))
    files[0].pin()
    for f in files[1:]:
        f.fileno()
    assert budget.open_count == 2 and files[0].is_open and files[3].is_open
    files[1].pin()  # pinning reopens; the pinned pair now exceeds nothing else
    files[2].pin()
    assert files[0].is_open and files[1].is_open and files[2].is_open  # over budget, all pinned
    for f in files[:3]:
        f.unpin()
    assert budget.open_count == 2
    assert FileSlice(files[0], 2, 5).read_bytes() == bytes([0]) * 5
    files[3].close()
    with pytest.raises(StorageError):
        files[3].fileno()
    missing = SegmentFile(tmp_path / "nope", budget)
    with pytest.raises(StorageError):
        missing.fileno()


def test_closing_a_pinned_file_waits_for_unpin(tmp_path):
    budget = FileBudget(max_open=10)
    (tmp_path / "f").write_bytes(b"abc")
    f = SegmentFile(tmp_path / "f", budget)
    f.pin()
    f.close()
    assert f.is_open and FileSlice(f, 0, 3).read_bytes() == b"abc"
    f.unpin()
    assert not f.is_open and budget.open_count == 0


def test_offset_index_persist_load_truncate(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100, max_entries=10)
    assert idx.lookup(150) == (100, 0)
    for off, pos in ((105, 100), (110, 250), (130, 900)):
        idx.append(off, pos)
    idx.persist()
    assert path.read_bytes() == bytes.fromhex(
        "00000005 00000064 0000000a 000000fa 0000001e 00000384"
    )
    loaded = OffsetIndex.load(path, 100, 10, log_size=1000)
    assert list(loaded.offsets) == [5, 10, 30] and list(loaded.positions) == [100, 250, 900]
    assert loaded.lookup(109) == (105, 100) and loaded.lookup(130) == (130, 900)
    assert loaded.floor_position(899) == 250 and loaded.floor_position(50) == 0
    loaded.truncate_to_position(250)
    loaded.append(120, 400)
    loaded.persist()
    assert list(OffsetIndex.load(path, 100, 10, 1000).positions) == [100, 400]
    with pytest.raises(ValueError):
        loaded.append(120, 500)
    with pytest.raises(IndexCorruptError):
        OffsetIndex.load(path, 100, 10, log_size=300)  # entry past the end of the log
    path.write_bytes(b"\x00" * 12)
    with pytest.raises(IndexCorruptError):
        OffsetIndex.load(path, 100, 10, 1000)


def test_time_index(tmp_path):
    path = tmp_path / "x.timeindex"
    ti = TimeIndex(path, 50, max_entries=3)
    assert ti.last_entry() == (-1, 50) and ti.lookup(10) == (-1, 50)
    ti.maybe_append(-1, 50)  # no timestamp: nothing to index
    ti.maybe_append(1000, 52)
    ti.maybe_append(1000, 55)  # not growing: skipped
    ti.maybe_append(2000, 60)
    ti.maybe_append(3000, 70)
    ti.maybe_append(4000, 80)  # full
    assert list(ti.timestamps) == [1000, 2000, 3000]
    ti.maybe_append(4000, 80, skip_full_check=True)
    assert ti.lookup(2500) == (2000, 60) and ti.last_entry() == (4000, 80)
    ti.persist()
    assert path.read_bytes()[:12] == bytes.fromhex("00000000000003e8 00000002")
    loaded = TimeIndex.load(path, 50, 3)
    assert list(loaded.offsets) == [2, 10, 20, 30]
    loaded.truncate_to(70)
    assert loaded.last_entry() == (2000, 60)


def test_checkpoint_files_round_trip_and_format(tmp_path):
    p = tmp_path / "recovery-point-offset-checkpoint"
    ck.write_offset_checkpoint(p, {("a", 0): 5, ("b-c", 12): 900})
    assert p.read_text() == "0\n2\na 0 5\nb-c 12 900\n"
    assert ck.read_offset_checkpoint(p) == {("a", 0): 5, ("b-c", 12): 900}
    assert ck.read_offset_checkpoint(tmp_path / "missing") == {}
    p.write_text("0\n3\na 0 5\n")
    assert ck.read_offset_checkpoint(p) == {}  # unreadable reads as absent (with a WARN)
    e = tmp_path / "leader-epoch-checkpoint"
    ck.write_leader_epoch_checkpoint(e, [(0, 0), (3, 120)])
    assert e.read_text() == "0\n2\n0 0\n3 120\n"
    assert ck.read_leader_epoch_checkpoint(e) == [(0, 0), (3, 120)]


def test_topic_id_string_matches_kafka():
    assert ck.topic_id_to_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    u = uuid.UUID("8f3c4b0e-1d2a-4c5b-9e6f-7a8b9c0d1e2f")
    s = ck.topic_id_to_str(u)
    assert len(s) == 22 and "=" not in s and ck.topic_id_from_str(s) == u
    assert ck.topic_id_to_str(uuid.UUID(bytes=b"\xfb\xff" * 8)) == "-__7__v_-__7__v_-__7_w"


def test_partition_metadata(tmp_path):
    p = tmp_path / "partition.metadata"
    u = uuid.uuid4()
    ck.write_partition_metadata(p, u)
    assert ck.read_partition_metadata(p) == u
    p.write_text("version: 1\ntopic_id: x\n")
    assert ck.read_partition_metadata(p) is None  # unreadable reads as absent (with a WARN)


def test_leader_epoch_cache_semantics(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochCache(path)
    assert c.latest_epoch == -1 and c.end_offset_for(0, 10) == (-1, -1)
    c.assign(2, 0)
    c.assign(2, 5)  # same epoch, later offset: no change
    c.assign(4, 10)
    c.assign(6, 20)
    assert c.entries() == [(2, 0), (4, 10), (6, 20)]
    assert c.end_offset_for(6, 99) == (6, 99)
    assert c.end_offset_for(5, 99) == (4, 20)
    assert c.end_offset_for(1, 99) == (1, 0)
    assert c.end_offset_for(7, 99) == (-1, -1)
    c.assign(5, 15)  # a new leader overrides the conflicting tail
    assert c.entries() == [(2, 0), (4, 10), (5, 15)]
    c.truncate_from_end(15)
    assert c.entries() == [(2, 0), (4, 10)]
    c.truncate_from_start(12)
    assert c.entries() == [(4, 12)]
    assert LeaderEpochCache(path).entries() == [(4, 12)]
    with pytest.raises(ValueError):
        c.assign(-1, 3)
    c.clear()
    assert LeaderEpochCache(path).entries() == []
