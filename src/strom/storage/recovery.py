"""Loading a partition directory: find segments, and after a crash re-validate the unflushed tail.

After a clean shutdown nothing is read but the active segment's index and the few batch
headers after its last entry. Otherwise every segment from the one holding the recovery point
on is re-read, CRC-checked and re-indexed; the first invalid byte truncates the log there and
later segments are deleted (Kafka's LogLoader does the same).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from strom.storage.config import LogConfig
from strom.storage.epochs import LeaderEpochCache
from strom.storage.files import FileBudget
from strom.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptSegmentError,
    LogSegment,
)

_STRAY_SUFFIXES = (DELETED_SUFFIX, ".cleaned", ".swap", ".tmp")


def scan_segment_files(dir: Path) -> list[int]:
    """Base offsets of the ``.log`` files in ``dir``; removes leftovers of interrupted work."""
    logs: list[int] = []
    indexes: dict[int, list[str]] = {}
    for name in os.listdir(dir):
        if name.endswith(_STRAY_SUFFIXES):
            (dir / name).unlink(missing_ok=True)
            continue
        stem, _, ext = name.partition(".")
        if len(stem) != 20 or not stem.isdigit():
            continue
        ext = "." + ext
        if ext == LOG_SUFFIX:
            logs.append(int(stem))
        elif ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            indexes.setdefault(int(stem), []).append(name)
    have = set(logs)
    for base, names in indexes.items():
        if base not in have:  # an index without its log is useless
            for name in names:
                (dir / name).unlink(missing_ok=True)
    logs.sort()
    return logs


def open_segments(
    dir: Path,
    config: LogConfig,
    budget: FileBudget,
    epochs: LeaderEpochCache,
    *,
    clean: bool,
    recovery_point: int,
    log_start_offset: int,
    now_ms: int,
    on_recover: Callable[[LogSegment], None] | None = None,
) -> list[LogSegment]:
    """Return the partition's segments, oldest first, the last one ready for appends."""

    def make(base: int, create: bool = False) -> LogSegment:
        return LogSegment(
            dir, base, budget, segment_index_bytes=config.segment_index_bytes,
            index_interval_bytes=config.index_interval_bytes,
            segment_jitter_ms=config.segment_jitter_ms, create=create, now_ms=now_ms,
        )  # fmt: skip

    bases = scan_segment_files(dir)
    if not bases:
        return [make(max(log_start_offset, 0), create=True)]
    segs = [make(b) for b in bases]

    start = 0 if clean else max(0, bisect_right(bases, recovery_point) - 1)
    if clean:
        try:
            segs[-1].activate()
            return segs
        except CorruptSegmentError:
            start = len(segs) - 1  # an unexpected torn tail: recover the active segment
    for j in range(start, len(segs)):
        seg = segs[j]
        if on_recover is not None:
            on_recover(seg)
        truncated, new_epochs = seg.recover(epochs.latest_epoch)
        for e, o in new_epochs:
            epochs.assign(e, o)
        if truncated:
            for later in segs[j + 1 :]:
                for p in (later.log_path, later.index_path, later.timeindex_path):
                    p.unlink(missing_ok=True)
            del segs[j + 1 :]
            break
    segs[-1].activate()
    return segs
