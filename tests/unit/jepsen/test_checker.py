"""The Jepsen checker on hand-made histories: a clean one passes, and each anomaly is caught
(so a run that reports none could have reported one)."""

from __future__ import annotations

import pytest

from ...jepsen.checker import KINDS, check
from ...jepsen.history import (
    ABORTED,
    COMMITTED,
    FINAL,
    UNKNOWN,
    History,
    OffsetCommit,
    OffsetRead,
    Read,
    Write,
    ctp_value,
    parse_ctp,
)

IN, TX, OUT = "in", "tx", "out"


def clean() -> History:
    """Two input records (one unacknowledged but present), a committed, an aborted and an
    unknown (absent) transaction, one processed input record with its offset committed."""
    h = History(input_topic=IN)
    h.writes = [
        Write("in:0", ("in:0",), COMMITTED, transactional=False),
        Write("in:1", ("in:1",), UNKNOWN, transactional=False),
        Write("t1", ("t1:0", "t1:1"), COMMITTED),
        Write("t2", ("t2:0", "t2:1"), ABORTED),
        Write("t3", ("t3:0", "t3:1"), UNKNOWN),
        Write("w0", (ctp_value("w0", 0, 0),), COMMITTED),
    ]
    h.reads = [
        Read(IN, 0, 0, "in:0", FINAL), Read(IN, 0, 1, "in:1", FINAL),
        Read(TX, 0, 0, "t1:0", FINAL), Read(TX, 1, 0, "t1:1", FINAL),
        Read(TX, 0, 0, "t1:0", "live-1"),
        Read(OUT, 0, 0, ctp_value("w0", 0, 0), FINAL),
    ]
    h.final_offsets = {0: 1}
    h.offset_commits = [OffsetCommit(0, 1, at=2.0)]
    h.offset_reads = [OffsetRead(0, -1, 0.5, 0.6), OffsetRead(0, 1, 2.5, 2.6)]
    h.replicas = {"tx-0": {"b1": [(0, None, b"t1:0")], "b2": [(0, None, b"t1:0")]}}
    return h


def kinds(h: History) -> set[str]:
    return {a.kind for a in check(h).anomalies}


def test_a_clean_history_passes():
    result = check(clean())
    assert result.valid, result.summary()
    assert result.stats["txn_committed"] == 2 and result.stats["txn_aborted"] == 1
    assert result.stats["records_acked"] == 1 and result.stats["records_unacked"] == 1
    assert "no anomalies" in result.summary()


def test_an_unknown_transaction_may_be_wholly_visible():
    h = clean()
    h.reads += [Read(TX, 0, 1, "t3:0", FINAL), Read(TX, 1, 1, "t3:1", FINAL)]
    assert check(h).valid


def test_lost_acknowledged_record():
    h = clean()
    h.reads = [r for r in h.reads if r.value != "in:0"]
    assert "lost" in kinds(h)


def test_lost_committed_transaction():
    h = clean()
    h.reads = [r for r in h.reads if not (r.value.startswith("t1") and r.reader == FINAL)]
    assert {"lost", "vanished"} <= kinds(h)  # the live reader had seen t1:0
    assert "torn" not in kinds(h)  # none of it visible: lost, not torn


def test_torn_transaction():
    h = clean()
    h.reads.append(Read(TX, 0, 1, "t3:0", FINAL))  # t3:1 missing
    assert kinds(h) == {"torn"}


def test_torn_committed_transaction_is_also_lost():
    h = clean()
    h.reads = [r for r in h.reads if r.value != "t1:1"]
    assert kinds(h) == {"torn", "lost"}


def test_aborted_record_visible_to_the_final_reader():
    h = clean()
    h.reads.append(Read(TX, 0, 2, "t2:0", FINAL))
    assert "aborted-read" in kinds(h)


def test_aborted_record_visible_to_a_live_reader():
    h = clean()
    h.reads.append(Read(TX, 0, 2, "t2:1", "live-1"))
    assert kinds(h) == {"aborted-read"}


def test_duplicate():
    h = clean()
    h.reads.append(Read(TX, 0, 5, "t1:0", FINAL))
    assert kinds(h) == {"duplicate"}


def test_phantom():
    h = clean()
    h.reads.append(Read(TX, 2, 0, "never-written", FINAL))
    assert kinds(h) == {"phantom"}


