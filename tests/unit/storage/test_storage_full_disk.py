"""A full disk or a failing log dir (issue 15, point 5): the dir goes offline as in Kafka
(KAFKA_STORAGE_ERROR for its partitions, one ERROR naming dir and cause), nothing torn is ever
served, and the dir comes back once it takes writes again. Out of file descriptors: the request
fails with KAFKA_STORAGE_ERROR and a rate-limited ERROR, the dir stays online."""

import asyncio
import errno
import logging
import os
import time
import uuid
from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode
from strom.storage import files, manager
from strom.storage.config import LogConfig
from strom.storage.errors import KafkaStorageError, StorageError
from strom.storage.files import FileBudget, SegmentFile
from strom.storage.health import RateLimitedLog, probe_dir
from strom.storage.manager import LogManager

TOPIC_ID = uuid.UUID(int=7)
DEADLINE_S = 10.0


class DiskFull:
    """Stands in for ``os.pwrite``: once armed, a write stores half its bytes and the next one
    fails with ENOSPC, as a filling disk does."""

    def __init__(self) -> None:
        self.real = os.pwrite
        self.real_write = os.write
        self.armed = False
        self.half_written = False

    def __call__(self, fd: int, data, pos: int) -> int:
        if not self.armed:
            return self.real(fd, data, pos)
        if not self.half_written and len(data) > 1:
            self.half_written = True
            return self.real(fd, bytes(data[: len(data) // 2]), pos)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, fd: int, data) -> int:
        """``os.write`` (the health probe's): fails while armed."""
        if self.armed:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real_write(fd, data)


@pytest.fixture
def disk_full(monkeypatch):
    fault = DiskFull()
    monkeypatch.setattr(os, "pwrite", fault)
    monkeypatch.setattr(os, "write", fault.write)
    return fault


def _manager(tmp_path: Path, config: LogConfig | None = None) -> tuple[LogManager, object]:
    mgr = LogManager([tmp_path / "logs"])
    mgr.load()
    plog = mgr.create("t", 0, TOPIC_ID, config or LogConfig())
    return mgr, plog


def _append(h, plog, value_size=100):
    return plog.append(bytearray(h.make_batch(2, value_size)), leader_epoch=0, now_ms=0)


def _read_all(plog) -> bytes:
    r = plog.read(plog.log_start_offset, 1 << 30, max_offset=plog.log_end_offset)
    return b"" if r.slice is None else r.slice.read_bytes()


def _errors(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_enospc_mid_write_takes_the_dir_offline_and_it_comes_back(h, tmp_path, disk_full, caplog):
    mgr, plog = _manager(tmp_path)
    for _ in range(3):
        _append(h, plog)
    before = _read_all(plog)
    size = plog.active_segment.log_path.stat().st_size
    disk_full.armed = True
    caplog.set_level(logging.INFO)
    with pytest.raises(KafkaStorageError) as exc:
        _append(h, plog)
    assert exc.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "No space left on device" in str(exc.value)
    # the half-written batch is cut off again: nothing torn on disk or in the log
    assert plog.active_segment.log_path.stat().st_size == size
    assert plog.log_end_offset == 6
    errors = _errors(caplog)
    assert len(errors) == 1, errors
    msg = errors[0].getMessage()
    assert str(tmp_path / "logs") in msg and "No space left on device" in msg and "t-0" in msg
    assert list(mgr.offline_dirs) == [tmp_path / "logs"]
    # every request to the dir answers KAFKA_STORAGE_ERROR, without another ERROR each
    for _ in range(5):
        with pytest.raises(KafkaStorageError, match="offline"):
            _append(h, plog)
        with pytest.raises(KafkaStorageError, match="offline"):
            plog.read(0, 1000)
    assert len(_errors(caplog)) == 1
    # no new partition lands in an offline dir
    with pytest.raises(KafkaStorageError, match="no log dir is online"):
        mgr.create("t", 1, TOPIC_ID, LogConfig())

    disk_full.armed = False
    assert asyncio.run(mgr.check_offline_dirs()) == [tmp_path / "logs"]
    assert not mgr.offline_dirs and plog.offline is None
    assert any("is back online" in r.getMessage() for r in caplog.records)
    assert _read_all(plog) == before
    assert _append(h, plog).first_offset == 6
    assert mgr.get("t", 0) is plog


def test_a_torn_tail_left_on_disk_is_cut_with_an_error_when_the_dir_comes_back(
    h, tmp_path, disk_full, monkeypatch, caplog
):
    """The cut after a failed write failed too: the torn batch stays on disk but is never
    served; the reload cuts it as crash recovery does (ERROR, bytes saved aside)."""
    mgr, plog = _manager(tmp_path)
    _append(h, plog)
    _append(h, plog)
    before = _read_all(plog)
    seg_path = plog.active_segment.log_path
    size = seg_path.stat().st_size
    real_ftruncate = os.ftruncate

    def no_space_to_truncate(fd, length):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "ftruncate", no_space_to_truncate)
    disk_full.armed = True
    with pytest.raises(KafkaStorageError):
        _append(h, plog)
    assert seg_path.stat().st_size > size  # the torn half-batch is still in the file
    monkeypatch.setattr(os, "ftruncate", real_ftruncate)
    disk_full.armed = False
    caplog.clear()
    assert mgr.bring_online(tmp_path / "logs")
    cut = [r.getMessage() for r in _errors(caplog)]
    assert len(cut) == 1 and "removed" in cut[0] and str(seg_path) in cut[0], cut
    assert seg_path.stat().st_size == size
    assert list(seg_path.parent.glob("*.log.corrupt-*")), "the cut bytes are kept aside"
    assert _read_all(plog) == before
    assert plog.log_end_offset == 4
    assert _append(h, plog).first_offset == 4


def test_a_roll_that_fails_takes_the_dir_offline_and_the_log_reloads(h, tmp_path, monkeypatch):
    """ENOSPC while creating the next segment's files: the dir goes offline, the reload keeps
    every batch written before."""
    mgr, plog = _manager(tmp_path, LogConfig(segment_bytes=600))
    for _ in range(4):
        _append(h, plog)
    before = _read_all(plog)
    real_open = SegmentFile.fileno

    def full(self):
        if not self.is_open and not self.created:
            raise KafkaStorageError(f"cannot open {self.path}") from OSError(
                errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(self)

    monkeypatch.setattr(SegmentFile, "fileno", full)
    with pytest.raises(KafkaStorageError) as exc:
        for _ in range(10):
            _append(h, plog)
    assert exc.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert mgr.offline_dirs
    monkeypatch.setattr(SegmentFile, "fileno", real_open)
    assert mgr.bring_online(tmp_path / "logs")
    assert _read_all(plog).startswith(before)
    nxt = plog.log_end_offset
    assert _append(h, plog).first_offset == nxt


def test_the_background_check_brings_the_dir_back(h, tmp_path, disk_full, monkeypatch):
    monkeypatch.setattr(manager, "OFFLINE_CHECK_INTERVAL_S", 0.01)

    async def main():
        mgr, plog = _manager(tmp_path)
        _append(h, plog)
        disk_full.armed = True
        with pytest.raises(KafkaStorageError):
            _append(h, plog)
        assert mgr.offline_dirs
        await asyncio.sleep(0.05)
        assert mgr.offline_dirs, "still failing: stays offline"
        disk_full.armed = False
        deadline = time.monotonic() + DEADLINE_S
        while mgr.offline_dirs:
            assert time.monotonic() < deadline, "the dir did not come back"
            await asyncio.sleep(0.01)
        assert _append(h, plog).first_offset == 2
        mgr.shutdown()

    asyncio.run(main())


def test_an_offline_dir_gets_no_clean_shutdown_marker(h, tmp_path, disk_full):
    mgr, plog = _manager(tmp_path)
    _append(h, plog)
    disk_full.armed = True
    with pytest.raises(KafkaStorageError):
        _append(h, plog)
    disk_full.armed = False
    mgr.shutdown()
    assert not (tmp_path / "logs" / manager.CLEAN_SHUTDOWN_MARKER).exists()
    again = LogManager([tmp_path / "logs"])
    again.load()
    assert again.get("t", 0).log_end_offset == 2


def test_a_failed_checkpoint_takes_the_dir_offline(h, tmp_path, monkeypatch, caplog):
    mgr, plog = _manager(tmp_path)
    _append(h, plog)

    def full(path, offsets, **kw):
        raise KafkaStorageError(f"cannot write {path}") from OSError(
            errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(manager, "write_offset_checkpoint", full)
    mgr.checkpoint()
    assert list(mgr.offline_dirs) == [tmp_path / "logs"]
    assert "offset checkpoints" in _errors(caplog)[0].getMessage()
    with pytest.raises(KafkaStorageError, match="offline"):
        _append(h, plog)


class NoDescriptors:
    """Stands in for ``os.open``: fails with EMFILE for segment files while ``on``."""

    def __init__(self) -> None:
        self.real = os.open
        self.on = False
        self.failed = 0

    def __call__(self, path, flags, mode=0o777, *, dir_fd=None):
        if self.on and str(path).endswith(".log"):
            self.failed += 1
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return self.real(path, flags, mode, dir_fd=dir_fd)


def test_out_of_descriptors_fails_the_request_not_the_dir(h, tmp_path, monkeypatch, caplog):
    mgr, plog = _manager(tmp_path)
    _append(h, plog)
    mgr.budget.close_all()
    fault = NoDescriptors()
    monkeypatch.setattr(os, "open", fault)
    fault.on = True
    for _ in range(5):
        with pytest.raises(KafkaStorageError) as exc:
            _append(h, plog)
        assert exc.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "Too many open files" in str(exc.value)
        with pytest.raises(StorageError):
            plog.read(0, 1000)
    errors = _errors(caplog)
    assert len(errors) == 1, "rate-limited: one ERROR, not one per request"
    assert "t-0" in errors[0].getMessage() and "file descriptors" in errors[0].getMessage()
    assert not mgr.offline_dirs and plog.offline is None
    fault.on = False
    assert _append(h, plog).first_offset == 2  # no recovery needed: it just works again
    assert plog.read(0, 10_000).slice is not None


def test_the_budget_gives_descriptors_back_when_the_process_runs_out(tmp_path, monkeypatch):
    budget = FileBudget(100)
    opened = []
    for i in range(6):
        f = SegmentFile(tmp_path / f"{i}.log", budget, create=True)
        f.fileno()
        opened.append(f)
    opened[5].pin()
    calls = {"n": 0}
    real = os.open

    def once(path, flags, mode=0o777, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(path, flags, mode, **kw)

    monkeypatch.setattr(os, "open", once)
    late = SegmentFile(tmp_path / "late.log", budget, create=True)
    assert late.fileno() >= 0
    assert calls["n"] == 2
    assert budget.open_count < 7 and opened[5].is_open  # pinned files are never closed
    opened[5].unpin()


def test_probe_needs_free_space_and_a_working_write(tmp_path, monkeypatch):
    assert probe_dir(tmp_path) is None
    assert not (tmp_path / ".strom_probe").exists()

    def tiny(path):
        return os.statvfs_result((4096, 4096, 1000, 10, 10, 100, 10, 10, 0, 255))

    monkeypatch.setattr(os, "statvfs", tiny)
    assert "bytes free" in probe_dir(tmp_path)
    monkeypatch.undo()
    monkeypatch.setattr(files, "fsync", lambda fd: (_ for _ in ()).throw(
        OSError(errno.EIO, os.strerror(errno.EIO))))
    assert "Input/output error" in probe_dir(tmp_path)


def test_rate_limited_log_says_how_many_were_held_back(caplog):
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("t"), 10.0, clock=lambda: now[0])
    assert limited.error("k", "bad %s", "thing")
    assert not limited.error("k", "bad %s", "thing")
    assert not limited.error("k", "bad %s", "thing")
    now[0] = 11.0
    assert limited.error("k", "bad %s", "thing")
    assert "2 more like it" in caplog.records[-1].getMessage()


def test_a_dir_whose_partitions_cannot_reload_stays_offline(h, tmp_path, disk_full, monkeypatch):
    mgr, plog = _manager(tmp_path)
    other = mgr.create("t", 1, TOPIC_ID, LogConfig())
    _append(h, plog)
    disk_full.armed = True
    with pytest.raises(KafkaStorageError):
        _append(h, plog)
    disk_full.armed = False
    real_reload = type(plog).reload

    def failing(self):
        if self is other:
            raise KafkaStorageError("cannot save damaged bytes") from OSError(errno.EIO, "EIO")
        real_reload(self)

    monkeypatch.setattr(type(plog), "reload", failing)
    assert not mgr.bring_online(tmp_path / "logs")
    assert mgr.offline_dirs and plog.offline and other.offline  # all or none
    monkeypatch.setattr(type(plog), "reload", real_reload)
    assert mgr.bring_online(tmp_path / "logs")
    assert _append(h, other).first_offset == 0 and _append(h, plog).first_offset == 2
