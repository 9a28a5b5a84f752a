"""Kafka Connect 4.4 in distributed mode against one Strom broker, unmodified.

One worker (module-scoped: its JVM start-up is the cost) runs with exactly-once source support,
so it exercises what Connect asks of a broker: its config, offset and status topics created
compacted through the admin API, a group of workers, transactional producers (fenced by their
successors, and through the admin's fenceProducers when a connector's task count changes),
read_committed consumers, and offsets committed by sink tasks.

- FileStreamSource -> topic -> FileStreamSink copies a file of 100,000 lines exactly; the worker
  is then stopped and once killed (SIGKILL) while the file keeps growing, and restarted.
- A sink with ``errors.tolerance=all`` routes the records it cannot convert to a dead-letter topic
  with Connect's error headers.
- MirrorMaker's source connector, run on the worker with two exactly-once tasks, is cut to one
  task: the leader fences the old tasks' producers with fenceProducers, and the mirrored topic
  still holds every record once.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from ..broker import BrokerProcess, free_port
from .connect import ConnectWorker
from .jvm import wait_until

GROUP = "strom-connect"
INTERNAL = {"config.storage.topic": "strom-connect-configs",
            "offset.storage.topic": "strom-connect-offsets",
            "status.storage.topic": "strom-connect-status"}
STRING = "org.apache.kafka.connect.storage.StringConverter"
BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"


def worker_settings(bootstrap: str) -> dict[str, object]:
    """Kafka's config/connect-distributed.properties, with timings short enough for a test."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "key.converter": JSON,
        "value.converter": JSON,
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        **INTERNAL,
        "offset.storage.replication.factor": 1,
        "config.storage.replication.factor": 1,
        "status.storage.replication.factor": 1,
        "offset.flush.interval.ms": 1000,
        # KIP-618: source tasks write records and offsets in one transaction each.
        "exactly.once.source.support": "enabled",
        # Sink tasks then read only committed records (Kafka's advice with exactly-once sources).
        "consumer.isolation.level": "read_committed",
        # A killed worker's sink consumers leave their groups after 6 s, not the default 45 s.
        "consumer.session.timeout.ms": 6000,
        "consumer.heartbeat.interval.ms": 1000,
        # A restarted (or killed) worker gets its connectors back at once, not after 5 minutes.
        "scheduled.rebalance.max.delay.ms": 0,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "plugin.discovery": "service_load",  # the jars carry manifests: no classpath scan
    }


@pytest.fixture(scope="module")
def worker(strom_broker: BrokerProcess, connect_classpath: list[Path], module_jvms,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectWorker]:
    w = ConnectWorker(module_jvms, connect_classpath, tmp_path_factory.mktemp("connect"),
                      worker_settings(strom_broker.bootstrap), free_port())
    w.start()
    yield w


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    a = admin(broker)  # held: the futures fail if the client is collected first
    a.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def committed(broker: BrokerProcess, group: str, topic: str) -> int:
    """The offset ``group`` committed on partition 0 of ``topic`` (-1 if none)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        c.close()


def caught_up(broker: BrokerProcess, group: str, topic: str) -> bool:
    """``group`` committed past the last record of partition 0 of ``topic``: it handled them all.

    A sink commits the offset after the last record it was given, so a transaction marker after
    that record is not counted: the records are read (the last few) to find the last one.
    """
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tail-reader",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        _, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, max(end - 10, 0))])
        last = -1
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(m.error())
            last = m.offset()
    finally:
        c.close()
    return last >= 0 and committed(broker, group, topic) == last + 1


def read_topic(broker: BrokerProcess, topic: str, isolation: str = "read_committed",
               timeout: float = 60.0, partition: int = 0) -> list:
    """Every record of one partition of ``topic`` up to its (last stable) end offset."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{time.time_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(m.error())
            out.append(m)
        raise AssertionError(f"reading {topic} took over {timeout:.0f} s ({len(out)} records)")
    finally:
        c.close()


