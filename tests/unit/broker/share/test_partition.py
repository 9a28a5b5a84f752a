"""The share-partition state machine, transition by transition, plus a seeded randomized run
against a naive per-offset model."""

from __future__ import annotations

import random

import pytest

from strom.broker.share.partition import (
    DELIVERY_LIMIT_REACHED,
    REJECTED,
    AckType,
    AcquiredRange,
    DeadLetter,
    SharePartition,
    SharePartitionConfig,
)
from strom.coordinator.share.state import RecordState, StateBatch
from strom.protocol.errors import ErrorCode

AV, AQ, ACK, ING, ARC = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                         RecordState.ARCHIVING, RecordState.ARCHIVED)
A, R, J, G, N = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP, AckType.RENEW
LOCK = 30000


def sp(start=0, batches=(), **kw) -> SharePartition:
    return SharePartition(SharePartitionConfig(**kw), start, batches)


def states(p: SharePartition) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in p.state_batches()]


# ------------------------------------------------------------------ acquire


def test_acquire_new_batch_is_one_run_with_count_one_and_a_lock():
    p = sp(max_in_flight_records=10000)
    assert p.fetch_offset(0) == 0
    got = p.acquire("m1", [(0, 9999)], 500, now_ms=100)
    assert got == [AcquiredRange(0, 9999, 1)]  # batch-optimized keeps the whole batch
    assert states(p) == [(0, 9999, AQ, 1)]
    assert (p.start_offset, p.end_offset, p.acquired_count, p.in_flight_count) == (
        0, 10000, 10000, 10000)
    assert p.next_deadline() == 100 + LOCK
    assert p.fetch_offset(0) is None  # 10000 in flight: the limit


def test_a_batch_straddling_the_in_flight_cap_is_acquired_only_up_to_it():
    p = sp()  # share.partition.max.record.locks 2000
    assert p.acquire("m1", [(0, 9999)], 500, now_ms=0) == [AcquiredRange(0, 1999, 1)]
    assert (p.end_offset, p.in_flight_count) == (2000, 2000)
    assert p.fetch_offset(0) is None
    # record_limit mode caches the rest of a batch, but not past the cap either
    q = sp(max_in_flight_records=100)
    assert q.acquire("m1", [(0, 199)], 60, 0, record_limit=True) == [AcquiredRange(0, 59, 1)]
    assert states(q) == [(0, 59, AQ, 1), (60, 99, AV, 0)]
    assert q.acquire("m2", [(0, 199)], 60, 0, record_limit=True, fetch_offset=60) == [
        AcquiredRange(60, 99, 1)]
    assert q.fetch_offset(0) is None
    # settled records make room: the rest of the batch comes from the log again
    assert q.acknowledge("m1", [(0, 59, [A])], 1) == ErrorCode.NONE
    assert q.fetch_offset(1) == 100
    assert q.acquire("m1", [(0, 199)], 500, 1, fetch_offset=100) == [AcquiredRange(100, 159, 1)]


def test_batch_optimized_stops_between_log_batches():
    p = sp()
    got = p.acquire("m1", [(0, 4), (5, 9), (10, 14)], 6, now_ms=0)
    assert got == [AcquiredRange(0, 9, 1)]
    assert p.end_offset == 10


def test_record_limit_acquires_exactly_and_caches_the_rest_of_the_batch():
    p = sp()
    got = p.acquire("m1", [(0, 9), (10, 19)], 3, now_ms=0, record_limit=True)
    assert got == [AcquiredRange(0, 2, 1)]
    assert states(p) == [(0, 2, AQ, 1), (3, 9, AV, 0)]
    assert p.end_offset == 10
    assert p.fetch_offset(0) == 3
    got = p.acquire("m2", [(0, 9), (10, 19)], 4, now_ms=0, record_limit=True, fetch_offset=3)
    assert got == [AcquiredRange(3, 6, 1)]  # the cached tail had count 0
    assert states(p)[-1] == (7, 9, AV, 0)


def test_acquire_skips_records_not_available_and_reacquires_released_ones():
    p = sp()
    p.acquire("m1", [(0, 9)], 100, 0)
    assert p.acknowledge("m1", [(3, 4, [R])], 1) == ErrorCode.NONE
    assert p.fetch_offset(1) == 3
    got = p.acquire("m2", [(0, 9)], 100, 2, fetch_offset=3)
    assert got == [AcquiredRange(3, 4, 2)]
    assert states(p) == [(0, 2, AQ, 1), (3, 4, AQ, 2), (5, 9, AQ, 1)]


