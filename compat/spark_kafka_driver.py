"""A Spark driver with Spark's own Kafka connector, run by compat/spark_kafka.py in the PySpark
4.2 virtualenv (never imported by the project's code, which runs PySpark 4.3).

    python spark_kafka_driver.py '{"master": "local[2]", "jars": [...], "conf": {...}}'

Answers {"spark": VERSION} once its session is up, then one JSON line per command line on
stdin, {"error": ...} when a command fails. Commands copy a source into a sink:

- ``{"op": "batch", "source": S, "sink": K, "select": [expr, ...]}``
- ``{"op": "stream", "source": S, "sink": K, "select": [...], "checkpoint": DIR}``: a streaming
  query with Trigger.AvailableNow (it drains what the source holds and stops); with
  ``"batch_cpu": true`` the answer also holds the driver's process-tree CPU at the end of each
  micro-batch with records (bench/stream_cpu.py);

S is ``{"format": "kafka", "options": {...}}``, ``{"format": "parquet", "path": P}`` or
``{"range": N, "prefix": "v-"}`` (rows key = str(i), value = prefix + str(i)); K is
``{"format": "kafka", "options": {...}}``, ``{"format": "parquet", "path": P}`` or
``{"format": "jsonl", "path": P}`` (rows collected to the driver and written as JSON lines,
binary columns as hex). The answer holds the rows copied and the seconds the copy took.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.stream_cpu


def source_frame(spark: Any, src: dict[str, Any], stream: bool) -> Any:
    if "range" in src:
        return spark.range(int(src["range"])).selectExpr(
            "CAST(id AS STRING) AS key", f"CONCAT('{src.get('prefix', 'v-')}', id) AS value")
    reader = spark.readStream if stream else spark.read
    if src["format"] == "parquet":
        if stream:
            schema = spark.read.parquet(src["path"]).schema
            return reader.schema(schema).parquet(src["path"])
        return reader.parquet(src["path"])
    return reader.format(src["format"]).options(**src.get("options", {})).load()


def to_jsonable(row: Any) -> dict[str, Any]:
    out = {}
    for k, v in row.asDict().items():
        out[k] = v.hex() if isinstance(v, bytes | bytearray) else (
            str(v) if hasattr(v, "isoformat") else v)
    return out


def batch(spark: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    df = source_frame(spark, cmd["source"], stream=False)
    if cmd.get("select"):
        df = df.selectExpr(*cmd["select"])
    sink = cmd["sink"]
    rows = None
    if sink["format"] == "jsonl":
        collected = df.collect()
        with open(sink["path"], "w") as f:
            for r in collected:
                f.write(json.dumps(to_jsonable(r)) + "\n")
        rows = len(collected)
    elif sink["format"] == "parquet":
        df.write.parquet(sink["path"])
    else:
        df.write.format(sink["format"]).options(**sink.get("options", {})).mode("append").save()
    return {"rows": rows, "seconds": time.monotonic() - t0}


def stream(spark: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    df = source_frame(spark, cmd["source"], stream=True)
    if cmd.get("select"):
        df = df.selectExpr(*cmd["select"])
    sink = cmd["sink"]
    writer = df.writeStream.option("checkpointLocation", cmd["checkpoint"])
    if sink["format"] == "parquet":
        writer = writer.format("parquet").option("path", sink["path"])
    else:
        writer = writer.format(sink["format"]).options(**sink.get("options", {}))
    listener = None
    if cmd.get("batch_cpu"):  # CPU at each batch's end: the stream's steady-state cost
        from bench.stream_cpu import batch_cpu_listener

        listener = batch_cpu_listener()
        spark.streams.addListener(listener)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(float(cmd.get("timeout", 600)))
    if listener is not None:
        spark.streams.removeListener(listener)
    if query.isActive:
        query.stop()
        raise RuntimeError("the streaming query did not finish in time")
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    answer = {"rows": sum(p["numInputRows"] for p in progress), "batches": len(progress),
              "seconds": time.monotonic() - t0}
    if listener is not None:
        answer["batch_cpu"] = listener.samples
    return answer


def main(setup_json: str) -> int:
    setup = json.loads(setup_json)
    # Answers go to the original stdout; everything else that writes to fd 1 (the JVM Spark
    # starts inherits it) goes to stderr, the log, and cannot break the protocol.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(setup["master"]).appName("spark-kafka-connector")
               .config("spark.jars", ",".join(setup["jars"]))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC"))
    for k, v in setup.get("conf", {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    out.write(json.dumps({"spark": spark.version}) + "\n")
    out.flush()
    ops = {"batch": batch, "stream": stream}
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            answer = ops[cmd["op"]](spark, cmd)
        except Exception as e:  # the answer carries it; the driver keeps serving
            answer = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
