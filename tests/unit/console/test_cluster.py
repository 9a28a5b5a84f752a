"""The snapshots' arithmetic: lag, totals, sizes."""

from __future__ import annotations

from strom.console.cluster import (
    MemberInfo,
    PartitionInfo,
    PartitionLag,
    TopicInfo,
    human_bytes,
    lag_of,
    total_lag,
)


def test_lag_of() -> None:
    assert lag_of(4, 10) == 6
    assert lag_of(10, 10) == 0
    assert lag_of(12, 10) == 0  # committed past a truncated log end: no negative lag
    assert lag_of(None, 10) is None and lag_of(-1, 10) is None and lag_of(3, None) is None


def test_total_lag_counts_known_lags() -> None:
    lags = [PartitionLag("t", 0, 4, 10, None), PartitionLag("t", 1, None, 10, "c"),
            PartitionLag("t", 2, 1, 3, "c")]
    assert [p.lag for p in lags] == [6, None, 2]
    assert total_lag(lags) == 8


def test_topic_totals() -> None:
    parts = (PartitionInfo(0, 1, (1, 2), (1, 2), 0, 10, 100),
             PartitionInfo(1, 2, (2, 1), (2,), 5, 8, 50))
    topic = TopicInfo("t", False, parts)
    assert (topic.replication_factor, topic.messages, topic.size, topic.end_offsets) == \
        (2, 13, 150, 18)
    assert [p.under_replicated for p in parts] == [False, True]
    unknown = TopicInfo("u", False, (PartitionInfo(0, None, (1,), (), None, None, None),))
    assert (unknown.messages, unknown.size, unknown.end_offsets) == (None, None, 0)
    assert TopicInfo("empty", False, ()).replication_factor == 0


def test_member_assignment_text() -> None:
    m = MemberInfo("m-1", "c", "/127.0.0.1", None, (("b", 1), ("a", 2), ("b", 0)))
    assert m.assignment_text == "a [2], b [0, 1]"


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (None, 0, 1023, 1536, 5 * 1024**3)] == \
        ["-", "0 B", "1023 B", "1.5 KiB", "5.0 GiB"]
