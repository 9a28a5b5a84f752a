"""The Raft log on disk (`PartitionRaftLog`): the same answers as the memory log the core was
built against, Kafka's bytes on disk (epochs in batch headers, control batches), restarts and
crashes, snapshots; and the simulation's safety checks run over disk logs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tests.unit.raft.sim import SimNetwork

from strom.raft.control import ControlType, parse_control_batch
from strom.raft.log import MemoryRaftLog, truncation_offset, validate_offset_and_epoch
from strom.raft.storage import METADATA_DIR_NAME, PartitionRaftLog
from strom.raft.types import (
    DataRecord,
    Entry,
    OffsetAndEpoch,
    RaftBatch,
    leader_change_record,
)
from strom.record import iter_batches
from strom.storage.log import PartitionLog

OE = OffsetAndEpoch


def _open(tmp_path: Path, name: str = "n") -> PartitionRaftLog:
    return PartitionRaftLog.open(tmp_path / name, sync=False)


def _values(log: PartitionRaftLog | MemoryRaftLog, start: int = 0) -> list[tuple[int, int, object]]:
    return [(b.base_offset + k, b.epoch, r)
            for b in log.read_batches(start, log.end_offset()) for k, r in enumerate(b.records)]


def _lead(log: PartitionRaftLog | MemoryRaftLog, epoch: int, *batches: list[Entry]) -> None:
    """What a new leader does: the epoch starts at the log end with a LeaderChange batch."""
    log.initialize_leader_epoch(epoch)
    log.append_as_leader([leader_change_record(1, [1, 2, 3], [1, 2])], epoch, 1000 + epoch)
    for records in batches:
        log.append_as_leader(records, epoch, 2000 + epoch)


def _data(*values: bytes) -> list[Entry]:
    return [DataRecord(v) for v in values]


def test_leader_appends_are_kafka_batches_with_the_raft_epoch(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _lead(log, 3, _data(b"a", b"b"), _data(b"c"))
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (0, 4, 3)
    info = log.read(0, 1 << 20)
    batches = list(iter_batches(info.records))  # type: ignore[arg-type]
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control) for _, h in batches] == [
        (0, 3, True), (1, 3, False), (3, 3, False)]
    control = parse_control_batch(info.records[:batches[0][1].size])  # type: ignore[index]
    assert control.records[0].leader_id == 1  # type: ignore[union-attr]
    got = _values(log)
    assert got[0][2].type == ControlType.LEADER_CHANGE  # type: ignore[union-attr]
    assert [(o, e, r) for o, e, r in got[1:]] == [(1, 3, DataRecord(b"a")),
                                                   (2, 3, DataRecord(b"b")),
                                                   (3, 3, DataRecord(b"c"))]
    # read_batches cuts to the range asked (listeners read up to the HW)
    assert [(b.base_offset, len(b.records)) for b in log.read_batches(2, 3)] == [(2, 1)]
    assert log.read(4, 1 << 20).size_bytes == 0
    log.close()


def _same_answers(disk: PartitionRaftLog, mem: MemoryRaftLog) -> None:
    assert disk.end_offset() == mem.end_offset()
    assert disk.last_fetched_epoch() == mem.last_fetched_epoch()
    for epoch in range(0, 12):
        assert disk.end_offset_for_epoch(epoch) == mem.end_offset_for_epoch(epoch), epoch
        for offset in range(0, mem.end_offset() + 2):
            assert validate_offset_and_epoch(disk, offset, epoch) == \
                validate_offset_and_epoch(mem, offset, epoch), (offset, epoch)
        d = OE(mem.end_offset() + 1, epoch)
        assert truncation_offset(disk, d) == truncation_offset(mem, d)
    assert [(o, e) for o, e, _ in _values(disk)] == [(o, e) for o, e, _ in _values(mem)]


def test_answers_like_the_memory_log_through_appends_and_truncations(tmp_path: Path) -> None:
    rng = random.Random(7)
    disk, mem = _open(tmp_path), MemoryRaftLog()
    epoch = 0
    for _round in range(25):
        action = rng.random()
        if action < 0.5 or mem.end_offset() == 0:
            epoch += rng.choice([1, 1, 2])
            batches = [_data(*(b"x%d" % rng.randrange(100) for _ in range(rng.randint(1, 3))))
                       for _ in range(rng.randint(0, 3))]
            for log in (disk, mem):
                _lead(log, epoch, *batches)
        else:
            cut = rng.randrange(0, mem.end_offset())
            # a disk log cuts whole batches only where a batch starts (as fetches do)
            starts = [b.base_offset for b in mem.batches if b.base_offset <= cut]
            cut = starts[-1] if starts else 0
            for log in (disk, mem):
                log.truncate_to(cut)
        _same_answers(disk, mem)
    disk.close()


def test_a_follower_appends_what_the_leader_read(tmp_path: Path) -> None:
    leader, follower = _open(tmp_path, "leader"), _open(tmp_path, "follower")
    _lead(leader, 2, _data(b"a"))
    _lead(leader, 5, _data(b"b", b"c"))
    fetched = leader.read(0, 1 << 20)
    info = follower.append_as_follower(fetched.records)
    assert info is not None and (info.first_offset, info.last_offset) == (0, 4)
    assert _values(follower) == _values(leader)
    assert follower.end_offset_for_epoch(2) == OE(2, 2)  # the epoch cache came with the batches
    assert follower.append_as_follower(b"") is None
    # Records that do not continue the log are refused, whole.
    with pytest.raises(Exception, match="ends at 5"):
        follower.append_as_follower(leader.read(2, 1 << 20).records)
    assert follower.end_offset() == 5
    leader.close()
    follower.close()


def test_truncation_and_the_high_watermark(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _lead(log, 1, _data(b"a", b"b"))
    _lead(log, 2, _data(b"c"))
    log.update_high_watermark(3)
    assert log.high_watermark() == 3
    log.update_high_watermark(2)
    assert log.high_watermark() == 3  # never back
    log.update_high_watermark(99)
    assert log.high_watermark() == log.end_offset() == 5
    with pytest.raises(ValueError, match="below the high watermark"):
        log.truncate_to(3)
    log.close()
    log = _open(tmp_path)  # the HW is not stored: a replica learns it again
    assert log.high_watermark() == 0
    log.truncate_to(3)
    assert (log.end_offset(), log.last_fetched_epoch()) == (3, 1)
    assert log.end_offset_for_epoch(2) == OE(3, 1)
    log.truncate_to(7)  # past the end: nothing
    assert log.end_offset() == 3
    log.close()


def test_flush_moves_the_flushed_offset_and_a_restart_keeps_everything(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _lead(log, 4, _data(b"a"))
    assert log.flushed_offset() == 0
    log.flush()
    assert log.flushed_offset() == 2
    _lead(log, 6, _data(b"b"))
    before = _values(log)
    log.close()
    again = _open(tmp_path)
    assert _values(again) == before
    assert (again.end_offset(), again.last_fetched_epoch()) == (4, 6)
    assert again.end_offset_for_epoch(5) == OE(2, 4)
    again.close()


def test_a_crash_loses_a_torn_tail_and_the_epochs_follow(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _lead(log, 1, _data(b"a"))
    log.flush()
    _lead(log, 2, _data(b"b"))
    log.flush()
    # The node dies as it writes the next batch: half of it reaches the segment file.
    segment = sorted((tmp_path / "n" / METADATA_DIR_NAME).glob("*.log"))[-1]
    whole = log.read(2, 1 << 20).records
    log.plog.take_offline("crash")  # files closed, nothing written on the way out
    with open(segment, "ab") as f:
        f.write(bytes(whole)[:30])  # type: ignore[arg-type]
    again = _open(tmp_path)
    assert (again.end_offset(), again.last_fetched_epoch()) == (4, 2)
    assert again.end_offset_for_epoch(1) == OE(2, 1)
    # Without its leader-epoch-checkpoint the log rebuilds the epochs from the batch headers.
    again.close()
    (tmp_path / "n" / METADATA_DIR_NAME / "leader-epoch-checkpoint").unlink()
    third = _open(tmp_path)
    assert third.end_offset_for_epoch(1) == OE(2, 1)
    assert third.end_offset_for_epoch(2) == OE(4, 2)
    third.close()


def _snapshot(log: PartitionRaftLog, sid: OffsetAndEpoch, payload: bytes = b"snap") -> None:
    writer = log.new_snapshot(sid)
    assert writer is not None
    writer.append(payload)
    assert writer.size() == len(payload)
    writer.freeze()


def test_snapshots_are_served_and_move_the_log_start(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _lead(log, 1, _data(b"a", b"b"))
    _lead(log, 2, _data(b"c"))
    assert log.latest_snapshot_id() is None and log.read_snapshot(OE(3, 1)) is None
    aborted = log.new_snapshot(OE(1, 1))
    assert aborted is not None
    aborted.append(b"x")
    aborted.abort()
    assert log.latest_snapshot_id() is None
    _snapshot(log, OE(3, 1), b"0123456789")
    assert log.new_snapshot(OE(3, 1)) is None  # frozen already
    raw = log.read_snapshot(OE(3, 1))
    assert raw is not None and raw.size() == 10 and raw.read(4, 3) == b"456"
    assert not log.delete_before_snapshot(OE(3, 1))  # not committed yet
    log.update_high_watermark(5)
    assert log.delete_before_snapshot(OE(3, 1))
    assert log.start_offset() == 3
    assert validate_offset_and_epoch(log, 1, 1).kind.value == "snapshot"
    assert log.end_offset_for_epoch(2) == OE(5, 2)
    log.close()
    again = _open(tmp_path)  # the log starts at the oldest snapshot again
    assert again.start_offset() == 3 and again.earliest_snapshot_id() == OE(3, 1)
    again.close()


def test_a_downloaded_snapshot_restarts_the_log(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _lead(log, 1, _data(b"a"))
    _snapshot(log, OE(1, 1))
    _snapshot(log, OE(40, 7))  # downloaded: far past the log end
    log.install_snapshot(OE(40, 7))
    assert (log.start_offset(), log.end_offset(), log.high_watermark()) == (40, 40, 40)
    assert log.last_fetched_epoch() == 7
    assert log.earliest_snapshot_id() == OE(40, 7)  # older snapshots went
    assert log.end_offset_for_epoch(7) == OE(40, 7)
    _lead(log, 8, _data(b"z"))
    assert _values(log, 40)[-1][:2] == (41, 8)
    log.close()


def test_open_installs_a_snapshot_past_the_end_and_drops_partial_files(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _lead(log, 1, _data(b"a"))
    log.flush()
    _snapshot(log, OE(30, 4))  # frozen, then a crash before install_snapshot
    partial = log.new_snapshot(OE(50, 5))
    assert partial is not None
    partial.append(b"half")
    log.plog.take_offline("crash")
    again = _open(tmp_path)
    assert (again.start_offset(), again.end_offset(), again.last_fetched_epoch()) == (30, 30, 4)
    assert not list((tmp_path / "n" / METADATA_DIR_NAME).glob("*.part"))
    again.close()


# --------------------------------------------------------------------------- the simulation


class SimDiskLog(PartitionRaftLog):
    """A disk log for the simulation: a crash closes nothing and reopens the directory, after
    cutting what was never flushed when the crash loses data."""

    root: Path

    @classmethod
    def at(cls, root: Path) -> SimDiskLog:
        opened = PartitionRaftLog.open(root, sync=False)
        log = cls(opened.plog, sync=False)
        log.root = root
        return log

    def crash(self, *, lose_unflushed: bool = False) -> None:
        plog: PartitionLog = self.plog
        if lose_unflushed:
            plog.truncate_to(plog.recovery_point)
        plog.take_offline("simulated crash")
        self.plog = PartitionRaftLog.open(self.root, sync=False).plog

    def records_between(self, start: int, end: int) -> list[tuple[int, int, Entry]]:
        return [(b.base_offset + k, b.epoch, r)
                for b in self.read_batches(start, end) for k, r in enumerate(b.records)]


def _on_disk(net: SimNetwork, tmp_path: Path) -> SimNetwork:
    for node in net.nodes.values():
        node.log = SimDiskLog.at(tmp_path / f"node-{node.id}")  # type: ignore[assignment]
    return net.start()


@pytest.mark.parametrize("seed", [1, 4])
def test_the_simulation_over_disk_logs_loses_no_committed_entry(tmp_path: Path,
                                                                seed: int) -> None:
    """Leader crashes (some losing unflushed data), restarts and a partition, with a writer;
    `History` checks every step (one leader per epoch, committed entries unchanged, HW
    monotonic), and at the end every node holds the whole committed log."""
    rng = random.Random(seed)
    net = _on_disk(SimNetwork(seed, [1, 2, 3], observers=[100], wire=seed % 2 == 0), tmp_path)
    assert net.run_for(5000, lambda: net.leader() is not None), net.states()
    net.schedule_appends(14_000, every_ms=(10, 40))
    for _ in range(3):
        net.run_for(rng.randint(800, 2000))
        old = net.leader()
        assert old is not None
        net.crash(old, lose_unflushed=rng.random() < 0.5)
        assert net.run_for(8000, lambda old=old: net.leader() not in (None, old)), net.states()  # type: ignore[misc]
        net.restart(old)
    net.partition([1], [2, 3, 100])
    net.run_for(1500)
    net.heal()
    net.schedule_appends(net.clock.now + 1500, prefix="last")
    net.run_for(6000)
    net.check_logs_agree()
    leader = net.leader()
    assert leader is not None
    lead = net.nodes[leader].client
    assert lead is not None and lead.high_watermark is not None
    assert lead.high_watermark >= net.history.committed_end() > 20
    for node in net.nodes.values():
        assert node.client is not None and node.client.high_watermark == lead.high_watermark
        # each log holds the committed entries, read back from its files
        assert [r for _, _, r in node.log.records_between(0, lead.high_watermark)] == \
            [net.history.committed[o][1] for o in range(lead.high_watermark)]


def test_raft_batches_round_trip_through_the_disk_format(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _lead(log, 9, _data(b"", b"v" * 1000))
    batches = log.read_batches(0, log.end_offset())
    assert [b.epoch for b in batches] == [9, 9]
    assert isinstance(batches[1], RaftBatch) and batches[1].records == (
        DataRecord(b""), DataRecord(b"v" * 1000))
    log.close()


@pytest.mark.parametrize("seed", [0, 3, 6])
def test_the_chaos_scenario_over_disk_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           seed: int) -> None:
    """test_sim_safety's random faults (crashes losing unflushed data, partitions, drops),
    with every node's log on disk."""
    from tests.unit.raft import test_sim_safety

    start = SimNetwork.start

    def start_on_disk(net: SimNetwork) -> SimNetwork:
        for node in net.nodes.values():
            node.log = SimDiskLog.at(tmp_path / f"node-{node.id}")  # type: ignore[assignment]
        return start(net)

    monkeypatch.setattr(SimNetwork, "start", start_on_disk)
    net = test_sim_safety.chaos(seed, wire=seed % 2 == 0)
    test_sim_safety.settle(net)
    assert net.history.committed_end() > 0
