"""LogManager: directories, incarnations, deletion, checkpoints and the clean-shutdown marker."""

import os
import re
import uuid

import pytest

from strom.storage.checkpoints import read_offset_checkpoint, topic_id_to_str
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError
from strom.storage.manager import CLEAN_SHUTDOWN_MARKER, LogManager, parse_partition_dir


def test_parse_partition_dir():
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir("a.b_c-0") == ("a.b_c", 0)
    for bad in ("topic", "-3", "t-x", "t-1.abc-delete", "t-0-future"):
        assert parse_partition_dir(bad) is None


def test_create_spreads_dirs_and_is_idempotent(h, tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    m.load()
    tid = uuid.uuid4()
    logs = [m.create("t", p, tid, LogConfig()) for p in range(4)]
    assert sorted(log.dir.parent.name for log in logs) == ["a", "a", "b", "b"]
    log0 = logs[0]
    log0.append(bytearray(h.make_batch(3)), leader_epoch=0, now_ms=0)
    again = m.create("t", 0, tid, LogConfig(retention_ms=5))
    assert again is log0 and again.config.retention_ms == 5 and again.log_end_offset == 3
    meta = (log0.dir / "partition.metadata").read_text()
    assert meta == f"version: 0\ntopic_id: {topic_id_to_str(tid)}\n"
    assert m.get("t", 0) is log0 and m.get("t", 9) is None
    m.shutdown()


def test_new_topic_id_replaces_old_incarnation_keeping_it_as_stray(h, tmp_path):
    m = LogManager([tmp_path])
    m.load()
    old_id = uuid.uuid4()
    old = m.create("t", 0, old_id, LogConfig())
    old.append(bytearray(h.make_batch(5)), leader_epoch=0, now_ms=0)
    new_id = uuid.uuid4()
    new = m.create("t", 0, new_id, LogConfig())
    assert new is not old and new.topic_id == new_id and new.log_end_offset == 0
    assert old.closed
    names = sorted(os.listdir(tmp_path))
    assert names[:3] == ["log-start-offset-checkpoint", "recovery-point-offset-checkpoint",
                         "replication-offset-checkpoint"] and names[3] == "t-0"  # fmt: skip
    [stray] = names[4:]  # the old incarnation's data is kept, not deleted
    assert re.fullmatch(r"t-0\.[0-9a-f]{32}-stray", stray), stray
    assert (tmp_path / stray / "partition.metadata").read_text().endswith(
        f"{topic_id_to_str(old_id)}\n")
    m.shutdown()
    # an old incarnation left on disk is also replaced when not loaded
    m2 = LogManager([tmp_path])
    other = uuid.uuid4()
    log = m2.create("t", 0, other, LogConfig())
    assert log.log_end_offset == 0 and log.topic_id == other


def test_delete_partition(h, tmp_path):
    m = LogManager([tmp_path])
    m.load()
    log = m.create("t", 3, uuid.uuid4(), LogConfig())
    log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
    m.delete_partition("t", 3)
    assert m.get("t", 3) is None and not (tmp_path / "t-3").exists()
    assert not [n for n in os.listdir(tmp_path) if n.endswith("-delete")]
    with pytest.raises(StorageError):
        log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
    m.delete_partition("t", 3)  # absent: no-op


def test_checkpoints_marker_and_reload(h, tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    m.load()
    assert not (dirs[0] / CLEAN_SHUTDOWN_MARKER).exists()
    tid = uuid.uuid4()
    for p in range(3):
        log = m.create("t", p, tid, LogConfig(segment_bytes=600, file_delete_delay_ms=0))
        for _ in range(p + 2):
            log.append(bytearray(h.make_batch(2, 200)), leader_epoch=4, now_ms=0)
    m.get("t", 2).delete_records_before(5)
    m.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_MARKER).exists()
    a_rp = read_offset_checkpoint(dirs[0] / "recovery-point-offset-checkpoint")
    b_rp = read_offset_checkpoint(dirs[1] / "recovery-point-offset-checkpoint")
    assert {**a_rp, **b_rp} == {("t", 0): 4, ("t", 1): 6, ("t", 2): 8}
    text = (dirs[0] / "log-start-offset-checkpoint").read_text()
    lines = text.splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    starts = {**read_offset_checkpoint(dirs[0] / "log-start-offset-checkpoint"),
              **read_offset_checkpoint(dirs[1] / "log-start-offset-checkpoint")}  # fmt: skip
    assert starts[("t", 2)] == 5
    m2 = LogManager(dirs)
    m2.load()
    assert {(log.topic, log.partition, log.log_end_offset) for log in m2.logs()} == {
        ("t", 0, 4), ("t", 1, 6), ("t", 2, 8)}  # fmt: skip
    assert m2.get("t", 2).log_start_offset == 5 and m2.get("t", 1).topic_id == tid
    assert m2.get("t", 0).latest_epoch == 4
    assert not (dirs[0] / CLEAN_SHUTDOWN_MARKER).exists()
    m2.shutdown()


def test_flush_if_due_and_flush_messages(h, tmp_path):
    now = [1000.0]
    m = LogManager([tmp_path], clock=lambda: now[0])
    m.load()
    log = m.create("t", 0, uuid.uuid4(), LogConfig(flush_ms=500, segment_bytes=400))
    log.append(bytearray(h.make_batch(1, 200)), leader_epoch=0, now_ms=0)
    log.append(bytearray(h.make_batch(1, 200)), leader_epoch=0, now_ms=0)  # rolls
    assert log.recovery_point == 0
    m.flush_if_due(now_ms=1_000_100)  # only the rolled segment is synced
    assert log.recovery_point == 1
    m.flush_if_due(now_ms=1_000_600)
    assert log.recovery_point == 2
    log2 = m.create("u", 0, uuid.uuid4(), LogConfig(flush_messages=3))
    log2.append(bytearray(h.make_batch(2)), leader_epoch=0, now_ms=0)
    assert log2.recovery_point == 0
    log2.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
    assert log2.recovery_point == 3
    m.shutdown()


def test_run_retention_over_all_logs(h, tmp_path):
    m = LogManager([tmp_path])
    m.load()
    cfg = LogConfig(retention_ms=100, segment_bytes=400, file_delete_delay_ms=0)
    for p in range(2):
        log = m.create("t", p, uuid.uuid4(), cfg)
        for ts in (0, 10, 1000):
            log.append(bytearray(h.make_batch(1, 200, ts=ts)), leader_epoch=0, now_ms=ts)
    assert m.run_retention(now_ms=1050) > 0
    assert all(log.log_start_offset == 2 for log in m.logs())
    m.shutdown()


def test_file_budget_limits_open_segments(h, tmp_path):
    m = LogManager([tmp_path], max_open_files=5)
    m.load()
    logs = [m.create("t", p, uuid.uuid4(), LogConfig()) for p in range(12)]
    for log in logs:
        log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
    assert m.budget.open_count <= 5
    for log in logs:  # reopening evicted files works transparently
        assert log.read(0, 100).slice.read_bytes()[:8] == bytes(8)
    assert m.budget.open_count <= 5
    m.shutdown()


def test_shutdown_syncs_each_filesystem_once_instead_of_an_fsync_per_file(h, tmp_path, monkeypatch):
    from strom.storage import files

    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    m.load()
    for p in range(4):
        log = m.create("t", p, uuid.uuid4(), LogConfig())
        log.append(bytearray(h.make_batch(2, 100)), leader_epoch=0, now_ms=0)
    fsyncs, synced = [], []
    monkeypatch.setattr(files, "fsync", lambda fd: fsyncs.append(fd))
    monkeypatch.setattr(files, "sync_filesystems", lambda ds: synced.append(list(ds)))
    m.shutdown()
    assert synced == [dirs]
    # only the directory-wide checkpoints and markers are fsynced one by one, not the logs
    assert len(fsyncs) <= 3 * len(dirs)
    assert all((d / CLEAN_SHUTDOWN_MARKER).exists() for d in dirs)


def test_a_failed_sync_leaves_no_clean_shutdown_marker(h, tmp_path, monkeypatch):
    from strom.storage import files
    from strom.storage.errors import KafkaStorageError

    m = LogManager([tmp_path / "a"])
    m.load()
    m.create("t", 0, uuid.uuid4(), LogConfig()).append(
        bytearray(h.make_batch(2, 100)), leader_epoch=0, now_ms=0)

    def fail(dirs):
        raise KafkaStorageError("syncfs failed: EIO")

    monkeypatch.setattr(files, "sync_filesystems", fail)
    with pytest.raises(KafkaStorageError):
        m.shutdown()
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_MARKER).exists()
    m2 = LogManager([tmp_path / "a"])
    m2.load()  # recovery instead of trusting the files
    assert m2.get("t", 0).log_end_offset == 2


