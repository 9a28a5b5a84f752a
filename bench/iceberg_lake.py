"""The harness side of the ``iceberg-1k`` scenario (issue 33): a Strom broker with Iceberg
topics on, what its tables cover, the lag from produce to a visible row, and Spark's lake load.

- :class:`WithIceberg` starts Strom with ``iceberg.enable=true`` and a SQLite catalog and a
  warehouse inside the run's data directory (:func:`catalog_file`, :func:`warehouse_dir`).
- :class:`Lake` reads that catalog with pyiceberg's ``SqlCatalog``, as any reader of the tables
  would: a table covers what its current snapshot's ``strom.offsets`` says (the summary the
  lake writer adds to each commit: partition -> the next offset to write).
- :func:`measure_lag` produces single records at a steady rate (a producer thread in this
  process, linger 0, acks=1) while reading the catalog every :data:`POLL_S`; a record's lag is
  from just before its ``produce()`` to the end of the first catalog read that shows it.
- :func:`lake_load` runs ``strom pipeline run lake-load --target iceberg`` in the PySpark 4.1
  virtualenv of compat/spark_iceberg.py, as tests/integration/spark/test_iceberg_lake_load.py
  does, and reads its own account of the load from its output.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.brokers import Command
from bench.procstat import helper_pid
from bench.tls import TlsFiles

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "strom"  # iceberg.namespace's default: tables are strom.<topic>
CATALOG = "strom"  # iceberg.catalog.name's default
OFFSETS = "strom.offsets"  # in each of the lake writer's snapshot summaries
POLL_S = 0.05  # between two reads of the catalog while a lag is measured
COVER_POLL_S = 0.1  # between two reads while waiting for a table to cover a backlog


class LakeError(RuntimeError):
    """A table that did not appear or fill in time, or a Spark load that failed."""


def catalog_file(data_dir: Path) -> Path:
    return data_dir / "lake" / "catalog.db"


def warehouse_dir(data_dir: Path) -> Path:
    return data_dir / "lake" / "warehouse"


@dataclass(frozen=True)
class WithIceberg:
    """A Strom :class:`Command` with Iceberg topics on: the broker runs its lake writer, the
    catalog is a SQLite file and the warehouse a directory, both in the run's data directory."""

    inner: Command

    def __call__(self, port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        catalog_file(data_dir).parent.mkdir(parents=True, exist_ok=True)
        settings = ("iceberg.enable=true",
                    f"iceberg.catalog.uri=sqlite:///{catalog_file(data_dir)}",
                    f"iceberg.catalog.warehouse={warehouse_dir(data_dir).as_uri()}")
        return [*self.inner(port, data_dir, tls), *(a for s in settings for a in ("--override", s))]


def covered(offsets: str | None) -> int:
    """Records a snapshot covers from its ``strom.offsets`` (partition -> next offset, as
    JSON), for a topic whose partitions start at offset 0; 0 without one."""
    return sum(int(v) for v in json.loads(offsets).values()) if offsets else 0


def partition_end(offsets: str | None, partition: int) -> int:
    """The next offset to write of ``partition`` in a ``strom.offsets`` value (0: none yet)."""
    return int(json.loads(offsets).get(str(partition), 0)) if offsets else 0


class Lake:
    """The broker's Iceberg catalog, read through pyiceberg (made once the writer made the
    SQLite file, so that the writer, not this reader, creates the catalog's tables)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._catalog: Any = None

    def catalog(self, timeout: float = 60.0) -> Any:
        if self._catalog is None:
            deadline = time.monotonic() + timeout
            while not catalog_file(self.data_dir).exists():
                if time.monotonic() > deadline:
                    raise LakeError(f"no catalog at {catalog_file(self.data_dir)} after "
                                    f"{timeout:.0f} s: is the lake writer running?")
                time.sleep(0.05)
            from pyiceberg.catalog.sql import SqlCatalog

            self._catalog = SqlCatalog(CATALOG, uri=f"sqlite:///{catalog_file(self.data_dir)}",
                                       warehouse=warehouse_dir(self.data_dir).as_uri())
        return self._catalog

    def wait_table(self, topic: str, timeout: float = 60.0) -> None:
        """Until the writer has made the topic's table (it has then started reading it)."""
        deadline = time.monotonic() + timeout
        while not self.catalog(timeout).table_exists((NAMESPACE, topic)):
            if time.monotonic() > deadline:
                raise LakeError(f"no Iceberg table {NAMESPACE}.{topic} after {timeout:.0f} s")
            time.sleep(0.1)

    def offsets(self, topic: str) -> str | None:
        """The current snapshot's ``strom.offsets`` (None: nothing committed yet)."""
        table = self.catalog().load_table((NAMESPACE, topic))
        snapshot = table.current_snapshot()
        if snapshot is None or snapshot.summary is None:
            return None
        return snapshot.summary.additional_properties.get(OFFSETS)

    def covered(self, topic: str) -> int:
        return covered(self.offsets(topic))

    def wait_covered(self, topic: str, records: int, timeout: float) -> float:
        """Until the table covers ``records`` records; the monotonic time it was seen."""
        deadline = time.monotonic() + timeout
        while True:
            have = self.covered(topic)
            now = time.monotonic()
            if have >= records:
                return now
            if now > deadline:
                raise LakeError(f"{NAMESPACE}.{topic} covers {have} of {records} records after "
                                f"{timeout:.0f} s")
            time.sleep(COVER_POLL_S)


def cover_timeout(records: int) -> float:
    """A deadline for a table to take ``records`` that only a stuck writer misses."""
    return 60.0 + records / 1_000


def writer_pid(broker_pid: int) -> int | None:
    """The broker's lake writer process (``python -m strom.lake``), if it runs."""
    return helper_pid(broker_pid, "strom.lake")


def wait_busy(pid: int, share: float = 0.5, window: float = 0.1,
              timeout: float = 30.0) -> float:
    """Until process ``pid`` uses at least ``share`` of a core over a ``window``-second
    sample (the lake writer has started on a backlog); the seconds that took."""
    from bench.procstat import cpu_delta, cpu_sample

    began = time.monotonic()
    while True:
        before, t0 = cpu_sample(pid), time.monotonic()
        time.sleep(window)
        used = cpu_delta(before, cpu_sample(pid)) / (time.monotonic() - t0)
        if used >= share:
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            raise LakeError(f"the lake writer (pid {pid}) not busy after {timeout:.0f} s")


# -- the lag from produce to a visible row ------------------------------------------------------


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ascending ``sorted_values`` by nearest rank."""
    if not sorted_values:
        raise ValueError("no values")
    n = len(sorted_values)
    return sorted_values[min(n - 1, max(0, math.ceil(q * n) - 1))]


def visible_lags(sent: Mapping[int, float], reads: Sequence[tuple[float, int]]) -> list[float]:
    """Each record's lag, ascending: ``sent`` maps its offset to when it was sent; ``reads``
    are the catalog reads in order, (when the read ended, the partition's next offset in the
    table then). A record shows from the first read whose next offset is past its own; one
    that no read shows is left out (the caller counts them)."""
    lags = []
    ends = [end for _, end in reads]
    for offset, at in sent.items():
        for i, end in enumerate(ends):
            if end > offset:
                lags.append(reads[i][0] - at)
                break
    return sorted(lags)


@dataclass
class LagRun:
    sent: dict[int, float] = field(default_factory=dict)  # offset -> monotonic send time
    reads: list[tuple[float, int]] = field(default_factory=list)
    read_seconds: list[float] = field(default_factory=list)  # how long each read took
    failed: int = 0
    first_error: str | None = None
    late: int = 0  # sends more than 10 ms behind their schedule

    def lags(self) -> list[float]:
        return visible_lags(self.sent, self.reads)


def _paced(bootstrap: str, topic: str, rate: float, count: int, values: Sequence[bytes],
           run: LagRun) -> None:
    """Send ``count`` records to partition 0 of ``topic``, one every 1/``rate`` s."""
    from confluent_kafka import Producer

    from bench.config import PRODUCER_LATENCY

    lock = threading.Lock()

    def delivered(sent_at: float, err: Any, msg: Any) -> None:
        with lock:
            if err is not None:
                run.failed += 1
                run.first_error = run.first_error or str(err)
            else:
                run.sent[msg.offset()] = sent_at

    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_LATENCY, "acks": 1,
                  "delivery.report.only.error": False, "log_level": 0})
    start = time.monotonic()
    for seq in range(count):
        due = start + seq / rate
        while (wait := due - time.monotonic()) > 0:
            p.poll(wait)
        now = time.monotonic()
        if now - due > 0.01:
            run.late += 1
        p.produce(topic, values[seq % len(values)], partition=0,
                  on_delivery=partial(delivered, now))
        p.poll(0)
    left = p.flush(30)
    if left:
        run.failed += left
        run.first_error = run.first_error or f"{left} records not delivered in 30 s"


def measure_lag(lake: Lake, bootstrap: str, topic: str, rate: float, seconds: float,
                values: Sequence[bytes], settle: float = 30.0) -> LagRun:
    """Produce ``rate`` x ``seconds`` records to partition 0 of ``topic`` (an Iceberg topic
    whose table exists) while reading the table's offsets every :data:`POLL_S`, until the last
    one shows (or ``settle`` seconds after the producer ended)."""
    run = LagRun()
    count = max(1, int(rate * seconds))
    thread = threading.Thread(target=_paced, args=(bootstrap, topic, rate, count, values, run),
                              daemon=True)
    thread.start()
    deadline = None
    while True:
        t0 = time.monotonic()
        offsets = lake.offsets(topic)
        t1 = time.monotonic()
        run.reads.append((t1, partition_end(offsets, 0)))
        run.read_seconds.append(t1 - t0)
        if not thread.is_alive():
            deadline = deadline or t1 + settle
            last = max(run.sent, default=-1)
            if run.reads[-1][1] > last or t1 > deadline:
                break
        time.sleep(max(0.0, POLL_S - (time.monotonic() - t0)))
    thread.join(5)
    return run


# -- Spark's lake load ---------------------------------------------------------------------------

SPARK_ICEBERG = REPO / "compat" / "spark_iceberg.py"
LOAD_LINE = re.compile(r"lake-load: (\d+) records to (\S+) in snapshot \S+ in ([0-9.]+)s")
LOAD_TIMEOUT = 900.0


def spark_iceberg() -> Any:
    """compat/spark_iceberg.py, by path (compat/ is a directory of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("compat_spark_iceberg", SPARK_ICEBERG)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_load(stdout: str) -> tuple[int, float] | None:
    """(records, seconds) from the line ``strom pipeline run lake-load --target iceberg``
    prints after its commit (the seconds from its ``run()`` on: the Spark session is up)."""
    found = LOAD_LINE.search(stdout)
    return (int(found.group(1)), float(found.group(3))) if found else None


@dataclass(frozen=True)
class SparkLoad:
    records: int
    load_s: float  # the load itself, as the command reports it (Spark session already up)
    run_s: float  # the whole command: Python and the JVM starting, the session, the load


@dataclass(frozen=True)
class SparkEnv:
    python: Path
    jars: tuple[Path, ...]
    module: Any

    @classmethod
    def ensure(cls) -> SparkEnv:
        """The PySpark 4.1 virtualenv and Iceberg's jars (made on first use: minutes)."""
        module = spark_iceberg()
        python, jars = module.ensure_all()
        return cls(python, tuple(jars), module)

    def command(self, bootstrap: str, topic: str, base: Path, master: str,
                registry: str | None, shuffle_partitions: int) -> list[str]:
        cmd = [str(self.python), "-c", "from strom.cli.main import main; main()",
               "pipeline", "run", "lake-load", "-b", bootstrap, "--topic", topic,
               "--target", "iceberg", "--catalog-uri", str(base / "catalog.db"),
               "--warehouse", str(base / "warehouse"), "--master", master,
               "--conf", "spark.jars=" + ",".join(str(j) for j in self.jars),
               "--conf", f"spark.sql.shuffle.partitions={shuffle_partitions}"]
        if registry is not None:
            cmd += ["--schema-registry", registry]
        return cmd

    def load(self, bootstrap: str, topic: str, base: Path, *, master: str = "local[2]",
             registry: str | None = None, shuffle_partitions: int = 6) -> SparkLoad:
        """One ``lake-load`` of ``topic`` into ``base``'s catalog; raises :class:`LakeError`
        if it fails or says nothing of its load."""
        base.mkdir(parents=True, exist_ok=True)
        cmd = self.command(bootstrap, topic, base, master, registry, shuffle_partitions)
        began = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LOAD_TIMEOUT,
                                  cwd=base, env=self.module.child_env(self.python),
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise LakeError(f"lake-load of {topic} took over {LOAD_TIMEOUT:.0f} s") from e
        took = time.monotonic() - began
        found = parse_load(proc.stdout) if proc.returncode == 0 else None
        if found is None:
            raise LakeError(f"lake-load of {topic} failed (exit {proc.returncode}): "
                            f"{proc.stdout.strip()[-300:]} {proc.stderr.strip()[-600:]}")
        return SparkLoad(found[0], found[1], took)
