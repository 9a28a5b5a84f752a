"""The CPU a running stream spends per record, without its start and stop.

A streaming query's first micro-batch pays for the query's start (for a Python source,
PySpark's source-runner process: about a second of CPU per query); a stream that keeps running
pays that once. :class:`BatchCpu`, a StreamingQueryListener, samples a process tree's CPU as
each micro-batch ends, so the CPU from the end of the first batch with records to the end of
the last, over the records of the batches in between, is what the stream costs per record once
it runs. Used in this checkout's driver (bench/spark_bench.py) and in the Kafka connector's
driver (compat/spark_kafka_driver.py), so both are measured the same way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from bench import procstat


def steady_cpu(samples: list[tuple[int, float, float]]) -> tuple[int, float, float]:
    """(records, CPU seconds, wall seconds) from the end of the first batch to the end of the
    last, given (records of the batch, CPU and monotonic time when it ended) per batch."""
    if len(samples) < 2:
        raise ValueError("a steady-state figure needs at least two micro-batches")
    first, last = samples[0], samples[-1]
    return sum(s[0] for s in samples[1:]), last[1] - first[1], last[2] - first[2]


def batch_cpu_listener(cpu: Callable[[], float] | None = None) -> Any:
    """A listener recording ``(records, cpu(), time.monotonic())`` when each batch with records
    ends; ``cpu``
    defaults to this process tree's CPU seconds. Register it with
    ``spark.streams.addListener``; read its ``samples``."""
    from pyspark.sql.streaming import StreamingQueryListener

    sample = cpu or (lambda: procstat.cpu_seconds(os.getpid()))

    class BatchCpu(StreamingQueryListener):
        def __init__(self) -> None:
            self.samples: list[tuple[int, float, float]] = []

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            rows = event.progress.numInputRows
            if rows > 0:
                self.samples.append((rows, sample(), time.monotonic()))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return BatchCpu()
