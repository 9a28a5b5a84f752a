"""Iceberg topics' pure logic: the offsets a snapshot's summary records, a batch of records
read since the last commit, rows as Arrow, the catalog properties from the broker's config."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from strom.config.broker import BrokerConfig
from strom.config.checks import check_startup
from strom.lake.mapping import (
    OFFSETS_PROPERTY,
    Batch,
    Row,
    arrow_table,
    format_offsets,
    parse_offsets,
)
from strom.lake.settings import Handoff, catalog_properties, local_catalog_paths


def test_offsets_round_trip_through_a_summary() -> None:
    text = format_offsets({1: 7, 0: 12})
    assert text == '{"0":12,"1":7}'
    assert parse_offsets({OFFSETS_PROPERTY: text, "operation": "append"}) == {0: 12, 1: 7}
    assert parse_offsets(None) == {}
    assert parse_offsets({"operation": "append"}) == {}
    with pytest.raises(ValueError):
        parse_offsets({OFFSETS_PROPERTY: "[1]"})


def test_a_batch_covers_its_base_plus_what_it_read() -> None:
    batch = Batch()
    batch.clear({0: 10, 1: 5})
    assert batch.add(Row(0, 10, 1, b"k", b"v"))
    assert batch.add(Row(0, 13, 1, None, None))  # a gap: transaction markers
    assert not batch.add(Row(0, 12, 1, None, None))  # read again after a seek: not taken
    assert not batch.add(Row(1, 4, 1, None, None))  # before the table's offset
    assert batch.add(Row(2, 0, 1, None, None))  # a partition the table has not seen yet
    assert len(batch) == 3
    assert batch.offsets() == {0: 14, 1: 5, 2: 1}
    batch.clear(batch.offsets())
    assert len(batch) == 0 and batch.base == {0: 14, 1: 5, 2: 1}


def test_a_batch_depends_only_on_its_partitions() -> None:
    batch = Batch(owned=frozenset({0}))
    batch.clear({0: 10, 1: 5})
    assert batch.base == {0: 10}
    assert batch.add(Row(0, 10, 1, b"k", b"vv"))
    assert batch.size == 3
    assert batch.fits({0: 10, 1: 99})  # partition 1 is another writer's
    assert not batch.fits({0: 11, 1: 5})
    assert not batch.fits({1: 5})  # partition 0 was written by someone: not from the start
    assert batch.offsets({0: 10, 1: 99}) == {0: 11, 1: 99}


def test_rows_as_arrow() -> None:
    table = arrow_table([Row(3, 42, 1_700_000_000_123, b"k", None, (("h", b"x"), ("n", None)))])
    row = table.to_pylist()[0]
    assert (row["partition"], row["offset"], row["key"], row["value"]) == (3, 42, b"k", None)
    assert row["timestamp"].timestamp() == pytest.approx(1_700_000_000.123)
    assert row["headers"] == [{"name": "h", "value": b"x"}, {"name": "n", "value": None}]


def test_catalog_properties_default_under_the_first_log_dir(tmp_path: Path) -> None:
    config = BrokerConfig.load(None, {"log.dirs": f"{tmp_path}/a,{tmp_path}/b",
                                      "iceberg.catalog.pool_pre_ping": "true"})
    props = catalog_properties(config)
    assert props["uri"] == f"sqlite:///{tmp_path}/a/iceberg/catalog.db"
    assert props["warehouse"] == f"file://{tmp_path}/a/iceberg/warehouse"
    assert props["schema_version"] == "v1" and props["pool_pre_ping"] == "true"
    assert "name" not in props
    assert local_catalog_paths(props) == [tmp_path / "a" / "iceberg",
                                          tmp_path / "a" / "iceberg" / "warehouse"]


def test_the_handoff_is_one_line() -> None:
    handoff = Handoff({"iceberg.enable": "true"}, "127.0.0.1:9092")
    line = handoff.to_line()
    assert line.endswith("\n") and line.count("\n") == 1
    assert Handoff.from_line(line) == handoff


def test_catalog_settings_passed_to_pyiceberg_are_not_warned_about(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="strom.config.checks"):
        check_startup(BrokerConfig.load(None, {"iceberg.catalog.pool_pre_ping": "true",
                                               "iceberg.no.such": "1"}))
    assert [r.getMessage() for r in caplog.records if r.name == "strom.config.checks"] == [
        "config iceberg.no.such is not used by Strom"]
