"""Idempotent producer state: sequences, duplicates, fencing, snapshots, replay, expiry, truncation."""

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import record as R
from strom.protocol.errors import ErrorCode
from strom.storage import producer_state as PS
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.validator import ORIGIN_COORDINATOR

NOW = 1_700_000_000_000


def batch(pid, epoch, seq, n=1, *, ts=NOW, transactional=False, key=b"k"):
    recs = [R.Record(i, ts, key, b"v%d" % (seq + i)) for i in range(n)]
    return bytearray(R.build_batch(recs, producer_id=pid, producer_epoch=epoch,
                                   base_sequence=seq, transactional=transactional))  # fmt: skip


def open_log(path, config=None, *, clock=lambda: NOW / 1000, **kw):
    return PartitionLog(Path(path), "t", 0, None, config or LogConfig(), clock=clock, **kw)


def append(log, data, origin="client"):
    return log.append(data, leader_epoch=0, now_ms=NOW, origin=origin)


def error_code(log, data):
    with pytest.raises(PS.StorageError) as e:
        append(log, data)
    return e.value.error_code


def test_in_sequence_batches_are_appended(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert append(log, batch(7, 0, 0, 3)).first_offset == 0
    assert append(log, batch(7, 0, 3, 2)).first_offset == 3
    entry = log.producer_state.producers[7]
    assert entry.epoch == 0 and entry.last_seq == 4 and entry.last_data_offset == 4
    assert entry.batches == [(0, 2, 0, 2, NOW), (3, 4, 3, 4, NOW)]


def test_retry_of_any_of_the_last_five_batches_gets_its_original_offsets(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, batch(-1, -1, -1, 2))  # plain producers interleave
    sent = []
    for i in range(7):
        sent.append((batch(7, 0, i * 2, 2), append(log, batch(7, 0, i * 2, 2)).first_offset))
    leo, size = log.log_end_offset, log.size_bytes()
    for data, first in sent[-5:]:
        res = append(log, data)
        assert res.duplicate and (res.first_offset, res.last_offset) == (first, first + 1)
    assert (log.log_end_offset, log.size_bytes()) == (leo, size)  # nothing written
    # older than the cached five: neither a duplicate nor in sequence
    assert error_code(log, sent[0][0]) == 45


def test_gap_is_out_of_order_and_nothing_is_written(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, batch(7, 0, 0))
    assert error_code(log, batch(7, 0, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 1
    assert append(log, batch(7, 0, 1)).first_offset == 1


def test_older_epoch_is_fenced_and_new_epoch_must_start_at_zero(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, batch(7, 3, 0, 2))
    assert error_code(log, batch(7, 2, 2)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_code(log, batch(7, 4, 5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, batch(7, 4, 0)).first_offset == 2
    # the old epoch's batches are forgotten: a retry of them is no duplicate any more
    assert error_code(log, batch(7, 3, 0, 2)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.producer_state.producers[7].batches == [(0, 0, 2, 2, NOW)]


def test_unknown_producer_may_start_at_any_sequence(tmp_path):
    """Kafka 2.5+ (KIP-360): state may have expired; the broker accepts the write."""
    log = open_log(tmp_path / "t-0")
    assert append(log, batch(9, 1, 42)).first_offset == 0
    assert append(log, batch(9, 1, 43)).first_offset == 1


def test_sequence_wraps_after_int32_max(tmp_path):
    log = open_log(tmp_path / "t-0")
    top = PS.INT32_MAX
    append(log, batch(7, 0, top - 1, 2))
    assert log.producer_state.producers[7].last_seq == top
    assert append(log, batch(7, 0, 0)).first_offset == 2
    wrapped = batch(7, 0, top, 3)  # seq top, 0, 1
    log2 = open_log(tmp_path / "t-1")
    append(log2, wrapped)
    assert log2.producer_state.producers[7].last_seq == 1
    assert append(log2, batch(7, 0, top, 3)).duplicate


def test_several_batches_of_one_producer_in_one_append(tmp_path):
    log = open_log(tmp_path / "t-0")
    data = batch(7, 0, 0, 2) + batch(7, 0, 2, 2)
    append(log, data)
    assert log.producer_state.producers[7].last_seq == 3
    assert error_code(log, batch(7, 0, 1, 1) + batch(7, 0, 5)) == 45


def test_produce_path_stays_header_only(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0")

    def boom(*a, **k):
        raise AssertionError("records decoded on the produce path")

    monkeypatch.setattr(R, "decode_records", boom)
    monkeypatch.setattr(R, "records_section", boom)
    append(log, batch(7, 0, 0))
    append(log, batch(7, 0, 1))
    assert append(log, batch(7, 0, 1)).duplicate
    log.roll()
    append(log, batch(7, 0, 2))


def _dedup_works(log, sent):
    for data, first in sent[-5:]:
        res = append(log, bytearray(data))
        assert res.duplicate and res.first_offset == first, (res, first)


@pytest.mark.parametrize("clean", [True, False])
def test_dedup_survives_restart(tmp_path, clean):
    path = tmp_path / "t-0"
    log = open_log(path, LogConfig(segment_bytes=400))
    sent = []
    for i in range(12):
        data = bytes(batch(7, 0, i))
        sent.append((data, append(log, bytearray(data)).first_offset))
    assert len(log.segments) > 2
    leo = log.log_end_offset
    if clean:
        log.close()
        assert (path / PS.snapshot_name(leo)).exists()
    log2 = open_log(path, LogConfig(segment_bytes=400), clean_shutdown=clean)
    assert log2.log_end_offset == leo
    _dedup_works(log2, sent)
    assert append(log2, batch(7, 0, 12)).first_offset == leo
    assert error_code(log2, batch(7, 0, 14)) == 45


def test_crash_replays_only_after_the_latest_snapshot(tmp_path, monkeypatch):
    path = tmp_path / "t-0"
    log = open_log(path, LogConfig(segment_bytes=400))
    for i in range(12):
        append(log, batch(7, 0, i))
    active = log.active_segment.base_offset
    assert (path / PS.snapshot_name(active)).exists()  # written on roll
    seen = []
    orig = PS.ProducerStateManager.prepare

    def spy(self, batches, data, origin):
        seen.extend(b[5] for b in batches)
        return orig(self, batches, data, origin)

    monkeypatch.setattr(PS.ProducerStateManager, "prepare", spy)
    log2 = open_log(path, LogConfig(segment_bytes=400))
    assert seen and min(seen) >= active
    # a replay within the active segment is saved by the next roll or close, not at load
    assert not (path / PS.snapshot_name(log2.log_end_offset)).exists()
    log2.close()
    assert (path / PS.snapshot_name(log2.log_end_offset)).exists()


def test_a_replay_over_whole_segments_is_saved_at_load(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, LogConfig(segment_bytes=400))
    for i in range(12):
        append(log, batch(7, 0, i))
    assert len(log.segments) > 2
    for snap in path.glob("*.snapshot"):
        snap.unlink()  # lost: the load replays from the first segment
    log2 = open_log(path, LogConfig(segment_bytes=400))
    assert (path / PS.snapshot_name(log2.log_end_offset)).exists()
    assert log2.producer_state.producers[7].last_seq == 11
    assert append(log2, batch(7, 0, 11)).duplicate


def test_missing_or_corrupt_snapshots_rebuild_from_the_log(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, LogConfig(segment_bytes=400))
    sent = []
    for i in range(12):
        data = bytes(batch(7, 0, i))
        sent.append((data, append(log, bytearray(data)).first_offset))
    log.close()
    snaps = sorted(path.glob("*.snapshot"))
    with open(snaps[-1], "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff")
    for s in snaps[:-1]:
        s.unlink()
    log2 = open_log(path, LogConfig(segment_bytes=400), clean_shutdown=True)
    _dedup_works(log2, sent)


def test_snapshot_format_is_kafkas(tmp_path):
    """version 1, CRC32C over the rest, 46-byte entries; Kafka keeps the last entry per id."""
    e = PS.ProducerStateEntry(5, 2, coordinator_epoch=3, last_timestamp=99,
                              batches=[(0, 1, 10, 11, 90), (2, 4, 12, 14, 95)])  # fmt: skip
    f = tmp_path / PS.snapshot_name(15)
    PS.write_snapshot(f, [e])
    data = f.read_bytes()
    version, _crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 2, 10 + 2 * 46)
    last = struct.unpack_from(">qhiqiqiq", data, 10 + 46)
    assert last == (5, 2, 4, 14, 2, 99, 3, -1)
    (back,) = PS.read_snapshot(f)
    assert back.batches == [(0, 1, 10, 11, 90), (2, 4, 12, 14, 99)]
    assert (back.epoch, back.coordinator_epoch, back.last_timestamp) == (2, 3, 99)
    # a Kafka snapshot (one entry per producer, here with no batch) reads back too
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 8, 1, -1, -1, 0, 50, 0, 7)
    kafka = struct.pack(">hI", 1, PS.crc32c(body)) + body
    g = tmp_path / PS.snapshot_name(20)
    g.write_bytes(kafka)
    (k,) = PS.read_snapshot(g)
    assert (k.producer_id, k.epoch, k.batches, k.txn_first_offset) == (8, 1, [], 7)


def test_idle_producers_expire(tmp_path):
    now = [NOW / 1000]
    path = tmp_path / "t-0"
    log = open_log(path, clock=lambda: now[0], producer_id_expiration_ms=1000)
    append(log, batch(7, 0, 0, ts=NOW))
    append(log, batch(8, 0, 0, ts=NOW + 5000))
    assert log.remove_expired_producers(NOW + 1500) == 1
    assert set(log.producer_state.producers) == {8}
    log.close()
    now[0] = (NOW + 7000) / 1000
    log2 = open_log(path, clock=lambda: now[0], producer_id_expiration_ms=1000, clean_shutdown=True)
    assert log2.producer_state.producers == {}  # expired ones are not loaded


def test_truncation_truncates_producer_state(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, LogConfig(segment_bytes=400))
    sent = []
    for i in range(12):
        data = bytes(batch(7, 0, i))
        sent.append((data, append(log, bytearray(data)).first_offset))
    cut = sent[9][1]
    log.truncate_to(cut)
    assert log.producer_state.producers[7].last_seq == 8
    assert all(o < cut for o in log.producer_state.snapshots[:-1])
    assert append(log, bytearray(sent[9][0])).first_offset == cut  # not a duplicate any more
    _dedup_works(log, sent[:10])
    log.truncate_fully_and_start_at(100)
    assert log.producer_state.producers == {} and not list(path.glob("*.snapshot"))


def test_retention_deletes_snapshots_with_their_segments(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, LogConfig(segment_bytes=400, retention_bytes=500, file_delete_delay_ms=0))
    for i in range(20):
        append(log, batch(7, 0, i))
    log.apply_retention(NOW)
    first = log.segments[0].base_offset
    assert first > 0
    assert all(o >= first for o in log.producer_state.snapshots)
    assert 7 in log.producer_state.producers  # state outlives its segments (Kafka 3.x)


def test_transaction_markers_update_the_producer(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, batch(7, 0, 0, transactional=True), origin=ORIGIN_COORDINATOR)
    assert log.producer_state.producers[7].txn_first_offset == 0
    assert log.producer_state.first_undecided_offset() == 0
    with pytest.raises(PS.InvalidTxnStateError):
        append(log, batch(7, 0, 1), origin=ORIGIN_COORDINATOR)
    marker = R.control_batch(commit=True, producer_id=7, producer_epoch=0, coordinator_epoch=4,
                             timestamp=NOW)  # fmt: skip
    append(log, bytearray(marker), origin=ORIGIN_COORDINATOR)
    entry = log.producer_state.producers[7]
    assert (entry.txn_first_offset, entry.coordinator_epoch) == (-1, 4)
    assert log.producer_state.first_undecided_offset() is None
    stale = R.control_batch(commit=False, producer_id=7, producer_epoch=0, coordinator_epoch=3,
                            timestamp=NOW)  # fmt: skip
    with pytest.raises(PS.TransactionCoordinatorFencedError):
        append(log, bytearray(stale), origin=ORIGIN_COORDINATOR)
    # replay rebuilds the same state from the log (markers are decoded there)
    log.close()
    for s in (tmp_path / "t-0").glob("*.snapshot"):
        s.unlink()
    log2 = open_log(tmp_path / "t-0", clean_shutdown=True)
    e2 = log2.producer_state.producers[7]
    assert (e2.txn_first_offset, e2.coordinator_epoch, e2.last_seq) == (-1, 4, 0)


# --- model-based: random sends, retries and gaps against a reference --------------------------

actions = st.lists(
    st.tuples(st.sampled_from(["send", "send", "retry", "gap", "bump", "old"]),
              st.integers(0, 10), st.integers(1, 3)),
    min_size=1, max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(actions, st.integers(0, 39))
def test_model(tmp_path_factory, plan, restart_at):
    path = tmp_path_factory.mktemp("model") / "t-0"
    log = open_log(path, LogConfig(segment_bytes=300))
    epoch, seq = 0, 0
    history = []  # (epoch, seq, n, first offset) of written batches
    expected_leo = 0
    for step, (kind, pick, n) in enumerate(plan):
        if step == restart_at:
            log.close()
            log = open_log(path, LogConfig(segment_bytes=300), clean_shutdown=True)
        if kind == "send":
            res = append(log, batch(1, epoch, seq, n))
            assert not res.duplicate and res.first_offset == expected_leo
            history.append((epoch, seq, n, res.first_offset))
            seq += n
            expected_leo += n
        elif kind == "retry" and history:
            recent = [h for h in history if h[0] == epoch][-5:]
            old = [h for h in history if h[0] == epoch][:-5]
            if recent:
                e, s, k, first = recent[pick % len(recent)]
                res = append(log, batch(1, e, s, k))
                assert res.duplicate and res.first_offset == first
            if old:
                e, s, k, _first = old[pick % len(old)]
                assert error_code(log, batch(1, e, s, k)) == 45
        elif kind == "gap" and history:  # (an unknown producer may start anywhere)
            assert error_code(log, batch(1, epoch, seq + 1 + pick, n)) == 45
        elif kind == "bump":
            epoch += 1
            seq = 0
        elif kind == "old" and history and history[-1][0] > 0:
            assert error_code(log, batch(1, history[-1][0] - 1, 0, n)) == 47
        assert log.log_end_offset == expected_leo
    log.close()
    assert os.path.exists(path / PS.snapshot_name(expected_leo)) or expected_leo == 0
