"""LogManager's set-aside directories, named as Kafka names them: ``-delete`` (renamed and
removed by a worker thread, at once when a re-created partition needs the name; a crash's
leftovers go at the next start) and ``-stray`` (kept,
never loaded, never removed)."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import uuid
from pathlib import Path

from strom.storage import manager as manager_module
from strom.storage.config import LogConfig
from strom.storage.manager import LogManager, suffixed_dir_name

DEADLINE_S = 20.0
DELETE_NAME = re.compile(r"t-(\d+)\.[0-9a-f]{32}-delete")


def test_suffixed_names_are_kafkas_and_fit_255_bytes() -> None:
    name = suffixed_dir_name("orders", 3, "-stray")
    assert re.fullmatch(r"orders-3\.[0-9a-f]{32}-stray", name), name
    long = suffixed_dir_name("x" * 249, 12345, "-delete")
    assert len(long.encode()) == 255 and long.endswith("-delete")
    assert re.fullmatch(r"x+-12345\.[0-9a-f]{32}-delete", long), long


def _with_data(m: LogManager, h, topic: str, partition: int) -> Path:
    plog = m.create(topic, partition, uuid.uuid4(), LogConfig())
    plog.append(bytearray(h.make_batch(3)), leader_epoch=0, now_ms=0)
    return plog.dir


def test_deletion_renames_and_removes_in_one_worker_job(h, tmp_path, monkeypatch) -> None:
    m = LogManager([tmp_path])
    m.load()
    for p in range(4):
        _with_data(m, h, "t", p)
    jobs: list[tuple[str, list[Path]]] = []
    remove = LogManager._remove_dirs
    release = threading.Event()

    def held(doomed: list[Path]) -> None:
        jobs.append((threading.current_thread().name, list(doomed)))
        assert release.wait(DEADLINE_S)
        remove(doomed)

    monkeypatch.setattr(LogManager, "_remove_dirs", staticmethod(held))

    async def scenario() -> None:
        renamed = m.delete_partitions([("t", p) for p in range(4)])
        assert m.get("t", 0) is None  # out of service at once
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while not jobs:  # the renames come first in the job
            assert asyncio.get_running_loop().time() < deadline, "the job never started"
            await asyncio.sleep(0.01)
        # the names are free now, while the removal is still held in its thread
        assert not any((tmp_path / f"t-{p}").exists() for p in range(4))
        assert sorted(int(DELETE_NAME.fullmatch(d.name).group(1)) for d in renamed) == [0, 1, 2, 3]
        assert all(d.exists() for d in renamed)
        again = m.create("t", 0, uuid.uuid4(), LogConfig())  # a re-created topic
        assert again.log_end_offset == 0
        release.set()
        await asyncio.wait_for(m.removals_done(), DEADLINE_S)
        assert not any(d.exists() for d in renamed)

    asyncio.run(scenario())
    [(thread, doomed)] = jobs  # one job for the whole change
    assert thread != threading.main_thread().name and len(doomed) == 4


def test_a_deleted_log_is_closed_without_writing_anything(h, tmp_path) -> None:
    """Deletion discards a log: no index, epoch checkpoint or producer snapshot is written
    for data that is going (a topic of 1,000 partitions would write 3,000 files on the loop)."""
    m = LogManager([tmp_path])
    m.load()
    plog = m.create("t", 0, uuid.uuid4(), LogConfig())
    plog.append(bytearray(h.make_batch(3)), leader_epoch=0, now_ms=0)
    before = {p.name: p.stat().st_mtime_ns for p in plog.dir.iterdir()}
    plog.discard()
    assert plog.closed
    assert {p.name: p.stat().st_mtime_ns for p in plog.dir.iterdir()} == before
    m.shutdown()


def test_a_recreated_partition_takes_its_name_before_the_worker_renames_it(
        h, tmp_path, monkeypatch) -> None:
    m = LogManager([tmp_path])
    m.load()
    old = _with_data(m, h, "t", 0)
    started, release = threading.Event(), threading.Event()
    run = LogManager._rename_and_remove

    def late(self: LogManager, moves: list[tuple[Path, Path]]) -> None:
        started.set()
        assert release.wait(DEADLINE_S)
        run(self, moves)

    monkeypatch.setattr(LogManager, "_rename_and_remove", late)

    async def scenario() -> None:
        [doomed] = m.delete_partitions([("t", 0)])
        assert (old / "00000000000000000000.log").exists()  # not renamed yet
        again = m.create("t", 0, uuid.uuid4(), LogConfig())  # takes the name now
        assert again.dir == old and again.log_end_offset == 0
        assert doomed.exists() and not m.stray_dirs  # the old data went to -delete, not stray
        release.set()
        await asyncio.wait_for(m.removals_done(), DEADLINE_S)
        assert not doomed.exists() and again.dir.exists()

    asyncio.run(scenario())
    assert started.is_set()
    m.shutdown()


def test_leftover_delete_dirs_are_removed_at_the_next_start(h, tmp_path, caplog) -> None:
    m = LogManager([tmp_path])
    m.load()
    d = _with_data(m, h, "t", 0)
    m.shutdown()
    leftover = d.rename(d.with_name(suffixed_dir_name("t", 0, "-delete")))  # as a crash left it
    caplog.set_level(logging.INFO, logger=manager_module.__name__)

    async def scenario() -> None:
        again = LogManager([tmp_path])
        again.load()  # with a loop: the removal runs in a worker thread
        assert again.get("t", 0) is None
        await asyncio.wait_for(again.removals_done(), DEADLINE_S)

    asyncio.run(scenario())
    assert not leftover.exists()
    assert leftover.name in caplog.text


def test_stray_dirs_are_kept_and_never_loaded(h, tmp_path, caplog) -> None:
    m = LogManager([tmp_path])
    m.load()
    _with_data(m, h, "t", 0)
    kept = _with_data(m, h, "t", 1)
    stray = m.mark_stray("t", 0, "the metadata does not know it")
    assert stray is not None and re.fullmatch(r"t-0\.[0-9a-f]{32}-stray", stray.name)
    assert m.get("t", 0) is None and m.get("t", 1) is not None
    files = sorted(p.name for p in stray.iterdir())
    assert "00000000000000000000.log" in files
    m.shutdown()

    caplog.set_level(logging.WARNING, logger=manager_module.__name__)
    for _ in range(2):  # every later start leaves it alone
        again = LogManager([tmp_path])
        again.load()
        assert again.get("t", 0) is None and again.get("t", 1) is not None
        assert again.stray_dirs == [stray]
        assert sorted(p.name for p in stray.iterdir()) == files
        again.shutdown()
    assert stray.name in caplog.text and kept.exists()


def test_set_aside_leaves_the_directory_and_create_keeps_its_data_as_stray(h, tmp_path) -> None:
    m = LogManager([tmp_path])
    m.load()
    d = _with_data(m, h, "t", 0)
    segment = d / "00000000000000000000.log"
    data = segment.read_bytes()
    assert m.set_aside("t", 0)  # closed (its indexes written), its records where they were
    assert m.get("t", 0) is None and segment.read_bytes() == data
    # a topic of another id takes the name: the data is renamed stray, not removed
    new = m.create("t", 0, uuid.uuid4(), LogConfig())
    assert new.log_end_offset == 0
    [stray] = [p for p in tmp_path.iterdir() if p.name.endswith("-stray")]
    assert (stray / "00000000000000000000.log").stat().st_size > 0


def test_an_empty_leftover_of_another_id_is_removed(tmp_path) -> None:
    m = LogManager([tmp_path])
    m.load()
    plan = m.plan_dirs([("t", 0)])
    LogManager.prepare_dirs([(plan[("t", 0)], uuid.uuid4())])  # made ahead, then not used
    m.create("t", 0, uuid.uuid4(), LogConfig())
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(("-stray", "-delete"))]


def test_a_failed_removal_is_logged_and_left_for_the_next_start(h, tmp_path, caplog,
                                                                monkeypatch) -> None:
    m = LogManager([tmp_path])
    m.load()
    _with_data(m, h, "t", 0)

    def refuse(path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(manager_module.shutil, "rmtree", refuse)
    caplog.set_level(logging.ERROR, logger=manager_module.__name__)
    [doomed] = m.delete_partitions([("t", 0)])  # no loop: inline
    assert doomed.exists() and str(doomed) in caplog.text
    monkeypatch.undo()
    m.shutdown()
    LogManager([tmp_path]).load()
    assert not doomed.exists()