def test_acquire_gaps_between_batches_and_listed_gaps_are_archived():
    p = sp()
    got = p.acquire("m1", [(0, 2), (5, 7)], 100, 0, gaps=[6])
    assert got == [AcquiredRange(0, 2, 1), AcquiredRange(5, 5, 1), AcquiredRange(7, 7, 1)]
    assert states(p) == [(0, 2, AQ, 1), (3, 4, ARC, 1), (5, 5, AQ, 1), (6, 6, ARC, 1),
                         (7, 7, AQ, 1)]


def test_acquire_leading_gap_from_fetch_offset_and_empty_state_jumps_start():
    p = sp(start=0)
    assert p.acquire("m1", [(10, 12)], 100, 0) == [AcquiredRange(10, 12, 1)]
    assert p.start_offset == 10  # empty state: the start follows the log
    q = sp(start=0)
    q.acquire("m1", [(0, 1)], 100, 0)
    q.acquire("m1", [(5, 6)], 100, 0, fetch_offset=2)
    assert states(q) == [(0, 1, AQ, 1), (2, 4, ARC, 1), (5, 6, AQ, 1)]


def test_compacted_away_available_records_are_archived():
    p = sp()
    p.acquire("m1", [(0, 9)], 100, 0)
    p.acknowledge("m1", [(0, 9, [R])], 1)
    got = p.acquire("m1", [(5, 9)], 100, 2, fetch_offset=0)  # 0-4 are gone from the log
    assert got == [AcquiredRange(5, 9, 2)]
    assert p.start_offset == 5


def test_max_in_flight_limits_new_records_but_not_redelivery():
    p = sp(max_in_flight_records=10)
    assert p.acquire("m1", [(0, 3), (4, 7), (8, 11), (12, 15)], 100, 0) == [
        AcquiredRange(0, 9, 1)]  # room 10: the batch holding the 10th record is cut there
    assert p.fetch_offset(0) is None
    assert p.acquire("m1", [(12, 15)], 100, 0) == []
    p.acknowledge("m1", [(4, 5, [R])], 1)
    assert p.fetch_offset(1) == 4
    got = p.acquire("m2", [(4, 7), (8, 11), (12, 15)], 100, 2)
    assert got == [AcquiredRange(4, 5, 2)]
    assert p.end_offset == 10


def test_acquire_nothing_for_empty_read_or_zero_records():
    p = sp()
    assert p.acquire("m1", [], 10, 0) == []
    assert p.acquire("m1", [(0, 9)], 0, 0) == []
    assert p.end_offset == 0


def test_last_delivery_attempt_is_delivered_alone():
    p = sp(delivery_count_limit=3, start=0, batches=[
        StateBatch(0, 0, int(AV), 1), StateBatch(1, 1, int(AV), 2), StateBatch(2, 4, int(AV), 1)])
    assert p.acquire("m1", [(0, 4)], 100, 0) == [AcquiredRange(0, 0, 2)]
    assert p.acquire("m2", [(1, 4)], 100, 0, fetch_offset=1) == [AcquiredRange(1, 1, 3)]
    assert p.acquire("m3", [(2, 4)], 100, 0, fetch_offset=2) == [AcquiredRange(2, 4, 2)]


def test_throttled_records_are_delivered_in_halved_batches():
    # limit 6: throttled from count 3; 3 -> size >> 1, 4 -> size >> 2
    p = sp(delivery_count_limit=6, batches=[StateBatch(0, 99, int(AV), 3)])
    assert p.acquire("m1", [(0, 99)], 500, 0) == [AcquiredRange(0, 49, 4)]
    q = sp(delivery_count_limit=6, batches=[StateBatch(0, 99, int(AV), 4)])
    assert q.acquire("m1", [(0, 99)], 500, 0) == [AcquiredRange(0, 24, 5)]


# ------------------------------------------------------------------ acknowledge


def acquired(n=10, **kw) -> SharePartition:
    p = sp(**kw)
    p.acquire("m1", [(0, n - 1)], 1000, 0)
    return p


