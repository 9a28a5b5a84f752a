"""The log rules the core relies on (epoch ends, divergence, snapshots, truncation) and the
leader's bookkeeping (the quorum HW, check-quorum, the append accumulator)."""

from __future__ import annotations

import pytest
from tests.unit.raft.harness import log_with

from strom.raft.control import decode_control_body, encode_control_body
from strom.raft.leader import Accumulator, LeaderState
from strom.raft.log import (
    MemoryRaftLog,
    truncation_offset,
    validate_offset_and_epoch,
)
from strom.raft.types import (
    ControlType,
    DataRecord,
    OffsetAndEpoch,
    RaftSettings,
    ReplicaKey,
    ValidKind,
    VoterSet,
    leader_change_record,
)

OE = OffsetAndEpoch


def test_end_offset_for_epoch() -> None:
    log = log_with((1, 3), (3, 4), (4, 2))  # epoch 1: 0-2, epoch 3: 3-6, epoch 4: 7-8
    assert log.end_offset_for_epoch(4) == OE(9, 4)  # the latest epoch ends at the log end
    assert log.end_offset_for_epoch(3) == OE(7, 3)
    assert log.end_offset_for_epoch(2) == OE(3, 1)  # epoch 2 never happened: 1 ended at 3
    assert log.end_offset_for_epoch(1) == OE(3, 1)
    assert log.end_offset_for_epoch(0) == OE(0, 0)  # before every epoch: where the first began
    assert MemoryRaftLog().end_offset_for_epoch(3) == OE(0, 0)


def test_validate_offset_and_epoch() -> None:
    log = log_with((1, 3), (3, 4))
    assert validate_offset_and_epoch(log, 0, 0).kind is ValidKind.VALID
    assert validate_offset_and_epoch(log, 5, 3).kind is ValidKind.VALID
    assert validate_offset_and_epoch(log, 7, 3).kind is ValidKind.VALID
    # Ahead of the leader in its own epoch: cut back to where the epoch ends.
    assert validate_offset_and_epoch(log, 9, 3) == \
        validate_offset_and_epoch(log, 9, 3).__class__(ValidKind.DIVERGING, OE(7, 3))
    # An epoch the leader never had: back to the end of the one before it.
    v = validate_offset_and_epoch(log, 6, 2)
    assert (v.kind, v.offset_and_epoch) == (ValidKind.DIVERGING, OE(3, 1))


class _Snapshotted(MemoryRaftLog):
    """A log that starts at 10 after snapshot (10, 2), the latest being (20, 3)."""

    def start_offset(self) -> int:
        return 10

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return OE(10, 2)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return OE(20, 3)


def test_validate_sends_a_follower_behind_the_log_start_to_the_snapshot() -> None:
    log = _Snapshotted()
    for offset, epoch in [(5, 2), (10, 1), (12, 1)]:
        v = validate_offset_and_epoch(log, offset, epoch)
        assert (v.kind, v.offset_and_epoch) == (ValidKind.SNAPSHOT, OE(20, 3)), (offset, epoch)


def test_truncation_offset() -> None:
    follower = log_with((1, 3), (2, 4))  # epoch 1: 0-2, epoch 2: 3-6
    assert truncation_offset(follower, OE(3, 1)) == 3  # leader's epoch 1 ended at 3
    assert truncation_offset(follower, OE(5, 2)) == 5  # same epoch, the leader has less
    assert truncation_offset(follower, OE(2, 0)) == 2  # epoch 0: min(offset, log end)
    assert truncation_offset(follower, OE(9, 5)) == 7  # unknown epoch: our last one's end


def test_memory_log_reads_whole_batches_and_loses_only_unflushed_data() -> None:
    log = log_with((1, 3))
    info = log.read(1, max_bytes=1)
    assert info.size_bytes > 0 and info.records[0].base_offset == 1  # type: ignore[index]
    log.append_as_leader([DataRecord(b"a")], 1, 0)
    assert log.end_offset() == 4 and log.flushed_offset() == 3
    log.crash(lose_unflushed=True)
    assert log.end_offset() == 3
    log.update_high_watermark(2)
    with pytest.raises(ValueError):
        log.truncate_to(1)


