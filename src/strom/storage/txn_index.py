"""The transaction index of a segment: ``<base>.txnindex``, Kafka's format.

One 34-byte entry per aborted transaction whose ABORT marker lies in the segment: version
(int16, 0), producer id (int64), first offset (int64), last offset (the marker, int64) and the
partition's last stable offset right after the abort (int64). A read_committed fetch collects
the entries that overlap the fetched range and hands them to the client, which drops the
aborted batches itself, so the records still go out zero-copy.

Entries are few (aborts are rare), so the file is read whole on first use and kept in memory;
appends go straight to the file.
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path
from typing import NamedTuple

from strom.storage import files
from strom.storage.errors import KafkaStorageError

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, LSO
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """Aborted transactions of one segment, in marker-offset order."""

    __slots__ = ("_dirty", "_entries", "path")

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._load()
        return self._entries

    def _load(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise KafkaStorageError(f"cannot read {self.path}: {e}") from e
        out = []
        usable = len(data) - len(data) % ENTRY_SIZE  # a torn last entry (crash) is dropped
        for version, pid, first, last, lso in ENTRY.iter_unpack(data[:usable]):
            if version != VERSION:
                raise KafkaStorageError(f"{self.path}: unknown transaction index version {version}")
            out.append(AbortedTxn(pid, first, last, lso))
        if usable != len(data):
            self._rewrite(out)
        return out

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            if not self.contains(txn.producer_id, txn.last_offset):  # else: a replay's repeat
                self.replace(sorted([*entries, txn], key=lambda e: e.last_offset))
            return
        try:
            with open(self.path, "ab") as f:
                f.write(ENTRY.pack(VERSION, *txn))
        except OSError as e:
            raise KafkaStorageError(f"cannot write {self.path}: {e}") from e
        entries.append(txn)
        self._dirty = True

    def contains(self, producer_id: int, last_offset: int) -> bool:
        return any(e.producer_id == producer_id and e.last_offset == last_offset
                   for e in self.entries)

    def collect(self, fetch_offset: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper), and whether the search may stop here
        (an entry's LSO reached `upper`: every transaction starting below it is decided)."""
        out = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper:
                out.append(e)
            if e.last_stable_offset >= upper:
                return out, True
        return out, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after `offset` (log truncation)."""
        if self._entries is None and not self.path.exists():
            self._entries = []
            return
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            self._rewrite(keep)
            self._entries = keep

    def replace(self, entries: list[AbortedTxn]) -> None:
        self._rewrite(entries)
        self._entries = list(entries)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            self.delete()
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_bytes(b"".join(ENTRY.pack(VERSION, *e) for e in entries))
            os.replace(tmp, self.path)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise KafkaStorageError(f"cannot rewrite {self.path}: {e}") from e
        self._dirty = True

    def flush(self) -> None:
        """fsync appends made since the last flush (with the segment's own flush)."""
        if not self._dirty:
            return
        self._dirty = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            files.fsync(fd)
        finally:
            os.close(fd)

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._entries = []
        self._dirty = False
