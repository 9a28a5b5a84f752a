"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``.

Closed segments are cheap until used: size, indexes and max timestamp load on first access, so
a broker with many partitions starts without reading them. Reads never decode records; they
bisect the offset index and walk batch headers with ``os.pread`` from the nearest entry.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

from crc32c import crc32c

from strom.record import (
    ATTRIBUTES_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    read_header,
)
from strom.record.buffers import Buf
from strom.storage.errors import CorruptRecordError, KafkaStorageError
from strom.storage.files import FileBudget, SegmentFile, fsync
from strom.storage.index import (
    INT32_MAX,
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
    IndexCorruptError,
    OffsetIndex,
    TailWrite,
    TimeIndex,
)
from strom.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CORRUPT_SUFFIX = ".corrupt-"  # <base>.log.corrupt-<epoch ms>: bytes recovery cut off
_SCAN_CHUNK = 16384
_COPY_CHUNK = 1 << 20

log = logging.getLogger(__name__)


def segment_name(base_offset: int) -> str:
    """Kafka's file name stem: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


class CorruptSegmentError(CorruptRecordError):
    """Bytes in a segment file that do not frame as valid batches: a fetch of them answers
    CORRUPT_MESSAGE, as Kafka's does when its reader meets an impossible batch size. A storage
    `CorruptRecordError`, hence also ``strom.record``'s (see ``strom.storage.errors``)."""


def side_file_path(log_path: str | Path) -> Path:
    """A new ``<segment>.log.corrupt-<epoch ms>`` name (a later millisecond if that one is taken)."""
    ms = int(time.time() * 1000)
    while True:
        side = Path(f"{log_path}{CORRUPT_SUFFIX}{ms}")
        if not side.exists():
            return side
        ms += 1


def _header_problem(h: BatchHeader, pos: int, end: int, min_offset: int) -> str | None:
    """Why the header at ``pos`` cannot start a batch that ends by ``end`` (None: it can)."""
    if h.length < MIN_BATCH_LENGTH:
        return f"batch length {h.length} is below the minimum of {MIN_BATCH_LENGTH}"
    if pos + LOG_OVERHEAD + h.length > end:
        return f"batch length {h.length} runs past the end of the segment ({end} bytes)"
    if h.magic != MAGIC_V2:
        return f"magic byte {h.magic} is not 2"
    if h.base_offset < min_offset or h.last_offset_delta < 0:
        return f"offset {h.base_offset} (+{h.last_offset_delta}) is out of order"
    return None