def test_accept_whole_batch_moves_start_offset_and_persists():
    p = acquired()
    assert p.take_changes() == (-1, [])  # acquisition is not persisted
    assert p.acknowledge("m1", [(0, 9, [A])], 5) == ErrorCode.NONE
    assert (p.start_offset, p.end_offset, p.state_batches()) == (10, 10, [])
    assert p.take_changes() == (10, [])


def test_partial_ack_splits_the_run_and_start_waits_for_the_head():
    p = acquired()
    assert p.acknowledge("m1", [(4, 4, [A])], 5) == ErrorCode.NONE
    assert states(p) == [(0, 3, AQ, 1), (4, 4, ACK, 1), (5, 9, AQ, 1)]
    assert p.start_offset == 0
    assert p.take_changes() == (-1, [StateBatch(4, 4, int(ACK), 1)])
    p.acknowledge("m1", [(0, 3, [A])], 6)
    assert p.start_offset == 5
    assert states(p) == [(5, 9, AQ, 1)]


def test_per_offset_types_and_runs_merge_back():
    p = acquired(6)
    assert p.acknowledge("m1", [(0, 5, [A, R, R, J, G, A])], 5) == ErrorCode.NONE
    assert states(p) == [(1, 2, AV, 1), (3, 4, ARC, 1), (5, 5, ACK, 1)]
    start, batches = p.take_changes()
    assert start == 1
    assert batches == [StateBatch(1, 2, int(AV), 1), StateBatch(3, 4, int(ARC), 1),
                       StateBatch(5, 5, int(ACK), 1)]
    got = p.acquire("m1", [(0, 5)], 100, 6, fetch_offset=1)
    assert got == [AcquiredRange(1, 2, 2)]
    p.acknowledge("m1", [(1, 2, [A])], 7)
    assert p.state_batches() == [] and p.start_offset == 6


def test_release_at_the_delivery_limit_archives():
    p = acquired(1, delivery_count_limit=2)
    p.acknowledge("m1", [(0, 0, [R])], 1)
    assert states(p) == [(0, 0, AV, 1)]
    p.acquire("m1", [(0, 0)], 10, 2)
    assert states(p) == [(0, 0, AQ, 2)]
    p.acknowledge("m1", [(0, 0, [R])], 3)
    assert p.start_offset == 1 and p.state_batches() == []
    assert p.take_changes() == (1, [])


def test_reject_and_gap_archive():
    p = acquired(4)
    p.acknowledge("m1", [(1, 1, [J]), (2, 2, [G])], 1)
    assert states(p) == [(0, 0, AQ, 1), (1, 2, ARC, 1), (3, 3, AQ, 1)]


@pytest.mark.parametrize("acks", [
    [(5, 4, [A])],  # last before first
    [(0, 3, [A, A])],  # types neither one nor one per offset
    [(0, 3, [])],  # no types
    [(0, 3, [9])],  # unknown type
    [(0, 3, [A]), (3, 5, [A])],  # overlapping batches
    [(4, 5, [A]), (0, 1, [A])],  # out of order
    [(8, 12, [A])],  # past the in-flight records
])
def test_malformed_acknowledgements_are_invalid_requests_and_change_nothing(acks):
    p = acquired()
    before = states(p)
    assert p.acknowledge("m1", acks, 1) == ErrorCode.INVALID_REQUEST
    assert states(p) == before and p.take_changes() == (-1, [])


def test_not_acquired_by_member_or_expired_or_not_acquired_is_invalid_record_state():
    p = acquired()
    p.acknowledge("m1", [(9, 9, [A])], 1)
    before = states(p)
    assert p.acknowledge("m2", [(0, 0, [A])], 1) == ErrorCode.INVALID_RECORD_STATE
    assert p.acknowledge("m1", [(0, 0, [A])], LOCK) == ErrorCode.INVALID_RECORD_STATE
    # all or nothing: the first batch is valid, the second is not
    assert p.acknowledge("m1", [(0, 1, [A]), (9, 9, [A])], 1) == ErrorCode.INVALID_RECORD_STATE
    assert states(p) == before
    assert sp(start=5).acknowledge("m1", [(5, 6, [A])], 0) == ErrorCode.INVALID_RECORD_STATE


