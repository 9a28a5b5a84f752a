"""Iceberg topics and Spark's lake load into Iceberg (issue 33 point 4): records/s into Iceberg
tables, the lag from produce to a visible row, and what the lake writer costs the Kafka
protocol's clients on the same broker.

One Strom broker with ``iceberg.enable=true`` (a SQLite catalog and a warehouse directory in its
data directory, bench/iceberg_lake.py) and its schema registry, warmed up like the other
steady-state scenarios. Its topics, 6 partitions each unless said: ``plain`` (no table),
``kv`` (``iceberg.mode=key_value``), ``avro`` (``iceberg.mode=value_schema``, the 10-field schema
of bench/schemas/event10.avsc registered under ``<topic>-value``) and ``lag`` (key_value, one
partition), all with ``iceberg.commit.interval.ms=1000``; the harness waits until the writer
has made the three tables. Then, every Kafka client a process of its own (bench/client.py),
``iceberg_records`` records of 1 KiB in each phase:

1. produce JSON records (bench/json_records.py) to ``plain`` and consume them back: the writer
   runs but has nothing to write;
2. produce JSON records to ``kv`` while the writer reads them; from the producer's start until
   the table's current snapshot covers them all (its ``strom.offsets``, read with pyiceberg) is
   the writer's records/s; the same with Avro records (Confluent framing) into ``avro``, whose
   writer decodes each value into the table's typed ``value`` column;
3. produce JSON records to a new plain topic ``backlog`` (a second run of phase 1's produce, the
   writer idle again), make it key_value, and once its table exists and the writer works on it
   (at least half a core over 0.1 s: it reads the backlog from offset 0) consume ``plain``
   again; then, the backlog in its table, consume ``plain`` once more;
4. a producer thread in the harness sends one record every 50 ms to ``lag`` for
   ``iceberg_lag_s`` seconds while the harness reads the table's offsets every 50 ms: each
   record's lag to a visible row;
5. ``strom pipeline run lake-load --target iceberg`` (PySpark 4.1 and Iceberg's Spark runtime,
   compat/spark_iceberg.py; made on first use) loads ``kv`` (values as bytes) and ``avro``
   (decoded through the registry) into tables of its own catalog, each a fresh command.

The goals compare, on one broker in one run, produce to ``kv`` with produce to a plain topic
(the mean of phases 1 and 3) and the consume while the writer works with the mean of the two
without. Broker CPU and RSS count the broker's whole process tree, its lake writer included,
except in the rows of the broker's CPU per record, which leave the writer out.
Kafka and Tansu have no Iceberg topics: every row is n/a for them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bench import avro_records, json_records
from bench.admin import create_topic
from bench.brokers import (
    BrokerProcess,
    BrokerSpec,
    free_port,
    schema_registry_url,
    with_schema_registry,
)
from bench.config import PARTITIONS, Sizes
from bench.iceberg_lake import (
    Lake,
    LakeError,
    SparkEnv,
    WithIceberg,
    cover_timeout,
    measure_lag,
    nearest_rank,
    wait_busy,
    writer_pid,
)
from bench.procstat import cpu_delta, cpu_sample, peak_rss_bytes
from bench.report import Metric, Outcome, ScenarioRows, Target
from bench.scenarios.base import (
    MB,
    Context,
    Scenario,
    consume_problem,
    io_timeout,
    produce_problem,
    record_rates,
    start_job,
)
from bench.scenarios.schema_validation import register, stored_records, wait_registry
from bench.scenarios.throughput import KIB
from bench.targets import ICEBERG_LOAD_COST_GOAL, RSS_LIMIT_MB

COMMIT_INTERVAL_MS = 1000
LAG_RATE = 20.0  # records/s of the paced producer (one every 50 ms)
SPARK_MASTER = "local[2]"
SPARK_ROWS = ("spark_json_rps", "spark_json_run_rps", "spark_avro_rps", "spark_avro_run_rps")


def iceberg_config(mode: str) -> dict[str, str]:
    return {"iceberg.mode": mode, "iceberg.commit.interval.ms": str(COMMIT_INTERVAL_MS)}


def no_iceberg(label: str) -> str:
    return f"{label} has no Iceberg topics: Strom only"


def mean_of(m: dict[str, float], first: str, second: str) -> float:
    return (m[first] + m[second]) / 2


class IcebergTopics(Scenario):
    name = "iceberg-1k"
    size = KIB
    warm_up = True

    def __init__(self) -> None:
        self._spark: SparkEnv | None = None
        self._no_spark: str | None = None

    @property
    def title(self) -> str:  # type: ignore[override]
        return (f"Iceberg topics and Spark's lake load, 1 KiB JSON and Avro records, "
                f"{PARTITIONS} partitions, acks=1, one broker with iceberg.enable "
                f"(iceberg.commit.interval.ms={COMMIT_INTERVAL_MS})")

    def rows(self, sizes: Sizes) -> ScenarioRows:
        metrics = (
            Metric("alone_produce_mbs", "produce JSON to a plain topic, lake writer idle (mean "
                   "of the runs before and after the lake phases)", "MB/s"),
            Metric("alone_produce_rps", "the same", "records/s", 0),
            Metric("lake_produce_mbs", "produce JSON to a key_value Iceberg topic, the lake "
                   "writer reading along", "MB/s", client_cpu="lake_produce_client_pct"),
            Metric("lake_produce_rps", "the same", "records/s", 0),
            Metric("lake_produce_writer_pct", "the lake writer's CPU meanwhile", "% of a core",
                   0),
            Metric("produce_cost", "produce, Iceberg topic / plain topic, same broker", "x", 2,
                   ICEBERG_LOAD_COST_GOAL),
            Metric("alone_produce_broker_us", "the broker's CPU per record produced, its lake "
                   "writer left out: plain topic", "µs", 2),
            Metric("lake_produce_broker_us", "the same: Iceberg topic", "µs", 2),
            Metric("alone_consume_rps", "consume the plain topic, lake writer idle (mean of the "
                   "runs before and after)", "records/s", 0),
            Metric("lake_consume_rps", "consume the plain topic while the lake writer writes a "
                   "backlog of as many records into another table", "records/s", 0,
                   client_cpu="lake_consume_client_pct"),
            Metric("consume_cost", "consume, lake writer busy / idle, same broker", "x", 2,
                   ICEBERG_LOAD_COST_GOAL),
            Metric("lake_consume_writer_pct", "the lake writer's CPU meanwhile", "% of a core",
                   0),
            Metric("backlog_left", "the writer's backlog not yet committed to its table when "
                   "that consume ended", "records", 0),
            Metric("kv_lake_rps", "into an Iceberg topic's table, key_value, JSON: from the "
                   "first record produced to the table covering all", "records/s", 0),
            Metric("kv_writer_us", "the lake writer's CPU per record, key_value", "µs", 1),
            Metric("avro_lake_rps", "into an Iceberg topic's table, value_schema, Avro decoded "
                   "into columns: the same", "records/s", 0),
            Metric("avro_writer_us", "the lake writer's CPU per record, value_schema", "µs", 1),
            Metric("avro_produce_rps", "produce Avro to the value_schema topic meanwhile",
                   "records/s", 0, client_cpu="avro_produce_client_pct"),
            Metric("lag_p50_ms", f"produce to a visible table row, {LAG_RATE:.0f} records/s "
                   "to 1 partition of a key_value topic, the catalog read every 50 ms: p50",
                   "ms", 0),
            Metric("lag_p99_ms", "the same, p99", "ms", 0),
            Metric("lag_max_ms", "the same, max", "ms", 0),
            Metric("spark_json_rps", "Spark lake-load --target iceberg, the key_value topic's "
                   "JSON records (values as bytes): the load, Spark session up", "records/s", 0),
            Metric("spark_json_run_rps", "the same, the whole command (JVM and session start "
                   "included)", "records/s", 0),
            Metric("spark_avro_rps", "Spark lake-load --target iceberg, the value_schema "
                   "topic's Avro records (decoded through the registry): the load",
                   "records/s", 0),
            Metric("spark_avro_run_rps", "the same, the whole command", "records/s", 0),
            Metric("rss_mb", "broker peak RSS, its lake writer included", "MB", 0,
                   Target("max", RSS_LIMIT_MB)),
            Metric("writer_rss_mb", "the lake writer's peak RSS", "MB", 0),
        )
        title = f"{self.title} ({sizes.iceberg_records:,} records per phase)"
        return ScenarioRows(self.name, title, metrics)

    def topic(self, phase: str) -> str:
        # topic names that are also table names as they are (no '-' or '.')
        return f"bench_iceberg_{phase}"

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        """Strom (subject, or a Strom peer) with Iceberg topics and its schema registry on;
        n/a for the other brokers."""
        if spec.kind != "strom":
            out = Outcome()
            for m in self.rows(ctx.sizes).metrics:
                out.na[m.key] = no_iceberg(spec.label)
            return out
        self._spark, self._no_spark = None, None
        try:  # before the broker starts: a first run makes the virtualenv (minutes)
            self._spark = SparkEnv.ensure()
        except Exception as e:  # no java, no network for a first run, ...
            self._no_spark = f"no PySpark 4.1 + Iceberg (compat/spark_iceberg.py): {e}"
            ctx.log(self._no_spark)
        iceberg = dataclasses.replace(spec, command=WithIceberg(spec.command))
        return super().run(with_schema_registry(iceberg, f"http://127.0.0.1:{free_port()}"),
                           ctx)

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        url = schema_registry_url(broker.spec)
        assert url is not None
        wait_registry(url, ctx.ready_timeout)
        schema_id = register(url, f"{self.topic('avro')}-value", avro_records.schema_text())
        lake = Lake(broker.data_dir)
        topics: tuple[tuple[str, dict[str, str], int], ...] = (
            ("plain", {}, PARTITIONS), ("kv", iceberg_config("key_value"), PARTITIONS),
            ("avro", iceberg_config("value_schema"), PARTITIONS),
            ("lag", iceberg_config("key_value"), 1))
        for phase, config, partitions in topics:
            create_topic(broker.bootstrap, self.topic(phase), partitions,
                         security=broker.security, config=config)
        for phase in ("kv", "avro", "lag"):
            lake.wait_table(self.topic(phase), ctx.ready_timeout)
        writer = writer_pid(broker.pid)
        if writer is None:
            out.failed = "the lake writer's process is not running"
            return
        os.sync()  # the warm-up's writes on disk, not during the first phase
        n = ctx.sizes.iceberg_records
        steps = (self._plain, self._lake_tables, self._backlog, self._lag, self._spark_loads)
        for step in steps:
            step(broker, ctx, out, lake, writer, n, schema_id)
            if out.failed:
                return
        out.metrics["writer_rss_mb"] = peak_rss_bytes(writer) / MB

    # -- phases ------------------------------------------------------------------------------

    def _job(self, broker: BrokerProcess, out: Outcome, job: dict[str, Any], key: str,
             n: int, writer: int, before_go: Callable[[], object] | None = None
             ) -> tuple[dict[str, Any], float]:
        """Run a client job (``before_go`` called once it is ready); the lake writer's CPU
        meanwhile as ``{key}_writer_pct`` (% of a core) and the broker's without it per record
        as ``{key}_broker_us``; (its result, the monotonic time it was let go). The caller
        records its rates once it has checked the result."""
        timeout = io_timeout(n, self.size)
        client = start_job(broker, job, timeout)
        try:
            client.ready(60)
            if before_go is not None:
                before_go()
            lake0, cpu0 = cpu_sample(writer), broker.cpu_sample()
            began = time.monotonic()
            client.go()
            res = client.result(timeout + 60)
            cpu = cpu_delta(cpu0, broker.cpu_sample())
            lake_cpu = cpu_delta(lake0, cpu_sample(writer))
        finally:
            client.kill()
        res["broker_cpu_s"] = cpu
        out.metrics[f"{key}_writer_pct"] = 100 * lake_cpu / (time.monotonic() - began)
        out.metrics[f"{key}_broker_us"] = 1e6 * max(cpu - lake_cpu, 0.0) / n
        return res, began

    def _produce(self, broker: BrokerProcess, out: Outcome, topic: str, key: str, n: int,
                 writer: int, **values: Any) -> float | None:
        """Produce ``n`` records to ``topic`` (JSON, or ``avro=<id>``); the rates under
        ``key``; the monotonic time the producer was let go, or None (and ``out.failed``)."""
        job = {"job": "produce", "topic": topic, "size": self.size, "count": n, "acks": 1,
               **(values or {"json": True})}
        res, began = self._job(broker, out, job, key, n, writer)
        problem = produce_problem(res)
        if problem is None:
            stored = stored_records(broker, topic)
            problem = None if stored == n else f"the topic holds {stored} records, not {n}"
        if problem is not None:
            out.failed = f"produce to {topic}: {problem}"
            return None
        record_rates(out, key, res, res["broker_cpu_s"], n, self.size)
        return began

    def _consume(self, broker: BrokerProcess, out: Outcome, key: str, n: int,
                 writer: int, before_go: Callable[[], object] | None = None) -> bool:
        """Consume the plain topic's ``n`` records; the rates under ``key``."""
        job = {"job": "consume", "topic": self.topic("plain"), "expected": n}
        res, _ = self._job(broker, out, job, key, n, writer, before_go)
        problem = consume_problem(res)
        if problem is not None:
            out.failed = f"consume ({key}): {problem}"
            return False
        record_rates(out, key, res, res["broker_cpu_s"], n, self.size)
        return True

    def _plain(self, broker: BrokerProcess, ctx: Context, out: Outcome, lake: Lake,
               writer: int, n: int, schema_id: int) -> None:
        """Phase 1: produce to the plain topic and consume it, the writer idle."""
        if self._produce(broker, out, self.topic("plain"), "alone1", n, writer) is not None:
            self._consume(broker, out, "consume1", n, writer)

    def _lake_tables(self, broker: BrokerProcess, ctx: Context, out: Outcome, lake: Lake,
                     writer: int, n: int, schema_id: int) -> None:
        """Phase 2: produce to the key_value topic and to the value_schema one, each until its
        table covers every record."""
        m = out.metrics
        for phase, key, values in (("kv", "lake_produce", {}),
                                   ("avro", "avro_produce", {"avro": schema_id})):
            topic = self.topic(phase)
            before = cpu_sample(writer)
            began = self._produce(broker, out, topic, key, n, writer, **values)
            if began is None:
                return
            try:
                done = lake.wait_covered(topic, n, cover_timeout(n))
            except LakeError as e:
                out.failed = str(e)
                return
            m[f"{phase}_lake_s"] = done - began
            m[f"{phase}_lake_rps"] = n / (done - began)
            m[f"{phase}_writer_us"] = 1e6 * cpu_delta(before, cpu_sample(writer)) / n
            m[f"{phase}_writer_peak_mb"] = peak_rss_bytes(writer) / MB
            ctx.log(f"{phase}: produced at {m[f'{key}_rps']:,.0f} records/s, in the table at "
                    f"{m[f'{phase}_lake_rps']:,.0f} records/s, the writer "
                    f"{m[f'{phase}_writer_us']:.1f} CPU-µs per record (its peak RSS so far "
                    f"{m[f'{phase}_writer_peak_mb']:.0f} MB)")

    def _backlog(self, broker: BrokerProcess, ctx: Context, out: Outcome, lake: Lake,
                 writer: int, n: int, schema_id: int) -> None:
        """Phase 3: produce a backlog to a plain topic (the writer idle), make it key_value,
        consume the plain topic while the writer writes the backlog, then once more after."""
        topic = self.topic("backlog")
        create_topic(broker.bootstrap, topic, PARTITIONS, security=broker.security)
        if self._produce(broker, out, topic, "alone2", n, writer) is None:
            return
        alter_topic(broker, topic, iceberg_config("key_value"))
        try:
            lake.wait_table(topic, ctx.ready_timeout)
            # the writer starts on a new table's records a moment after making it: the
            # consumer is let go once the writer works
            if not self._consume(broker, out, "lake_consume", n, writer,
                                 partial(wait_busy, writer, timeout=ctx.ready_timeout)):
                return
            out.metrics["backlog_left"] = n - lake.covered(topic)
            lake.wait_covered(topic, n, cover_timeout(n))
        except LakeError as e:
            out.failed = str(e)
            return
        if not self._consume(broker, out, "consume2", n, writer):
            return
        m = out.metrics
        for what in ("mbs", "rps"):
            m[f"alone_produce_{what}"] = mean_of(m, f"alone1_{what}", f"alone2_{what}")
        m["alone_consume_rps"] = mean_of(m, "consume1_rps", "consume2_rps")
        m["alone_produce_broker_us"] = mean_of(m, "alone1_broker_us", "alone2_broker_us")
        m["produce_cost"] = m["lake_produce_rps"] / m["alone_produce_rps"]
        m["consume_cost"] = m["lake_consume_rps"] / m["alone_consume_rps"]
        ctx.log(f"produce records/s: plain {m['alone1_rps']:,.0f} and {m['alone2_rps']:,.0f}, "
                f"Iceberg topic {m['lake_produce_rps']:,.0f} ({m['produce_cost']:.2f}x); "
                f"consume: idle writer {m['consume1_rps']:,.0f} and {m['consume2_rps']:,.0f}, "
                f"busy {m['lake_consume_rps']:,.0f} ({m['consume_cost']:.2f}x; the writer at "
                f"{m['lake_consume_writer_pct']:.0f}% of a core, {m['backlog_left']:,.0f} "
                "records of its backlog not committed at the end)")

    def _lag(self, broker: BrokerProcess, ctx: Context, out: Outcome, lake: Lake,
             writer: int, n: int, schema_id: int) -> None:
        """Phase 4: single records at a steady rate, each until a catalog read shows it."""
        run = measure_lag(lake, broker.bootstrap, self.topic("lag"), LAG_RATE,
                          ctx.sizes.iceberg_lag_s, json_records.values(64, self.size))
        lags = run.lags()
        if run.failed or len(lags) < len(run.sent) or not lags:
            out.failed = (f"lag: {run.failed} records not delivered ({run.first_error}), "
                          f"{len(run.sent) - len(lags)} of {len(run.sent)} never in the table")
            return
        m = out.metrics
        for q, key in ((0.5, "lag_p50_ms"), (0.99, "lag_p99_ms"), (1.0, "lag_max_ms")):
            m[key] = 1000 * nearest_rank(lags, q)
        read_ms = 1000 * sum(run.read_seconds) / len(run.read_seconds)
        m["lag_read_ms"] = read_ms
        ctx.log(f"lag to a visible row over {len(lags)} records: p50 {m['lag_p50_ms']:.0f} ms, "
                f"p99 {m['lag_p99_ms']:.0f} ms, max {m['lag_max_ms']:.0f} ms (a catalog read "
                f"took {read_ms:.1f} ms on average; {run.late} sends over 10 ms late)")

    def _spark_loads(self, broker: BrokerProcess, ctx: Context, out: Outcome, lake: Lake,
                     writer: int, n: int, schema_id: int) -> None:
        """Phase 5: Spark's lake load of the key_value topic and of the value_schema one."""
        if self._spark is None:
            for key in SPARK_ROWS:
                out.na[key] = self._no_spark or "not run"
            return
        url = schema_registry_url(broker.spec)
        loads: tuple[tuple[str, str, str | None], ...] = (("kv", "spark_json", None),
                                                          ("avro", "spark_avro", url))
        for phase, key, registry in loads:
            problem: str | None = None
            try:
                load = self._spark.load(broker.bootstrap, self.topic(phase),
                                        broker.data_dir / "spark", master=SPARK_MASTER,
                                        registry=registry, shuffle_partitions=PARTITIONS)
            except LakeError as e:  # the other rows stand: these say why they are empty
                problem = f"FAILED: {e}"
            else:
                if load.records != n:
                    problem = (f"FAILED: loaded {load.records} records of {self.topic(phase)}, "
                               f"not {n}")
            if problem is not None:
                ctx.log(f"Spark lake-load of {phase}: {problem}")
                out.na[f"{key}_rps"] = out.na[f"{key}_run_rps"] = problem
                continue
            out.metrics[f"{key}_rps"] = n / load.load_s
            out.metrics[f"{key}_run_rps"] = n / load.run_s
            ctx.log(f"Spark lake-load of {phase}: {load.load_s:.1f} s of load, "
                    f"{load.run_s:.1f} s in all ({n / load.load_s:,.0f} and "
                    f"{n / load.run_s:,.0f} records/s)")


def alter_topic(broker: BrokerProcess, topic: str, config: dict[str, str],
                timeout: float = 30.0) -> None:
    """Set ``config`` on ``topic`` (IncrementalAlterConfigs)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **broker.security,
                         "log_level": 0})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in config.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout)


SCENARIOS = [IcebergTopics()]
