"""Moving a partition's log to another log dir (AlterReplicaLogDirs): the copy in rounds on a
worker thread while the log serves, the swap on the loop, and what a start makes of the
directories a crash left at each step of a move (never a lost record)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from strom import record as R
from strom.protocol.errors import ErrorCode
from strom.storage import manager as manager_module
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog
from strom.storage.manager import LogManager
from strom.storage.move import DirCopy, MoveCancelled

DEADLINE_S = 20.0
SMALL_SEGMENTS = LogConfig(segment_bytes=1500)  # a few batches each: the move copies many files


def _batch(values: list[bytes]) -> bytearray:
    return bytearray(R.build_batch([R.Record(i, 1_000 + i, None, v) for i, v in enumerate(values)]))


def _append(plog: PartitionLog, first: int, count: int) -> list[bytes]:
    values = [b"value-%05d" % i for i in range(first, first + count)]
    for v in values:
        plog.append(_batch([v * 20]), leader_epoch=0, now_ms=0)
    return [v * 20 for v in values]


def _values(plog: PartitionLog) -> list[bytes]:
    """Every record value, read through the log as a fetch reads it."""
    out: list[bytes] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20, max_offset=plog.log_end_offset).slice.read_bytes()
        for pos, h in R.iter_batches(memoryview(data)):
            out += [r.value for r in R.decode_records(data[pos : pos + h.size])]
            offset = h.next_offset
    return out


def _manager(*dirs: Path) -> LogManager:
    m = LogManager(list(dirs), config_for=lambda _t: SMALL_SEGMENTS)
    m.load()
    return m


def _leftovers(*dirs: Path) -> list[str]:
    return sorted(p.name for d in dirs for p in d.iterdir()
                  if p.name.endswith(("-future", "-delete", "-stray")))


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.01)


class HeldRounds:
    """Wraps DirCopy.catch_up: after its first round the copy waits until `release` (the test
    appends or deletes meanwhile); records the threads rounds run on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.threads: list[str] = []
        real = DirCopy.catch_up

        def held(copy: DirCopy, generation: int) -> int:
            self.threads.append(threading.current_thread().name)
            copied = real(copy, generation)
            self.entered.set()
            assert self.release.wait(DEADLINE_S)
            return copied

        monkeypatch.setattr(DirCopy, "catch_up", held)


# --- the move --------------------------------------------------------------------------------


