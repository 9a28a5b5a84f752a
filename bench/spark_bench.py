"""Spark <-> Strom throughput: records/s from a topic into Parquet and from a DataFrame into a
topic, with the CPU time of the broker and of Spark, and where the time goes.

    .venv/bin/python -m bench.spark_bench [--records 1000000] [--value-bytes 100]
                                          [--partitions 6] [--master local[2]] [--json PATH]

Steps (a fresh broker with its own data directory; nothing else is measured in between):
  1. produce the records (not timed as part of Spark);
  2. client only: read every partition's range into Arrow batches with the source's own
     readers in this process, the librdkafka one and the native one (the default): the
     per-record cost of the client outside Spark;
  3. spark.read.format("strom") -> Parquet (batch);
  4. spark.readStream.format("strom") -> Parquet (Trigger.AvailableNow, one micro-batch),
     then as a long-running stream would see it: micro-batches of a fifth of the backlog
     (five, or six when the per-partition split rounds down), timed from the first batch's
     start to the last one's end (query start and stop left out), and its steady state: CPU
     and time from the first batch's end to the last one's (bench/stream_cpu.py);
  5. Parquet -> df.write.format("strom") into a new topic (the sink);
  6. the same topic read, and the same Parquet written, by Spark's own Kafka connector
     (spark-sql-kafka-0-10, the Java client inside Spark's JVM): batch and stream reads into
     Parquet (and the steady state of a stream in micro-batches, as in step 4), batch writes
     into a new topic. Maven Central serves no connector for PySpark 4.3,
     so it runs at 4.2.0 in a driver process of its own from a cached virtualenv
     (compat/spark_kafka.py; the first run fetches it). --no-kafka-connector skips this step.
CPU: the broker's process tree, and Spark's (this process's tree: driver JVM, Python workers,
the driver itself, the connector's driver process) minus the broker's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import procstat
from bench.brokers import BrokerProcess, strom_spec
from bench.stream_cpu import batch_cpu_listener, steady_cpu

_SPARK_KAFKA = Path(__file__).resolve().parent.parent / "compat" / "spark_kafka.py"


@dataclass
class Phase:
    name: str
    records: int
    seconds: float
    broker_cpu: float
    spark_cpu: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        per = 1e6 / self.records if self.records else 0.0
        return (f"{self.name:34s} {self.records:>9,} rec {self.seconds:7.2f} s "
                f"{self.rate:>10,.0f} rec/s   broker cpu {self.broker_cpu:6.2f} s "
                f"({self.broker_cpu * per:5.2f} us/rec)   spark/client cpu {self.spark_cpu:6.2f} s "
                f"({self.spark_cpu * per:5.2f} us/rec)")


class Meter:
    """Wall time and CPU of the broker's tree and of the rest of this process's tree."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid

    def sample(self) -> tuple[float, float, float]:
        broker = procstat.cpu_seconds(self.broker_pid)
        everything = procstat.cpu_seconds(os.getpid())
        return time.monotonic(), broker, everything - broker

    def phase(self, name: str, records: int, before: tuple[float, float, float]) -> Phase:
        t, b, s = self.sample()
        return Phase(name, records, t - before[0], b - before[1], s - before[2])