def test_acknowledging_below_the_start_offset_is_ignored():
    p = acquired()
    p.acknowledge("m1", [(0, 4, [A])], 1)
    assert p.acknowledge("m1", [(0, 4, [R])], 1) == ErrorCode.NONE
    assert p.acknowledge("m1", [(3, 6, [A])], 1) == ErrorCode.NONE  # 5-6 applied
    assert p.start_offset == 7


def test_renew_extends_the_lock_and_persists_nothing():
    p = acquired(4)
    assert p.acknowledge("m1", [(0, 3, [N, A, N, N])], 20000) == ErrorCode.NONE
    p.take_changes()
    assert p.acknowledge("m1", [(0, 0, [N])], 25000) == ErrorCode.NONE
    assert p.take_changes() == (-1, [])
    assert not p.expire_locks(LOCK)  # 2-3 renewed at 20000, 0 at 25000
    assert states(p) == [(0, 0, AQ, 1), (1, 1, ACK, 1), (2, 3, AQ, 1)]
    assert p.next_deadline() == 20000 + LOCK
    assert p.expire_locks(20000 + LOCK)
    assert states(p) == [(0, 0, AQ, 1), (1, 1, ACK, 1), (2, 3, AV, 1)]


def test_renew_disabled_is_invalid_record_state():
    p = acquired(renew_enabled=False)
    assert p.acknowledge("m1", [(0, 9, [N])], 1) == ErrorCode.INVALID_RECORD_STATE
    assert p.acknowledge("m1", [(0, 9, [A])], 1) == ErrorCode.NONE


# ------------------------------------------------------------------ locks and members


def test_lock_expiry_releases_and_archives_at_the_limit():
    p = acquired(3, delivery_count_limit=2)
    assert not p.expire_locks(LOCK - 1)
    assert p.expire_locks(LOCK)
    assert states(p) == [(0, 2, AV, 1)] and p.next_deadline() is None
    assert p.take_changes() == (-1, [StateBatch(0, 2, int(AV), 1)])
    p.acquire("m1", [(0, 2)], 10, LOCK)
    p.expire_locks(2 * LOCK)
    assert p.start_offset == 3 and p.take_changes() == (3, [])


def test_acquire_expires_locks_first():
    p = acquired(2)
    assert p.acquire("m2", [(0, 1)], 10, LOCK) == [AcquiredRange(0, 1, 2)]


def test_release_member_keeps_the_delivery_count():
    p = sp()
    p.acquire("m1", [(0, 4)], 100, 0)
    p.acquire("m2", [(5, 9)], 100, 0)
    assert p.release_member("m1", 1)
    assert not p.release_member("m1", 1)
    assert states(p) == [(0, 4, AV, 1), (5, 9, AQ, 1)]
    assert p.acquired_count == 5


# ------------------------------------------------------------------ redelivery delay


def test_redelivery_delay_with_backoff():
    cfg = dict(redelivery_delay_ms=1000, redelivery_backoff_multiplier=2.0,
               redelivery_max_delay_ms=3000)
    p = acquired(1, **cfg)
    p.acknowledge("m1", [(0, 0, [R])], 10)
    assert p.next_deadline() == 1010
    assert p.fetch_offset(1009) == 1 and p.acquire("m1", [(0, 0)], 10, 1009) == []
    assert p.fetch_offset(1010) == 0
    assert p.acquire("m1", [(0, 0)], 10, 1010) == [AcquiredRange(0, 0, 2)]
    p.acknowledge("m1", [(0, 0, [R])], 2000)
    assert p.next_deadline() == 4000  # 1000 * 2 ** (2 - 1)
    assert p.expire_locks(4000) and p.next_deadline() is None
    p.acquire("m1", [(0, 0)], 10, 4000)
    p.expire_locks(4000 + LOCK)  # lock timeouts are delayed too, capped at the max
    assert p.next_deadline() == 4000 + LOCK + 3000
    assert SharePartitionConfig().redelivery_delay(3) == 0


