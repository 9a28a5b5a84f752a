"""The Iceberg lake load's pieces that need no Spark session (issue 33 point 1): Avro schemas
to table column types, the catalog's Spark settings, and the PySpark 4.1 stand-ins."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pytest

from strom.pipelines.iceberg_load import (
    AvroDecoder,
    IcebergLoadConfig,
    IcebergLoadError,
    avro_to_ddl,
    spark_conf,
    sqlite_path,
    table_ddl,
)

CLICK = {"type": "record", "name": "Click", "namespace": "shop", "fields": [
    {"name": "user", "type": "string"},
    {"name": "n", "type": ["null", "long"]},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                               "scale": 2}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "double"}},
    {"name": "from", "type": {"type": "record", "name": "Ref", "fields": [
        {"name": "page", "type": "string"}]}},
    {"name": "back", "type": ["null", "Ref"]},
]}


def test_avro_records_become_structs() -> None:
    assert avro_to_ddl(CLICK) == (
        "STRUCT<`user`: STRING, `n`: BIGINT, `at`: TIMESTAMP, `day`: DATE, "
        "`price`: DECIMAL(9,2), `id`: STRING, `kind`: STRING, `tags`: ARRAY<STRING>, "
        "`attrs`: MAP<STRING, DOUBLE>, `from`: STRUCT<`page`: STRING>, "
        "`back`: STRUCT<`page`: STRING>>")


@pytest.mark.parametrize("schema", [["int", "string"], "Nowhere", {"type": "unknown"}])
def test_avro_types_without_a_column_type_are_refused(schema: object) -> None:
    with pytest.raises(IcebergLoadError):
        avro_to_ddl(schema)


def test_decoder_resolves_each_record_to_the_table_schema() -> None:
    old = {"type": "record", "name": "Click", "fields": [{"name": "user", "type": "string"}]}
    new = {"type": "record", "name": "Click", "fields": [
        {"name": "user", "type": "string"},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"},
         "default": "00000000-0000-0000-0000-000000000000"}]}
    decoder = AvroDecoder("http://registry.invalid", new)
    decoder._parsed[7] = fastavro.parse_schema(old)  # as if fetched for id 7
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(old), {"user": "ada"})
    assert decoder.decode(b"\x00" + (7).to_bytes(4, "big") + buf.getvalue()) == {
        "user": "ada", "id": "00000000-0000-0000-0000-000000000000"}
    assert decoder.decode(None) is None
    with pytest.raises(IcebergLoadError, match="wire format"):
        decoder.decode(b'{"user": "ada"}')


def test_catalog_settings_for_a_sqlite_file(tmp_path: Path) -> None:
    cfg = IcebergLoadConfig("b:9092", topic="web.clicks-v1",
                            catalog_uri=str(tmp_path / "catalog.db"),
                            warehouse=str(tmp_path / "wh"))
    conf = spark_conf(cfg)
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.uri"] == f"jdbc:sqlite:{tmp_path / 'catalog.db'}"
    assert conf["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"
    assert conf["spark.sql.catalog.lake.warehouse"] == (tmp_path / "wh").as_uri()
    assert "iceberg-spark-runtime-4.1_2.13" in conf["spark.jars.packages"]
    assert "spark.jars.packages" not in spark_conf(cfg, {"spark.jars": "/x.jar"})
    assert sqlite_path(IcebergLoadConfig("b", catalog_uri="jdbc:sqlite:/a/c.db")) == Path(
        "/a/c.db")
    assert cfg.qualified == "lake.strom.web_clicks_v1"
    ddl = table_ddl(cfg, "BINARY")
    assert "PARTITIONED BY (days(`timestamp`))" in ddl
    assert "value BINARY" in ddl and "headers" not in ddl


def test_a_rest_catalog_needs_its_uri() -> None:
    with pytest.raises(IcebergLoadError, match="URI"):
        spark_conf(IcebergLoadConfig("b", catalog_type="rest"))
    conf = spark_conf(IcebergLoadConfig("b", catalog_type="rest",
                                        catalog_uri="http://127.0.0.1:8181", warehouse=None))
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert "spark.sql.catalog.lake.warehouse" not in conf


def test_pyspark_41_stand_ins() -> None:
    from strom.spark import compat41

    assert isinstance(compat41.ReadMaxRows(5), compat41.ReadLimit)
    assert compat41.ReadMaxRows(5).max_rows == 5
    compat41.SupportsTriggerAvailableNow().prepareForTriggerAvailableNow()