def produce(bootstrap: str, topic: str, records: int, value_bytes: int, partitions: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 500000, "compression.type": "none"})
    value = os.urandom(value_bytes // 2 + 1).hex().encode()[:value_bytes]
    t0 = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
        if i % 20000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("produce did not finish")
    return time.monotonic() - t0


def client_only(bootstrap: str, topic: str, ends: dict[int, int], native: bool) -> int:
    """Read every partition into Arrow batches with the source's reader in this process: the
    native one (Strom's client and C decoder) or the librdkafka one (confluent-kafka)."""
    from strom.spark.consumer import ReadSettings, read_range
    from strom.spark.offsets import OffsetRange

    settings = ReadSettings(params=(("bootstrap.servers", bootstrap),), group_id="bench",
                            native=native)
    n = 0
    for p, end in ends.items():
        for batch in read_range(OffsetRange(topic, p, 0, end), settings):
            n += batch.num_rows
    return n


def _spark_kafka():
    """compat/spark_kafka.py, by path: compat/ is a directory of scripts, not a package."""
    spec = importlib.util.spec_from_file_location("compat_spark_kafka", _SPARK_KAFKA)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def topic_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records in ``topic`` (no transactions here: the sum of its high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                   for p in range(partitions))
    finally:
        c.close()


def kafka_connector_phases(args: argparse.Namespace, work: Path, bs: str, admin, meter: Meter,
                           parquet_in: Path) -> list[Phase]:
    """Spark's own Kafka connector on the same topic and the same Parquet input."""
    import pyarrow.parquet as pq
    from confluent_kafka.admin import NewTopic

    sk = _spark_kafka()
    sk.ensure_all()  # a first run fetches it: not timed
    phases: list[Phase] = []
    driver = sk.ConnectorDriver(work / "kafka-connector", args.master,
                                {"spark.sql.shuffle.partitions": str(args.partitions)})
    try:
        source = {"format": "kafka", "options": {"kafka.bootstrap.servers": bs,
                                                 "subscribe": "bench-in"}}
        label = f"Kafka connector {driver.version}:"
        warm = work / "kc-warm"
        driver.call("batch", source=source, select=["value"],
                    sink={"format": "parquet", "path": str(warm)})  # as the strom warm-up
        shutil.rmtree(warm, ignore_errors=True)
        for run in range(args.repeat):
            out = work / f"kc-parquet-batch-{run}"
            before = meter.sample()
            driver.call("batch", source=source, sink={"format": "parquet", "path": str(out)})
            phases.append(meter.phase(f"{label} topic -> Parquet (batch) #{run + 1}",
                                      args.records, before))
            assert pq.read_table(out).num_rows == args.records
        for run in range(args.repeat):
            out = work / f"kc-parquet-stream-{run}"
            stream_source = {"format": "kafka", "options": {**source["options"],
                                                            "startingOffsets": "earliest"}}
            before = meter.sample()
            answer = driver.call("stream", source=stream_source, checkpoint=str(
                work / f"kc-checkpoint-{run}"), sink={"format": "parquet", "path": str(out)})
            phases.append(meter.phase(f"{label} topic -> Parquet (stream) #{run + 1}",
                                      args.records, before))
            assert answer["rows"] == args.records == pq.read_table(out).num_rows
        out = work / "kc-parquet-stream-steady"
        answer = driver.call("stream", source={"format": "kafka", "options": {
            **source["options"], "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": str(max(1, args.records // 5))}},
            checkpoint=str(work / "kc-checkpoint-steady"), batch_cpu=True,
            sink={"format": "parquet", "path": str(out)})
        assert answer["rows"] == args.records
        records, cpu, seconds = steady_cpu([tuple(s) for s in answer["batch_cpu"]])
        phases.append(Phase(f"{label} topic -> Parquet (stream, steady: batches 2-"
                            f"{len(answer['batch_cpu'])})", records, seconds, 0.0, cpu))
        for run in range(args.repeat):
            topic = f"bench-kc-out-{run}"
            for f in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
                f.result(30)
            before = meter.sample()
            driver.call("batch", source={"format": "parquet", "path": str(parquet_in)},
                        select=["value"], sink={"format": "kafka", "options": {
                            "kafka.bootstrap.servers": bs, "topic": topic}})
            phases.append(meter.phase(f"{label} Parquet -> topic (sink) #{run + 1}",
                                      args.records, before))
            assert topic_records(bs, topic, args.partitions) == args.records
    finally:
        driver.close()
    return phases


def comparison(phases: list[Phase]) -> list[str]:
    """Best run per path, the strom format next to Spark's Kafka connector."""
    def best(connector: bool, kind: str) -> Phase | None:
        runs = [p for p in phases if p.name.startswith("Kafka connector") == connector
                and kind in p.name]
        return max(runs, key=lambda p: p.rate) if runs else None

    lines = [f"{'best run':26s} {'strom format':>24s} {'Kafka connector':>24s} "
             f"{'strom/Kafka':>12s}",
             f"{'':26s} {'rec/s, Spark CPU us/rec':>24s} {'rec/s, Spark CPU us/rec':>24s}"]
    for title, kind in (("source, batch -> Parquet", "(batch)"),
                        ("source, stream -> Parquet", "(stream)"),
                        ("stream, steady (batches 2-N)", "(stream, steady"),
                        ("sink, Parquet -> topic", "(sink)")):
        ours, theirs = best(False, kind), best(True, kind)
        if ours is None or theirs is None:
            continue

        def cell(p: Phase) -> str:
            return f"{p.rate:,.0f}, {p.spark_cpu * 1e6 / p.records:.2f}"

        lines.append(f"{title:26s} {cell(ours):>24s} {cell(theirs):>24s} "
                     f"{ours.rate / theirs.rate:>11.2f}x")
    return lines


def _progress_start(progress: dict) -> float:
    """A StreamingQueryProgress timestamp ('2026-11-22T18:01:02.345Z') as epoch seconds."""
    import datetime as dt

    return dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each Spark phase (the first "
                    "one warms the JVM up)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--no-kafka-connector", action="store_true",
                    help="skip Spark's own Kafka connector (step 6)")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    exe = str(Path(sys.executable).with_name("strom"))
    broker = BrokerProcess(strom_spec(exe), work)
    broker.start()
    phases: list[Phase] = []
    try:
        broker.wait_ready(60)
        bs = broker.bootstrap
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic("bench-in", args.partitions, 1)]).values():
            f.result(30)
        meter = Meter(broker.pid)
        before = meter.sample()
        produce(bs, "bench-in", args.records, args.value_bytes, args.partitions)
        phases.append(meter.phase("produce (confluent-kafka)", args.records, before))
        ends = {p: args.records // args.partitions + (1 if p < args.records % args.partitions else 0)
                for p in range(args.partitions)}

        for native in (False, True):
            before = meter.sample()
            n = client_only(bs, "bench-in", ends, native)
            label = f"client read into Arrow, {'native' if native else 'librdkafka'} (no Spark)"
            phases.append(meter.phase(label, n, before))

        from strom.spark.session import local_session

        spark = local_session("strom-spark-bench", args.master,
                              {"spark.sql.shuffle.partitions": str(args.partitions)})
        source = (spark.read.format("strom").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", "bench-in"))
        source.load().limit(1).collect()  # warm up: JVM, Python workers, planner

        out = work / "parquet-batch-0"
        for run in range(args.repeat):
            # The first run also pays for the JVM's JIT warm-up; later runs are what a
            # long-lived job sees.
            out = work / f"parquet-batch-{run}"
            before = meter.sample()
            source.load().write.parquet(str(out))
            phases.append(meter.phase(f"strom -> Spark -> Parquet (batch) #{run + 1}",
                                      args.records, before))
            assert spark.read.parquet(str(out)).count() == args.records

        for run in range(args.repeat):
            out_s, ck = work / f"parquet-stream-{run}", work / f"checkpoint-{run}"
            before = meter.sample()
            q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
                 .option("subscribe", "bench-in").option("startingOffsets", "earliest").load()
                 .writeStream.format("parquet").option("path", str(out_s))
                 .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
            q.awaitTermination()
            phases.append(meter.phase(f"strom -> Spark -> Parquet (stream) #{run + 1}",
                                      args.records, before))
            assert spark.read.parquet(str(out_s)).count() == args.records

        # A long-running stream: micro-batches of a fifth of the backlog each, timed from the
        # first batch's start to the last one's end (the query's start and stop, 2-3 s of
        # fixed cost, left out: what a stream that keeps running sees).
        out_s, ck = work / "parquet-stream-steady", work / "checkpoint-steady"
        listener = batch_cpu_listener(lambda: meter.sample()[2])
        spark.streams.addListener(listener)
        before = meter.sample()
        q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
             .option("subscribe", "bench-in").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(max(1, args.records // 5))).load()
             .writeStream.format("parquet").option("path", str(out_s))
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination()
        whole = meter.phase("(stream query incl. start/stop)", args.records, before)
        spark.streams.removeListener(listener)
        records, cpu, seconds = steady_cpu(listener.samples)
        phases.append(Phase(f"strom -> Spark -> Parquet (stream, steady: batches 2-"
                            f"{len(listener.samples)})", records, seconds, 0.0, cpu))
        batches = [b for b in q.recentProgress if b["numInputRows"] > 0]
        assert sum(b["numInputRows"] for b in batches) == args.records
        first = _progress_start(batches[0])
        last = _progress_start(batches[-1]) + batches[-1]["durationMs"]["triggerExecution"] / 1000
        # (CPU: the whole query's, start and stop included: the conservative figure)
        phases.append(Phase(f"strom -> Spark -> Parquet (stream, {len(batches)} batches, in "
                            "query)", args.records, last - first, whole.broker_cpu,
                            whole.spark_cpu))

        values = spark.read.parquet(str(out)).select("value")
        for run in range(args.repeat):
            topic = f"bench-out-{run}"
            for f in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
                f.result(30)
            before = meter.sample()
            (values.write.format("strom").option("kafka.bootstrap.servers", bs)
             .option("topic", topic).mode("append").save())
            phases.append(meter.phase(f"Parquet -> Spark -> strom (sink) #{run + 1}",
                                      args.records, before))
            written = spark.read.format("strom").option("kafka.bootstrap.servers", bs) \
                .option("subscribe", topic).load().count()
            assert written == args.records, written
        spark.stop()
        if not args.no_kafka_connector:
            phases += kafka_connector_phases(args, work, bs, admin, meter, out)
    finally:
        broker.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.records:,} records of {args.value_bytes} B, {args.partitions} partitions, "
          f"{args.master}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    for p in phases:
        print(p.line())
    by = {p.name: p for p in phases}
    native = by["client read into Arrow, native (no Spark)"]
    librdkafka = by["client read into Arrow, librdkafka (no Spark)"]
    batch = min((p for p in phases if "(batch)" in p.name), key=lambda p: p.seconds)
    per = 1e6 / args.records
    client_cpu = native.spark_cpu * per
    spark_cpu = max(0.0, batch.spark_cpu * per - client_cpu)
    if not args.no_kafka_connector:
        print("\n" + "\n".join(comparison(phases)))
    print(f"\nwhere the CPU goes per record, best batch read ({batch.name}; us): broker "
          f"{batch.broker_cpu * per:.2f}, client read into Arrow {client_cpu:.2f} (through "
          f"librdkafka: {librdkafka.spark_cpu * per:.2f}), Spark (JVM, Arrow->rows, Parquet, "
          f"task overhead) {spark_cpu:.2f}")
    if args.json:
        args.json.write_text(json.dumps({
            "records": args.records, "value_bytes": args.value_bytes,
            "partitions": args.partitions, "master": args.master,
            "phases": [asdict(p) | {"rate": p.rate} for p in phases],
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
