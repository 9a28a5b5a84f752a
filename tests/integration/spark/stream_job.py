"""A streaming query in its own process (its own Spark driver), for the kill-and-restart test.

    python stream_job.py BOOTSTRAP TOPIC OUTPUT CHECKPOINT MAX_OFFSETS TRIGGER

TRIGGER is "continuous" (default trigger, runs until killed) or "available-now" (drains the
topic and exits). The query copies (partition, offset, value) to Parquet.
"""

from __future__ import annotations

import sys


def main(bootstrap: str, topic: str, output: str, checkpoint: str, max_offsets: str,
         trigger: str) -> None:
    from strom.spark.session import local_session

    spark = local_session("strom-stream-job", "local[2]", {
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    }, log_level="ERROR")
    df = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", max_offsets).load()
          .select("partition", "offset", "value"))
    writer = (df.writeStream.format("parquet").option("path", output)
              .option("checkpointLocation", checkpoint))
    if trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("STARTED", flush=True)
    query.awaitTermination()
    print("DONE", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:7])
