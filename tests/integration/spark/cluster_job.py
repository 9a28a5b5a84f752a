"""A streaming strom -> strom copy with exactlyOnce=true, driven from its own process against a
Spark standalone master, for test_spark_cluster.py (which kills it and starts it again).

    python cluster_job.py MASTER BOOTSTRAP SOURCE SINK CHECKPOINT MAX_OFFSETS TRIGGER

TRIGGER is "continuous" (the default trigger, runs until killed) or "available-now" (drains the
source and exits 0).
"""

from __future__ import annotations

import os
import sys


def main(master: str, bootstrap: str, source: str, sink: str, checkpoint: str,
         max_offsets: str, trigger: str) -> None:
    from pyspark.sql import SparkSession

    python = os.environ["PYSPARK_PYTHON"]  # the interpreter Strom is installed in
    jvm = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    spark = (SparkSession.builder.master(master).appName("strom-cluster-job")
             .config("spark.pyspark.python", python)
             .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
             .config("spark.executor.memory", "512m")
             .config("spark.executor.cores", "1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.extraJavaOptions", jvm)
             .config("spark.executor.extraJavaOptions", jvm)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    df = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", max_offsets).load()
          .selectExpr("key", "value"))
    writer = (df.writeStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", sink).option("exactlyOnce", "true")
              .option("checkpointLocation", checkpoint))
    if trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("STARTED", query.id, flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:8])