def test_redelivery_delay_is_persisted_and_restored():
    p = acquired(3, redelivery_delay_ms=1000)
    p.acknowledge("m1", [(0, 0, [R]), (1, 1, [A])], 10)
    _, batches = p.take_changes()
    assert batches == [StateBatch(0, 0, int(AV), 1, 1010), StateBatch(1, 1, int(ACK), 1)]
    # a restart reads it back: held until 1010, then delivered as usual
    q = sp(0, batches, redelivery_delay_ms=1000)
    assert q.next_deadline() == 1010
    assert q.fetch_offset(1009) == 2 and q.acquire("m2", [(0, 2)], 10, 1009) == [
        AcquiredRange(2, 2, 1)]
    assert q.fetch_offset(1010) == 0
    assert q.acquire("m2", [(0, 2)], 10, 1010) == [AcquiredRange(0, 0, 2)]
    # Kafka's records carry no delay: the record is available at once
    r = sp(0, [StateBatch(0, 0, int(AV), 1)], redelivery_delay_ms=1000)
    assert r.next_deadline() is None and r.fetch_offset(0) == 0
    # records whose lock expired are held back too, and written with their delay's end
    q.expire_locks(1010 + LOCK)
    assert q.take_changes()[1] == [StateBatch(0, 0, int(AV), 2, 1010 + LOCK + 1000),
                                   StateBatch(2, 2, int(AV), 1, 1010 + LOCK + 1000)]


def test_gap_ranges_are_archived_inside_and_across_batches():
    p = sp()
    got = p.acquire("m1", [(0, 9), (10, 10), (11, 19)], 100, 0,
                    gap_ranges=[(3, 5), (10, 10), (15, 25)], gaps=[8])
    assert got == [AcquiredRange(0, 2, 1), AcquiredRange(6, 7, 1), AcquiredRange(9, 9, 1),
                   AcquiredRange(11, 14, 1)]
    assert states(p) == [(0, 2, AQ, 1), (3, 5, ARC, 1), (6, 7, AQ, 1), (8, 8, ARC, 1),
                         (9, 9, AQ, 1), (10, 10, ARC, 1), (11, 14, AQ, 1), (15, 19, ARC, 1)]
    # archived gaps are persisted with the next write
    assert (3, 5, int(ARC), 1) in [(b.first_offset, b.last_offset, b.delivery_state,
                                    b.delivery_count) for b in p.take_changes()[1]]
    # a read that is all gap moves the partition on without acquiring anything
    q = sp()
    assert q.acquire("m1", [(0, 4)], 100, 0, gap_ranges=[(0, 4)]) == []
    assert (q.start_offset, q.end_offset) == (5, 5)


# ------------------------------------------------------------------ dead letters


def test_dead_letters_for_reject_and_limit_and_the_start_offset_waits():
    p = acquired(4, dead_letter=True, delivery_count_limit=2)
    p.acknowledge("m1", [(0, 3, [J, R, A, G])], 1)
    assert states(p) == [(0, 0, ING, 1), (1, 1, AV, 1), (2, 2, ACK, 1), (3, 3, ARC, 1)]
    assert p.start_offset == 0
    assert p.take_dead_letters() == [DeadLetter(0, 0, 1, REJECTED)]
    assert p.take_dead_letters() == []
    assert p.take_changes()[1][0] == StateBatch(0, 0, int(ING), 1)
    p.acquire("m1", [(1, 1)], 10, 2)
    p.expire_locks(2 + LOCK)
    assert p.take_dead_letters() == [DeadLetter(1, 1, 2, DELIVERY_LIMIT_REACHED)]
    p.dead_lettered(0, 0)
    assert p.start_offset == 1
    p.dead_lettered(1, 1)
    assert p.start_offset == 4 and p.take_changes() == (4, [])


def test_without_dead_letter_reject_goes_straight_to_archived():
    p = acquired(1)
    p.acknowledge("m1", [(0, 0, [J])], 1)
    assert p.take_dead_letters() == [] and p.start_offset == 1


# ------------------------------------------------------------------ persistence


def test_rebuild_from_persisted_state():
    batches = [StateBatch(12, 13, int(ACK), 1), StateBatch(14, 15, int(AQ), 2),
               StateBatch(18, 19, int(ING), 5), StateBatch(20, 20, int(AV), 3),
               StateBatch(2, 5, int(ARC), 1)]
    p = sp(start=10, batches=batches, dead_letter=True)
    assert p.start_offset == 10 and p.end_offset == 21
    assert states(p) == [(10, 11, AV, 0), (12, 13, ACK, 1), (14, 15, AV, 2), (16, 17, AV, 0),
                         (18, 19, ING, 5), (20, 20, AV, 3)]
    assert p.take_dead_letters() == [DeadLetter(18, 19, 5, DELIVERY_LIMIT_REACHED)]
    assert p.acquire("m1", [(10, 20)], 100, 0) == [
        AcquiredRange(10, 11, 1), AcquiredRange(14, 15, 3), AcquiredRange(16, 17, 1)]
    q = sp(start=0, batches=[StateBatch(0, 1, int(ING), 1)])  # no DLQ configured any more
    assert q.start_offset == 2 and q.take_changes() == (2, [])
    r = sp(start=0, batches=[StateBatch(0, 3, int(ARC), 1), StateBatch(4, 4, int(AV), 1)])
    assert r.start_offset == 4 and r.take_changes() == (4, [])


