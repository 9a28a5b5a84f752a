"""The iceberg-1k scenario's pieces (issue 33): JSON records, what a table covers, lags, the
Spark command and its output, the broker's command and the rows (no broker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import json_records
from bench.brokers import schema_registry_url, strom_spec, tansu_spec, with_schema_registry
from bench.client import _values
from bench.config import FULL, QUICK
from bench.iceberg_lake import (
    Lake,
    LakeError,
    SparkEnv,
    WithIceberg,
    catalog_file,
    covered,
    nearest_rank,
    parse_load,
    partition_end,
    visible_lags,
    wait_busy,
    warehouse_dir,
)
from bench.report import Outcome, build_rows
from bench.scenarios import BY_NAME
from bench.scenarios.base import Context
from bench.scenarios.iceberg import IcebergTopics


def test_json_values_are_1_kib_objects_of_the_events() -> None:
    values = json_records.values(100)
    assert len(values) == 100 and len(set(values)) == 100
    assert all(len(v) == 1024 for v in values)
    first = json.loads(values[0])
    assert list(first) == ["id", "timestamp", "user", "kind", "amount", "quantity", "accepted",
                           "referrer", "tags", "body"]
    assert [json.loads(v)["id"] for v in values[:3]] == [0, 1, 2]
    assert json_records.values(5) == json_records.values(5)  # the same for the same seed
    assert all(len(v) == 300 for v in json_records.values(10, size=300))
    with pytest.raises(ValueError):
        json_records.values(1, size=50)  # the other fields alone take more


def test_a_json_produce_job_cycles_a_pool() -> None:
    job = {"size": 1024, "json": True, "pool": 3}
    sent = list(_values(job, 7))
    assert len(sent) == 7 and len(set(sent)) == 3 and sent[3] == sent[0]
    assert all(len(v) == 1024 and json.loads(v) for v in sent)


def test_covered_adds_up_the_partitions_next_offsets() -> None:
    assert covered(None) == 0
    assert covered('{"0": 10, "1": 7, "2": 0}') == 17
    assert partition_end('{"0": 10, "1": 7}', 1) == 7
    assert partition_end('{"0": 10}', 3) == 0
    assert partition_end(None, 0) == 0


def test_nearest_rank() -> None:
    values = [float(i) for i in range(1, 401)]
    assert nearest_rank(values, 0.5) == 200
    assert nearest_rank(values, 0.99) == 396
    assert nearest_rank(values, 1.0) == 400
    assert nearest_rank([3.0], 0.99) == 3.0
    with pytest.raises(ValueError):
        nearest_rank([], 0.5)


def test_a_record_shows_from_the_first_read_past_its_offset() -> None:
    sent = {0: 10.0, 1: 10.05, 2: 10.9, 3: 11.0}
    reads = [(10.5, 0), (11.0, 2), (11.5, 2), (12.2, 4)]
    assert visible_lags(sent, reads) == pytest.approx(sorted([1.0, 0.95, 1.3, 1.2]))
    # a record no read shows is left out
    assert visible_lags({5: 1.0}, reads) == []


def test_the_broker_gets_iceberg_topics_and_its_registry(tmp_path: Path) -> None:
    import dataclasses

    spec = with_schema_registry(
        dataclasses.replace(strom_spec("strom"), command=WithIceberg(strom_spec("strom").command)),
        "http://127.0.0.1:8081")
    argv = spec.command(9092, tmp_path)
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--override"]
    assert "iceberg.enable=true" in overrides
    assert f"iceberg.catalog.uri=sqlite:///{catalog_file(tmp_path)}" in overrides
    assert f"iceberg.catalog.warehouse={warehouse_dir(tmp_path).as_uri()}" in overrides
    assert catalog_file(tmp_path).parent.is_dir()  # SQLite makes the file, not its directory
    assert schema_registry_url(spec) == "http://127.0.0.1:8081"


def test_the_lake_reads_what_a_table_covers(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    lake = Lake(tmp_path)
    with pytest.raises(LakeError):
        lake.catalog(timeout=0.0)  # no catalog file yet
    catalog_file(tmp_path).parent.mkdir(parents=True)
    writer = SqlCatalog("strom", uri=f"sqlite:///{catalog_file(tmp_path)}",
                        warehouse=warehouse_dir(tmp_path).as_uri())
    writer.create_namespace("strom")
    with pytest.raises(LakeError):
        lake.wait_table("t", timeout=0.0)
    table = writer.create_table(("strom", "t"), Schema(NestedField(1, "offset", LongType())))
    lake.wait_table("t", timeout=1.0)
    assert lake.offsets("t") is None and lake.covered("t") == 0
    rows = pa.table({"offset": pa.array([0, 1, 2], pa.int64())})
    table.append(rows, snapshot_properties={"strom.offsets": '{"0": 2, "1": 1}'})
    assert lake.covered("t") == 3
    assert lake.wait_covered("t", 3, timeout=1.0) > 0
    with pytest.raises(LakeError):
        lake.wait_covered("t", 4, timeout=0.0)


def test_wait_busy_waits_for_a_process_to_work() -> None:
    idle = subprocess.Popen(["sleep", "30"])
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with pytest.raises(LakeError):
            wait_busy(idle.pid, window=0.05, timeout=0.2)
        assert wait_busy(busy.pid, share=0.3, window=0.05, timeout=10.0) < 10.0
    finally:
        for proc in (idle, busy):
            proc.kill()
            proc.wait()


def test_the_load_line_of_lake_load() -> None:
    out = ("lake-load: 200000 records to lake.strom.bench_iceberg_kv in snapshot "
           "4404185418181256 in 21.7s\n")
    assert parse_load(out) == (200_000, 21.7)
    assert parse_load("lake-load: nothing new in t since the last commit to lake.strom.t") \
        is None


class FakeCompat:
    @staticmethod
    def child_env(python: Path) -> dict[str, str]:
        return {"PYSPARK_PYTHON": str(python)}


def test_the_spark_command(tmp_path: Path) -> None:
    env = SparkEnv(Path("/venv/bin/python"), (Path("/libs/a.jar"), Path("/libs/b.jar")),
                   FakeCompat())
    cmd = env.command("127.0.0.1:9092", "bench_iceberg_avro", tmp_path, "local[2]",
                      "http://127.0.0.1:8081", 6)
    assert cmd[:3] == ["/venv/bin/python", "-c", "from strom.cli.main import main; main()"]
    assert cmd[3:6] == ["pipeline", "run", "lake-load"]
    pairs = dict(zip(cmd[6::2], cmd[7::2], strict=False))
    assert pairs["--target"] == "iceberg" and pairs["--topic"] == "bench_iceberg_avro"
    assert pairs["--catalog-uri"] == str(tmp_path / "catalog.db")
    assert pairs["--schema-registry"] == "http://127.0.0.1:8081"
    assert "spark.jars=/libs/a.jar,/libs/b.jar" in cmd
    no_registry = env.command("b:1", "t", tmp_path, "local[2]", None, 6)
    assert "--schema-registry" not in no_registry


def test_sizes() -> None:
    assert QUICK.iceberg_records < FULL.iceberg_records
    assert QUICK.iceberg_lag_s < FULL.iceberg_lag_s


def test_rows_and_peers() -> None:
    scenario = BY_NAME["iceberg-1k"]
    assert isinstance(scenario, IcebergTopics)
    rows = scenario.rows(QUICK)
    keys = [m.key for m in rows.metrics]
    assert len(keys) == len(set(keys))
    assert f"{QUICK.iceberg_records:,} records per phase" in rows.title
    ctx = Context(sizes=QUICK, workdir=Path("/nonexistent"), log=lambda _m: None)
    out = scenario.run(tansu_spec("/nonexistent/tansu"), ctx)  # starts nothing
    assert out.failed is None and set(out.na) == set(keys)
    assert out.na["kv_lake_rps"] == "Tansu has no Iceberg topics: Strom only"


def test_the_cost_goals_are_judged_on_strom_alone() -> None:
    rows = IcebergTopics().rows(QUICK)
    goals = {m.key for m in rows.metrics if m.targets}
    assert goals == {"produce_cost", "consume_cost", "rss_mb"}

    def verdicts(produce: float, consume: float) -> list[str]:
        strom = Outcome(metrics={"produce_cost": produce, "consume_cost": consume})
        kafka = Outcome(na={m.key: "Kafka has no Iceberg topics: Strom only"
                            for m in rows.metrics})
        table = build_rows([rows], {"iceberg-1k": {"Strom": [strom], "Kafka": [kafka]}},
                           "Strom", ["Kafka"], {})
        return [r.verdict for r in table if r.verdict and "RSS" not in r.metric]

    assert verdicts(0.95, 0.9) == ["pass", "pass"]
    assert verdicts(0.85, 1.1) == ["FAIL", "pass"]
    assert verdicts(0.5, 0.5) == ["FAIL", "FAIL"]