def test_sync_filesystems_reports_a_missing_directory(tmp_path, monkeypatch):
    from strom.storage import files
    from strom.storage.errors import KafkaStorageError

    monkeypatch.setattr(files, "FSYNC_ENABLED", True)
    files.sync_filesystems([tmp_path])
    if files._syncfs is not None:
        with pytest.raises(KafkaStorageError, match="cannot open"):
            files.sync_filesystems([tmp_path / "gone"])


def test_a_deleted_log_is_freed_by_reference_counting_alone(tmp_path) -> None:
    """The partition manager freezes new logs out of the garbage collector (gc.freeze); that
    keeps no memory only if a log holds no reference cycle. Without any collection, a deleted
    log must be gone, and nothing it owned left in a cycle."""
    import gc
    import weakref

    manager = LogManager([tmp_path], max_open_files=100, producer_id_expiration_ms=86_400_000)
    manager.load()
    log = manager.create("t", 0, uuid.uuid4(), LogConfig())
    log.roll()
    ref = weakref.ref(log)
    del log
    gc.collect()
    gc.disable()
    try:
        manager.delete_partition("t", 0)
        assert ref() is None
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_prepared_directories_are_used_by_create(tmp_path) -> None:
    manager = LogManager([tmp_path], max_open_files=100, producer_id_expiration_ms=86_400_000)
    manager.load()
    topic_id = uuid.uuid4()
    plan = manager.plan_dirs([("t", 0), ("t", 1)])
    made = LogManager.prepare_dirs([(path, topic_id) for path in plan.values()])
    assert made == set(plan.values())
    log = manager.create("t", 0, topic_id, LogConfig(), prepared=plan[("t", 0)])
    assert log.dir == plan[("t", 0)] and log.topic_id == topic_id
    # a prepared directory of another topic id is not trusted: create replaces it
    other = uuid.uuid4()
    log1 = manager.create("t", 1, other, LogConfig())
    assert log1.topic_id == other
    assert LogManager.prepare_dirs([(plan[("t", 0)], topic_id)]) == set()  # exists: left alone
