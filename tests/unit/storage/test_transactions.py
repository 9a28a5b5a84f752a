"""Transactions in the partition log: last stable offset, `.txnindex` of aborted transactions
(Kafka's format), the aborted list a read_committed fetch reports, and their rebuild after a
crash, truncation and segment deletion."""

from __future__ import annotations

import struct
from pathlib import Path

from strom import record as R
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from strom.storage.validator import ORIGIN_COORDINATOR

NOW = 1_700_000_000_000


def open_log(path: Path, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog(path, "t", 0, None, config or LogConfig(), clock=lambda: NOW / 1000, **kw)


def data(log: PartitionLog, pid: int, seq: int, n: int = 1, *, txn: bool = True) -> int:
    recs = [R.Record(i, NOW, b"k", b"v" * 20) for i in range(n)]
    batch = R.build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq,
                          transactional=txn)
    return log.append(bytearray(batch), leader_epoch=0, now_ms=NOW).first_offset


def marker(log: PartitionLog, pid: int, commit: bool) -> int:
    batch = R.control_batch(commit=commit, producer_id=pid, producer_epoch=0,
                            coordinator_epoch=0, timestamp=NOW)
    return log.append(bytearray(batch), leader_epoch=0, now_ms=NOW,
                      origin=ORIGIN_COORDINATOR).first_offset


def scenario(log: PartitionLog) -> None:
    """0-1: txn of 7; 2: plain 9; 3: ABORT 7; 4: txn 8; 5: txn 10; 6: ABORT 10; 7: COMMIT 8."""
    assert data(log, 7, 0, 2) == 0
    assert log.last_stable_offset == 0 and log.high_watermark == 2
    data(log, 9, 0, txn=False)
    assert log.last_stable_offset == 0  # a plain write after an open transaction waits too
    assert marker(log, 7, commit=False) == 3
    assert log.last_stable_offset == 4
    data(log, 8, 0)
    data(log, 10, 0)
    assert log.last_stable_offset == 4
    marker(log, 10, commit=False)
    assert log.last_stable_offset == 4  # 8 is still open
    marker(log, 8, commit=True)
    assert log.last_stable_offset == 8 == log.log_end_offset


def test_lso_and_the_transaction_index(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    scenario(log)
    seg = log.active_segment
    assert seg.txn_index.entries == [AbortedTxn(7, 0, 3, 4), AbortedTxn(10, 5, 6, 4)]
    raw = seg.txn_index_path.read_bytes()
    assert len(raw) == 2 * ENTRY_SIZE == 68
    assert struct.unpack(">hqqqq", raw[:34]) == (0, 7, 0, 3, 4)  # version, pid, first, last, LSO
    assert log.aborted_transactions(0, 8) == [(7, 0), (10, 5)]
    assert log.aborted_transactions(4, 8) == [(10, 5)]
    assert log.aborted_transactions(4, 5) == []  # 10 starts at 5
    assert log.aborted_transactions(7, 8) == []
    result = log.read(0, 1 << 20, max_offset=log.last_stable_offset)
    assert log.offset_after(0, result.slice) == 8
    part = log.read(0, 1, max_offset=8)  # one batch: offsets 0-1
    assert log.offset_after(0, part.slice) == 2


def test_entries_follow_the_marker_segment_and_the_search_stops(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=200))
    data(log, 7, 0)  # 0
    data(log, 9, 0, txn=False)  # 1
    data(log, 9, 1, txn=False)  # 2
    marker(log, 7, commit=False)  # 3
    assert len(log.segments) > 1
    holder = [s for s in log.segments if s.txn_index.entries]
    assert len(holder) == 1 and holder[0].base_offset <= 3 < holder[0].next_offset
    assert log.aborted_transactions(0, 1) == [(7, 0)]  # found in a later segment
    data(log, 11, 0)  # 4, then aborted at 5: its entry's LSO (6) ends the search
    marker(log, 11, commit=False)
    assert log.aborted_transactions(0, 6) == [(7, 0), (11, 4)]


def test_index_survives_restarts_and_is_rebuilt_after_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path)
    scenario(log)
    expected = log.active_segment.txn_index.entries
    log.close()
    log = open_log(path, clean_shutdown=True)
    assert log.active_segment.txn_index.entries == expected
    assert log.last_stable_offset == 8
    log.close()
    # a crash that lost the index and the snapshots: replaying the log writes it again once
    for p in [*path.glob("*.txnindex"), *path.glob("*.snapshot")]:
        p.unlink()
    log = open_log(path)
    assert log.active_segment.txn_index.entries == expected
    assert log.aborted_transactions(0, 8) == [(7, 0), (10, 5)]
    log.close()
    log = open_log(path)  # replaying over indexed markers adds nothing
    assert log.active_segment.txn_index.entries == expected


def test_open_transaction_survives_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path)
    data(log, 7, 0)
    data(log, 9, 0, txn=False)
    # no close: the next open is a crash recovery; the open transaction still bounds the LSO
    log = open_log(path)
    assert log.last_stable_offset == 0
    marker(log, 7, commit=False)
    assert log.last_stable_offset == 3 and log.aborted_transactions(0, 3) == [(7, 0)]


def test_truncation_drops_entries_past_the_new_end(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    scenario(log)
    log.truncate_to(6)
    assert log.active_segment.txn_index.entries == [AbortedTxn(7, 0, 3, 4)]
    assert log.last_stable_offset == 4  # 8 and 10 are open again
    log.truncate_to(3)
    assert log.active_segment.txn_index.entries == []
    assert not log.active_segment.txn_index_path.exists()
    assert log.last_stable_offset == 0


def test_deleted_segments_take_their_index_along(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, LogConfig(segment_bytes=200, file_delete_delay_ms=0))
    data(log, 7, 0)
    marker(log, 7, commit=False)
    for i in range(4):
        data(log, 9, i, txn=False)
    first = log.segments[0]
    assert first.txn_index_path.exists()
    log.delete_records_before(log.segments[-1].base_offset)
    assert not list(path.glob("*.txnindex*"))


def test_transaction_index_file(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    assert index.entries == [] and not index.path.exists()
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 9, 10))
    index.append(AbortedTxn(1, 0, 5, 6))  # a repeat (replay): ignored
    index.append(AbortedTxn(3, 1, 7, 3))  # out of order: kept sorted by marker offset
    assert [e.last_offset for e in index.entries] == [5, 7, 9]
    with open(index.path, "ab") as f:
        f.write(b"\x00" * 10)  # a torn entry from a crash
    again = TransactionIndex(index.path)
    assert again.entries == index.entries
    assert index.path.stat().st_size == 3 * ENTRY_SIZE
    found, complete = again.collect(6, 8)
    assert [e.producer_id for e in found] == [3, 2] and complete
    again.truncate_to(7)
    assert [e.last_offset for e in TransactionIndex(index.path).entries] == [5]