def test_the_leader_change_record_encodes_as_kafkas_control_record() -> None:
    entry = leader_change_record(2, [1, 2, 3], [2, 3])
    key, value = encode_control_body(entry.type, entry.body)
    kind, body = decode_control_body(key, value)
    assert kind == ControlType.LEADER_CHANGE
    assert body["leader_id"] == 2
    assert body["voters"] == [{"voter_id": 1}, {"voter_id": 2}, {"voter_id": 3}]
    assert body["granting_voters"] == [{"voter_id": 2}, {"voter_id": 3}]


# ----------------------------------------------------------------------------- leader


def _leader(voters: list[int], start: int = 10) -> LeaderState:
    return LeaderState(local=ReplicaKey(1), epoch=4, epoch_start_offset=start,
                       voters=VoterSet.static(voters), granting=set(voters), endpoints=(),
                       now_ms=0, settings=RaftSettings())


def test_the_hw_is_what_a_majority_has_and_only_past_the_epoch_start() -> None:
    st = _leader([1, 2, 3])
    assert not st.update_local_end_offset(11)
    assert st.high_watermark is None  # only the leader has 11
    assert not st.update_replica_state(ReplicaKey(2), 5, 10)  # a majority has 10: not past 10
    assert st.high_watermark is None
    assert st.update_replica_state(ReplicaKey(2), 6, 11)
    assert st.high_watermark == 11
    assert not st.update_replica_state(ReplicaKey(9), 7, 50)  # an observer never counts
    assert st.update_local_end_offset(20) is False  # 2 still at 11
    assert st.update_replica_state(ReplicaKey(3), 8, 15) and st.high_watermark == 15
    assert not st.update_replica_state(ReplicaKey(3), 9, 12)  # a voter going back...
    assert not st.update_replica_state(ReplicaKey(2), 9, 11)
    assert st.high_watermark == 15  # ...never moves the HW back


def test_five_voters_need_three() -> None:
    st = _leader([1, 2, 3, 4, 5], start=0)
    st.update_local_end_offset(10)
    st.update_replica_state(ReplicaKey(2), 1, 10)
    assert st.high_watermark is None
    st.update_replica_state(ReplicaKey(3), 1, 7)
    assert st.high_watermark == 7
    st.update_replica_state(ReplicaKey(4), 1, 9)
    assert st.high_watermark == 9


def test_check_quorum_needs_a_majority_of_voters_fetching() -> None:
    st = _leader([1, 2, 3, 4, 5])
    timeout = RaftSettings().check_quorum_timeout_ms
    assert st.check_quorum_deadline == timeout
    st.update_replica_state(ReplicaKey(2), 1000, 10)
    st.update_replica_state(ReplicaKey(9), 1100, 10)  # an observer does not count
    assert st.check_quorum_deadline == timeout
    st.update_replica_state(ReplicaKey(3), 1200, 10)  # leader + 2 + 3 = a majority of 5
    assert st.check_quorum_deadline == 1200 + timeout
    assert not st.check_quorum_expired(1200 + timeout - 1)
    assert st.check_quorum_expired(1200 + timeout)
    assert not _leader([1]).check_quorum_expired(10**9)  # alone, it is its own majority


def test_preferred_successors_by_fetch_offset() -> None:
    st = _leader([1, 2, 3, 4])
    st.update_replica_state(ReplicaKey(3), 1, 12)
    st.update_replica_state(ReplicaKey(2), 1, 11)
    assert [k.id for k in st.non_leader_voters_by_descending_fetch_offset()] == [3, 2, 4]


def test_the_accumulator_keeps_each_append_whole_and_lingers() -> None:
    acc = Accumulator(100, RaftSettings(append_linger_ms=25))
    assert acc.add([DataRecord(b"a" * 100)], now_ms=10) == 100
    assert acc.add([DataRecord(b"b" * 100), DataRecord(b"c" * 100)], now_ms=12) == 102
    assert not acc.ready(34) and acc.ready(35)  # 25 ms after the first record
    assert [len(b) for b in acc.drain()] == [3]
    assert acc.deadline is None and acc.next_offset == 103

    small = Accumulator(0, RaftSettings(max_batch_bytes=300))
    small.add([DataRecord(b"a" * 100)], now_ms=0)
    small.add([DataRecord(b"b" * 100), DataRecord(b"c" * 100)], now_ms=0)
    assert small.ready(0)  # full: no lingering
    assert [len(b) for b in small.drain()] == [1, 2]  # the second group did not fit whole
    with pytest.raises(ValueError):
        small.add([DataRecord(b"x" * 500)], now_ms=0)