def test_divergent_read():
    h = clean()
    h.reads.append(Read(TX, 0, 0, "t3:0", "live-2"))  # offset 0 showed t1:0 to the others
    assert "divergent-read" in kinds(h)


def test_vanished():
    h = clean()
    h.reads.append(Read(TX, 0, 1, "t3:0", "live-1"))  # seen, then gone
    assert "vanished" in kinds(h)


def test_unprocessed_input():
    h = clean()
    h.final_offsets = {0: 2}  # offset 1 committed as consumed, but no output for it
    assert kinds(h) == {"unprocessed"}


def test_input_processed_twice():
    h = clean()
    h.writes.append(Write("w1", (ctp_value("w1", 0, 0),), COMMITTED))
    h.reads.append(Read(OUT, 1, 0, ctp_value("w1", 0, 0), FINAL))
    assert kinds(h) == {"processed-twice"}


def test_output_above_the_committed_offset():
    h = clean()
    h.final_offsets = {0: 0}
    assert "processed-uncommitted" in kinds(h)


def test_output_of_an_input_that_does_not_exist():
    h = clean()
    h.writes.append(Write("w1", (ctp_value("w1", 0, 7),), UNKNOWN))
    h.reads.append(Read(OUT, 1, 0, ctp_value("w1", 0, 7), FINAL))
    assert kinds(h) == {"phantom"}


def test_offset_read_below_an_acknowledged_commit():
    h = clean()
    h.offset_reads.append(OffsetRead(0, 0, 3.0, 3.1))
    assert kinds(h) == {"offset-regressed"}


def test_offset_read_below_an_earlier_read():
    h = History(offset_reads=[OffsetRead(0, 5, 1.0, 1.1), OffsetRead(0, 3, 2.0, 2.1)])
    assert kinds(h) == {"offset-regressed"}


def test_overlapping_offset_reads_may_disagree():
    """A read that began before the other ended may show the older offset."""
    h = History(offset_reads=[OffsetRead(0, 5, 1.0, 1.5), OffsetRead(0, 3, 1.2, 1.6)])
    assert check(h).valid


def test_final_offsets_below_an_acknowledged_commit():
    h = clean()
    h.final_offsets = {0: 0}
    h.reads = [r for r in h.reads if r.topic != OUT]
    h.writes = [w for w in h.writes if w.id != "w0"]
    assert kinds(h) == {"offset-regressed"}


def test_replica_divergence():
    h = clean()
    h.replicas["tx-0"]["b3"] = [(0, None, b"t1:0"), (1, None, b"t3:0")]
    result = check(h)
    assert {a.kind for a in result.anomalies} == {"replica-divergence"}
    assert "first difference at index 1" in result.anomalies[0].detail


def test_hanging_transaction():
    h = clean()
    h.hanging = ["tx-1"]
    assert kinds(h) == {"hanging-transaction"}


# one test above for each kind; this table makes a new kind without one fail here
DETECTED_BY = {
    "lost": test_lost_acknowledged_record, "duplicate": test_duplicate,
    "phantom": test_phantom, "aborted-read": test_aborted_record_visible_to_a_live_reader,
    "torn": test_torn_transaction, "divergent-read": test_divergent_read,
    "vanished": test_vanished, "unprocessed": test_unprocessed_input,
    "processed-twice": test_input_processed_twice,
    "processed-uncommitted": test_output_above_the_committed_offset,
    "offset-regressed": test_offset_read_below_an_earlier_read,
    "replica-divergence": test_replica_divergence, "hanging-transaction": test_hanging_transaction,
}


def test_every_kind_has_a_test():
    assert set(DETECTED_BY) == set(KINDS)


def test_a_value_written_twice_is_a_workload_bug():
    h = clean()
    h.writes.append(Write("again", ("t1:0",), COMMITTED))
    with pytest.raises(ValueError, match="unique"):
        check(h)


def test_ctp_values_round_trip():
    assert parse_ctp(ctp_value("w3.17", 2, 40)) == (2, 40)
    assert parse_ctp("t1:0") is None and parse_ctp("ctp:x:a:b") is None


def test_summary_lists_kinds_and_examples():
    h = clean()
    h.hanging = ["tx-1", "tx-2"]
    text = check(h).summary()
    assert "hanging-transaction: 2" in text and "tx-2" in text
