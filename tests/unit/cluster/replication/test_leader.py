"""The leader's bookkeeping of its followers: ISR and high-watermark rules."""

from strom.cluster.replication.leader import UNKNOWN_OFFSET, LeaderState

LAG = 30_000


def leader(now: int = 0, replicas=(1, 2, 3), start: int = 0) -> LeaderState:
    return LeaderState(1, list(replicas), leader_epoch=5, epoch_start_offset=start, now_ms=now)


def test_high_watermark_waits_for_every_isr_member_to_report():
    s = leader()
    assert s.high_watermark([1, 2, 3], leader_leo=10) == UNKNOWN_OFFSET
    s.record_fetch(2, 10, leader_leo=10, now_ms=1)
    assert s.high_watermark([1, 2, 3], leader_leo=10) == UNKNOWN_OFFSET
    s.record_fetch(3, 7, leader_leo=10, now_ms=1)
    assert s.high_watermark([1, 2, 3], leader_leo=10) == 7
    # a follower outside the ISR does not hold the high watermark back
    assert s.high_watermark([1, 2], leader_leo=10) == 10


def test_leader_alone_has_its_own_log_end_as_high_watermark():
    assert leader().high_watermark([1], leader_leo=42) == 42


def test_a_follower_at_the_log_end_is_caught_up_now():
    s = leader(now=0)
    s.record_fetch(2, 10, leader_leo=10, now_ms=50_000)
    assert s.out_of_sync([1, 2], now_ms=60_000, lag_max_ms=LAG) == []
    assert s.out_of_sync([1, 2], now_ms=80_001, lag_max_ms=LAG) == [2]


def test_a_follower_keeping_pace_under_load_stays_in_sync():
    """It never reaches the moving log end, but always the end of its previous fetch."""
    s = leader(now=0)
    leo = 100
    for t in range(0, 100_000, 1_000):
        s.record_fetch(2, leo - 5, leader_leo=leo, now_ms=t)
        leo += 5
    assert s.out_of_sync([1, 2], now_ms=100_000, lag_max_ms=LAG) == []


def test_a_stuck_follower_falls_out_of_sync():
    s = leader(now=0)
    for t in range(0, 40_000, 1_000):
        s.record_fetch(2, 3, leader_leo=100 + t, now_ms=t)
    assert s.out_of_sync([1, 2, 3], now_ms=40_000, lag_max_ms=LAG) == [2, 3]


def test_a_follower_joins_once_at_the_high_watermark_and_the_epoch_start():
    s = leader(start=20)
    s.record_fetch(3, 15, leader_leo=30, now_ms=1)
    assert s.ready_to_join([1, 2], high_watermark=15) == []  # below the epoch start
    s.record_fetch(3, 25, leader_leo=30, now_ms=2)
    assert s.ready_to_join([1, 2], high_watermark=28) == []  # below the high watermark
    assert s.ready_to_join([1, 2], high_watermark=25) == [3]
    assert s.ready_to_join([1, 2, 3], high_watermark=25) == []


def test_replica_set_changes_keep_known_followers():
    s = leader()
    s.record_fetch(2, 9, leader_leo=9, now_ms=1)
    s.set_replicas([1, 2, 4], now_ms=5)
    assert set(s.followers) == {2, 4}
    assert s.followers[2].log_end_offset == 9
    assert not s.record_fetch(3, 1, leader_leo=9, now_ms=6)
