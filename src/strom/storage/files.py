"""Segment files behind a budget of open file descriptors.

10,000 partitions mean tens of thousands of segment files; keeping one descriptor per file
would exhaust the process limit. Every segment file opens lazily through a shared
``FileBudget`` (an LRU); the least recently used unpinned file is closed when the budget is
exceeded. A pinned file (e.g. during a ``sendfile``) is never closed under its user.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from strom.storage.errors import KafkaStorageError

_O_FLAGS = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)

# Process-wide switch for tests on slow shared disks; a broker must leave it on.
FSYNC_ENABLED = True


def fsync(fd: int) -> None:
    """``os.fsync`` unless disabled by ``FSYNC_ENABLED`` (tests only)."""
    if FSYNC_ENABLED:
        os.fsync(fd)


def fsync_paths(paths: Iterable[Path]) -> None:
    """fsync each file; one deleted meanwhile (its segment went) is skipped. Thread-safe."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fsync(fd)
        finally:
            os.close(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # not Linux/glibc: os.sync() does the same, wider
        return None
    fn.argtypes = [ctypes.c_int]
    return fn


_syncfs = _load_syncfs()


def sync_filesystems(dirs: Iterable[Path]) -> None:
    """Make everything written under ``dirs`` durable: one ``syncfs`` per directory (Linux), or
    ``os.sync()`` where there is none. One call writes back a whole filesystem's dirty files
    and metadata, far cheaper than an fsync per file when there are thousands."""
    if not FSYNC_ENABLED:
        return
    if _syncfs is None:
        os.sync()
        return
    for d in dirs:
        try:
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise KafkaStorageError(f"cannot open {d} to sync it: {e}") from e
        try:
            if _syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise KafkaStorageError(f"syncfs of {d} failed: {os.strerror(err)}")
        finally:
            os.close(fd)


class FileBudget:
    """LRU of open ``SegmentFile`` descriptors, at most ``max_open`` unless all are pinned."""

    def __init__(self, max_open: int = 1000) -> None:
        if max_open < 1:
            raise ValueError("max_open must be positive")
        self.max_open = max_open
        self._open: OrderedDict[SegmentFile, None] = OrderedDict()

    @property
    def open_count(self) -> int:
        return len(self._open)

    def _opened(self, f: SegmentFile) -> None:
        self._open[f] = None
        if len(self._open) > self.max_open:
            self._evict(keep=f)

    def _evict(self, keep: SegmentFile | None = None) -> None:
        excess = len(self._open) - self.max_open
        if excess <= 0:
            return
        victims = []
        for f in self._open:  # oldest first; stop as soon as enough are found
            if f is not keep and f._pins == 0:
                victims.append(f)
                if len(victims) >= excess:
                    break
        for f in victims:
            f._close_fd()

    def close_all(self) -> None:
        for f in list(self._open):
            f._close_fd()

    def shed(self) -> bool:
        """Out of descriptors (EMFILE/ENFILE): close the older half of the unpinned files so
        the open that failed can be retried. True when any were closed."""
        victims = [f for f in self._open if f._pins == 0]
        victims = victims[: max(1, len(victims) // 2)] if victims else []
        for f in victims:
            f._close_fd()
        return bool(victims)


class SegmentFile:
    """A file opened on demand within a ``FileBudget``; ``fileno()`` (re)opens it."""

    __slots__ = ("_budget", "_closed", "_create", "_fd", "_pins", "path")

    def __init__(self, path: str | Path, budget: FileBudget, *, create: bool = False) -> None:
        """``create``: the file is created (or emptied) when first opened, so a partition that
        is never written costs no file and no descriptor."""
        self.path = path
        self._budget = budget
        self._fd: int | None = None
        self._pins = 0
        self._closed = False
        self._create = create

    @property
    def created(self) -> bool:
        """False while a lazily created file has not been opened (it does not exist yet)."""
        return not self._create

    def fileno(self) -> int:
        fd = self._fd
        if fd is not None:
            self._budget._open.move_to_end(self)
            return fd
        if self._closed:
            raise KafkaStorageError(f"segment file {self.path} is closed")
        flags = _O_FLAGS | os.O_CREAT | os.O_TRUNC if self._create else _O_FLAGS
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE) or not self._budget.shed():
                raise KafkaStorageError(f"cannot open {self.path}: {e}") from e
            try:  # the budget gave some descriptors back: once more
                fd = os.open(self.path, flags, 0o644)
            except OSError as e2:
                raise KafkaStorageError(f"cannot open {self.path}: {e2}") from e2
        self._create = False
        self._fd = fd
        self._budget._opened(self)
        return fd

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def pin(self) -> None:
        """Keep the descriptor open until the matching ``unpin`` (opens it if needed)."""
        self._pins += 1
        try:
            self.fileno()
        except BaseException:
            self._pins -= 1
            raise

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins <= 0:
            self._pins = 0
            if self._closed:
                self._close_fd()
            else:
                self._budget._evict()

    def close(self) -> None:
        """Close now, or when the last pin is released; later ``fileno()`` calls fail."""
        self._closed = True
        if self._pins == 0:
            self._close_fd()

    def reopenable(self) -> None:
        """Allow ``fileno()`` again after ``close`` (used when a log is reopened)."""
        self._closed = False

    def _close_fd(self) -> None:
        fd = self._fd
        if fd is not None:
            self._fd = None
            self._budget._open.pop(self, None)
            os.close(fd)

    def size(self) -> int:
        return os.fstat(self.fileno()).st_size

    def __repr__(self) -> str:
        return f"SegmentFile({str(self.path)!r}, open={self._fd is not None}, pins={self._pins})"


@dataclass(slots=True)
class FileSlice:
    """A byte range of a segment file, to send with ``os.sendfile``.

    Pin ``file`` around the send so the budget does not close the descriptor under it.
    """

    file: SegmentFile
    position: int
    length: int

    def read_bytes(self) -> bytes:
        self.file.pin()
        try:
            fd = self.file.fileno()
            parts = []
            pos, end = self.position, self.position + self.length
            while pos < end:
                chunk = os.pread(fd, end - pos, pos)
                if not chunk:
                    raise KafkaStorageError(f"short read from {self.file.path}")
                parts.append(chunk)
                pos += len(chunk)
            return b"".join(parts)
        finally:
            self.file.unpin()
