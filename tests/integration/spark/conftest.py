"""Fixtures for the Spark tests: one local SparkSession for the whole run, helpers to fill and
read topics. Every test here is marked ``spark`` (select them with ``-m spark``).

The broker fixtures (``strom_broker``, ``make_broker``, ``unique_topic``) come from
tests/integration/conftest.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

if importlib.util.find_spec("pyspark") is None:
    MISSING = "PySpark is not installed (pip install 'strom[spark]')"
elif shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    MISSING = "Java is not installed (Spark needs a JRE 17+)"
else:
    MISSING = None

# Settings measured to keep a local[2] session and its micro-batches quick (see
# shared/notes/spark-python-datasource.md).
TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.maintenanceInterval": "600s",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs a local Spark (Java + PySpark)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
            if MISSING:
                item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from strom.spark.session import local_session

    # local[2,3]: two cores, and up to 3 attempts per task, as on a cluster (plain local[N]
    # never retries a failed task; the exactly-once sink's retry test needs retries)
    session = local_session("strom-tests", "local[2,3]", TEST_CONF, log_level="ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def tmp_dir(tmp_path: Path) -> Path:
    return tmp_path


# --------------------------------------------------------------------------------------------
# topic helpers
# --------------------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                  operation_timeout=30)
    for f in futures.values():
        f.result(timeout=30)
    wait_for(lambda: len(admin.list_topics(name, timeout=10).topics[name].partitions) == partitions
             and admin.list_topics(name, timeout=10).topics[name].error is None,
             f"topic {name} ready")


def produce(bootstrap: str, topic: str, records: Iterable[dict[str, Any]]) -> int:
    """Produce ``{"value", "key"?, "partition"?, "headers"?, "timestamp"?}`` dicts; all acked."""
    failures: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                  "partitioner": "murmur2_random"})
    n = 0
    for r in records:
        kwargs = {k: r[k] for k in ("key", "partition", "headers", "timestamp") if k in r}
        while True:
            try:
                p.produce(topic, r.get("value"), on_delivery=lambda e, m: e and failures.append(e),
                          **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
    assert p.flush(30) == 0
    assert not failures, failures[:3]
    return n


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 60.0,
             interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except Exception as e:  # e.g. metadata not there yet
            last_error = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


def read_all(spark: Any, bootstrap: str, topic: str, **options: str) -> list[Any]:
    reader = (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().collect()


PYTHON = sys.executable


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, ()))
    return found


def consume_all(bootstrap: str, topic: str, isolation: str = "read_committed",
                timeout: float = 60.0) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of ``topic`` as confluent-kafka reads it: (partition, offset, key, value),
    read up to the end offsets (the last stable offsets for ``read_committed``) of the moment
    of the call."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-check",
                  "enable.auto.commit": False, "isolation.level": isolation})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout

        def behind() -> bool:
            positions = c.position([TopicPartition(topic, p) for p in parts])
            return any(tp.offset < ends[tp.partition] for tp in positions if ends[tp.partition])

        while behind():
            assert time.monotonic() < deadline, f"timed out reading back {topic}"
            for m in c.consume(5000, 0.2):
                if m.error() is None:
                    out.append((m.partition(), m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()
