"""Loading a partition directory: find segments, and after a crash re-validate the unflushed tail.

After a clean shutdown nothing is read but the active segment's index and the few batch
headers after its last entry. Otherwise every segment from the one holding the recovery point
on is re-read, CRC-checked and re-indexed; the first invalid byte truncates the log there and
later segments are removed (Kafka's LogLoader does the same). Unlike Kafka, nothing removed is
deleted: the cut bytes and the later segments become ``<segment>.log.corrupt-<epoch ms>`` side
files, and each removal logs an ERROR (segments below the recovery point are not scanned).

A cleaning interrupted by a crash leaves ``.cleaned`` files (the swap never began: they are
deleted) or a ``<base>.log.swap`` (the cleaned segment was complete: the swap is finished by
deleting the segments it replaces and renaming it, then its indexes are rebuilt).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from strom.record import (
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    read_header,
)
from strom.storage.config import LogConfig
from strom.storage.epochs import DeferredEpochCache
from strom.storage.files import FileBudget
from strom.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptSegmentError,
    LogSegment,
    segment_name,
)
from strom.storage.txn_index import TXN_INDEX_SUFFIX

_STRAY_SUFFIXES = (DELETED_SUFFIX, ".cleaned", ".swap", ".tmp")
SWAP_LOG_SUFFIX = LOG_SUFFIX + ".swap"


def _next_offset_of(path: str, base: int) -> int:
    """One past the last complete batch of a log file (header walk, no CRC check)."""
    nxt = base
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos + RECORD_BATCH_OVERHEAD <= size:
            h = read_header(os.pread(fd, RECORD_BATCH_OVERHEAD, pos))
            end = pos + LOG_OVERHEAD + h.length
            if h.length < MIN_BATCH_LENGTH or end > size:
                break
            nxt = h.base_offset + h.last_offset_delta + 1
            pos = end
    finally:
        os.close(fd)
    return nxt


def complete_swaps(dir: Path) -> set[int]:
    """Finish swaps interrupted by a crash; returns the base offsets of the swapped-in segments.

    Every ``.log`` file whose base offset lies in the range the swap file covers is one of
    the segments it replaces (possibly not yet renamed ``.deleted``) and goes; then the swap
    file takes its final name. Its index files are rebuilt by the caller.
    """
    names = os.listdir(dir)
    swaps = sorted(int(n[:20]) for n in names
                   if n.endswith(SWAP_LOG_SUFFIX) and len(n) == 20 + len(SWAP_LOG_SUFFIX)
                   and n[:20].isdigit())  # fmt: skip
    if not swaps:
        return set()
    logs = sorted(int(n[:20]) for n in names
                  if n.endswith(LOG_SUFFIX) and len(n) == 24 and n[:20].isdigit())  # fmt: skip
    for base in swaps:
        stem = dir / segment_name(base)
        swap = str(stem) + SWAP_LOG_SUFFIX
        end = _next_offset_of(swap, base)
        for other in logs:
            if base <= other < end or other == base:
                # (the cleaned segment holds no aborted data, so no transaction index either)
                for suf in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    (dir / (segment_name(other) + suf)).unlink(missing_ok=True)
        for suf in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (dir / (segment_name(base) + suf)).unlink(missing_ok=True)
        os.replace(swap, str(stem) + LOG_SUFFIX)
    return set(swaps)


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
        elif ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
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
    epochs: DeferredEpochCache,
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

    swapped = complete_swaps(dir)
    bases = scan_segment_files(dir)
    if not bases:
        return [make(max(log_start_offset, 0), create=True)]
    segs = [make(b) for b in bases]
    for seg in segs:
        if seg.base_offset in swapped:
            seg.rebuild_indexes()  # a completed swap: trust the data, rebuild the indexes

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
        # The active segment's indexes are written by its next flush or close: on a broker
        # restarted after kill -9 that saves creating two files per partition.
        active = j == len(segs) - 1
        truncated, new_epochs = seg.recover(epochs.latest_epoch, persist=not active)
        for e, o in new_epochs:
            epochs.note(e, o)  # written at the next flush or close; a crash re-recovers
        if truncated:
            for later in segs[j + 1 :]:
                later.move_aside(f"recovery truncated the log at offset {seg.next_offset} "
                                 f"in the earlier segment {seg.log_path}")  # fmt: skip
            del segs[j + 1 :]
            break
    segs[-1].activate()
    return segs
