"""Spark reads the Iceberg table an Iceberg topic's writer made (issue 33 point 3: Spark,
pyiceberg and DuckDB read the same table in `make test`): Spark's Iceberg runtime on PySpark 4.1
(compat/spark_iceberg.py's cached virtualenv), its JdbcCatalog on the SQLite file pyiceberg's
SqlCatalog wrote. The lake load itself, on a standalone cluster with kill -9 and two loads at
once, is test_iceberg_lake_load.py (make test-iceberg-load).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from strom.lake import duckdb as lake_duckdb
from strom.lake.mapping import Batch, Row
from strom.lake.settings import Handoff, LakeSettings
from strom.lake.writer import TopicTable, open_catalog

_PATH = Path(__file__).resolve().parents[3] / "compat" / "spark_iceberg.py"
_spec = importlib.util.spec_from_file_location("compat_spark_iceberg", _PATH)
assert _spec is not None and _spec.loader is not None
spark_iceberg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(spark_iceberg)

# A fresh machine makes the virtualenv (PyPI) and fetches the jars (Maven) first.
pytestmark = [pytest.mark.timeout(
    120 + (0 if spark_iceberg.is_cached() else
           spark_iceberg.INSTALL_TIMEOUT + spark_iceberg.dist.FETCH_TIMEOUT))]

READ = """
import json, sys
from pyspark.sql import SparkSession
db, warehouse, jars = sys.argv[1:4]
catalog = "spark.sql.catalog.strom"
spark = (SparkSession.builder.master("local[1]").appName("iceberg-read")
         .config("spark.jars", jars)
         .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
         .config("spark.ui.enabled", "false")
         .config(catalog, "org.apache.iceberg.spark.SparkCatalog")
         .config(catalog + ".type", "jdbc").config(catalog + ".uri", "jdbc:sqlite:" + db)
         .config(catalog + ".jdbc.schema-version", "V1")
         .config(catalog + ".warehouse", warehouse).getOrCreate())
rows = spark.sql("SELECT `partition`, `offset`, key, value, headers FROM strom.strom.events "
                 "ORDER BY `partition`, `offset`").collect()
print(json.dumps([[r[0], r[1], bytes(r[2]).decode(), bytes(r[3]).decode(),
                   [[h["name"], bytes(h["value"]).decode()] for h in r[4]]] for r in rows]))
spark.stop()
"""


def test_spark_reads_the_table_pyiceberg_and_duckdb_read(tmp_path: Path) -> None:
    python, jars = spark_iceberg.ensure_all()  # a missing tool fails here, one line
    settings = LakeSettings.of(Handoff({"log.dirs": str(tmp_path)}, "127.0.0.1:9092"))
    table = TopicTable(open_catalog(settings), settings.namespace, "events")
    table.open()
    batch = Batch()
    batch.clear({})
    for offset in range(20):  # two days of records, in two partitions
        batch.add(Row(offset % 2, offset // 2, 1_700_000_000_000 + offset * 3_600_000,
                      f"k{offset}".encode(), f"v{offset}".encode(), (("n", b"%d" % offset),)))
    table.commit(batch)
    assert table.table is not None
    expected: list[list[Any]] = sorted(
        [r["partition"], r["offset"], r["key"].decode(), r["value"].decode(),
         [[h["name"], h["value"].decode()] for h in r["headers"]]]
        for r in table.table.scan().to_arrow().to_pylist())
    assert len(expected) == 20

    props = settings.catalog_properties
    db = props["uri"][len("sqlite:///"):]
    proc = subprocess.run(
        [str(python), "-c", READ, db, props["warehouse"], ",".join(str(j) for j in jars)],
        capture_output=True, text=True, timeout=110, env=spark_iceberg.child_env(python),
        stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected

    read = lake_duckdb.scan(lake_duckdb.connect(), table.table.metadata_location)
    assert sorted([r["partition"], r["offset"], r["key"].decode(), r["value"].decode(),
                   [[h["name"], h["value"].decode()] for h in r["headers"]]]
                  for r in read.to_pylist()) == expected
