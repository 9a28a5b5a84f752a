"""The ``strom`` format on a real Spark cluster: a standalone master and two workers started from
PySpark's own distribution on 127.0.0.1, executors in their own JVMs with their own Python
workers, a driver in a process of its own. Nothing is shared but the network and the checkpoint
directory.

A streaming strom -> strom copy with exactlyOnce=true survives a SIGKILL of a worker (with its
executor and Python workers) mid-stream and a SIGKILL of the driver (restarted on the same
checkpoint); the output topic then holds every input record exactly once for read_committed
consumers.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from .conftest import consume_all, create_topic, produce, wait_for
from .standalone import Cluster, Proc

JOB = Path(__file__).with_name("cluster_job.py")
RECORDS = 20_000
SOURCE_PARTITIONS = 2  # one task per executor and micro-batch
MAX_OFFSETS = 4_000  # five micro-batches
# 60-80 s measured on the 2-core machine at load average 5 (other test runs beside it): nine
# JVMs and their Python workers start in this test.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        c.start_worker()
        c.start_worker()
        wait_for(lambda: c.alive_workers() == 2, "a master with two workers", timeout=60)
        yield c
    finally:
        c.stop()


def numbered(d: Path) -> set[int]:
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def running_tasks(worker: Proc) -> set[str]:
    """Task ids the worker's executors started and have not finished (their logs)."""
    text = "".join(p.read_text(errors="replace")
                   for p in Path(worker.work_dir).glob("app-*/*/stderr"))
    started = set(re.findall(r"Running task .*?\(TID (\d+)\)", text))
    return started - set(re.findall(r"Finished task .*?\(TID (\d+)\)", text))


class OutputWatch:
    """Tells whether a transaction of the sink is open with records in the output topic: its
    end offset is then ahead of the last stable offset. A kill at that moment leaves records
    that only an abort (the restarted task's ``init_transactions``) can take back."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self.consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-watch",
                                    "isolation.level": iso})
                          for iso in ("read_committed", "read_uncommitted")]

    def open_transaction_records(self) -> bool:
        stable, end = ([c.get_watermark_offsets(TopicPartition(self.topic, p), 5)[1]
                        for p in range(self.partitions)] for c in self.consumers)
        return any(e > s for s, e in zip(stable, end, strict=True))

    def close(self) -> None:
        for c in self.consumers:
            c.close()


def test_exactly_once_through_worker_and_driver_kills(cluster, strom_broker, unique_topic,
                                                     tmp_path):
    bs, src, dst = strom_broker.bootstrap, unique_topic("src"), unique_topic("dst")
    create_topic(bs, src, SOURCE_PARTITIONS)
    create_topic(bs, dst, 2)
    # equal partitions: every micro-batch reads MAX_OFFSETS // SOURCE_PARTITIONS from each
    produce(bs, src, ({"partition": i % SOURCE_PARTITIONS, "key": b"k%d" % (i % 97),
                       "value": b"r%05d" % i} for i in range(RECORDS)))
    ck = tmp_path / "ck"  # the only thing the drivers share besides the network

    def driver(name: str, trigger: str) -> Proc:
        cmd = [sys.executable, str(JOB), cluster.url, bs, src, dst, str(ck), str(MAX_OFFSETS),
               trigger, str(MAX_OFFSETS // SOURCE_PARTITIONS)]
        proc = Proc(name, cmd, cluster.driver_env(), tmp_path)
        cluster.procs.append(proc)  # stopped with the cluster if the test fails
        return proc

    def progress(proc: Proc, min_commits: int) -> bool:
        """``min_commits`` batches done and the next one planned, not yet committed."""
        assert proc.alive(), f"{proc.name} exited:\n{proc.log_tail()}\n{cluster.logs()}"
        done, planned = numbered(ck / "commits"), numbered(ck / "offsets")
        return len(done) >= min_commits and len(planned) > len(done)

    watch = OutputWatch(bs, dst, 2)
    try:
        first = driver("driver-1", "continuous")
        # the application holds an executor on each worker before anything is killed
        wait_for(lambda: sum(w["coresused"] for w in cluster.state()["workers"]
                             if w["state"] == "ALIVE") == 2, "executors on both workers",
                 timeout=90)
        victim = cluster.workers[0]
        wait_for(lambda: progress(first, 1) and running_tasks(victim)
                 and watch.open_transaction_records(),
                 "a committed micro-batch, a task of the next one on the first worker and "
                 "records of an open transaction", timeout=90, interval=0.01)
        victim.kill9()  # the worker JVM, its executor JVM and that executor's Python workers
        at_kill = len(numbered(ck / "commits"))
        cluster.start_worker()  # a replacement machine joins; the query must not need it

        # the query goes on: more batches commit, then the driver dies in the middle of one
        wait_for(lambda: progress(first, at_kill + 1) and watch.open_transaction_records(),
                 "one more committed micro-batch, and records of the next one written",
                 timeout=120, interval=0.01)
        first.kill9()
    finally:
        watch.close()
    committed_by_first = len(numbered(ck / "commits"))
    assert committed_by_first < RECORDS // MAX_OFFSETS, "finished before the driver was killed"
    # the worker's executor was lost with a task running, and Spark ran that task again
    log = first.log_path.read_text(errors="replace")
    lost = re.findall(r"task (\d+)\.0 in stage (\d+\.\d+) \(TID \d+\) failed because while it "
                      r"was being computed, its executor exited", log)
    assert lost, first.log_tail()
    assert any(f"Finished task {t}.1 in stage {s} " in log for t, s in lost), first.log_tail()

    second = driver("driver-2", "available-now")  # same checkpoint: same query id, same batches
    wait_for(lambda: second.proc.poll() is not None, "the restarted driver to drain the topic",
             timeout=150)
    assert second.proc.returncode == 0, f"{second.log_tail()}\n{cluster.logs()}"
    assert len(numbered(ck / "commits")) > committed_by_first

    committed = consume_all(bs, dst, "read_committed")
    expected = Counter((b"k%d" % (i % 97), b"r%05d" % i) for i in range(RECORDS))
    got = Counter((k, v) for _, _, k, v in committed)
    assert [kv for kv, n in got.items() if n > 1] == []
    assert got == expected
    # the kills left transactions open with records in them, which were aborted (read_committed
    # skipped them): the output holds more records than a clean run writes
    assert len(consume_all(bs, dst, "read_uncommitted")) > RECORDS