def test_take_changes_merges_and_writes_reacquired_ranges_as_before_acquisition():
    p = acquired(6)
    p.acknowledge("m1", [(0, 2, [R])], 1)
    p.acknowledge("m1", [(3, 5, [R])], 1)
    p.acquire("m1", [(0, 5)], 3, 2, record_limit=True)
    assert p.take_changes() == (-1, [StateBatch(0, 5, int(AV), 1)])
    assert p.take_changes() == (-1, [])


def test_move_start_offset_forward_back_and_past_the_end():
    p = acquired(10)
    p.move_start_offset(4)
    assert (p.start_offset, states(p)[0]) == (4, (4, 9, AQ, 1))
    assert p.acknowledge("m1", [(0, 9, [A])], 1) == ErrorCode.NONE
    assert p.start_offset == 10
    p.move_start_offset(20)
    assert (p.start_offset, p.end_offset) == (20, 20)
    p.move_start_offset(5)
    assert (p.start_offset, p.end_offset, p.state_batches()) == (5, 5, [])
    assert p.take_changes()[0] == 5


# ------------------------------------------------------------------ randomized


class Model:
    """Per-offset truth: offset -> [state, count, member, deadline]."""

    def __init__(self, cfg: SharePartitionConfig):
        self.cfg, self.rec, self.start, self.end = cfg, {}, 0, 0

    def release(self, o, now):
        st = self.rec[o]
        if st[1] >= self.cfg.delivery_count_limit:
            self.rec[o] = [ING if self.cfg.dead_letter else ARC, st[1], None, 0]
        else:
            d = self.cfg.redelivery_delay(st[1])
            self.rec[o] = [AV, st[1], None, now + d if d else 0]

    def expire(self, now):
        for o, st in self.rec.items():
            if st[0] == AQ and st[3] <= now:
                self.release(o, now)
            elif st[0] == AV and 0 < st[3] <= now:
                st[3] = 0

    def settle(self):
        while self.start < self.end and self.rec[self.start][0] in (ACK, ARC):
            del self.rec[self.start]
            self.start += 1


