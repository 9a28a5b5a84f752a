"""`strom pipeline ...`: Strom's reference Spark pipelines and their input generator.

    strom pipeline run derived-feed -b HOST:PORT [--source clicks] [--trigger available-now]
    strom pipeline run lake-load -b HOST:PORT --topic clicks --output /data/lake/clicks
    strom pipeline run lake-load -b HOST:PORT --topic clicks --target iceberg \
        [--catalog-uri out/lake/catalog.db --warehouse out/lake/warehouse] [--schema-registry URL]
    strom pipeline generate-clicks -b HOST:PORT --rate 1000 --orgs 20 [--count N]

PySpark is imported only by `run`, so the rest of the CLI starts as fast as before.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from strom.cli.common import (
    BootstrapOpt,
    ClientOptions,
    CliError,
    CommandConfigOpt,
    ErrorTracker,
    TimeoutOpt,
    UsageError,
    err,
    handle_errors,
    kafka_error_text,
    out,
    parse_kv_list,
    wait_for_cluster,
)

app = typer.Typer(
    help="Reference Spark pipelines on Strom topics (see docs/spark.md).",
    no_args_is_help=True,
)

PIPELINES = ("derived-feed", "lake-load")


def _spark(master: str, conf: list[str] | None, app_name: str) -> Any:
    try:
        from strom.spark.session import local_session
    except ImportError as e:  # pragma: no cover - depends on the install
        raise CliError(f"PySpark is not installed ({e}); install strom[spark]") from None
    try:
        return local_session(app_name, master, parse_kv_list(conf, "conf"))
    except ImportError as e:
        raise CliError(f"PySpark is not installed ({e}); install strom[spark]") from None


@app.command("run")
@handle_errors
def run(
    name: Annotated[str, typer.Argument(help=f"Pipeline: {', '.join(PIPELINES)}.")],
    bootstrap_server: BootstrapOpt = "localhost:9092",
    source: Annotated[str, typer.Option("--source", "--topic", help="Input topic(s).")] = "clicks",
    output_topic: Annotated[
        str | None, typer.Option("--output-topic", help="derived-feed: counts topic "
                                 "(default SOURCE.visits).")] = None,
    dead_letter_topic: Annotated[
        str | None, typer.Option("--dead-letter-topic", help="derived-feed: rejected events "
                                 "(default SOURCE.dlq).")] = None,
    output: Annotated[
        str | None, typer.Option("--output", "--parquet", help="Parquet directory "
                                 "(default out/SOURCE-visits or out/lake/SOURCE).")] = None,
    checkpoint: Annotated[
        str | None, typer.Option("--checkpoint", help="derived-feed: checkpoint directory "
                                 "(default out/checkpoints/derived-feed-SOURCE).")] = None,
    trigger: Annotated[
        str, typer.Option("--trigger", help="derived-feed: available-now, or "
                          "processing-time:<interval> (runs until stopped).")
    ] = "processing-time:5 seconds",
    watermark: Annotated[str, typer.Option("--watermark", help="derived-feed: allowed lateness.")
                         ] = "10 minutes",
    starting_offsets: Annotated[
        str, typer.Option("--starting-offsets", help="derived-feed: earliest, latest or JSON "
                          "(first start only; later runs resume from the checkpoint).")
    ] = "earliest",
    max_offsets_per_trigger: Annotated[
        int | None, typer.Option("--max-offsets-per-trigger", min=1)] = None,
    min_partitions: Annotated[
        int | None, typer.Option("--min-partitions", min=1, help="lake-load: Spark tasks at "
                                 "least (ranges are split).")] = None,
    kafka: Annotated[
        list[str] | None, typer.Option("--kafka", help="A client setting k=v (repeatable).")
    ] = None,
    target: Annotated[str, typer.Option("--target", help="lake-load: parquet (a directory) or "
                                        "iceberg (a table).")] = "parquet",
    catalog: Annotated[str, typer.Option("--catalog", help="lake-load iceberg: the catalog "
                                         "name (readers of the SQLite file use the same).")
                       ] = "lake",
    catalog_type: Annotated[str, typer.Option("--catalog-type", help="lake-load iceberg: jdbc "
                                              "(a SQLite file) or rest.")] = "jdbc",
    catalog_uri: Annotated[
        str | None, typer.Option("--catalog-uri", help="lake-load iceberg: the SQLite file "
                                 "(default out/lake/catalog.db) or the REST catalog's URL.")
    ] = None,
    warehouse: Annotated[str, typer.Option("--warehouse", help="lake-load iceberg: where data "
                                           "files go.")] = "out/lake/warehouse",
    namespace: Annotated[str, typer.Option("--namespace", help="lake-load iceberg: the table's "
                                           "namespace.")] = "strom",
    table: Annotated[str | None, typer.Option("--table", help="lake-load iceberg: the table "
                                              "name (default: the topic's).")] = None,
    schema_registry: Annotated[
        str | None, typer.Option("--schema-registry", help="lake-load iceberg: decode values "
                                 "with the topic's Avro value schema from this registry.")
    ] = None,
    columns: Annotated[
        str | None, typer.Option("--columns", help="lake-load iceberg: declared value columns "
                                 "of JSON values (Spark DDL), else raw bytes.")] = None,
    include_headers: Annotated[bool, typer.Option("--include-headers", help="lake-load "
                                                  "iceberg: a headers column.")] = False,
    master: Annotated[str, typer.Option("--master", help="Spark master.")] = "local[2]",
    conf: Annotated[list[str] | None, typer.Option("--conf", help="A Spark setting k=v "
                                                   "(repeatable).")] = None,
) -> None:
    """Run a reference pipeline: derived-feed (streaming) or lake-load (batch)."""
    if name not in PIPELINES:
        raise UsageError(f"unknown pipeline {name!r}: choose one of {', '.join(PIPELINES)}")
    client = parse_kv_list(kafka, "kafka setting")
    if name == "derived-feed":
        from strom.pipelines.derived_feed import DerivedFeedConfig
        from strom.pipelines.derived_feed import run as run_feed

        if trigger != "available-now" and not trigger.startswith("processing-time:"):
            raise UsageError("--trigger must be available-now or processing-time:<interval>")
        cfg = DerivedFeedConfig(
            bootstrap_servers=bootstrap_server, source_topic=source,
            output_topic=output_topic or f"{source}.visits",
            dead_letter_topic=dead_letter_topic or f"{source}.dlq",
            parquet_path=output or f"out/{source}-visits",
            checkpoint_dir=checkpoint or f"out/checkpoints/derived-feed-{source}",
            watermark=watermark, starting_offsets=starting_offsets,
            max_offsets_per_trigger=max_offsets_per_trigger, trigger=trigger, kafka=client)
        spark = _spark(master, conf, f"strom-{name}")
        err.print(f"derived-feed: {source} -> {cfg.output_topic}, {cfg.dead_letter_topic}, "
                  f"{cfg.parquet_path} (checkpoints in {cfg.checkpoint_dir})", markup=False)
        queries = run_feed(spark, cfg)
        for q in queries:
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            out.print(f"{q.name}: {len(q.recentProgress)} batches, {rows} input rows", markup=False)
        return

    if target == "iceberg":
        _run_iceberg_load(bootstrap_server, source, catalog, catalog_type, catalog_uri, warehouse,
                          namespace, table, schema_registry, columns, include_headers,
                          min_partitions, client, master, conf)
        return
    if target != "parquet":
        raise UsageError("--target must be parquet or iceberg")
    from strom.pipelines.lake_load import LakeLoadConfig
    from strom.pipelines.lake_load import run as run_load

    cfg_load = LakeLoadConfig(bootstrap_servers=bootstrap_server, topic=source,
                              output=output or f"out/lake/{source}",
                              min_partitions=min_partitions, kafka=client)
    spark = _spark(master, conf, f"strom-{name}")
    result = run_load(spark, cfg_load)
    if result.load_id is None:
        out.print(f"lake-load: nothing new in {source} since the last load", markup=False)
        return
    out.print(f"lake-load {result.load_id}: {result.records} records in {result.files} files "
              f"to {cfg_load.output} in {result.seconds:.1f}s", markup=False)


def _run_iceberg_load(bootstrap: str, topic: str, catalog: str, catalog_type: str,
                      catalog_uri: str | None, warehouse: str, namespace: str, table: str | None,
                      schema_registry: str | None, columns: str | None, include_headers: bool,
                      min_partitions: int | None, client: dict[str, str], master: str,
                      conf: list[str] | None) -> None:
    from strom.pipelines.iceberg_load import IcebergLoadConfig, IcebergLoadError, spark_conf
    from strom.pipelines.iceberg_load import run as run_iceberg

    if catalog_type not in ("jdbc", "rest"):
        raise UsageError("--catalog-type must be jdbc or rest")
    cfg = IcebergLoadConfig(
        bootstrap_servers=bootstrap, topic=topic, catalog=catalog, catalog_type=catalog_type,
        catalog_uri=catalog_uri, warehouse=warehouse, namespace=namespace, table=table,
        schema_registry_url=schema_registry, columns=columns, include_headers=include_headers,
        min_partitions=min_partitions, kafka=client)
    try:
        settings = spark_conf(cfg, parse_kv_list(conf, "conf"))
        try:
            from strom.spark.session import local_session
        except ImportError as e:  # pragma: no cover - depends on the install
            raise CliError(f"PySpark is not installed ({e})") from None
        spark = local_session("strom-lake-load", master, settings)
        err.print(f"lake-load: {topic} -> {cfg.qualified}", markup=False)
        result = run_iceberg(spark, cfg)
    except IcebergLoadError as e:
        raise CliError(str(e)) from None
    if not result.committed:
        out.print(f"lake-load: nothing new in {topic} since the last commit to {cfg.qualified}",
                  markup=False)
        return
    out.print(f"lake-load: {result.records} records to {cfg.qualified} in snapshot "
              f"{result.snapshot_id} in {result.seconds:.1f}s", markup=False)


# --------------------------------------------------------------------------------------------
# generate-clicks
# --------------------------------------------------------------------------------------------


class _Counts:
    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, error: Any, msg: Any) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.failed += 1
            if self.first_error is None:
                self.first_error = kafka_error_text(error)


@app.command("generate-clicks")
@handle_errors
def generate_clicks(
    rate: Annotated[float, typer.Option("--rate", min=0.1, help="Events per second.")] = 1000.0,
    orgs: Annotated[int, typer.Option("--orgs", min=1, help="Number of organisations.")] = 10,
    topic: Annotated[str, typer.Option("--topic", help="Topic to write to.")] = "clicks",
    count: Annotated[int | None, typer.Option("--count", min=1, help="Stop after this many "
                                              "events (default: run until Ctrl-C).")] = None,
    duration: Annotated[float | None, typer.Option("--duration", min=0.1, help="Stop after "
                                                   "this many seconds.")] = None,
    invalid_ratio: Annotated[float, typer.Option("--invalid-ratio", min=0.0, max=1.0,
                                                 help="Share of deliberately broken events.")
                             ] = 0.01,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same events).")] = 0,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Produce a synthetic clickstream (JSON events keyed by organisation) at a steady rate."""
    from confluent_kafka import Producer

    from strom.pipelines.clicks import generate_events

    total = count
    if duration is not None:
        by_time = max(1, int(rate * duration))
        total = by_time if total is None else min(total, by_time)
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    tracker = ErrorTracker()
    counts = _Counts()
    conf = tracker.install(opts.config(**{"linger.ms": 20, "partitioner": "murmur2_random"}))
    conf["on_delivery"] = counts
    producer = Producer(conf)
    wait_for_cluster(producer, tracker, opts)

    events = generate_events(total if total is not None else 2**62, orgs=orgs, seed=seed,
                             spacing_ms=max(1, int(1000 / rate)), invalid_ratio=invalid_ratio)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = [SpinnerColumn(), TextColumn("[bold]{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns += [TextColumn("{task.fields[status]}"), TimeElapsedColumn()]
    started = time.monotonic()
    sent = 0
    interrupted = False
    with Progress(*columns, console=err, transient=False, disable=not err.is_terminal) as progress:
        task = progress.add_task(f"clicks -> {topic}", total=total, status="")

        def show() -> None:
            elapsed = max(1e-6, time.monotonic() - started)
            progress.update(task, completed=sent, status=(
                f"sent {sent:,}  delivered {counts.delivered:,}  failed {counts.failed:,}  "
                f"{sent / elapsed:,.0f}/s"))

        try:
            for event in events:
                # pacing: event n is due at n / rate seconds after the start
                due = started + sent / rate
                now = time.monotonic()
                if due > now:
                    producer.poll(due - now)
                    show()
                while True:
                    try:
                        producer.produce(topic, event.value, event.key)
                        break
                    except BufferError:
                        producer.poll(0.05)
                sent += 1
                if sent % 1000 == 0:
                    producer.poll(0)
                    show()
        except KeyboardInterrupt:
            interrupted = True
        remaining = producer.flush(timeout)
        show()
    if remaining:
        counts.failed += remaining
    elapsed = time.monotonic() - started
    err.print(f"Sent {sent} events to {topic} in {elapsed:.1f}s: {counts.delivered} delivered, "
              f"{counts.failed} failed.", markup=False)
    if counts.failed:
        raise CliError(f"{counts.failed} events were not delivered: {counts.first_error}")
    if interrupted:
        raise typer.Exit(130)
