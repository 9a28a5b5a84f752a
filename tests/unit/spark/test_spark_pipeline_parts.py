"""Pipeline pieces that need no Spark: the click generator and the lake-load commit protocol."""

from __future__ import annotations

import json
from pathlib import Path

from strom.pipelines import lake_load
from strom.pipelines.clicks import (
    DAY_MS,
    MINUTE_MS,
    expected_counts,
    generate_events,
    iso_ms,
)


def test_generator_is_deterministic_and_mixes_in_invalid_events():
    a = list(generate_events(500, orgs=3, seed=1, start_ms=0, invalid_ratio=0.1))
    b = list(generate_events(500, orgs=3, seed=1, start_ms=0, invalid_ratio=0.1))
    assert a == b
    assert a != list(generate_events(500, orgs=3, seed=2, start_ms=0, invalid_ratio=0.1))
    invalid = [e for e in a if not e.valid]
    assert 20 < len(invalid) < 90
    for e in a:
        assert e.key == e.org_id.encode()
        if e.valid:
            body = json.loads(e.value)
            assert body["org_id"] == e.org_id and body["ts"] == iso_ms(e.ts_ms)
            assert body["url"].startswith("https://")
    assert {e.org_id for e in a} == {"org-000", "org-001", "org-002"}


def test_expected_counts_by_minute_and_day():
    events = list(generate_events(3, orgs=1, seed=0, start_ms=DAY_MS - MINUTE_MS,
                                  spacing_ms=40_000, invalid_ratio=0))
    # 23:59:00, 23:59:40 on day 0 and 00:00:20 on day 1
    assert expected_counts(events) == {
        ("minute", "org-000", DAY_MS - MINUTE_MS): 2,
        ("minute", "org-000", DAY_MS): 1,
        ("day", "org-000", 0): 2,
        ("day", "org-000", DAY_MS): 1,
    }


def test_iso_ms():
    assert iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"


def touch(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_recover_discards_uncommitted_and_publishes_committed_loads(tmp_path):
    out = tmp_path / "lake"
    touch(out / "_strom_loads" / "dead" / "date=2026-01-01" / "part-0.parquet")
    touch(out / "_strom_loads" / "done" / "date=2026-01-02" / "part-1.parquet", "data")
    touch(out / "_strom_loads" / "done" / "_SUCCESS")
    lake_load._write_commit(out, {"load_id": "done", "start": {}, "end": {"t": {"0": 5}}})

    lake_load.recover(out)
    assert not (out / "_strom_loads" / "dead").exists()
    assert not (out / "_strom_loads" / "done").exists()
    assert (out / "date=2026-01-02" / "part-1.parquet").read_text() == "data"
    assert not (out / "date=2026-01-01").exists()
    lake_load.recover(out)  # idempotent
    assert (out / "date=2026-01-02" / "part-1.parquet").exists()


def test_commit_records_are_sequential_and_the_newest_wins(tmp_path):
    out = tmp_path / "lake"
    assert lake_load.loaded_offsets(out) == {}
    first = lake_load._write_commit(out, {"load_id": "a", "end": {"t": {"0": 3, "1": 4}}})
    second = lake_load._write_commit(out, {"load_id": "b", "end": {"t": {"0": 7, "1": 4}}})
    assert (first.name, second.name) == ("000000000000.json", "000000000001.json")
    assert lake_load.loaded_offsets(out) == {("t", 0): 7, ("t", 1): 4}
    assert lake_load.last_commit(out)["load_id"] == "b"
    assert not list((out / "_strom_offsets").glob("*.tmp"))
