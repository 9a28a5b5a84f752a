"""Derived feed (streaming): visits per organisation per day and per minute, from a clickstream.

Input: a topic of JSON click events (see :mod:`strom.pipelines.clicks`). Two streaming queries:

``<name>-topic`` (update mode) writes, continuously, to the Strom sink:
  - to the output topic, every changed count: key ``minute|org-003|2026-11-22T06:45:00Z``,
    value ``{"granularity", "org_id", "window_start", "window_end", "visits"}``; a consumer
    keeps the last value per key (the topic suits cleanup.policy=compact);
  - to the dead-letter topic, every event that does not parse or validate, with its original
    key, value and headers plus headers naming the error and the source topic, partition and
    offset (Kafka Connect's ``__connect.errors.*`` names, which DLQ tools already read).
``<name>-parquet`` (append mode) writes the final count of each window to Parquet, partitioned
by granularity and date, once the watermark has passed the window's end.

Bad input never stops the stream: parsing uses from_json (permissive) and try_to_timestamp, and
every rejected event takes the dead-letter path. Events later than the watermark are dropped
from the counts by Spark (they are not errors).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strom.spark import FORMAT

EVENT_SCHEMA = ("ts STRING, org_id STRING, user_id STRING, session_id STRING, url STRING, "
                "referrer STRING, user_agent STRING, _corrupt_record STRING")
DLQ_EXCEPTION_CLASS = "strom.pipelines.InvalidEvent"


@dataclass
class DerivedFeedConfig:
    bootstrap_servers: str
    source_topic: str = "clicks"
    output_topic: str = "clicks.visits"
    dead_letter_topic: str = "clicks.dlq"
    parquet_path: str = "out/visits"
    checkpoint_dir: str = "out/checkpoints/derived-feed"
    watermark: str = "10 minutes"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    trigger: str = "processing-time:5 seconds"  # or "available-now"
    name: str = "derived-feed"
    kafka: dict[str, str] = field(default_factory=dict)  # extra client settings (no prefix)


def _source(spark: Any, cfg: DerivedFeedConfig) -> Any:
    reader = (spark.readStream.format(FORMAT)
              .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
              .option("subscribe", cfg.source_topic)
              .option("startingOffsets", cfg.starting_offsets)
              .option("includeHeaders", "true"))
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    for key, value in cfg.kafka.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def parse_events(raw: Any) -> Any:
    """Source rows + ``event`` (parsed struct), ``event_time`` and ``error`` (null if valid)."""
    from pyspark.sql import functions as F

    e = F.col("event")
    parsed = raw.withColumn(
        "event",
        F.from_json(F.col("value").cast("string"), EVENT_SCHEMA,
                    {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}))
    parsed = parsed.withColumn("event_time", F.expr("try_to_timestamp(event.ts)"))
    error = (
        F.when(F.col("value").isNull(), F.lit("empty value"))
        .when(e.isNull() | e["_corrupt_record"].isNotNull(), F.lit("malformed JSON"))
        .when(e["org_id"].isNull() | (F.trim(e["org_id"]) == ""), F.lit("missing org_id"))
        .when(e["user_id"].isNull() | (F.trim(e["user_id"]) == ""), F.lit("missing user_id"))
        .when(e["ts"].isNull(), F.lit("missing ts"))
        .when(F.col("event_time").isNull(), F.concat(F.lit("invalid ts: "), e["ts"]))
        .when(e["url"].isNull() | ~e["url"].rlike("^https?://[^ ]+$"),
              F.concat(F.lit("invalid url: "), F.coalesce(e["url"], F.lit("null"))))
    )
    return parsed.withColumn("error", error)


def _header(name: str, value: Any) -> Any:
    from pyspark.sql import functions as F

    return F.struct(F.lit(name).alias("key"), value.cast("string").cast("binary").alias("value"))


def dead_letters(parsed: Any, dead_letter_topic: str) -> Any:
    """Rejected events as sink rows (topic, key, value, headers)."""
    from pyspark.sql import functions as F

    extra = F.array(
        _header("__connect.errors.topic", F.col("topic")),
        _header("__connect.errors.partition", F.col("partition")),
        _header("__connect.errors.offset", F.col("offset")),
        _header("__connect.errors.exception.class.name", F.lit(DLQ_EXCEPTION_CLASS)),
        _header("__connect.errors.exception.message", F.col("error")),
    )
    headers = F.concat(F.coalesce(F.col("headers"), F.array().cast(
        "array<struct<key:string,value:binary>>")), extra)
    return parsed.where(F.col("error").isNotNull()).select(
        F.lit(dead_letter_topic).alias("topic"), "key", "value", headers.alias("headers"))


def visit_counts(parsed: Any, watermark: str) -> Any:
    """Counts per (granularity, org_id, window): 1-minute windows and UTC days."""
    from pyspark.sql import functions as F

    valid = (parsed.where(F.col("error").isNull())
             .select("event_time", F.col("event.org_id").alias("org_id"))
             .withWatermark("event_time", watermark))

    def per(size: str, granularity: str) -> Any:
        return (valid.groupBy(F.window("event_time", size).alias("w"), "org_id")
                .agg(F.count(F.lit(1)).alias("visits"))
                .select(F.lit(granularity).alias("granularity"), "org_id",
                        F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                        "visits"))

    return per("1 minute", "minute").unionByName(per("1 day", "day"))


def _iso(col: Any) -> Any:
    from pyspark.sql import functions as F

    return F.date_format(col, "yyyy-MM-dd'T'HH:mm:ss'Z'")


def count_records(counts: Any, output_topic: str) -> Any:
    """Counts as sink rows: key granularity|org|window start, JSON value."""
    from pyspark.sql import functions as F

    key = F.concat_ws("|", "granularity", "org_id", _iso(F.col("window_start")))
    value = F.to_json(F.struct(
        "granularity", "org_id", _iso(F.col("window_start")).alias("window_start"),
        _iso(F.col("window_end")).alias("window_end"), "visits"))
    empty_headers = F.lit(None).cast("array<struct<key:string,value:binary>>")
    return counts.select(F.lit(output_topic).alias("topic"), key.cast("binary").alias("key"),
                         value.cast("binary").alias("value"), empty_headers.alias("headers"))


def _trigger(writer: Any, trigger: str) -> Any:
    if trigger == "available-now":
        return writer.trigger(availableNow=True)
    if trigger.startswith("processing-time:"):
        return writer.trigger(processingTime=trigger.split(":", 1)[1])
    raise ValueError(f"unknown trigger {trigger!r}: use available-now or processing-time:<interval>")


def build(spark: Any, cfg: DerivedFeedConfig) -> list[Any]:
    """The two queries' writers (not started): counts and dead letters to topics, and the
    final counts to Parquet."""
    from pyspark.sql import functions as F

    parsed = parse_events(_source(spark, cfg))
    counts = visit_counts(parsed, cfg.watermark)
    to_topics = count_records(counts, cfg.output_topic).unionByName(
        dead_letters(parsed, cfg.dead_letter_topic))
    sink_options = {"kafka.bootstrap.servers": cfg.bootstrap_servers}
    sink_options.update({f"kafka.{k}": v for k, v in cfg.kafka.items() if k != "isolation.level"})

    def write_batch(batch: Any, batch_id: int) -> None:
        # Python sinks accept only append mode, so update-mode output goes through
        # foreachBatch and the batch writer (at-least-once, as the streaming sink would be).
        batch.write.format(FORMAT).options(**sink_options).mode("append").save()

    topic_writer = (to_topics.writeStream.queryName(f"{cfg.name}-topic").outputMode("update")
                    .foreachBatch(write_batch)
                    .option("checkpointLocation", f"{cfg.checkpoint_dir}/topic"))
    final = counts.withColumn("date", F.to_date("window_start"))
    parquet_writer = (final.writeStream.queryName(f"{cfg.name}-parquet").outputMode("append")
                      .format("parquet").partitionBy("granularity", "date")
                      .option("path", cfg.parquet_path)
                      .option("checkpointLocation", f"{cfg.checkpoint_dir}/parquet"))
    return [_trigger(topic_writer, cfg.trigger), _trigger(parquet_writer, cfg.trigger)]


def start(spark: Any, cfg: DerivedFeedConfig) -> list[Any]:
    """Start both queries; they run until stopped (or, with available-now, until done)."""
    return [writer.start() for writer in build(spark, cfg)]


def run(spark: Any, cfg: DerivedFeedConfig) -> list[Any]:
    """Run the queries: one after the other with available-now (each drains the backlog and
    stops; no point competing for cores), else together until one of them stops."""
    queries: list[Any] = []
    try:
        if cfg.trigger == "available-now":
            for writer in build(spark, cfg):
                queries.append(writer.start())
                queries[-1].awaitTermination()
        else:
            queries = start(spark, cfg)
            spark.streams.awaitAnyTermination()
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    for q in queries:
        error = q.exception()
        if error is not None:
            raise RuntimeError(f"query {q.name} failed: {error}")
    return queries
