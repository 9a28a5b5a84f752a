"""What the Iceberg topic tests share: the records they produce, and a wait until a table holds
every delivered record exactly once (whatever catalog reaches it)."""

from __future__ import annotations

import json
import time

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from strom.lake import duckdb as lake_duckdb

from .. import clients as kc

T = 45.0  # an upper bound: the writer runs at a low CPU priority, starved on a busy machine


def messages(start: int, count: int) -> list[kc.Msg]:
    return [kc.Msg(f"k{i}".encode(), f"v{i}".encode(), [("n", f"{i}".encode())],
                   partition=i % 2) for i in range(start, start + count)]


def table_offsets(catalog: Catalog, topic: str) -> dict[str, int] | None:
    """The table's current snapshot's strom.offsets (None before a commit): cheap, no data
    file is read."""
    try:
        table = catalog.load_table(("strom", topic))
    except NoSuchTableError:
        return None
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return None
    offsets = snapshot.summary["strom.offsets"]
    return json.loads(offsets) if offsets else None


def table_rows(catalog: Catalog, topic: str) -> tuple[list[dict], dict[str, int] | None]:
    """The table's rows and its current snapshot's strom.offsets (nothing before a commit)."""
    try:
        table = catalog.load_table(("strom", topic))
    except NoSuchTableError:
        return [], None
    snapshot = table.current_snapshot()
    if snapshot is None:
        return [], None
    offsets = snapshot.summary["strom.offsets"] if snapshot.summary is not None else None
    return table.scan().to_arrow().to_pylist(), json.loads(offsets) if offsets else None


def wait_exactly(catalog: Catalog, topic: str, delivered: list[kc.Msg]) -> list[dict]:
    """Until the table holds every delivered record once (and nothing else). It polls the
    snapshot's offsets, which cost no data file, and reads the rows once they cover every
    delivered record: a row written twice or never produced is still there then."""
    want = {(m.partition, m.offset) for m in delivered}
    ends: dict[str, int] = {}
    for m in delivered:
        assert m.partition is not None and m.offset is not None
        ends[str(m.partition)] = max(ends.get(str(m.partition), 0), m.offset + 1)
    deadline = time.monotonic() + T
    while True:
        offsets = table_offsets(catalog, topic)
        covered = offsets is not None and all(offsets.get(p, 0) >= end
                                              for p, end in ends.items())
        if covered or time.monotonic() >= deadline:
            found, offsets = table_rows(catalog, topic)
            keys = [(r["partition"], r["offset"]) for r in found]
            assert len(keys) == len(set(keys)), "a record was written twice"
            assert set(keys) <= want, "a row that was never produced"
            if len(keys) == len(want):
                assert offsets == ends
                return found
            assert time.monotonic() < deadline, f"{len(keys)} of {len(want)} records in the table"
        time.sleep(0.1)  # poll interval, not synchronisation


def duckdb_rows(catalog: Catalog, topic: str) -> list[dict]:
    """The table's rows as DuckDB reads them (from its current metadata file, extensions from
    their wheels), by partition and offset."""
    table = catalog.load_table(("strom", topic))
    read = lake_duckdb.scan(lake_duckdb.connect(), table.metadata_location)
    return read.sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()
