"""The lake load into Apache Iceberg (issue 33 point 1): `strom pipeline run lake-load --target
iceberg` writes a topic into an Iceberg table through Spark's Iceberg runtime, in the SQLite
catalog pyiceberg reads too, exactly once across restarts, a kill -9 of the driver and two runs
at once (the one that loses the race is fenced).

Maven Central serves Iceberg's Spark runtime for Spark 4.1 at the newest, and it does not load
on the project's PySpark 4.3: the pipeline runs in a virtualenv with PySpark 4.1.4
(compat/spark_iceberg.py, cached under ~/.cache/strom-compat after the first run), with Strom
from the repository's src. The runs go to a standalone Spark cluster started from that PySpark
(a master and a worker on 127.0.0.1: executors in JVMs of their own, their Python workers in the
virtualenv); each run's driver is a `strom` CLI process there. The table is read back with
pyiceberg's SqlCatalog on the same SQLite file, in that virtualenv too, and with DuckDB.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest

from strom.lake import duckdb as lake_duckdb

from ..registry.test_registry_api import http, registry_url, wait_ready
from .conftest import create_topic, produce, wait_for
from .standalone import DAEMON_JVM, Cluster


def _compat(name: str) -> Any:
    """A module of compat/ (not a package: loaded by path)."""
    path = Path(__file__).resolve().parents[3] / "compat" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"compat_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


spark_iceberg = _compat("spark_iceberg")
iceberg_rest = _compat("iceberg_rest")  # Iceberg's REST catalog on 127.0.0.1 (built on first use)

# A fresh machine makes the virtualenv (PyPI) and fetches the jars (Maven) in the first test.
pytestmark = [pytest.mark.iceberg_load_cluster, pytest.mark.timeout(
    300 + (0 if spark_iceberg.is_cached() else
           spark_iceberg.INSTALL_TIMEOUT + spark_iceberg.dist.FETCH_TIMEOUT)
    + (0 if iceberg_rest.is_cached() else
       iceberg_rest.dist.FETCH_TIMEOUT + iceberg_rest.COMPILE_TIMEOUT))]

SCHEMA = {"type": "record", "name": "Click", "namespace": "shop", "fields": [
    {"name": "user", "type": "string"},
    {"name": "n", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
DAY_MS = 86_400_000
T0 = 1_795_000_000_000 - 1_795_000_000_000 % DAY_MS  # a UTC midnight in 2026

READ_TABLE = """
import json, sys
from pyiceberg.catalog.sql import SqlCatalog
db, warehouse, name = sys.argv[1:4]
catalog = SqlCatalog("lake", uri=f"sqlite:///{db}", warehouse=warehouse)
table = catalog.load_table(name)
rows = table.scan(selected_fields=("partition", "offset", "timestamp", "value")).to_arrow()
values = rows.column("value").to_pylist()
print(json.dumps({
    "spec": [[str(f.transform), table.schema().find_column_name(f.source_id)]
             for f in table.spec().fields],
    "value_fields": [f.name for f in table.schema().find_field("value").field_type.fields],
    "rows": [[p, o, t.isoformat(), v["user"], v["n"], v["tags"], v["note"]]
             for p, o, t, v in zip(rows.column("partition").to_pylist(),
                                   rows.column("offset").to_pylist(),
                                   rows.column("timestamp").to_pylist(), values)],
    "snapshots": [dict(s.summary.additional_properties) for s in table.snapshots()],
    "metadata_location": table.metadata_location,
}))
"""


@pytest.fixture(scope="module")
def env() -> tuple[Path, list[Path]]:
    return spark_iceberg.ensure_all()  # a missing tool or failed install fails here, one line


@pytest.fixture(scope="module")
def spark41(env: tuple[Path, list[Path]], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    """A standalone master and worker started from the virtualenv's PySpark 4.1 (its executors
    and Python workers run there too)."""
    python, _ = env
    home = subprocess.run([str(python), "-c", "import os, pyspark; "
                           "print(os.path.dirname(pyspark.__file__))"], capture_output=True,
                          text=True, check=True, env=spark_iceberg.child_env(python),
                          timeout=60).stdout.strip()
    cluster = Cluster(tmp_path_factory.mktemp("spark41"), home=Path(home), python=str(python),
                      env=spark_iceberg.child_env(python), cores=2)
    try:
        cluster.start_worker()
        wait_for(lambda: cluster.alive_workers() == 1, "a PySpark 4.1 master and worker",
                 timeout=90)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def registry(make_module_broker) -> tuple[Any, str]:
    broker = make_module_broker({"schema.registry.listeners": "http://127.0.0.1:0",
                                 "metrics.listener": ""})
    url = registry_url(broker)
    wait_ready(url)
    return broker, url


def _avro(schema_id: int, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue()


def _records(schema_id: int, first: int, count: int) -> list[dict[str, Any]]:
    out = []
    for i in range(first, first + count):
        ts = T0 + (i % 3) * DAY_MS + i  # three days: three table partitions
        value = _avro(schema_id, {"user": f"u{i % 7}", "n": i, "at": ts,
                                  "tags": [f"t{i % 2}"], "note": None if i % 2 else f"n{i}"})
        out.append({"key": str(i).encode(), "value": value, "partition": i % 2, "timestamp": ts})
    return out


def _load_cmd(python: Path, jars: list[Path], bootstrap: str, topic: str, base: Path,
              registry: str, master: str, rest: str | None = None) -> list[str]:
    """The load's command: the catalog in base/catalog.db through Spark's JdbcCatalog, or
    through a REST catalog server over that file."""
    conf = {"spark.jars": ",".join(str(j) for j in jars),
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.extraJavaOptions": DAEMON_JVM,
            "spark.executor.extraJavaOptions": DAEMON_JVM,
            "spark.executor.memory": "512m", "spark.cores.max": "1"}  # two apps at once
    cmd = [str(python), "-c", "from strom.cli.main import main; main()",
           "pipeline", "run", "lake-load", "-b", bootstrap, "--topic", topic,
           "--target", "iceberg", "--catalog-uri", rest or str(base / "catalog.db"),
           "--catalog-type", "rest" if rest else "jdbc",
           "--warehouse", str(base / "warehouse"), "--schema-registry", registry,
           "--master", master]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd


def _run_load(cmd: list[str], python: Path, base: Path) -> str:
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=base,
                          env=spark_iceberg.child_env(python), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"lake-load failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    print(f"lake-load run: {time.monotonic() - began:.1f}s: {proc.stdout.strip()}")
    return proc.stdout


def _read_table(python: Path, base: Path, topic: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(python), "-c", READ_TABLE, str(base / "catalog.db"),
         (base / "warehouse").as_uri(), f"strom.{topic.replace('-', '_').replace('.', '_')}"],
        capture_output=True, text=True, timeout=120, env=spark_iceberg.child_env(python))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def _duckdb_rows(metadata_location: str) -> list[list[Any]]:
    """The table's rows as DuckDB reads them (in this process, its iceberg extension from the
    wheel), in READ_TABLE's shape."""
    read = lake_duckdb.scan(lake_duckdb.connect(), metadata_location,
                            ("partition", "offset", "timestamp", "value"))
    return [[r["partition"], r["offset"], r["timestamp"].isoformat(), r["value"]["user"],
             r["value"]["n"], r["value"]["tags"], r["value"]["note"]] for r in read.to_pylist()]


