"""From records to table rows, and the offsets a snapshot covers: pure logic, no pyiceberg.

A `key_value` table has one row per record: `partition` (int), `offset` (long), `timestamp`
(timestamptz, microseconds; the table is partitioned by its day), `key` and `value` (binary,
null for a null key or value) and `headers` (a list of name/value structs)."""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, NamedTuple

OFFSETS_PROPERTY = "strom.offsets"  # snapshot summary: {"<partition>": <next offset>, ...}
TOPIC_PROPERTY = "strom.topic"
RETRIES_PROPERTY = "commit.retry.num-retries"  # pyiceberg's; 0: a conflict is never re-applied


class Row(NamedTuple):
    """One record as read (a tuple: the writer makes one per record, so it must be cheap)."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    decoded: Any = None  # the value as the table's value column takes it (value_schema mode)


def parse_offsets(summary: Mapping[str, str] | None) -> dict[int, int]:
    """The next offset per partition a snapshot's summary records ({} when none)."""
    if not summary:
        return {}
    text = summary.get(OFFSETS_PROPERTY)
    if not text:
        return {}
    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError(f"{OFFSETS_PROPERTY} is not a JSON object: {text!r}")
    return {int(p): int(o) for p, o in found.items()}


def format_offsets(offsets: Mapping[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())}, separators=(",", ":"))


@dataclass
class Batch:
    """The records read from one topic since its last commit, and the offsets they start from
    (the table's offsets when they were read)."""

    base: dict[int, int] = field(default_factory=dict)  # next offset per partition, at start
    rows: list[Row] = field(default_factory=list)
    next: dict[int, int] = field(default_factory=dict)  # next offset per partition read
    owned: frozenset[int] | None = None  # the partitions this writer reads (None: any)
    size: int = 0  # bytes of keys and values held

    def add(self, row: Row) -> bool:
        """Takes a record read; False (and not taken) if it is before what the batch already
        holds for its partition (read again after a seek)."""
        expected = self.next.get(row.partition, self.base.get(row.partition, 0))
        if row.offset < expected:
            return False
        self.rows.append(row)
        self.next[row.partition] = row.offset + 1
        self.size += len(row.key or b"") + len(row.value or b"")
        return True

    def partitions(self) -> set[int]:
        """The partitions whose offsets in the table this batch depends on."""
        return set(self.owned) if self.owned is not None else {*self.base, *self.next}

    def fits(self, stored: Mapping[int, int]) -> bool:
        """Whether the table still covers exactly this batch's base, for its partitions (other
        partitions may be written by other writers, e.g. other brokers leading them)."""
        return all(stored.get(p) == self.base.get(p) for p in self.partitions())

    def cut(self, partition: int, offset: int) -> None:
        """Drops the partition's records from `offset` on: the batch covers it up to there."""
        self.rows = [r for r in self.rows if r.partition != partition or r.offset < offset]
        self.next[partition] = offset

    def moved(self) -> bool:
        """Whether a commit would cover more than the base (records read, even if none of
        them is a row: all went to a dead-letter topic)."""
        return any(o != self.base.get(p) for p, o in self.next.items())

    def offsets(self, stored: Mapping[int, int] | None = None) -> dict[int, int]:
        """What the table covers once this batch is committed on top of `stored`."""
        return {**(stored or {}), **self.base, **self.next}

    def clear(self, base: Mapping[int, int]) -> None:
        self.base = {p: o for p, o in base.items()
                     if self.owned is None or p in self.owned}
        self.rows = []
        self.next = {}
        self.size = 0

    def __len__(self) -> int:
        return len(self.rows)


def arrow_schema() -> Any:
    import pyarrow as pa

    header = pa.struct([pa.field("name", pa.string(), nullable=False),
                        pa.field("value", pa.binary(), nullable=True)])
    return pa.schema([
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("key", pa.binary(), nullable=True),
        pa.field("value", pa.binary(), nullable=True),
        pa.field("headers", pa.list_(pa.field("element", header, nullable=False)),
                 nullable=True),
    ])


def binary_array(values: Sequence[bytes | None]) -> Any:
    """A binary Arrow array of the values (None: null), its bytes copied once: pyarrow's
    converter grows its buffer by doubling, so a batch of 16 MiB briefly took 48 MiB (and
    the allocator kept it)."""
    import pyarrow as pa

    lengths = [len(v) if v is not None else 0 for v in values]
    if sum(lengths) >= 1 << 31:  # beyond 32-bit offsets: pyarrow's way (chunks)
        return pa.array(values, pa.binary())
    offsets = array("i", accumulate(lengths, initial=0))
    nulls = sum(v is None for v in values)
    valid = pa.array([v is not None for v in values]).buffers()[1] if nulls else None
    return pa.Array.from_buffers(pa.binary(), len(values), [
        valid, pa.py_buffer(offsets), pa.py_buffer(b"".join(v for v in values if v))], nulls)


def arrow_table(rows: Sequence[Row]) -> Any:
    import pyarrow as pa

    schema = arrow_schema()
    return pa.Table.from_arrays([
        pa.array([r.partition for r in rows], pa.int32()),
        pa.array([r.offset for r in rows], pa.int64()),
        pa.array([r.timestamp_ms * 1000 for r in rows], schema.field("timestamp").type),
        binary_array([r.key for r in rows]),
        binary_array([r.value for r in rows]),
        pa.array([[{"name": n, "value": v} for n, v in r.headers] for r in rows],
                 schema.field("headers").type),
    ], schema=schema)


def row_dicts(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Rows as pyarrow's from_pylist takes them, with each value decoded (value_schema mode)."""
    return [{"partition": r.partition, "offset": r.offset, "timestamp": r.timestamp_ms * 1000,
             "key": r.key, "value": r.decoded,
             "headers": [{"name": n, "value": v} for n, v in r.headers]} for r in rows]
