"""Combining state batches as Kafka's PersisterStateBatchCombiner does."""

from __future__ import annotations

from strom.coordinator.share.merge import combine
from strom.coordinator.share.state import StateBatch as B

AVAILABLE, ACQUIRED, ACKED, ARCHIVED = 0, 1, 2, 4


def test_nothing_and_one() -> None:
    assert combine([], [], 0) == []
    assert combine([B(0, 9, ACKED, 1)], [], -1) == [B(0, 9, ACKED, 1)]


def test_below_start_offset_is_dropped_and_straddling_batch_cut() -> None:
    assert combine([B(0, 4, ACKED, 1), B(5, 9, AVAILABLE, 1)], [B(10, 12, ACKED, 1)], 7) == [
        B(7, 9, AVAILABLE, 1), B(10, 12, ACKED, 1)]
    assert combine([B(0, 4, ACKED, 1)], [], 5) == []


def test_minus_one_start_offset_keeps_everything() -> None:
    assert combine([B(0, 4, ACKED, 1)], [B(2, 3, ACKED, 1)], -1) == [B(0, 4, ACKED, 1)]


def test_overlap_goes_to_the_higher_delivery_count_then_state() -> None:
    so_far = [B(0, 9, AVAILABLE, 1)]
    # a redelivery (count 2) wins over the stored count 1, whatever the state
    assert combine(so_far, [B(3, 5, AVAILABLE, 2)], 0) == [
        B(0, 2, AVAILABLE, 1), B(3, 5, AVAILABLE, 2), B(6, 9, AVAILABLE, 1)]
    # same count: the higher state (acknowledged over available)
    assert combine(so_far, [B(3, 5, ACKED, 1)], 0) == [
        B(0, 2, AVAILABLE, 1), B(3, 5, ACKED, 1), B(6, 9, AVAILABLE, 1)]
    # an older state never wins back the offsets
    assert combine([B(0, 9, ACKED, 2)], [B(3, 5, AVAILABLE, 1)], 0) == [B(0, 9, ACKED, 2)]


def test_neighbours_with_the_same_state_are_joined() -> None:
    assert combine([B(0, 4, ACKED, 1)], [B(5, 9, ACKED, 1), B(10, 10, ARCHIVED, 1)], 0) == [
        B(0, 9, ACKED, 1), B(10, 10, ARCHIVED, 1)]


def test_unsorted_input_gives_sorted_output() -> None:
    assert combine([B(20, 29, AVAILABLE, 1)], [B(0, 9, ACKED, 1), B(10, 19, ARCHIVED, 3)], 0) == [
        B(0, 9, ACKED, 1), B(10, 19, ARCHIVED, 3), B(20, 29, AVAILABLE, 1)]


def test_gaps_stay_gaps() -> None:
    assert combine([B(0, 1, ACKED, 1)], [B(5, 6, ACKED, 1)], 0) == [
        B(0, 1, ACKED, 1), B(5, 6, ACKED, 1)]


def test_redelivery_delay_end_rides_along_and_the_latest_wins() -> None:
    # a release with a delay (Strom's not_before_ms) replaces the stored state of its offsets
    assert combine([B(0, 9, ACKED, 1)], [B(3, 4, AVAILABLE, 2, 5000)], 0) == [
        B(0, 2, ACKED, 1), B(3, 4, AVAILABLE, 2, 5000), B(5, 9, ACKED, 1)]
    # same count and state: the later end of the delay wins; runs differing in it stay apart
    assert combine([B(0, 4, AVAILABLE, 2, 5000)], [B(2, 6, AVAILABLE, 2, 7000)], 0) == [
        B(0, 1, AVAILABLE, 2, 5000), B(2, 6, AVAILABLE, 2, 7000)]
    # a redelivery (higher count) wins, delay or not
    assert combine([B(0, 4, AVAILABLE, 2, 5000)], [B(0, 4, AVAILABLE, 3)], 0) == [
        B(0, 4, AVAILABLE, 3)]
