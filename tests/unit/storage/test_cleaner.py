"""Log compaction: latest value per key, tombstones, offsets, producer batches, transactions,
crash safety of the swap, the memory bound, and the background service."""

import asyncio
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom import record as R
from strom.storage import log as log_module
from strom.storage.cleaner import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner, OffsetMap
from strom.storage.cleaner.offset_map import BYTES_PER_ENTRY
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog
from strom.storage.validator import ORIGIN_COORDINATOR

T0 = 1_700_000_000_000
DAY = 86_400_000


class Clock:
    def __init__(self, ms=T0):
        self.ms = ms

    def __call__(self):
        return self.ms / 1000


def compact_config(**kw):
    base = dict(cleanup_policy="compact", segment_bytes=600, min_cleanable_dirty_ratio=0.0,
                file_delete_delay_ms=0, index_interval_bytes=100)  # fmt: skip
    base.update(kw)
    return LogConfig(**base)


def open_log(path, config=None, clock=None, **kw):
    return PartitionLog(Path(path), "t", 0, None, config or compact_config(),
                        clock=clock or Clock(), **kw)  # fmt: skip


def cleaner_for(plog, clock=None, **cfg):
    return LogCleaner(lambda: [plog] if not plog.closed else [], CleanerConfig(**cfg),
                      dir_of=lambda _l: plog.dir.parent, clock=clock or Clock())  # fmt: skip


def put(plog, records, *, ts=T0, compression=0, origin="client", **kw):
    """Append one batch of (key, value) records; returns its first offset."""
    recs = [R.Record(i, ts + i, k, v) for i, (k, v) in enumerate(records)]
    data = bytearray(R.build_batch(recs, compression=compression, **kw))
    return plog.append(data, leader_epoch=0, now_ms=ts, origin=origin).first_offset


def read_all(plog):
    """Every batch of the log from the files: (header, records), checking CRCs and offsets."""
    out = []
    prev_next = -1
    for seg in plog.segments:
        data = seg.log_path.read_bytes()
        pos = 0
        for pos, h in R.iter_batches(data):
            assert R.crc_ok(data, pos, h), f"bad CRC in {seg.log_path} at {pos}"
            assert h.base_offset >= prev_next, "offsets must grow"
            prev_next = h.next_offset
            recs = R.decode_records(data[pos : pos + h.size])
            assert all(h.base_offset <= r.offset <= h.last_offset for r in recs)
            out.append((h, recs))
        assert sum(h.size for h, _ in out if True) >= 0
    return out


def records(plog):
    return [r for h, recs in read_all(plog) if not h.is_control for r in recs]


def clean_until_done(cleaner, now_ms=None, limit=50):
    n = 0
    while cleaner.clean_once(now_ms):
        n += 1
        assert n < limit, "cleaning does not converge"
    return n


def check_compacted(plog, written, *, tombstones_kept=True):
    """``written``: offset -> (key, value) of everything appended. The closed segments hold the
    latest record of each key among them (the active segment is never cleaned nor used)."""
    active = plog.active_segment.base_offset
    latest = {}
    for off in sorted(o for o in written if o < active):
        k, v = written[off]
        latest[k] = (off, v)
    got = records(plog)
    for r in got:  # survivors keep their offset and content
        assert written[r.offset] == (r.key, r.value)
    cleaned = [r for r in got if r.offset < active]
    keys = [r.key for r in cleaned]
    assert len(keys) == len(set(keys)), "a key survives twice in the cleaned part"
    for r in cleaned:
        assert latest[r.key][0] == r.offset, f"{r.key} kept at {r.offset}, latest is {latest[r.key]}"
    offsets = {r.offset for r in got}
    for k, (off, v) in latest.items():
        if v is not None or tombstones_kept:
            assert off in offsets, f"latest record of {k} at {off} is missing"
        else:
            assert off not in offsets, f"tombstone of {k} at {off} outlived delete.retention.ms"
    assert all(o in offsets for o in written if o >= active)


# --- the offset map -------------------------------------------------------------------------


def test_offset_map_is_bounded_and_reports_full():
    m = OffsetMap(BYTES_PER_ENTRY * 10, 0.9)
    assert m.slots == 10 and m.max_entries == 9 and m.memory <= BYTES_PER_ENTRY * 10
    for i in range(9):
        assert m.put(b"k%d" % i, i)
    assert m.full and not m.put(b"new", 99)
    assert m.put(b"k3", 50) and m.get(b"k3") == 50  # existing keys still update
    assert m.get(b"new") == -1 and m.get(b"k0") == 0
    small = OffsetMap(1 << 30, expected_keys=100)
    assert small.slots < 200  # sized to the keys, not the whole budget


