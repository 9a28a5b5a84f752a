"""Records as the console shows them: decoding, truncation, ordering, time parsing."""

from __future__ import annotations

import pytest

from strom.console.records import (
    MAX_TEXT,
    RecordView,
    iso_time,
    newest,
    oldest,
    parse_time,
    record_view,
    tail_start,
    text_of,
)


class FakeMessage:
    def __init__(self, partition: int, offset: int, ts: int, key: bytes | None,
                 value: bytes | None, headers: list[tuple[str, bytes | None]] | None) -> None:
        self._p, self._o, self._ts = partition, offset, ts
        self._k, self._v, self._h = key, value, headers

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts) if self._ts >= 0 else (0, -1)

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._h


def rec(partition: int, offset: int, ts: int | None) -> RecordView:
    return RecordView(partition, offset, ts, None, None, 0, ())


def test_text_is_utf8_with_replacement_and_truncated() -> None:
    assert text_of(None) is None
    assert text_of(b"caf\xc3\xa9") == "café"
    assert text_of(b"\xff\xfeok") == "\ufffd\ufffdok"
    long = text_of(b"x" * (MAX_TEXT + 5))
    assert long is not None and len(long) == MAX_TEXT + 1 and long.endswith("…")
    assert text_of("short", limit=3) == "sho…"


def test_record_view_keeps_hostile_text_as_text() -> None:
    """Escaping is the template's job (autoescape): the view keeps the characters as they are."""
    msg = FakeMessage(2, 7, 1_700_000_000_123, b"k", b"<script>alert(1)</script>",
                      [("h1", b"v"), ("h2", None)])
    view = record_view(msg)
    assert view == RecordView(2, 7, 1_700_000_000_123, "k", "<script>alert(1)</script>", 25,
                              (("h1", "v"), ("h2", None)))
    assert view.time == "2023-11-14T22:13:20.123Z"


def test_record_without_timestamp_key_or_value() -> None:
    view = record_view(FakeMessage(0, 0, -1, None, None, None))
    assert (view.timestamp_ms, view.key, view.value, view.value_size, view.headers, view.time) \
        == (None, None, None, 0, (), "")


def test_newest_and_oldest_merge_partitions() -> None:
    records = [rec(0, 5, 100), rec(1, 2, 300), rec(0, 6, 200), rec(1, 3, 300)]
    assert [(r.partition, r.offset) for r in newest(records, 3)] == [(1, 3), (1, 2), (0, 6)]
    assert [(r.partition, r.offset) for r in oldest(records, 2)] == [(0, 5), (0, 6)]


def test_tail_start() -> None:
    assert tail_start(0, 100, 20) == 80
    assert tail_start(90, 100, 20) == 90  # retention deleted the older ones
    assert tail_start(0, 0, 20) == 0


@pytest.mark.parametrize(("text", "ms"), [
    ("2023-11-14T22:13:20Z", 1_700_000_000_000),
    ("2023-11-14T22:13:20.5+00:00", 1_700_000_000_500),
    ("2023-11-14 23:13:20+01:00", 1_700_000_000_000),
    ("2023-11-14T22:13:20", 1_700_000_000_000),  # no zone: UTC
    ("1700000000000", 1_700_000_000_000),
])
def test_parse_time(text: str, ms: int) -> None:
    assert parse_time(text) == ms


@pytest.mark.parametrize("text", ["yesterday", "9" * 5000, "2026-13-01", ""])
def test_parse_time_refuses_other_text(text: str) -> None:
    with pytest.raises(ValueError, match="not an ISO 8601 time"):
        parse_time(text)


def test_parse_time_refuses_times_before_1970() -> None:
    with pytest.raises(ValueError, match="before 1970"):
        parse_time("1969-12-31T23:59:59Z")


def test_iso_time_round_trips() -> None:
    assert parse_time(iso_time(1_700_000_000_123)) == 1_700_000_000_123