def _data_files(base: Path) -> int:
    return sum(1 for _ in (base / "warehouse").rglob("*.parquet"))


def _check(table: dict[str, Any], total: int) -> None:
    """Every produced record (two partitions, offsets from 0) exactly once, decoded."""
    keys = Counter((p, o) for p, o, *_ in table["rows"])
    assert not [k for k, n in keys.items() if n > 1], "records written twice"
    assert sorted(keys) == sorted((i % 2, i // 2) for i in range(total))
    for p, o, ts, user, n, tags, note in table["rows"]:
        i = 2 * o + p
        assert (n, user, tags, note) == (i, f"u{i % 7}", [f"t{i % 2}"],
                                         None if i % 2 else f"n{i}")
        assert datetime.fromisoformat(ts) == datetime.fromtimestamp(
            (T0 + (i % 3) * DAY_MS + i) / 1000, UTC)
    last = [s for s in table["snapshots"] if "strom.offsets" in s][-1]
    assert json.loads(last["strom.offsets"]) == {
        table["topic"]: {"0": (total + 1) // 2, "1": total // 2}}


def test_lake_load_into_iceberg_exactly_once(env, spark41, registry, unique_topic,
                                             tmp_path, request) -> None:
    python, jars = env
    broker, url = registry
    bs = broker.bootstrap
    topic = unique_topic("ice")
    create_topic(bs, topic, 2)
    status, body = http(f"{url}/subjects/{topic}-value/versions", "POST",
                        {"schema": json.dumps(SCHEMA)})
    assert status == 200, body
    schema_id = body["id"]
    cmd = _load_cmd(python, jars, bs, topic, tmp_path, url, spark41.url)
    # the same catalog served by Iceberg's REST handler (our launcher, 127.0.0.1)
    rest_url, rest_proc = iceberg_rest.start_rest_catalog(
        tmp_path / "catalog.db", (tmp_path / "warehouse").as_uri(), "lake")
    request.addfinalizer(lambda: iceberg_rest.stop_rest_catalog(rest_proc))
    cmd_rest = _load_cmd(python, jars, bs, topic, tmp_path, url, spark41.url, rest_url)

    # run 1 makes the table (value columns from the registered schema, days(timestamp)) and
    # is killed (-9, the driver and its JVM) once it has written data files, before or after
    # its commit; runs 2 and 3 then load whatever is not committed, once
    began = time.monotonic()
    produce(bs, topic, _records(schema_id, 0, 6000))
    print(f"produce 6k: {time.monotonic() - began:.1f}s")
    files_before = _data_files(tmp_path)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=spark_iceberg.child_env(python),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: _data_files(tmp_path) > files_before or proc.poll() is not None,
                 "run 1 writing data files", timeout=180, interval=0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    wait_for(lambda: not _group_alive(proc.pid), "run 1's processes gone", timeout=30)
    print(f"run 1 killed after {time.monotonic() - began:.1f}s")
    began = time.monotonic()
    killed = _read_table(python, tmp_path, topic) | {"topic": topic}
    assert len(killed["rows"]) in (0, 6000)
    print(f"read: {time.monotonic() - began:.1f}s, {len(killed['rows'])} rows after the kill")

    # runs 2 and 3 start together from what the table holds, one through the JdbcCatalog and
    # one through the REST catalog: one commits; the other either finds nothing new or, having
    # planned the same records, is fenced (its branch never reaches main), so each record is
    # still in the table once
    produce(bs, topic, _records(schema_id, 6000, 1000))
    began = time.monotonic()
    logs = [(tmp_path / f"run{n}.out", tmp_path / f"run{n}.err") for n in (2, 3)]
    runs = []
    for out_path, err_path in logs:  # (files: a full pipe must not stall a run)
        with out_path.open("w") as o, err_path.open("w") as e:
            runs.append(subprocess.Popen(cmd if not runs else cmd_rest, cwd=tmp_path,
                                         env=spark_iceberg.child_env(python), stdout=o,
                                         stderr=e, stdin=subprocess.DEVNULL))
    outcomes = [(r.wait(240), o.read_text(), e.read_text())
                for r, (o, e) in zip(runs, logs, strict=True)]
    print(f"runs 2 and 3: {time.monotonic() - began:.1f}s: {outcomes}")
    committed = [o for code, o, _ in outcomes if code == 0 and "records to" in o]
    assert len(committed) == 1, outcomes
    out = committed[0]
    for code, o, e in outcomes:
        assert (code == 0 and ("records to" in o or "nothing new" in o)) or \
            (code != 0 and "another load committed while this one ran" in e), (code, o, e)
    table = _read_table(python, tmp_path, topic) | {"topic": topic}
    assert table["spec"] == [["day", "timestamp"]]
    assert table["value_fields"] == ["user", "n", "at", "tags", "note"]
    _check(table, 7000)
    # DuckDB reads the table Spark wrote, row for row as pyiceberg does
    began = time.monotonic()
    assert sorted(_duckdb_rows(table["metadata_location"])) == sorted(table["rows"])
    print(f"DuckDB read: {time.monotonic() - began:.1f}s")

    assert "nothing new" not in out and "records" in out, out

def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True