# --- compaction rules -----------------------------------------------------------------------

ops = st.lists(
    st.lists(st.tuples(st.integers(0, 12), st.booleans(), st.integers(0, 40)),
             min_size=1, max_size=4),
    min_size=1, max_size=60,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops, st.sampled_from([0, 1, 4]), st.sampled_from([1 << 20, BYTES_PER_ENTRY * 12]),
       st.booleans())  # fmt: skip
def test_latest_value_per_key_survives(tmp_path_factory, plan, codec, memory, roll):
    path = tmp_path_factory.mktemp("c") / "t-0"
    clock = Clock()
    plog = open_log(path, compact_config(delete_retention_ms=DAY), clock)
    written = {}
    for batch in plan:
        recs = [(b"key-%d" % k, None if tomb else b"v" * size) for k, tomb, size in batch]
        first = put(plog, recs, compression=codec)
        for i, kv in enumerate(recs):
            written[first + i] = kv
    if roll:
        plog.roll()
    cleaner = cleaner_for(plog, clock, dedupe_buffer_size=memory)
    clean_until_done(cleaner)
    check_compacted(plog, written)
    leo = plog.log_end_offset
    # tombstones go once delete.retention.ms has passed since the pass that first kept them
    clock.ms += DAY + 1
    clean_until_done(cleaner)
    check_compacted(plog, written, tombstones_kept=False)
    assert plog.log_end_offset == leo
    plog.close()
    reopened = open_log(path, compact_config(delete_retention_ms=DAY), clock, clean_shutdown=True)
    check_compacted(reopened, written, tombstones_kept=False)


def test_small_key_map_cleans_in_several_passes(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(segment_bytes=2000), clock)
    written = {}
    for rnd in range(4):
        for k in range(40):
            off = put(plog, [(b"k%02d" % k, b"round-%d" % rnd)])
            written[off] = (b"k%02d" % k, b"round-%d" % rnd)
    plog.roll()
    cleaner = cleaner_for(plog, clock, dedupe_buffer_size=BYTES_PER_ENTRY * 12)  # 10 keys a pass
    passes = clean_until_done(cleaner)
    assert passes >= 4
    check_compacted(plog, written)
    assert len(records(plog)) == 40


def test_active_segment_and_young_segments_are_not_cleaned(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(min_compaction_lag_ms=60_000), clock)
    for i in range(30):
        put(plog, [(b"same", b"v%d" % i)], ts=T0 + i)
    cleaner = cleaner_for(plog, clock)
    assert not cleaner.clean_once()  # everything is younger than the lag
    clock.ms += 120_000
    assert cleaner.clean_once()
    got = records(plog)
    active = plog.active_segment.base_offset
    assert [r.offset for r in got if r.offset < active] == [active - 1]  # the newest closed one
    assert len([r for r in got if r.offset >= active]) == plog.log_end_offset - active


def test_dirty_ratio_threshold_and_max_compaction_lag(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(min_cleanable_dirty_ratio=0.99), clock)
    for i in range(30):
        put(plog, [(b"k%d" % (i % 3), b"x" * 30)])
    cleaner = cleaner_for(plog, clock)
    assert cleaner.grab_filthiest() is not None  # all dirty: ratio 1.0
    assert cleaner.clean_once()
    for i in range(10):
        put(plog, [(b"k%d" % (i % 3), b"x" * 30)])
    ltc = cleaner.grab_filthiest()
    assert ltc is None  # a little new dirt is below the ratio
    plog.update_config(compact_config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=1000))
    clock.ms += 5000
    assert cleaner.grab_filthiest().need_compaction_now