def file_lines(path: Path) -> list[str]:
    """Whole lines only: a line the sink is half-way through writing is not counted."""
    try:
        data = path.read_text()
    except FileNotFoundError:
        return []
    return data.split("\n")[:-1]


class Appender(threading.Thread):
    """Appends numbered lines to the source file in small chunks (a stream, not one write) from
    ``first`` on, until ``finish()``: whatever the test does meanwhile happens mid-stream."""

    def __init__(self, path: Path, first: int, chunk: int = 100, pause: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.path, self.chunk, self.pause = path, chunk, pause
        self.last = first - 1  # the last line written
        self._done = threading.Event()

    def run(self) -> None:
        with open(self.path, "a") as f:
            while not self._done.is_set():
                start, self.last = self.last + 1, self.last + self.chunk
                f.write("".join(f"line-{i}\n" for i in range(start, self.last + 1)))
                f.flush()
                time.sleep(self.pause)

    def finish(self) -> int:
        """Stop appending; returns the number of the last line written."""
        self._done.set()
        self.join(10)
        return self.last


def lines(first: int, last: int) -> list[str]:
    return [f"line-{i}" for i in range(first, last + 1)]


def redelivered(sink: list[str], source: list[str], resumed_at: int) -> int:
    """How many lines ``sink`` repeats, checking it is ``source[:k] + source[resumed_at:]``.

    That is what an at-least-once sink may write after a crash: everything once, in order,
    except the lines from the one at its last committed offset (``source[resumed_at]``) on,
    which it writes again.
    """
    extra = len(sink) - len(source)
    assert extra >= 0, f"the sink lost {-extra} lines"
    k = resumed_at + extra
    if sink != source[:k] + source[resumed_at:]:
        first = next(i for i, (a, b) in enumerate(zip(sink, source, strict=False)) if a != b)
        raise AssertionError(f"sink is not the source with lines {resumed_at}..{k} written twice: "
                             f"it has {len(sink)} lines, the first unexpected one is "
                             f"{sink[first]!r} at {first}, after {sink[first - 2:first]}")
    return extra


def test_internal_topics_created_compacted(worker: ConnectWorker,
                                           strom_broker: BrokerProcess) -> None:
    """The worker created its three topics itself (CreateTopics), compacted, as Connect demands."""
    a = admin(strom_broker)
    topics = a.list_topics(timeout=10).topics
    for name in INTERNAL.values():
        assert name in topics, f"{name} missing: {sorted(topics)}"
        res = ConfigResource("topic", name)
        configs = a.describe_configs([res])[res].result(timeout=10)
        assert configs["cleanup.policy"].value == "compact", name
    # Kafka's defaults for Connect's topics: 25 offset partitions, 5 status, 1 config.
    assert len(topics[INTERNAL["offset.storage.topic"]].partitions) == 25
    assert len(topics[INTERNAL["status.storage.topic"]].partitions) == 5
    assert len(topics[INTERNAL["config.storage.topic"]].partitions) == 1


def test_dead_letter_queue(worker: ConnectWorker, strom_broker: BrokerProcess, tmp_path: Path,
                           unique_topic) -> None:
    """Records the JsonConverter cannot read go to the DLQ with their context; the rest to the file."""
    raw, dlq = unique_topic("raw"), unique_topic("dlq")
    create_topic(strom_broker, raw)
    sent: list[tuple[bytes, bytes]] = []
    p = Producer({"bootstrap.servers": strom_broker.bootstrap})
    for i in range(60):
        value = f'"good-{i}"'.encode() if i % 4 else f"bad-{i} {{not json".encode()
        sent.append((f"k{i}".encode(), value))
        p.produce(raw, key=f"k{i}".encode(), value=value)
    assert p.flush(30) == 0
    bad = {off: kv for off, kv in enumerate(sent) if off % 4 == 0}
    sink = tmp_path / "good.txt"
    name = f"dlq-sink-{raw.rsplit('.', 1)[-1]}"
    worker.put_connector(name, {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1", "topics": raw, "file": str(sink),
        "key.converter": STRING,
        "value.converter": JSON, "value.converter.schemas.enable": "false",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
    })
    try:
        worker.wait_running(name)
        # Done when the sink's group committed past the last record: every record was handled.
        wait_until(lambda: caught_up(strom_broker, f"connect-{name}", raw), 60,
                   "the DLQ sink to commit every record")
        assert file_lines(sink) == [f"good-{i}" for i in range(len(sent)) if i % 4]

        dead = read_topic(strom_broker, dlq)
        assert [(m.key(), m.value()) for m in dead] == list(bad.values())
        for m, offset in zip(dead, bad, strict=True):
            headers = {k: v.decode() for k, v in m.headers()}
            assert headers["__connect.errors.topic"] == raw
            assert headers["__connect.errors.partition"] == "0"
            assert headers["__connect.errors.offset"] == str(offset)
            assert headers["__connect.errors.connector.name"] == name
            assert headers["__connect.errors.task.id"] == "0"
            assert headers["__connect.errors.stage"] == "VALUE_CONVERTER"
            assert headers["__connect.errors.class.name"] == JSON
            assert headers["__connect.errors.exception.class.name"] == \
                "org.apache.kafka.connect.errors.DataException"
            assert "__connect.errors.exception.stacktrace" in headers
    finally:
        worker.delete_connector(name)


def test_task_count_change_fences_zombies(worker: ConnectWorker, strom_broker: BrokerProcess,
                                          unique_topic) -> None:
    """Fewer exactly-once tasks: the leader fences the old ones with the admin's fenceProducers.

    Connect skips that round while a connector has one task (its successor's producer fences
    it), so MirrorMaker's source connector runs here as a plain connector with two tasks (one
    per partition of a topic mirrored within the same broker), then is cut to one.
    """
    topic = unique_topic("mirrored")
    create_topic(strom_broker, topic, partitions=2)
    remote = f"origin.{topic}"
    name = f"mirror-{topic.rsplit('.', 1)[-1]}"
    p = Producer({"bootstrap.servers": strom_broker.bootstrap})

    def produce(first: int, last: int) -> None:
        for i in range(first, last):
            p.produce(topic, value=f"r{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0

    def mirrored() -> list[str]:
        return sorted(m.value().decode() for part in (0, 1)
                      for m in read_topic(strom_broker, remote, partition=part))

    def connector(tasks: int) -> dict[str, str]:
        return {"connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
                "tasks.max": str(tasks), "exactly.once.support": "required",
                "key.converter": BYTES, "value.converter": BYTES,
                "source.cluster.alias": "origin", "target.cluster.alias": "local",
                "source.cluster.bootstrap.servers": strom_broker.bootstrap,
                "target.cluster.bootstrap.servers": strom_broker.bootstrap,
                "topics": re.escape(topic),
                # MirrorMaker's source supports exactly-once only when it reads read_committed.
                "consumer.isolation.level": "read_committed",
                "replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
                "sync.topic.acls.enabled": "false", "sync.topic.configs.enabled": "false"}

    produce(0, 200)
    # Worker logs its fencing rounds at DEBUG: raise that one logger through the REST API.
    worker.request("PUT", "/admin/loggers/org.apache.kafka.connect.runtime.Worker",
                   {"level": "DEBUG"})
    assert worker.jvm is not None
    since = len(worker.jvm.log())
    worker.put_connector(name, connector(tasks=2))
    try:
        worker.wait_running(name, tasks=2)
        expected = sorted(f"r{i}" for i in range(200))
        wait_until(lambda: mirrored() == expected, 60, f"200 records in {remote}")

        worker.put_connector(name, connector(tasks=1))
        worker.jvm.wait_for_log(rf"Finished fencing out 2 task producers for source connector "
                                rf"{name}", 60, since)
        worker.wait_running(name, tasks=1)
        produce(200, 400)
        expected = sorted(f"r{i}" for i in range(400))
        wait_until(lambda: mirrored() == expected, 60, f"400 records in {remote}, each once",
                   lambda: f"{len(mirrored())} records")
    finally:
        worker.delete_connector(name)


def test_file_pipeline_survives_stop_and_kill(worker: ConnectWorker, strom_broker: BrokerProcess,
                                              tmp_path: Path, unique_topic) -> None:
    """100,000 lines file -> topic -> file exactly; then a clean stop and a SIGKILL mid-stream.

    The source runs exactly-once (required): the topic must hold every line once, read_committed,
    whatever happened to the worker. The FileStream sink is at-least-once: after SIGTERM it
    commits what it wrote, so nothing repeats; after SIGKILL it may write again the lines after
    its last committed offset (one stretch, in order), which is measured.
    """
    topic = unique_topic("lines")
    create_topic(strom_broker, topic)
    src, dst = tmp_path / "source.txt", tmp_path / "sink.txt"
    src.write_text("".join(f"line-{i}\n" for i in range(1, 100_001)))
    base = {"tasks.max": "1", "key.converter": STRING, "value.converter": STRING}
    suffix = topic.rsplit(".", 1)[-1]
    source, sink = f"file-source-{suffix}", f"file-sink-{suffix}"
    worker.put_connector(source, {
        **base, "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "file": str(src), "topic": topic, "exactly.once.support": "required"})
    worker.put_connector(sink, {
        **base, "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "file": str(dst), "topics": topic})
    try:
        worker.wait_running(source)
        worker.wait_running(sink)
        started = time.monotonic()
        wait_until(lambda: len(file_lines(dst)) >= 100_000, 120, "100,000 lines in the sink file",
                   lambda: f"{len(file_lines(dst))} lines")
        print(f"100,000 lines through Connect in {time.monotonic() - started:.1f} s")
        assert dst.read_text() == src.read_text()

        # A clean stop while lines keep arriving: nothing lost, nothing repeated.
        appender = Appender(src, 100_001)
        appender.start()
        wait_until(lambda: len(file_lines(dst)) >= 105_000, 60, "the sink to move on")
        worker.stop()
        worker.start()
        last = appender.finish()
        wait_until(lambda: file_lines(dst)[-1:] == [f"line-{last}"], 120,
                   f"line {last} in the sink file after a restart",
                   lambda: f"{len(file_lines(dst))} lines")
        wait_until(lambda: caught_up(strom_broker, f"connect-{sink}", topic), 30,
                   "the sink to commit the end of the topic")
        assert file_lines(dst) == lines(1, last)

        # SIGKILL while lines keep arriving, then a restart.
        appender = Appender(src, last + 1)
        appender.start()
        wait_until(lambda: len(file_lines(dst)) >= last + 5_000, 60, "the sink to move on")
        worker.kill()
        resumed_at = committed(strom_broker, f"connect-{sink}", topic)  # where the sink restarts
        worker.start()
        last = appender.finish()
        expected = lines(1, last)
        wait_until(lambda: file_lines(dst)[-1:] == [f"line-{last}"], 120,
                   f"line {last} in the sink file after a restart",
                   lambda: f"{len(file_lines(dst))} lines")
        # Exactly-once source: each line once in the topic, in order, for read_committed readers.
        records = read_topic(strom_broker, topic)
        assert [m.value().decode() for m in records] == expected
        everything = read_topic(strom_broker, topic, isolation="read_uncommitted")
        print(f"records in the topic: {len(records)} committed, "
              f"{len(everything) - len(records)} more in aborted transactions")

        # The sink wrote again what came after its committed offset (an offset in the topic, where
        # each transaction's commit marker takes one offset too, hence the look-up).
        resume_line = next(i for i, m in enumerate(records) if m.offset() >= resumed_at)
        repeated = redelivered(file_lines(dst), expected, resume_line)
        print(f"sink lines written again after SIGKILL: {repeated}")
    finally:
        for name in (source, sink):
            worker.delete_connector(name)
