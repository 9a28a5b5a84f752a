"""Records as the console shows them: bytes decoded for a person, times parsed and printed.

Keys, values and headers are arbitrary bytes (possibly hostile HTML): they are decoded as UTF-8
with replacement characters and truncated here, and escaped by the templates (autoescape).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

MAX_TEXT = 400  # characters of a key, value or header value shown


class KafkaMessage(Protocol):
    """The parts of confluent_kafka.Message the console reads."""

    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> bytes | str | None: ...
    def value(self) -> bytes | str | None: ...
    def headers(
        self,
    ) -> list[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None: ...


@dataclass(frozen=True)
class RecordView:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: str | None
    value: str | None
    value_size: int
    headers: tuple[tuple[str, str | None], ...]

    @property
    def time(self) -> str:
        return iso_time(self.timestamp_ms) if self.timestamp_ms is not None else ""


def text_of(data: bytes | str | None, limit: int = MAX_TEXT) -> str | None:
    """UTF-8 with replacement characters, cut at `limit` characters (marked with an ellipsis)."""
    if data is None:
        return None
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "…"


def record_view(msg: KafkaMessage) -> RecordView:
    ts_type, ts = msg.timestamp()
    value = msg.value()
    return RecordView(
        partition=msg.partition() or 0,
        offset=msg.offset() or 0,
        timestamp_ms=ts if ts_type != 0 and ts >= 0 else None,  # 0: TIMESTAMP_NOT_AVAILABLE
        key=text_of(msg.key()),
        value=text_of(value),
        value_size=len(value) if value is not None else 0,
        headers=tuple((name, text_of(v)) for name, v in _header_items(msg)),
    )


def _header_items(msg: KafkaMessage) -> Iterable[tuple[str, str | bytes | None]]:
    """A consumed message's headers are a list; a dict (as a producer may give) works too."""
    headers = msg.headers()
    if isinstance(headers, dict):
        return headers.items()
    return headers or ()


def newest(records: Iterable[RecordView], limit: int) -> list[RecordView]:
    """The `limit` latest records of several partitions, newest first (by time, then offset)."""
    key = lambda r: (r.timestamp_ms or -1, r.offset, r.partition)  # noqa: E731
    return sorted(records, key=key, reverse=True)[:limit]


def oldest(records: Iterable[RecordView], limit: int) -> list[RecordView]:
    """The `limit` earliest records of several partitions, oldest first (a search's answer)."""
    return sorted(records, key=lambda r: (r.timestamp_ms or -1, r.partition, r.offset))[:limit]


def tail_start(start: int, end: int, count: int) -> int:
    """The first offset of a partition's last `count` records (offsets start..end-1)."""
    return max(start, end - count)


def iso_time(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 in UTC, to the millisecond."""
    when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> int:
    """ISO 8601 (a time without a zone is UTC) or milliseconds since the epoch -> milliseconds.

    Raises ValueError with a message fit for the page."""
    text = text.strip()
    if text.isdigit() and len(text) <= 15:  # up to the year 33658
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time or epoch milliseconds: {text[:40]!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise ValueError(f"a time before 1970 has no records: {text[:40]!r}")
    return ms