def test_checkpoint_is_kept_across_cleaner_restarts(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", clock=clock)
    for i in range(40):
        put(plog, [(b"k%d" % (i % 4), b"v")])
    c1 = cleaner_for(plog, clock)
    assert c1.clean_once()
    cp = (tmp_path / CLEANER_CHECKPOINT).read_text().split()
    assert cp[:2] == ["0", "1"] and cp[2:4] == ["t", "0"]
    assert int(cp[4]) == plog.active_segment.base_offset
    c2 = cleaner_for(plog, clock)
    assert c2.checkpoint_of(plog) == int(cp[4])
    assert not c2.clean_once()  # nothing dirty since


def test_keyless_records_are_rejected_on_compacted_topics(tmp_path):
    plog = open_log(tmp_path / "t-0")
    with pytest.raises(StorageError) as e:
        put(plog, [(b"k", b"v"), (None, b"no key")])
    assert e.value.error_code == 87  # INVALID_RECORD
    assert plog.log_end_offset == 0


def test_batches_keep_offsets_producer_fields_and_last_producer_batch(tmp_path):
    clock = Clock()
    path = tmp_path / "t-0"
    plog = open_log(path, clock=clock)
    seq = 0
    for _i in range(12):
        put(plog, [(b"a", b"1"), (b"b", b"2")], producer_id=9, producer_epoch=3, base_sequence=seq)
        seq += 2
    put(plog, [(b"c", b"x")])  # a plain producer after it
    put(plog, [(b"a", b"new"), (b"b", b"new")])  # supersedes the idempotent producer's records
    plog.roll()
    cleaner = cleaner_for(plog, clock)
    clean_until_done(cleaner)
    batches = read_all(plog)
    idem = [h for h, _ in batches if h.producer_id == 9]
    assert idem, "the producer's last batch must stay"
    last = idem[-1]
    assert (last.base_offset, last.last_offset_delta, last.base_sequence, last.producer_epoch) == (
        22, 1, 22, 3)  # fmt: skip
    assert last.records_count == 0  # emptied: both keys are newer elsewhere
    # the producer's sequence state is rebuilt from the log alone
    plog.close()
    for snap in path.glob("*.snapshot"):
        snap.unlink()
    again = open_log(path, clock=clock, clean_shutdown=True)
    entry = again.producer_state.producers[9]
    assert (entry.epoch, entry.last_seq, entry.last_data_offset) == (3, 23, 23)
    assert put(again, [(b"a", b"z")], producer_id=9, producer_epoch=3, base_sequence=24) == again.log_end_offset - 1


def test_transactions_aborted_data_and_markers(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(delete_retention_ms=1000), clock)

    def txn(pid, recs, commit):
        put(plog, recs, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True,
            origin=ORIGIN_COORDINATOR)  # fmt: skip
        marker = R.control_batch(commit=commit, producer_id=pid, producer_epoch=0,
                                 coordinator_epoch=0, timestamp=T0)  # fmt: skip
        plog.append(bytearray(marker), leader_epoch=0, now_ms=T0, origin=ORIGIN_COORDINATOR)

    put(plog, [(b"k", b"committed-plain")])
    txn(100, [(b"k", b"aborted")], commit=False)
    txn(101, [(b"j", b"committed-txn")], commit=True)
    for i in range(10):
        put(plog, [(b"filler%d" % i, b"x" * 40)])
    plog.roll()
    cleaner = cleaner_for(plog, clock)
    clean_until_done(cleaner)
    got = {r.key: r.value for r in records(plog)}
    assert got[b"k"] == b"committed-plain"  # the aborted value never wins
    assert got[b"j"] == b"committed-txn"
    markers = [h for h, _ in read_all(plog) if h.is_control]
    assert {h.producer_id for h in markers} == {100, 101}  # both are their producers' last batch
    # while producer 101 is active its last data batch stays (emptied once superseded), and
    # so does its marker: data of the transaction is still there
    put(plog, [(b"j", b"newer")])
    plog.roll()
    clean_until_done(cleaner)
    batches = read_all(plog)
    assert [h.records_count for h, _ in batches if h.producer_id == 101] == [0, 1]
    assert [h.records_count for h, _ in batches if h.producer_id == 100] == [0, 1]
    # once the producers expired, the data batches go, then the markers get a delete horizon,
    # and after delete.retention.ms they go too
    clock.ms += 3 * DAY
    assert plog.remove_expired_producers(clock.ms) == 2
    for i in range(3):
        put(plog, [(b"more%d" % i, b"x")], ts=clock.ms)
        plog.roll()
        clean_until_done(cleaner)
    assert not [h for h, _ in read_all(plog) if h.producer_id == 101 and not h.is_control]
    marker = [h for h, _ in read_all(plog) if h.producer_id == 101]
    assert marker and marker[0].attributes & R.DELETE_HORIZON_MASK
    clock.ms += 2000
    clean_until_done(cleaner)
    assert not [h for h, _ in read_all(plog) if h.producer_id in (100, 101) and h.records_count]
    assert {r.key: r.value for r in records(plog)}[b"j"] == b"newer"


@pytest.mark.parametrize("warm", [False, True], ids=["first-pass", "merging-pass"])
@pytest.mark.parametrize("crash_after", range(0, 16))
def test_crash_at_every_swap_step_leaves_a_consistent_log(tmp_path, monkeypatch, crash_after, warm):
    clock = Clock()
    path = tmp_path / "t-0"
    plog = open_log(path, compact_config(segment_bytes=400, delete_retention_ms=DAY), clock)
    written = {}
    for i in range(60):
        k, v = b"k%d" % (i % 5), b"value-%d" % i
        written[put(plog, [(k, v)])] = (k, v)
    plog.roll()
    if warm:  # a first pass leaves small segments that the next pass merges into one group
        clean_until_done(cleaner_for(plog, clock))
        for i in range(60, 70):
            k, v = b"k%d" % (i % 7), b"value-%d" % i
            written[put(plog, [(k, v)])] = (k, v)
        plog.roll()
    plog.flush()
    calls = [0]
    real_replace = os.replace

    class Crash(BaseException):
        pass

    def flaky_replace(src, dst):
        if calls[0] >= crash_after:
            raise Crash()
        calls[0] += 1
        return real_replace(src, dst)

    monkeypatch.setattr(log_module.os, "replace", flaky_replace)
    from strom.storage import segment as segment_module

    monkeypatch.setattr(segment_module.os, "replace", flaky_replace)
    cleaner = cleaner_for(plog, clock, dedupe_buffer_size=1 << 20)
    crashed = False
    try:
        clean_until_done(cleaner)
    except Crash:
        crashed = True
    monkeypatch.undo()
    leftovers = sorted(p.name for p in path.iterdir() if p.suffix in (".cleaned", ".swap"))
    # "restart": a new log on the same directory, as after kill -9
    again = open_log(path, compact_config(segment_bytes=400, delete_retention_ms=DAY), clock)
    assert not [p for p in path.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
    assert again.log_end_offset == max(written) + 1
    got = records(again)
    for r in got:
        assert written[r.offset] == (r.key, r.value)
    latest = {k: max(o for o, (kk, _v) in written.items() if kk == k) for k in {k for k, _ in written.values()}}
    for k, off in latest.items():
        assert any(r.offset == off for r in got), f"latest {k} lost (crashed={crashed}, {leftovers})"
    # and cleaning resumes to the full result
    clean_until_done(cleaner_for(again, clock))
    check_compacted(again, written)


def test_interrupted_cleaning_files_are_discarded(tmp_path):
    plog = open_log(tmp_path / "t-0")
    for i in range(30):
        put(plog, [(b"k", b"v%d" % i)])
    plog.close()
    for suffix in (".log.cleaned", ".index.cleaned", ".timeindex.swap"):
        (tmp_path / "t-0" / ("00000000000000000000" + suffix)).write_bytes(b"junk")
    again = open_log(tmp_path / "t-0", clean_shutdown=True)
    assert len(records(again)) == 30
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.suffix in (".cleaned", ".swap")]


def test_reads_started_before_a_swap_keep_working(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(file_delete_delay_ms=60_000), clock)
    for i in range(40):
        put(plog, [(b"k%d" % (i % 2), b"v%d" % i)])
    plog.roll()
    before = plog.read(0, 10_000)
    expected = before.slice.read_bytes()
    before.slice.file.pin()
    cleaner_for(plog, clock).clean_once()
    assert before.slice.read_bytes() == expected  # the old file lives on until unpinned
    before.slice.file.unpin()
    after = plog.read(0, 10_000).slice.read_bytes()
    assert after != expected and R.iter_batches(after)


def test_service_cleans_in_the_background(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", clock=clock)

    async def main():
        cleaner = cleaner_for(plog, clock, backoff_ms=10)
        cleaner.start()
        try:
            deadline = time.monotonic() + 30
            i = 0
            while cleaner.passes < 2:
                put(plog, [(b"k%d" % (i % 3), b"v%d" % i)])
                i += 1
                assert time.monotonic() < deadline, "cleaner never ran"
                await asyncio.sleep(0.001)
        finally:
            await cleaner.stop()
        return i

    n = asyncio.run(main())
    assert n > 0 and len(records(plog)) < n
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.suffix == ".cleaned"]
