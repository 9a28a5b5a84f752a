"""Offset and time indexes in Kafka's on-disk format, held in memory as arrays.

Kafka preallocates and mmaps its index files; we keep entries in ``array`` objects and append
the new ones to the file when the segment is flushed, rolled or closed. The files have the same
layout as Kafka's (big-endian, exact size, no preallocation), so Kafka tools can read them.
Lookups are ``bisect`` over the in-memory arrays.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

_BIG_ENDIAN = sys.byteorder == "big"
_TIME_ENTRY = struct.Struct(">qi")
OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
INT32_MAX = 2147483647


class IndexCorruptError(Exception):
    """An index file fails its sanity check; the segment rebuilds it from the log."""


def _read(path: str | Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write_tail(path: str | Path, keep_bytes: int, data: bytes) -> None:
    """Cut the file to ``keep_bytes`` and append ``data`` (creating the file if needed)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != keep_bytes:
            os.ftruncate(fd, keep_bytes)
        if data:
            os.pwrite(fd, data, keep_bytes)
    finally:
        os.close(fd)


class OffsetIndex:
    """Entries (relative offset i32, file position i32): the last offset of a batch and the
    position where that batch starts."""

    __slots__ = (
        "_persisted", "_synced", "base_offset", "max_entries", "offsets", "path", "positions",
    )  # fmt: skip

    def __init__(self, path: str | Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self.offsets = array("i")  # relative to base_offset
        self.positions = array("i")
        self._persisted = 0  # entries known to be in the file
        # the file holds exactly the first ``_persisted`` entries (False: it may be missing or
        # longer, after a truncation): a flush with nothing new then costs no syscall
        self._synced = False

    @classmethod
    def load(
        cls, path: str | Path, base_offset: int, max_entries: int, log_size: int
    ) -> OffsetIndex:
        idx = cls(path, base_offset, max_entries)
        try:
            data = _read(path)
        except FileNotFoundError:
            if log_size > 0:
                raise IndexCorruptError(f"{path} is missing") from None
            return idx
        if len(data) % OFFSET_ENTRY_SIZE:
            raise IndexCorruptError(f"{path} size {len(data)} is not a multiple of 8")
        flat = array("i")
        flat.frombytes(data)
        if not _BIG_ENDIAN:
            flat.byteswap()
        offs, poss = flat[0::2], flat[1::2]
        prev_o, prev_p = -1, -1
        for o, p in zip(offs, poss, strict=True):
            if o <= prev_o or p <= prev_p or p >= log_size:
                raise IndexCorruptError(f"{path} has an out-of-order or out-of-range entry")
            prev_o, prev_p = o, p
        idx.offsets, idx.positions = offs, poss
        idx._persisted = len(offs)
        idx._synced = True
        return idx

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def is_full(self) -> bool:
        return len(self.offsets) >= self.max_entries

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self.offsets and rel <= self.offsets[-1]:
            raise ValueError(f"index offset {offset} is not above the last entry")
        self.offsets.append(rel)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= ``offset``, else (base, 0)."""
        i = bisect_right(self.offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 when none)."""
        i = bisect_right(self.positions, position) - 1
        return self.positions[i] if i >= 0 else 0

    @property
    def last_position(self) -> int:
        return self.positions[-1] if self.positions else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches starting at or after ``position``."""
        n = bisect_right(self.positions, position - 1)
        if n < len(self.offsets):
            del self.offsets[n:]
            del self.positions[n:]
            self._persisted = min(self._persisted, n)
            self._synced = False

    def reset(self) -> None:
        del self.offsets[:]
        del self.positions[:]
        self._persisted = 0
        self._synced = False

    def persist(self) -> None:
        """Write entries not yet in the file (and cut off entries removed by truncation)."""
        n = len(self.offsets)
        start = self._persisted
        if self._synced and start == n:
            return
        flat = array("i", bytes(8 * (n - start)))
        flat[0::2] = self.offsets[start:]
        flat[1::2] = self.positions[start:]
        if not _BIG_ENDIAN:
            flat.byteswap()
        _write_tail(self.path, start * OFFSET_ENTRY_SIZE, flat.tobytes())
        self._persisted = n
        self._synced = True


class TimeIndex:
    """Entries (timestamp i64, relative offset i32): the max timestamp seen so far and the offset
    of the batch where it was reached; appended only when the timestamp grows."""

    __slots__ = (
        "_persisted", "_synced", "base_offset", "max_entries", "offsets", "path", "timestamps",
    )  # fmt: skip

    def __init__(self, path: str | Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self.timestamps = array("q")
        self.offsets = array("i")
        self._persisted = 0
        self._synced = False  # as in OffsetIndex

    @classmethod
    def load(cls, path: str | Path, base_offset: int, max_entries: int) -> TimeIndex:
        idx = cls(path, base_offset, max_entries)
        try:
            data = _read(path)
        except FileNotFoundError:
            return idx  # a missing time index only costs timestamp lookups
        if len(data) % TIME_ENTRY_SIZE:
            raise IndexCorruptError(f"{path} size {len(data)} is not a multiple of 12")
        prev_t, prev_o = None, -1
        for t, o in _TIME_ENTRY.iter_unpack(data):
            if (prev_t is not None and t <= prev_t) or o < prev_o:
                raise IndexCorruptError(f"{path} has an out-of-order entry")
            idx.timestamps.append(t)
            idx.offsets.append(o)
            prev_t, prev_o = t, o
        idx._persisted = len(idx.offsets)
        idx._synced = True
        return idx

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def is_full(self) -> bool:
        return len(self.offsets) >= self.max_entries

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        if not self.offsets:
            return -1, self.base_offset
        return self.timestamps[-1], self.base_offset + self.offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        if not skip_full_check and self.is_full:
            return
        if self.offsets:
            if timestamp <= self.timestamps[-1] or offset - self.base_offset < self.offsets[-1]:
                return
        elif timestamp <= -1:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= ``timestamp``."""
        i = bisect_right(self.timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self.timestamps[i], self.base_offset + self.offsets[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        n = bisect_right(self.offsets, offset - self.base_offset - 1)
        if n < len(self.offsets):
            del self.timestamps[n:]
            del self.offsets[n:]
            self._persisted = min(self._persisted, n)
            self._synced = False

    def reset(self) -> None:
        del self.timestamps[:]
        del self.offsets[:]
        self._persisted = 0
        self._synced = False

    def persist(self) -> None:
        start = self._persisted
        if self._synced and start == len(self.offsets):
            return
        data = b"".join(
            _TIME_ENTRY.pack(self.timestamps[i], self.offsets[i])
            for i in range(start, len(self.offsets))
        )
        _write_tail(self.path, start * TIME_ENTRY_SIZE, data)
        self._persisted = len(self.offsets)
        self._synced = True
