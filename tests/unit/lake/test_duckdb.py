"""DuckDB reads a table the lake writer wrote (pyiceberg's SqlCatalog on a SQLite file) row for
row as pyiceberg does, with its extensions loaded from their wheels and nothing downloaded."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from strom.config.broker import BrokerConfig
from strom.lake import duckdb as lake_duckdb
from strom.lake.mapping import Batch, Row
from strom.lake.settings import Handoff, LakeSettings
from strom.lake.writer import TopicTable, open_catalog


def _table(tmp_path: Path):
    config = {"log.dirs": str(tmp_path), "iceberg.enable": "true"}
    BrokerConfig.load(None, config)
    settings = LakeSettings.of(Handoff(config, "127.0.0.1:9092"))
    table = TopicTable(open_catalog(settings), settings.namespace, "orders.eu")
    stored = table.open()
    for partition, offsets in ((0, range(0, 3)), (1, range(0, 2)), (0, range(3, 5))):
        batch = Batch()
        batch.clear(stored)
        for o in offsets:  # two days (two table partitions), a null key, headers
            batch.add(Row(partition, o, 1_700_000_000_000 + o * 86_400_000,
                          None if o == 1 else b"k%d" % o, b"v%d" % o,
                          (("trace", b"t%d" % o), ("empty", None))))
        stored = table.commit(batch)
    assert table.table is not None
    return table.table


def test_duckdb_reads_the_rows_pyiceberg_reads(tmp_path: Path) -> None:
    table = _table(tmp_path)
    connection = lake_duckdb.connect()
    order = [("partition", "ascending"), ("offset", "ascending")]
    read = lake_duckdb.scan(connection, table.metadata_location).sort_by(order)
    expected = table.scan().to_arrow().sort_by(order)
    assert read.num_rows == 7
    assert read.to_pylist() == expected.to_pylist()
    assert read.column_names == ["partition", "offset", "timestamp", "key", "value", "headers"]
    some = lake_duckdb.scan(connection, table.metadata_location, ("offset", "key"))
    assert some.column_names == ["offset", "key"]
    assert sorted(some.to_pylist(), key=lambda r: (r["offset"], r["key"] or b""))[:3] == [
        {"offset": 0, "key": b"k0"}, {"offset": 0, "key": b"k0"}, {"offset": 1, "key": None}]


def test_nothing_is_downloaded(tmp_path: Path) -> None:
    connection = lake_duckdb.connect()
    settings = connection.sql(
        "SELECT current_setting('autoinstall_known_extensions'),"
        " current_setting('autoload_known_extensions')").fetchall()
    assert settings == [(False, False)]
    loaded = connection.sql(
        "SELECT extension_name, install_mode FROM duckdb_extensions()"
        " WHERE extension_name IN ('avro', 'iceberg') AND loaded ORDER BY 1").fetchall()
    assert loaded == [("avro", "NOT_INSTALLED"), ("iceberg", "NOT_INSTALLED")]  # from the wheels
    # a query that needs an extension not loaded fails instead of fetching it
    with pytest.raises(duckdb.Error, match="requires the extension httpfs"):
        connection.sql("SELECT * FROM read_csv('https://example.invalid/a.csv')").fetchall()
    for name in lake_duckdb.EXTENSIONS:
        path = lake_duckdb.extension_path(name)
        assert path.name == f"{name}.duckdb_extension" and f"v{duckdb.__version__}" in path.parts


def test_a_missing_extension_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lake_duckdb, "EXTENSIONS", ("avro", "no_such_thing"))
    with pytest.raises(lake_duckdb.DuckDBUnavailable,
                       match=r"duckdb-extension-no_such_thing\).*strom\[iceberg\]"):
        lake_duckdb.connect()
    monkeypatch.setattr(duckdb, "__version__", "0.0.1")
    with pytest.raises(lake_duckdb.DuckDBUnavailable, match=r"no extension for duckdb 0\.0\.1"):
        lake_duckdb.extension_path("iceberg")