def test_a_log_moves_while_it_serves_and_stays_moved_after_a_restart(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    m = _manager(a, b)
    plog = m.create("t", 0, uuid.uuid4(), SMALL_SEGMENTS)
    assert m.dir_of("t", 0) == a
    written = _append(plog, 0, 42)
    assert len(plog.segments) > 5 and plog.active_segment.size > 0  # it grows during the copy
    rounds = HeldRounds(monkeypatch)

    async def scenario() -> None:
        assert m.alter_log_dir("t", 0, str(b.absolute()))
        await _until(rounds.entered.is_set, "the first round never ended")
        written.extend(_append(plog, 42, 20))  # appends and rolls between two rounds
        assert m.moves()[("t", 0)].target == b
        rounds.release.set()
        await asyncio.wait_for(m.moves_done(), DEADLINE_S)
        await asyncio.wait_for(m.removals_done(), DEADLINE_S)

    asyncio.run(scenario())
    assert threading.main_thread().name not in rounds.threads  # copied off the event loop
    assert m.get("t", 0) is plog and not plog.closed  # the same object serves, from b
    assert (m.dir_of("t", 0), plog.dir) == (b, b / "t-0")
    assert not (a / "t-0").exists() and _leftovers(a, b) == [] and m.moves() == {}
    assert _values(plog) == written
    written += _append(plog, 62, 5)
    assert _values(plog) == written
    m.shutdown()

    again = _manager(a, b)
    assert again.dir_of("t", 0) == b and _values(again.get("t", 0)) == written
    again.shutdown()


def test_a_move_where_the_log_is_does_nothing_and_kafkas_errors(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    m = _manager(a, b)
    m.create("t", 0, uuid.uuid4(), SMALL_SEGMENTS)
    long_topic = "x" * 249  # a legal topic name, but its future directory's would pass 255
    m.create(long_topic, 0, uuid.uuid4(), SMALL_SEGMENTS)

    def code(topic: str, path: str) -> int:
        with pytest.raises(StorageError) as e:
            m.alter_log_dir(topic, 0, path)
        return e.value.error_code

    assert code("t", str(tmp_path / "c")) == ErrorCode.LOG_DIR_NOT_FOUND
    assert code("t", str(b.absolute()) + "/") == ErrorCode.LOG_DIR_NOT_FOUND  # compared exactly
    assert code(long_topic, str(b.absolute())) == ErrorCode.INVALID_TOPIC_EXCEPTION
    m._offline[b] = "test"
    assert code("t", str(b.absolute())) == ErrorCode.KAFKA_STORAGE_ERROR
    del m._offline[b]
    assert m.alter_log_dir("missing", 0, str(b.absolute())) is False
    assert m.alter_log_dir("t", 0, str(a.absolute())) is True  # there already
    assert m.moves() == {}
    m.shutdown()


def test_deleting_the_partition_cancels_its_move_and_removes_the_copy(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    m = _manager(a, b)
    _append(m.create("t", 0, uuid.uuid4(), SMALL_SEGMENTS), 0, 20)
    rounds = HeldRounds(monkeypatch)

    async def scenario() -> None:
        assert m.alter_log_dir("t", 0, str(b.absolute()))
        await _until(rounds.entered.is_set, "the copy never began")
        assert [p.name for p in b.iterdir() if p.name.endswith("-future")]
        m.delete_partitions([("t", 0)])
        rounds.release.set()
        await asyncio.wait_for(m.moves_done(), DEADLINE_S)
        await asyncio.wait_for(m.removals_done(), DEADLINE_S)

    asyncio.run(scenario())
    assert m.moves() == {} and _leftovers(a, b) == [] and not (b / "t-0").exists()
    m.shutdown()


def test_asking_for_another_dir_replaces_the_move_under_way(tmp_path, monkeypatch):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    m = _manager(a, b, c)
    plog = m.create("t", 0, uuid.uuid4(), SMALL_SEGMENTS)
    written = _append(plog, 0, 20)
    rounds = HeldRounds(monkeypatch)

    async def scenario() -> None:
        assert m.alter_log_dir("t", 0, str(b.absolute()))
        await _until(rounds.entered.is_set, "the copy never began")
        assert m.alter_log_dir("t", 0, str(b.absolute()))  # on its way there: left alone
        assert m.alter_log_dir("t", 0, str(c.absolute()))  # as Kafka: the copy to b goes
        rounds.release.set()
        await asyncio.wait_for(m.moves_done(), DEADLINE_S)
        await asyncio.wait_for(m.removals_done(), DEADLINE_S)

    asyncio.run(scenario())
    assert m.dir_of("t", 0) == c and _values(plog) == written
    assert _leftovers(a, b, c) == [] and [p for p in b.iterdir() if p.is_dir()] == []
    m.shutdown()


# --- failures during the swap ----------------------------------------------------------------


def test_a_failed_last_copy_leaves_the_log_serving_where_it_was(tmp_path, monkeypatch, caplog):
    a, b = tmp_path / "a", tmp_path / "b"
    m = _manager(a, b)
    plog = m.create("t", 0, uuid.uuid4(), SMALL_SEGMENTS)
    written = _append(plog, 0, 20)

    def broken(_copy: DirCopy, _generation: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(DirCopy, "finish", broken)
    caplog.set_level(logging.ERROR, logger=manager_module.__name__)

    async def scenario() -> None:
        assert m.alter_log_dir("t", 0, str(b.absolute()))
        await asyncio.wait_for(m.moves_done(), DEADLINE_S)
        await asyncio.wait_for(m.removals_done(), DEADLINE_S)

    asyncio.run(scenario())
    assert "Input/output error" in caplog.text
    assert (m.dir_of("t", 0), plog.dir, plog.closed) == (a, a / "t-0", False)
    written += _append(plog, 20, 3)
    assert _values(plog) == written and _leftovers(a, b) == []
    m.shutdown()


def test_a_copy_that_cannot_take_its_name_gives_the_original_back(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    m = _manager(a, b)
    plog = m.create("t", 0, uuid.uuid4(), SMALL_SEGMENTS)
    written = _append(plog, 0, 20)
    rename = os.rename

    def refuse_final(src, dst) -> None:
        if Path(dst) == b / "t-0":
            raise OSError(errno.EIO, "Input/output error")
        rename(src, dst)

    monkeypatch.setattr(manager_module.os, "rename", refuse_final)

    async def scenario() -> None:
        assert m.alter_log_dir("t", 0, str(b.absolute()))
        await asyncio.wait_for(m.moves_done(), DEADLINE_S)
        await asyncio.wait_for(m.removals_done(), DEADLINE_S)

    asyncio.run(scenario())
    assert (m.dir_of("t", 0), plog.dir, plog.closed) == (a, a / "t-0", False)
    assert _values(plog) == written and _leftovers(a, b) == []
    m.shutdown()


# --- what a start makes of a move a crash interrupted ----------------------------------------


def _crashed_move(tmp_path: Path, *, committed: bool, original: bool = True
                  ) -> tuple[Path, Path, list[bytes], Path]:
    """Directories as a crash leaves them: a log in a/t-0 with records, its complete copy in
    b/t-0.<uid>-future; ``committed``: the original set aside as a/t-0.<uid>-delete (the
    commit); ``original=False``: no original at all."""
    a, b = tmp_path / "a", tmp_path / "b"
    m = _manager(a, b)
    written = _append(m.create("t", 0, uuid.uuid4(), SMALL_SEGMENTS), 0, 20)
    m.shutdown()
    uid = uuid.uuid4().hex
    future = b / f"t-0.{uid}-future"
    shutil.copytree(a / "t-0", future)
    if committed:
        (a / "t-0").rename(a / f"t-0.{uid}-delete")
    elif not original:
        shutil.rmtree(a / "t-0")
    return a, b, written, future


def _start(a: Path, b: Path) -> LogManager:
    async def load() -> LogManager:
        m = _manager(a, b)
        await asyncio.wait_for(m.removals_done(), DEADLINE_S)
        return m

    return asyncio.run(load())


def test_a_crash_before_the_commit_keeps_the_original_and_removes_the_copy(tmp_path):
    a, b, written, future = _crashed_move(tmp_path, committed=False)
    (future / "00000000000000000000.log").unlink()  # a copy cut short as well
    m = _start(a, b)
    assert m.dir_of("t", 0) == a and _values(m.get("t", 0)) == written
    assert not future.exists() and _leftovers(a, b) == []
    m.shutdown()


def test_a_crash_after_the_commit_completes_the_move(tmp_path, caplog):
    a, b, written, future = _crashed_move(tmp_path, committed=True)
    caplog.set_level(logging.WARNING, logger=manager_module.__name__)
    m = _start(a, b)
    assert m.dir_of("t", 0) == b and _values(m.get("t", 0)) == written
    assert not future.exists() and _leftovers(a, b) == []
    assert "completing the move of t-0" in caplog.text
    m.shutdown()


def test_a_copy_without_its_original_is_kept_as_stray(tmp_path):
    a, b, _written, future = _crashed_move(tmp_path, committed=False, original=False)
    files = sorted(p.name for p in future.iterdir())
    m = _start(a, b)
    assert m.get("t", 0) is None
    [stray] = m.stray_dirs
    assert re.fullmatch(r"t-0\.[0-9a-f]{32}-stray", stray.name) and stray.parent == b
    assert sorted(p.name for p in stray.iterdir()) == files
    m.shutdown()


def test_a_committed_copy_is_never_removed_even_when_the_partition_exists(tmp_path):
    a, b, _written, future = _crashed_move(tmp_path, committed=True)
    files = sorted(p.name for p in future.iterdir())
    (a / "t-0").mkdir()  # e.g. made again after a swap that failed half-way
    m = _start(a, b)
    assert m.dir_of("t", 0) == a and _values(m.get("t", 0)) == []
    [stray] = m.stray_dirs  # the records stay, for the operator to take back
    assert stray.parent == b and sorted(p.name for p in stray.iterdir()) == files
    m.shutdown()


# --- DirCopy: one round at a time -------------------------------------------------------------


def _settle(path: Path) -> None:
    """Date a file back: written long before any round began."""
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))


def _tree(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_each_round_copies_only_what_changed(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "00000000000000000000.log").write_bytes(b"a" * 1000)
    (src / "00000000000000000000.index").write_bytes(b"i" * 80)
    (src / "partition.metadata").write_bytes(b"version: 0\n")
    for name in ("00000000000000000000.index", "partition.metadata"):
        _settle(src / name)
    (src / "00000000000000000000.log.deleted").write_bytes(b"gone")  # never copied
    (src / "next-segment.log.tmp").write_bytes(b"")
    copy = DirCopy(src, dst)
    assert copy.catch_up(0) == 1000 + 80 + 11
    assert copy.catch_up(0) == 0
    with open(src / "00000000000000000000.log", "ab") as f:
        f.write(b"b" * 300)
    assert copy.catch_up(0) == 300  # appended bytes only
    (src / "00000000000000000000.index").write_bytes(b"j" * 80)  # rewritten: mtime moves
    (src / "00000000000000000300.log").write_bytes(b"c" * 10)
    (src / "partition.metadata").unlink()
    assert copy.catch_up(0) == 80 + 10
    expected = {k: v for k, v in _tree(src).items() if not k.endswith((".deleted", ".tmp"))}
    assert _tree(dst) == expected and copy.size == sum(map(len, expected.values()))
    assert copy.holds("00000000000000000000.log", 1300)
    assert not copy.holds("00000000000000000000.log", 1301)


def test_a_recent_file_is_compared_until_its_stat_can_be_trusted(tmp_path):
    """A second write within the same mtime tick would not show in the stat: a file written
    shortly before its copy began is compared with the copy (and copied when it differs) until
    its mtime is older than the round; then its stat alone says it is unchanged."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    f = src / "leader-epoch-checkpoint"
    f.write_bytes(b"0\n1\n0 0\n")
    copy = DirCopy(src, dst)
    assert copy.catch_up(0) == 8
    st = f.stat()
    f.write_bytes(b"0\n1\n5 9\n")  # the same size and, as within one tick, the same mtime
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert copy.catch_up(0) == 8 and _tree(dst) == _tree(src)
    assert copy.catch_up(0) == 0  # compared: the same bytes, nothing written
    tmp = src / "leader-epoch-checkpoint.tmp"
    tmp.write_bytes(f.read_bytes())
    tmp.replace(f)  # rewritten whole with the same bytes (another inode): still nothing
    assert copy.catch_up(0) == 0
    _settle(f)
    assert copy.catch_up(0) == 0

    def unexpected(_name: str, _size: int) -> bool:
        raise AssertionError("a settled file is trusted by its stat")

    copy._same_bytes = unexpected  # type: ignore[method-assign]
    assert copy.catch_up(0) == 0


def test_a_truncated_log_is_copied_whole_again(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    log = src / "00000000000000000000.log"
    log.write_bytes(b"a" * 100)
    copy = DirCopy(src, dst)
    copy.catch_up(0)
    with open(log, "r+b") as f:  # truncated, then longer than before: same inode
        f.truncate(40)
        f.seek(40)
        f.write(b"b" * 200)
    assert copy.catch_up(1) == 240  # the log's generation moved: the whole file
    assert _tree(dst) == _tree(src)


def test_a_cancelled_copy_stops_and_discard_removes_it(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "00000000000000000000.log").write_bytes(b"a" * 10)
    copy = DirCopy(src, dst)
    copy.cancelled.set()
    with pytest.raises(MoveCancelled):
        copy.catch_up(0)
    copy.discard()
    assert not dst.exists()
