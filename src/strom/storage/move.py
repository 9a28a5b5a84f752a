"""Copying a partition directory into another log dir while its log keeps serving: the file
work of AlterReplicaLogDirs (KIP-113); `LogManager.alter_log_dir` drives it.

Kafka fills a ``<topic>-<partition>.<uuid>-future`` directory in the target log dir with a
fetcher thread while the current log serves, then swaps the two. Strom copies files instead,
into the same name, in rounds on a worker thread (`DirCopy.catch_up`), each file fsynced. A
round copies only what changed since the last one:

- a segment's ``.log`` only grows while the log does not truncate (truncations and reloads
  change the log's ``generation``), so its new bytes are appended; a new inode, a smaller size
  or another generation copies it again;
- any other file (indexes, producer snapshots, leader epochs, partition.metadata) is copied
  again when its inode, size or mtime changed. One written less than `SETTLED_NS` before its
  copy began could have been written again within the same mtime tick, unseen: its bytes are
  compared with the copy's instead (small files only, else it is copied again), so the last
  round, on the event loop, writes and fsyncs only what really changed.

``*.deleted``, ``*.cleaned`` and ``*.tmp`` files are never copied: the load of a partition
removes them anyway. Once a round leaves little to copy, the event loop closes the log, copies
what remains (`DirCopy.finish`: the last appends and what the close wrote) and syncs the copy;
`LogManager` then commits the move by renames (see there for why a crash loses nothing).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from strom.storage import files
from strom.storage.log import CLEANED_SUFFIX, sync_directory
from strom.storage.segment import DELETED_SUFFIX, LOG_SUFFIX

FUTURE_DIR_SUFFIX = "-future"
SETTLED_NS = 1_000_000_000  # a file unwritten this long before its copy began is trusted by mtime
CHUNK = 8 << 20  # bytes copied between two looks at the cancel flag
COMPARE_LIMIT = 1 << 20  # a recently written file up to this size is compared, not recopied
_SKIPPED = (DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")
# copy_file_range cannot do these here (another filesystem, an old kernel): read and write
_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM}


class MoveCancelled(Exception):
    """The move was cancelled (deleted partition, another target, shutdown) or its log is gone."""


def moved_dir_name(topic: str, partition: int, uid: str, suffix: str) -> str:
    """``<topic>-<partition>.<uid><suffix>``: Kafka's future directory name (never cut short:
    Kafka refuses to move a partition whose name would pass 255 bytes)."""
    return f"{topic}-{partition}.{uid}{suffix}"


def parse_moved_dir(name: str, suffix: str) -> tuple[str, int, str] | None:
    """``<topic>-<partition>.<32 hex><suffix>`` -> (topic, partition, uid); None otherwise."""
    if not name.endswith(suffix):
        return None
    head, dot, uid = name[: -len(suffix)].rpartition(".")
    if not dot or len(uid) != 32 or any(c not in "0123456789abcdef" for c in uid):
        return None
    topic, dash, part = head.rpartition("-")
    if not dash or not topic or not part.isdigit():
        return None
    return topic, int(part), uid


@dataclass(frozen=True, slots=True)
class _Copied:
    """A source file as a round saw it (stat before its copy) and copied it."""

    ino: int
    size: int
    mtime_ns: int
    began_ns: int  # wall clock when the round began, before the stat
    generation: int  # the log's truncation count then


@dataclass(frozen=True, slots=True)
class _Step:
    name: str
    start: int  # 0: the whole file anew; else append the bytes from here
    seen: _Copied


class DirCopy:
    """The copy of one partition directory ``src`` at ``dst``, brought up to date round after
    round. Rounds run one at a time, on a worker thread or (the last) on the event loop."""

    def __init__(self, src: Path, dst: Path) -> None:
        self.src = src
        self.dst = dst
        self.cancelled = threading.Event()
        self.size = 0  # bytes in the copy so far (DescribeLogDirs shows it)
        self._copied: dict[str, _Copied] = {}
        self._lock = threading.Lock()  # one round at a time; `discard` waits for it

    def catch_up(self, generation: int) -> int:
        """One round (worker thread): copy what changed; returns the bytes copied."""
        with self._lock:
            self._check()
            return self._run(*self.plan(generation))

    def pending(self, generation: int) -> int:
        """The bytes a round would copy now (stat calls only)."""
        with self._lock:
            return sum(s.seen.size - s.start for s in self.plan(generation)[0])

    def finish(self, generation: int) -> int:
        """The last round, once the log is closed: then sync the copy's directory and its log
        dir, so that the copy and its name survive a crash before the commit's renames."""
        with self._lock:
            copied = self._run(*self.plan(generation))
            sync_directory(self.dst)
            sync_directory(self.dst.parent)
            return copied

    def holds(self, name: str, size: int) -> bool:
        """Whether the copy holds the first ``size`` bytes of file ``name`` (any thread)."""
        c = self._copied.get(name)
        return c is not None and c.ino != -1 and c.size >= size

    def discard(self) -> None:
        """Cancel and remove the copy (worker thread: waits for a round under way to stop)."""
        self.cancelled.set()
        with self._lock, contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.dst)

    # --- one round -------------------------------------------------------------------------

    def plan(self, generation: int) -> tuple[list[_Step], list[str]]:
        """What a round would copy now, and the copied files the source no longer has."""
        began = time.time_ns()
        steps: list[_Step] = []
        present: set[str] = set()
        with os.scandir(self.src) as it:
            for entry in it:
                name = entry.name
                if name.endswith(_SKIPPED):
                    continue
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # deleted meanwhile (retention, a roll's rename)
                    continue
                present.add(name)
                seen = _Copied(st.st_ino, st.st_size, st.st_mtime_ns, began, generation)
                start = self._start_of(name, seen)
                if start is not None:
                    steps.append(_Step(name, start, seen))
        return steps, [name for name in self._copied if name not in present]

    def _start_of(self, name: str, now: _Copied) -> int | None:
        """Where copying ``name`` starts; None: the copy is current."""
        prev = self._copied.get(name)
        if prev is None or prev.ino == -1:
            return 0
        if name.endswith(LOG_SUFFIX):
            if prev.ino != now.ino or prev.generation != now.generation or now.size < prev.size:
                return 0
            return None if now.size == prev.size else prev.size
        same = (prev.ino, prev.size, prev.mtime_ns) == (now.ino, now.size, now.mtime_ns)
        if same and prev.mtime_ns < prev.began_ns - SETTLED_NS:
            return None
        if now.size == prev.size and self._same_bytes(name, now.size):
            # rewritten with the same bytes (a checkpoint), or too recent to trust its stat:
            # current as of now, trusted by its stat from the round its mtime is settled in
            self._copied[name] = now
            return None
        return 0

    def _same_bytes(self, name: str, size: int) -> bool:
        if size > COMPARE_LIMIT:
            return False
        try:
            with open(self.src / name, "rb") as a, open(self.dst / name, "rb") as b:
                return a.read(size + 1) == b.read(size + 1)
        except FileNotFoundError:
            return False

    def _run(self, steps: list[_Step], gone: list[str]) -> int:
        for name in gone:
            self.size -= self._copied.pop(name).size
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.dst / name)
        copied = 0
        for step in steps:
            self._check()
            prev = self._copied.get(step.name)
            if prev is not None:  # until this copy is done, the old one is never current
                self._copied[step.name] = replace(prev, ino=-1)
            n = self._copy(step)
            if n is None:  # gone from the source meanwhile: the next round removes the copy
                continue
            copied += n
            self.size += step.start + n - (prev.size if prev is not None else 0)
            self._copied[step.name] = replace(step.seen, size=step.start + n)
        return copied

    def _copy(self, step: _Step) -> int | None:
        """Copy the step's bytes and fsync them; None when the source file is gone."""
        try:
            src = os.open(self.src / step.name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if step.start == 0 else 0)
            dst = os.open(self.dst / step.name, flags, 0o644)
            try:
                n = self._copy_range(src, dst, step.start, step.seen.size - step.start)
                files.fsync(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        return n

    def _copy_range(self, src: int, dst: int, offset: int, count: int) -> int:
        """Copy ``count`` bytes from ``offset`` (fewer if the source got shorter)."""
        done = 0
        kernel = hasattr(os, "copy_file_range")
        while done < count:
            self._check()
            pos, n = offset + done, min(CHUNK, count - done)
            if kernel:
                try:
                    got = os.copy_file_range(src, dst, n, pos, pos)
                except OSError as e:
                    if e.errno not in _NO_COPY_RANGE:
                        raise
                    kernel = False
                    continue
            else:
                got = _pwrite_all(dst, os.pread(src, n, pos), pos)
            if got == 0:
                break
            done += got
        return done

    def _check(self) -> None:
        if self.cancelled.is_set():
            raise MoveCancelled(f"copy of {self.src} to {self.dst} cancelled")


def _pwrite_all(fd: int, data: bytes, pos: int) -> int:
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], pos + written)
    return written


def sync_tree(path: Path) -> None:
    """fsync every file of a partition directory and the directory itself (worker thread)."""
    with os.scandir(path) as it:
        names = [e.name for e in it if e.is_file(follow_symlinks=False)]
    files.fsync_paths(path / name for name in names)
    sync_directory(path)
