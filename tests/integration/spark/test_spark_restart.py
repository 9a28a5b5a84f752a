"""Kill the Spark driver mid-stream (SIGKILL, no chance to clean up), restart from the
checkpoint: the Parquet output holds every (partition, offset) exactly once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

from .conftest import PYTHON, create_topic, descendants, produce, wait_for

JOB = Path(__file__).with_name("stream_job.py")
RECORDS = {0: 600, 1: 450, 2: 300}


def numbered(d: Path) -> set[int]:
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def start_job(bootstrap, topic, out, ck, trigger, log):
    """The streaming query in a process of its own: the driver this test kills."""
    return subprocess.Popen(
        [PYTHON, str(JOB), bootstrap, topic, str(out), str(ck), "150", trigger],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def test_kill_driver_and_resume_exactly_once(spark, strom_broker, unique_topic, tmp_path):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 3)
    produce(bs, topic, ({"partition": p, "value": b"%d" % i}
                        for p, n in RECORDS.items() for i in range(n)))
    out, ck = tmp_path / "out", tmp_path / "ck"
    log_path = tmp_path / "job.log"
    with open(log_path, "ab") as log:
        proc = start_job(bs, topic, out, ck, "continuous", log)
        try:
            # Kill while a planned batch is not committed yet (offset log ahead of commits).
            def mid_batch():
                if proc.poll() is not None:
                    raise AssertionError(f"job exited early:\n{log_path.read_text()[-3000:]}")
                done, planned = numbered(ck / "commits"), numbered(ck / "offsets")
                return len(done) >= 2 and len(planned) > len(done)

            wait_for(mid_batch, "two committed batches and one in flight", timeout=150,
                     interval=0.02)
        finally:
            tree = descendants(proc.pid)
            for pid in tree:  # our job, its JVM and Python workers: all started by this test
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait(30)
        committed_before = len(numbered(ck / "commits"))
    assert committed_before < 9, "the job finished before it could be killed"

    # Restart from the checkpoint with another driver (this test's session): Spark replays
    # the batch that was in flight from its offset log, then reads the rest.
    restarted = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "100000").load()
                 .select("partition", "offset", "value"))
    q = (restarted.writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert not q.isActive and q.exception() is None

    rows = spark.read.parquet(str(out)).select("partition", "offset").collect()
    seen = Counter((r.partition, r.offset) for r in rows)
    assert [k for k, n in seen.items() if n > 1] == []
    assert sorted(seen) == [(p, o) for p, n in RECORDS.items() for o in range(n)]
    assert len(numbered(ck / "commits")) > committed_before
