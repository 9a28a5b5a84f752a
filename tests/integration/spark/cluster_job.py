"""A streaming strom -> strom copy with exactlyOnce=true, driven from its own process against a
Spark standalone master, for test_spark_cluster.py (which kills it and starts it again).

    python cluster_job.py MASTER BOOTSTRAP SOURCE SINK CHECKPOINT MAX_OFFSETS TRIGGER TASK_ROWS

TRIGGER is "continuous" (the default trigger, runs until killed) or "available-now" (drains the
source and exits 0). TASK_ROWS is the rows a task reads (MAX_OFFSETS per source partition): the
last of them is held back for a second (in the JVM, between the Python source and the Python
sink), and the sink gets Arrow batches of 100 rows through a 2 KiB stream buffer (Spark's 64 KiB
default would hold the small rows back until the end), so every task writes the rest of its rows
and then holds its transaction open, long enough for the test to kill it there.
"""

from __future__ import annotations

import os
import sys


def main(master: str, bootstrap: str, source: str, sink: str, checkpoint: str,
         max_offsets: str, trigger: str, task_rows: str) -> None:
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
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
             .config("spark.buffer.size", "2048")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    # the scheduler's task starts, ends and losses (at INFO): the test reads them
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.scheduler.TaskSetManager", jvm.org.apache.logging.log4j.Level.INFO)
    df = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", max_offsets).load()
          .selectExpr("key", "value", "reflect('java.lang.Thread', 'sleep', CAST(IF(offset % "
                      f"{int(task_rows)} = {int(task_rows) - 1}, 1000, 0) AS BIGINT)) AS pace"))
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
    main(*sys.argv[1:9])