class LogSegment:
    """A segment file and its indexes. ``next_offset`` is one past its last batch's offset."""

    __slots__ = (
        "_max_ts",
        "_max_ts_offset",
        "_next_offset",
        "_oi",
        "_rolling_ts",
        "_size",
        "_stem",
        "_ti",
        "_txn",
        "base_offset",
        "bytes_since_index",
        "created_ms",
        "dir",
        "file",
        "index_interval",
        "max_index_entries",
        "roll_jitter_ms",
    )

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        budget: FileBudget,
        *,
        segment_index_bytes: int,
        index_interval_bytes: int = 4096,
        segment_jitter_ms: int = 0,
        create: bool = False,
        fresh: bool = False,
        prepared: str | None = None,
        now_ms: int = 0,
    ) -> None:
        """``create``: start an empty segment, replacing any files at this base offset;
        ``fresh`` (with ``create``): the directory is new, so there is nothing to replace and
        the log file is only created when first used; ``prepared`` (with ``create``): an empty
        file created ahead of the roll in a worker thread, renamed to be the log file (one
        metadata operation on the event loop instead of creating a file)."""
        self.dir = dir
        self.base_offset = base_offset
        self._stem = os.path.join(dir, segment_name(base_offset))  # str: cheap for many segments
        self.max_index_entries = max(1, segment_index_bytes // OFFSET_ENTRY_SIZE)
        self.index_interval = index_interval_bytes
        self.roll_jitter_ms = random.randrange(segment_jitter_ms) if segment_jitter_ms > 0 else 0
        self.created_ms = now_ms
        self.bytes_since_index = 0
        self._oi: OffsetIndex | None = None
        self._ti: TimeIndex | None = None
        self._max_ts: int | None = None  # None: not loaded yet
        self._max_ts_offset = base_offset
        self._rolling_ts: int | None = None
        self._next_offset: int | None = None
        self._txn: TransactionIndex | None = None
        if create:
            if prepared is not None and not fresh and self._adopt(prepared):
                self.file = SegmentFile(self._stem + LOG_SUFFIX, budget)
            else:
                self.file = SegmentFile(self._stem + LOG_SUFFIX, budget, create=True)
            if not fresh:
                self.file.fileno()  # create (or empty) the log file now; opens a prepared one
                # Stale index files at this base would be replaced: the offset and time
                # indexes start as unknown, so their first write rewrites the file whole
                # (and a crash before it recovers this segment, rebuilding both); a
                # transaction index is appended to, so a stale one goes now.
                self.txn_index_path.unlink(missing_ok=True)
            self._size: int | None = 0
            self._oi = OffsetIndex(self._stem + INDEX_SUFFIX, base_offset, self.max_index_entries)
            self._ti = self._new_time_index()
            self._max_ts = -1
            self._next_offset = base_offset
        else:
            self.file = SegmentFile(self._stem + LOG_SUFFIX, budget)
            self._size = None

    def _adopt(self, prepared: str) -> bool:
        """Rename a prepared empty file to this segment's log file; False if that failed (it
        is then created as usual; a prepared ``*.tmp`` left behind goes at the next load)."""
        try:
            os.rename(prepared, self._stem + LOG_SUFFIX)
        except OSError as e:
            log.warning("cannot use the prepared segment file %s: %s", prepared, e)
            return False
        return True

    @property
    def log_path(self) -> Path:
        return Path(self._stem + LOG_SUFFIX)

    @property
    def index_path(self) -> Path:
        return Path(self._stem + INDEX_SUFFIX)

    @property
    def timeindex_path(self) -> Path:
        return Path(self._stem + TIME_INDEX_SUFFIX)

    @property
    def txn_index_path(self) -> Path:
        return Path(self._stem + TXN_INDEX_SUFFIX)

    @property
    def txn_index(self) -> TransactionIndex:
        """Aborted transactions whose markers are in this segment (loaded on first use)."""
        txn = self._txn
        if txn is None:
            txn = self._txn = TransactionIndex(self._stem + TXN_INDEX_SUFFIX)
        return txn

    def _new_time_index(self) -> TimeIndex:
        entries = max(1, self.max_index_entries * OFFSET_ENTRY_SIZE // TIME_ENTRY_SIZE)
        return TimeIndex(self._stem + TIME_INDEX_SUFFIX, self.base_offset, entries)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self._size})"

    # --- lazily loaded state -------------------------------------------------------------------

    @property
    def size(self) -> int:
        s = self._size
        if s is None:
            try:
                s = self._size = os.stat(self.file.path).st_size
            except OSError as e:
                raise KafkaStorageError(f"cannot stat {self.file.path}: {e}") from e
        return s

    @property
    def offset_index(self) -> OffsetIndex:
        oi = self._oi
        if oi is None:
            try:
                oi = OffsetIndex.load(self._stem + INDEX_SUFFIX, self.base_offset, self.max_index_entries,
                                      self.size)  # fmt: skip
            except IndexCorruptError:
                self.rebuild_indexes()
                oi = self._oi
                assert oi is not None  # rebuild_indexes() (recover) built it
            else:
                self._oi = oi
        return oi

    @property
    def time_index(self) -> TimeIndex:
        ti = self._ti
        if ti is None:
            try:
                ti = TimeIndex.load(self._stem + TIME_INDEX_SUFFIX, self.base_offset,
                                    self._new_time_index().max_entries)  # fmt: skip
            except IndexCorruptError:
                self.rebuild_indexes()
                ti = self._ti
                assert ti is not None  # rebuild_indexes() (recover) built it
            else:
                self._ti = ti
        return ti

    def _load_max_ts(self) -> int:
        ts, self._max_ts_offset = self.time_index.last_entry()
        self._max_ts = ts
        return ts

    @property
    def max_timestamp(self) -> int:
        """Largest batch max timestamp in the segment (-1 when none)."""
        ts = self._max_ts
        if ts is None:
            ts = self._load_max_ts()
        return ts

    @property
    def offset_of_max_timestamp(self) -> int:
        """Last offset of the batch that first reached ``max_timestamp``."""
        if self._max_ts is None:
            self._load_max_ts()
        return self._max_ts_offset

    def largest_timestamp(self) -> int:
        """Age reference for retention: max timestamp, or the file mtime when there is none."""
        ts = self.max_timestamp
        if ts >= 0:
            return ts
        try:
            return int(os.stat(self.file.path).st_mtime * 1000)
        except OSError:
            return 0

    @property
    def next_offset(self) -> int:
        nxt = self._next_offset
        if nxt is None:
            nxt = self._next_offset = self._read_next_offset()
        return nxt

    def _read_next_offset(self) -> int:
        last = None
        for _pos, h in self.iter_headers(self.offset_index.last_position):
            last = h
        return self.base_offset if last is None else last.base_offset + last.last_offset_delta + 1

    def rolling_timestamp(self) -> int | None:
        """Max timestamp of the first batch (Kafka bases time rolling on it)."""
        if self._rolling_ts is None and self.size >= RECORD_BATCH_OVERHEAD:
            for _pos, h in self.iter_headers(0):
                self._rolling_ts = h.max_timestamp
                break
        return self._rolling_ts

    def activate(self) -> None:
        """Prepare a loaded segment to take appends (after a clean shutdown).

        Walks the headers after the last index entry to find the next offset; raises
        ``CorruptSegmentError`` when they do not end exactly at the end of the file.
        """
        size = self.size
        start = self.offset_index.last_position
        end, last = start, None
        for pos, h in self.iter_headers(start):
            last, end = h, pos + LOG_OVERHEAD + h.length
        if end != size:
            raise CorruptSegmentError(f"{self.log_path} does not end on a batch boundary")
        if last is not None:
            self._next_offset = last.base_offset + last.last_offset_delta + 1
        elif start == 0:
            self._next_offset = self.base_offset
        _ = self.next_offset
        self.bytes_since_index = size - start

    # --- reading -------------------------------------------------------------------------------

    def iter_headers(self, start: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Batch headers from file position ``start`` up to ``end`` (default: segment size).

        Raises ``CorruptSegmentError`` at bytes that cannot be a batch (a bad length, magic or
        offset, or a batch cut short): stopping there as if the segment ended would leave a
        consumer waiting forever, or skipping to the next segment's records without a word.
        """
        end = self.size if end is None else end
        pos = start
        buf = b""
        buf_start = pos
        min_offset = self.base_offset
        while pos < end:
            off = pos - buf_start
            if off + RECORD_BATCH_OVERHEAD > len(buf):
                if pos + RECORD_BATCH_OVERHEAD > end:
                    raise self.corrupt_at(pos, f"{end - pos} bytes left, too few for a batch")
                try:
                    buf = os.pread(self.file.fileno(), min(_SCAN_CHUNK, end - pos), pos)
                except OSError as e:
                    raise KafkaStorageError(f"cannot read {self.log_path}: {e}") from e
                buf_start, off = pos, 0
                if len(buf) < RECORD_BATCH_OVERHEAD:
                    raise self.corrupt_at(pos, "the file is shorter than the segment")
            h = read_header(buf, off)
            nxt = pos + LOG_OVERHEAD + h.length
            if (h.length < MIN_BATCH_LENGTH or nxt > end or h.magic != MAGIC_V2
                    or h.base_offset < min_offset or h.last_offset_delta < 0):  # fmt: skip
                raise self.corrupt_at(pos, _header_problem(h, pos, end, min_offset) or "")
            yield pos, h
            min_offset = h.base_offset + h.last_offset_delta + 1
            pos = nxt

    def corrupt_at(self, pos: int, why: str) -> CorruptSegmentError:
        return CorruptSegmentError(
            f"corrupt batch at position {pos} of {self.log_path} (segment base offset "
            f"{self.base_offset}): {why}")  # fmt: skip

    def translate(self, offset: int, start_pos: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        pos = max(self.offset_index.lookup(offset)[1], start_pos)
        for p, h in self.iter_headers(pos):
            if h.base_offset + h.last_offset_delta >= offset:
                return p, h
        return None

    def batch_end_within(self, start: int, cap: int) -> int:
        """Largest batch boundary in [start, cap], walking headers from the nearest index entry
        (stopping before a damaged batch: a read ends there, the next one reports it)."""
        pos = max(start, self.offset_index.floor_position(cap))
        with contextlib.suppress(CorruptSegmentError):
            for p, h in self.iter_headers(pos):
                nxt = p + LOG_OVERHEAD + h.length
                if nxt > cap:
                    break
                pos = nxt
        return pos

    # --- writing -------------------------------------------------------------------------------

    def append(self, data: Buf, metas: list[tuple[int, int, int, int]]) -> None:
        """Write ``data`` (whole batches) in one call and index it.

        ``metas`` holds (position in data, size, last offset, max timestamp) per batch.
        """
        pos0 = self.size
        fd = self.file.fileno()
        view = memoryview(data)
        n = len(view)
        written = 0
        try:
            while written < n:
                written += os.pwrite(fd, view[written:], pos0 + written)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, pos0)
            raise KafkaStorageError(f"write to {self.log_path} failed: {e}") from e
        self._size = pos0 + n
        if pos0 == 0:
            self._rolling_ts = metas[0][3] if len(metas) == 1 else max(m[3] for m in metas)
        max_ts = self.max_timestamp
        max_off = self._max_ts_offset
        bsi = self.bytes_since_index
        index_interval = self.index_interval
        oi = self.offset_index
        ti = self.time_index
        for rel, size, last_off, ts in metas:
            if ts > max_ts:
                max_ts, max_off = ts, last_off
            if bsi > index_interval:
                if len(oi.offsets) < oi.max_entries:
                    oi.append(last_off, pos0 + rel)
                ti.maybe_append(max_ts, max_off)
                bsi = 0
            bsi += size
        self.bytes_since_index = bsi
        self._max_ts, self._max_ts_offset = max_ts, max_off
        self._next_offset = metas[-1][2] + 1

    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def seal(self, *, persist: bool = True) -> None:
        """The segment stops being active: record its max timestamp and write its indexes
        (``persist=False``: a background flush writes them, see ``take_index_tails``)."""
        ti = self.time_index
        ti.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        if persist:
            self.persist_indexes()

    def persist_indexes(self) -> None:
        """Write what the index files lack, on the calling thread."""
        if not self.file.created:  # never written: no files at all until the first append
            return
        try:
            if self._oi is not None:
                self._oi.persist()
            if self._ti is not None:
                self._ti.persist()
        except OSError as e:
            raise KafkaStorageError(f"cannot write indexes of {self.log_path}: {e}") from e

    def take_index_tails(self) -> list[TailWrite]:
        """The index entries not in the files yet, as bytes for a worker thread to write."""
        if not self.file.created:
            return []
        out = []
        for idx in (self._oi, self._ti):
            w = idx.take_tail() if idx is not None else None
            if w is not None:
                out.append(w)
        return out

    def retire_indexes(self) -> None:
        """Index files are about to be renamed or deleted: tails taken for a background
        write are dropped (waits for one being written)."""
        for idx in (self._oi, self._ti):
            if idx is not None:
                idx.retire()

    def flush(self, *, sync: bool = True) -> None:
        """Write indexes and fsync the log file (a segment never written has no files yet);
        ``sync=False`` only writes the indexes."""
        if not self.file.created:
            return
        self.persist_indexes()
        if not sync:
            return
        if self._txn is not None:
            self._txn.flush()
        try:
            fsync(self.file.fileno())
        except OSError as e:
            raise KafkaStorageError(f"fsync of {self.log_path} failed: {e}") from e

    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing ``offset`` and everything after it; returns bytes cut."""
        found = self.translate(offset)
        if found is None:
            return 0
        pos, h = found
        old = self.size
        try:
            os.ftruncate(self.file.fileno(), pos)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {self.log_path}: {e}") from e
        self._size = pos
        self._next_offset = h.base_offset
        oi = self.offset_index
        oi.truncate_to_position(pos)
        ti = self.time_index
        ti.truncate_to(h.base_offset)
        # max timestamp: the time index covers everything before the last offset-index entry
        max_ts, max_off = ti.last_entry()
        for _p, bh in self.iter_headers(oi.last_position):
            if bh.max_timestamp > max_ts:
                max_ts, max_off = bh.max_timestamp, bh.base_offset + bh.last_offset_delta
        self._max_ts, self._max_ts_offset = max_ts, max_off
        self.bytes_since_index = pos - oi.last_position
        if pos == 0:
            self._rolling_ts = None
        self.persist_indexes()
        self.txn_index.truncate_to(h.base_offset)
        return old - pos

    # --- recovery ------------------------------------------------------------------------------

    def recover(
        self, latest_epoch: int = -1, *, persist: bool = True, during: str = "recovery"
    ) -> tuple[int, list[tuple[int, int]]]:
        """Re-read the whole segment, CRC-check every batch and rebuild both indexes.

        Cuts the file at the first invalid or incomplete batch (Kafka's LogSegment.recover),
        after copying the bytes cut to a side file and logging an ERROR (``during`` says what
        was going on). Returns (bytes truncated, new leader-epoch entries seen in batch headers).
        ``persist=False`` keeps the rebuilt indexes in memory until the next flush, seal or
        close (for the active segment: a crash before then recovers it again, as it is still
        above the recovery point).
        """
        size = self.size
        index_interval = self.index_interval
        oi = OffsetIndex(self.index_path, self.base_offset, self.max_index_entries)
        ti = self._new_time_index()
        epochs: list[tuple[int, int]] = []
        valid = 0
        last_index_pos = 0
        max_ts, max_off = -1, self.base_offset
        next_offset = self.base_offset
        rolling_ts = None
        if size > 0:
            fd = self.file.fileno()
            with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
                mv = memoryview(mm)
                try:
                    while valid + RECORD_BATCH_OVERHEAD <= size:
                        h = read_header(mv, valid)
                        bsize = LOG_OVERHEAD + h.length
                        last = h.base_offset + h.last_offset_delta
                        if (
                            h.length < MIN_BATCH_LENGTH
                            or valid + bsize > size
                            or h.magic != MAGIC_V2
                            or h.base_offset < next_offset
                            or h.last_offset_delta < 0
                            or last - self.base_offset > INT32_MAX
                            or crc32c(mv[valid + ATTRIBUTES_OFFSET : valid + bsize]) != h.crc
                        ):
                            break
                        if rolling_ts is None:
                            rolling_ts = h.max_timestamp
                        if h.max_timestamp > max_ts:
                            max_ts, max_off = h.max_timestamp, last
                        if valid - last_index_pos > index_interval:
                            if not oi.is_full:
                                oi.append(last, valid)
                            ti.maybe_append(max_ts, max_off)
                            last_index_pos = valid
                        epoch = h.partition_leader_epoch
                        if epoch >= 0 and epoch > latest_epoch:
                            epochs.append((epoch, h.base_offset))
                            latest_epoch = epoch
                        next_offset = last + 1
                        valid += bsize
                finally:
                    mv.release()
        truncated = size - valid
        if truncated:
            self._cut_damaged_tail(valid, next_offset, during)
        self._size = valid
        self.retire_indexes()  # (a background write of the old ones must not land later)
        self._oi, self._ti = oi, ti
        self._max_ts, self._max_ts_offset = max_ts, max_off
        self._next_offset = next_offset
        self._rolling_ts = rolling_ts
        self.bytes_since_index = valid - last_index_pos
        # rewrite both index files from scratch
        for p in (self.index_path, self.timeindex_path):
            p.unlink(missing_ok=True)
        ti.maybe_append(max_ts, max_off, skip_full_check=True)
        if persist:
            self.persist_indexes()
        self.txn_index.truncate_to(next_offset)  # entries past a torn tail go with it
        return truncated, epochs

    def rebuild_indexes(self) -> None:
        """Rebuild missing or corrupt index files by scanning the segment; like Kafka (which
        recovers a segment whose offset index is missing), bytes that do not frame as valid
        batches are cut, but never silently (see ``recover``)."""
        self.recover(during="an index rebuild")

    def _why_invalid(self, pos: int, next_offset: int) -> str:
        """What is wrong with the bytes at ``pos``, where ``recover`` stopped."""
        size = self.size
        if pos + RECORD_BATCH_OVERHEAD > size:
            return f"{size - pos} bytes left, too few for a batch"
        h = read_header(os.pread(self.file.fileno(), RECORD_BATCH_OVERHEAD, pos))
        problem = _header_problem(h, pos, size, next_offset)
        if problem is None and h.base_offset + h.last_offset_delta - self.base_offset > INT32_MAX:
            problem = f"offset {h.base_offset} is too far above the segment's base offset"
        return problem or "CRC mismatch"

    def _cut_damaged_tail(self, valid: int, next_offset: int, during: str) -> None:
        """Move the bytes from ``valid`` on to a side file, then truncate the segment there."""
        size = self.size
        why = self._why_invalid(valid, next_offset)
        side = self._copy_aside(valid, size)
        try:
            os.ftruncate(self.file.fileno(), valid)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {self.log_path}: {e}") from e
        log.error(
            "removed %d bytes (offsets %d and up) from %s at position %d during %s: %s; "
            "the removed bytes are in %s",
            size - valid, next_offset, self.log_path, valid, during, why, side,
        )  # fmt: skip

    def _copy_aside(self, start: int, end: int) -> Path:
        """Copy bytes [start, end) of the log file to a new, fsynced side file."""
        side = side_file_path(self.log_path)
        src = self.file.fileno()
        try:
            out = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                pos = start
                while pos < end:
                    chunk = os.pread(src, min(_COPY_CHUNK, end - pos), pos)
                    if not chunk:
                        break
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view) :]
                    pos += len(chunk)
                fsync(out)
            finally:
                os.close(out)
        except OSError as e:  # keep the bytes in the segment rather than lose them
            raise KafkaStorageError(f"cannot save damaged bytes of {self.log_path}: {e}") from e
        return side

    def move_aside(self, reason: str) -> None:
        """Take the whole segment out of the log: its log file becomes a side file (its
        indexes are deleted); an empty segment is simply deleted."""
        self.close()
        self.retire_indexes()
        size = os.stat(self.log_path).st_size if self.log_path.exists() else 0
        for p in (self.index_path, self.timeindex_path, self.txn_index_path):
            p.unlink(missing_ok=True)
        if size == 0:
            self.log_path.unlink(missing_ok=True)
            return
        side = side_file_path(self.log_path)
        try:
            os.rename(self.log_path, side)
        except OSError as e:
            raise KafkaStorageError(f"cannot move {self.log_path} aside: {e}") from e
        log.error("removed %s (%d bytes, offsets %d and up) from the log: %s; it is now %s",
                  self.log_path, size, self.base_offset, reason, side)  # fmt: skip

    # --- deletion ------------------------------------------------------------------------------

    def rename_for_deletion(self) -> list[Path]:
        """Rename files to ``*.deleted`` (Kafka's async delete); returns the new paths.

        The log file stays readable through ``self.file`` (slices already handed out keep
        working) until the caller closes it when the files are finally removed.
        """
        self.retire_indexes()
        out = []
        for p in (self.log_path, self.index_path, self.timeindex_path, self.txn_index_path):
            target = p.with_name(p.name + DELETED_SUFFIX)
            try:
                os.replace(p, target)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise KafkaStorageError(f"cannot rename {p}: {e}") from e
            if p.suffix == LOG_SUFFIX:
                self.file.path = target
            out.append(target)
        return out

    def close(self) -> None:
        self.file.close()
