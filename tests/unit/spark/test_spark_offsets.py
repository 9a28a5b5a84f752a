"""Offset JSON, admission control and range planning (pure functions)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.spark.offsets import (
    OffsetRange,
    backlog,
    from_json_dict,
    plan_stream_ranges,
    rate_limit,
    split_ranges,
    to_json_dict,
)


def test_json_is_canonical_whatever_the_insertion_order():
    a = {("b", 10): 5, ("a", 2): 1, ("b", 9): 3, ("a", 10): 0}
    b = dict(reversed(list(a.items())))
    assert json.dumps(to_json_dict(a)) == json.dumps(to_json_dict(b))
    assert json.dumps(to_json_dict(a)) == '{"a": {"2": 1, "10": 0}, "b": {"9": 3, "10": 5}}'
    assert from_json_dict(json.loads(json.dumps(to_json_dict(a)))) == a


def no_new(tps):
    raise AssertionError(f"no new partitions expected, asked for {tps}")


def test_rate_limit_splits_in_proportion_to_backlog():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 0}
    latest = {("t", 0): 1000, ("t", 1): 600, ("t", 2): 3}
    out = rate_limit(100, start, latest, no_new)
    # backlogs 1000, 500, 3 of 1503: shares 66.5 -> 66, 33.3 -> 33, 0.2 -> 1 (never starved)
    assert out == {("t", 0): 66, ("t", 1): 133, ("t", 2): 1}


def test_rate_limit_never_passes_latest_and_keeps_idle_partitions():
    start = {("t", 0): 10, ("t", 1): 50}
    latest = {("t", 0): 12, ("t", 1): 50}
    assert rate_limit(1000, start, latest, no_new) == latest
    assert rate_limit(1, {("t", 0): 5}, {("t", 0): 5}, no_new) == {("t", 0): 5}


def test_rate_limit_reads_new_partitions_from_their_earliest_offset():
    asked = []

    def earliest(tps):
        asked.extend(tps)
        return {tp: 40 for tp in tps}

    out = rate_limit(10, {("t", 0): 0}, {("t", 0): 100, ("u", 0): 140}, earliest)
    assert asked == [("u", 0)]
    assert out == {("t", 0): 5, ("u", 0): 45}


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), min_size=1,
                max_size=12), st.integers(1, 50_000))
def test_rate_limit_properties(spans, limit):
    start = {("t", i): a for i, (a, _) in enumerate(spans)}
    latest = {("t", i): a + b for i, (a, b) in enumerate(spans)}
    out = rate_limit(limit, start, latest, no_new)
    assert set(out) == set(latest)
    for tp in latest:
        assert start[tp] <= out[tp] <= latest[tp]
        if latest[tp] > start[tp]:
            assert out[tp] > start[tp]  # nobody starves
    # the total stays within the limit, except for the at-most-one offset given to each tiny share
    assert sum(out[tp] - start[tp] for tp in out) <= limit + len(out)


def test_backlog():
    assert backlog({("t", 0): 5}, {("t", 0): 9, ("u", 0): 3}) == 7


def plan(start, end, earliest=None, fail=True):
    losses = []

    def report(message):
        losses.append(message)
        if fail:
            raise RuntimeError(message)

    def lookup(tps):
        if earliest is None:  # every new partition exists and starts at 0
            return {tp: 0 for tp in tps}
        return {tp: earliest[tp] for tp in tps if tp in earliest}

    return plan_stream_ranges(start, end, lookup, report), losses


def test_plan_reads_known_and_new_partitions():
    ranges, losses = plan({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4})
    assert ranges == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 0, 4)]
    assert losses == []


@pytest.mark.parametrize("start, end, earliest, words", [
    ({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, {("t", 1): 2}, "starts from 2 instead of 0"),
    ({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, {}, "Cannot find earliest offsets"),
    ({("t", 0): 5, ("t", 1): 1}, {("t", 0): 9}, None, "are gone"),
    ({("t", 0): 9}, {("t", 0): 3}, None, "offset was changed from 9 to 3"),
])
def test_plan_reports_data_loss(start, end, earliest, words):
    with pytest.raises(RuntimeError, match=words):
        plan(start, end, earliest)
    ranges, losses = plan(start, end, earliest, fail=False)
    assert any(words in m for m in losses)
    assert all(r.tp in end for r in ranges)


def test_split_without_options_is_one_range_per_partition_and_drops_empty():
    rs = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 9, 3)]
    assert split_ranges(rs) == [OffsetRange("t", 0, 0, 10)]


def test_split_min_partitions_divides_the_big_ranges():
    rs = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10)]
    out = split_ranges(rs, min_partitions=4)
    assert OffsetRange("t", 1, 0, 10) in out  # small ranges stay whole
    big = sorted(r for r in out if r.partition == 0)
    assert len(big) == 3
    assert big[0].start == 0 and big[-1].end == 1000
    assert all(a.end == b.start for a, b in itertools.pairwise(big))


def test_split_max_records_per_partition():
    out = split_ranges([OffsetRange("t", 0, 0, 10)], max_records_per_partition=4)
    assert [(r.start, r.end) for r in out] == [(0, 3), (3, 6), (6, 10)]


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=8), st.integers(1, 40),
       st.one_of(st.none(), st.integers(1, 3000)))
def test_split_covers_every_offset_once(sizes, min_parts, max_records):
    rs = [OffsetRange("t", i, 100, 100 + s) for i, s in enumerate(sizes)]
    out = split_ranges(rs, min_partitions=min_parts, max_records_per_partition=max_records)
    for r in rs:
        pieces = sorted((x.start, x.end) for x in out if x.partition == r.partition)
        if r.size == 0:
            assert pieces == []
            continue
        assert pieces[0][0] == r.start and pieces[-1][1] == r.end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
        assert all(e > s for s, e in pieces)
        if max_records:
            assert all(e - s <= max_records for s, e in pieces)