def test_randomized_against_a_per_offset_model():
    rng = random.Random(932)
    for _ in range(25):
        cfg = SharePartitionConfig(
            delivery_count_limit=rng.choice([2, 3, 5]), max_in_flight_records=rng.choice([8, 40]),
            lock_duration_ms=100, dead_letter=rng.random() < 0.5,
            redelivery_delay_ms=rng.choice([0, 0, 30]), redelivery_backoff_multiplier=2.0,
            redelivery_max_delay_ms=100)
        p, m, now = SharePartition(cfg, 0), Model(cfg), 0
        members = ["a", "b", "c"]
        for _ in range(150):
            now += rng.choice([0, 1, 20, 60])
            op = rng.random()
            if op < 0.35:
                fo = p.fetch_offset(now)
                if fo is None:
                    continue
                m.expire(now)
                base, batches = fo, []
                for _ in range(rng.randint(1, 3)):
                    size = rng.randint(1, 6)
                    batches.append((base, base + size - 1))
                    base += size + (1 if rng.random() < 0.15 else 0)
                gaps = [o for o in range(fo, base) if rng.random() < 0.05]
                rl = rng.random() < 0.5
                n = rng.randint(1, 8)
                old_end = p.end_offset
                member = rng.choice(members)
                got = p.acquire(member, batches, n, now, record_limit=rl, gaps=gaps)
                total = sum(g.last_offset - g.first_offset + 1 for g in got)
                if rl:
                    assert total <= n
                assert p.in_flight_count <= cfg.max_in_flight_records
                covered = {o for b in batches for o in range(b[0], b[1] + 1)} - set(gaps)
                for g in got:
                    for o in range(g.first_offset, g.last_offset + 1):
                        assert o in covered
                        if o < old_end:
                            st = m.rec[o]
                            assert st[0] == AV and st[3] <= now and g.delivery_count == st[1] + 1
                        else:
                            assert g.delivery_count == 1
                        m.rec[o] = [AQ, g.delivery_count, member, now + 100]
                truth = {o: b for b in p.state_batches()
                         for o in range(b.first_offset, b.last_offset + 1)}
                for o in range(fo, old_end):  # compacted away or listed gaps: archived if
                    st = m.rec.get(o)  # the partition got that far in the read
                    if o not in covered and st and st[0] == AV and st[3] <= now:
                        b = truth.get(o)
                        if b is None or b.delivery_state == ARC:
                            m.rec[o] = [ARC, st[1], None, 0]
                for o in range(old_end, p.end_offset):
                    if o not in m.rec:
                        m.rec[o] = [ARC, 1, None, 0] if o not in covered else [AV, 0, None, 0]
                m.end = max(m.end, p.end_offset)
                if p.start_offset > m.start and not m.rec:
                    m.start = p.start_offset
            elif op < 0.75:
                acquired_offsets = sorted(o for o, st in m.rec.items() if st[0] == AQ)
                if not acquired_offsets:
                    continue
                o1 = rng.choice(acquired_offsets)
                o2 = min(o1 + rng.randint(0, 4), m.end - 1)
                per = rng.random() < 0.5
                types = [rng.choice([A, R, J, G, N]) for _ in range(o2 - o1 + 1)] if per else [
                    rng.choice([A, R, J, G, N])]
                member = rng.choice(members)
                before = states(p)
                err = p.acknowledge(member, [(o1, o2, types)], now)
                ok = all(m.rec[o][0] == AQ and m.rec[o][2] == member and m.rec[o][3] > now
                         for o in range(o1, o2 + 1))
                if err != ErrorCode.NONE:
                    assert states(p) == before
                    assert err == ErrorCode.INVALID_RECORD_STATE and not ok
                    continue
                assert ok
                for i, o in enumerate(range(o1, o2 + 1)):
                    t = types[i] if per else types[0]
                    st = m.rec[o]
                    if t == A:
                        m.rec[o] = [ACK, st[1], None, 0]
                    elif t == R:
                        m.release(o, now)
                    elif t == J:
                        m.rec[o] = [ING if cfg.dead_letter else ARC, st[1], None, 0]
                    elif t == G:
                        m.rec[o] = [ARC, st[1], None, 0]
                    else:
                        st[3] = now + 100
            elif op < 0.85:
                p.expire_locks(now)
                m.expire(now)
            elif op < 0.93:
                for d in p.take_dead_letters():
                    for o in range(d.first_offset, d.last_offset + 1):
                        assert m.rec[o][0] == ING
                p.dead_lettered(p.start_offset, p.end_offset)
                for st in m.rec.values():
                    if st[0] == ING:
                        st[0] = ARC
            else:
                member = rng.choice(members)
                held = any(st[0] == AQ and st[2] == member for st in m.rec.values())
                assert p.release_member(member, now) == held
                for o, st in m.rec.items():
                    if st[0] == AQ and st[2] == member:
                        m.release(o, now)
            m.settle()
            check_invariants(p, cfg)
            truth = [(o, b.delivery_state, b.delivery_count) for b in p.state_batches()
                     for o in range(b.first_offset, b.last_offset + 1)]
            assert truth == [(o, int(st[0]), st[1]) for o, st in sorted(m.rec.items())]
            assert (p.start_offset, p.end_offset) == (m.start if m.rec else p.end_offset,
                                                      m.end if m.rec else p.end_offset)


def check_invariants(p: SharePartition, cfg: SharePartitionConfig) -> None:
    runs = p._runs
    offset = p.start_offset
    for i, r in enumerate(runs):
        assert r.first == offset and r.last >= r.first
        offset = r.last + 1
        if i == 0:
            assert r.state not in (ACK, ARC)
        if i:
            assert runs[i - 1].key() != r.key()
        assert (r.state == AQ) == (r.member is not None)
        if r.state == AV:
            assert r.count < cfg.delivery_count_limit
    assert offset == p.end_offset
    assert p.start_offset <= p.end_offset
