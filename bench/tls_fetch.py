"""Consume throughput over TLS against plaintext, from one Strom broker in one sitting.

One broker serves the same log on a PLAINTEXT and an SSL listener; records are produced once,
then read back in full by a confluent-kafka consumer over each listener in turn (alternating,
``--runs`` times each), so the two differ only in how the fetch bodies leave the broker:
``sendfile`` from the page cache on PLAINTEXT, read into memory and encrypted on SSL.

    .venv/bin/python -m bench.tls_fetch                       # 3 runs of 300 MB at 10 KiB
    .venv/bin/python -m bench.tls_fetch --mb 200 --size 1024 --runs 2

Prints a markdown table: MB/s and broker CPU seconds per GB for each listener (medians), and
the SSL/PLAINTEXT ratios.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.admin import create_topic
from bench.procstat import cpu_seconds
from bench.tls import make_certificates

HOST = "127.0.0.1"
TOPIC = "tls-fetch"
PARTITIONS = 4


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _consume_all(conf: dict, expected: int) -> float:
    """Seconds to read every record of the topic from the start."""
    consumer = Consumer({**conf, "group.id": f"bench-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 10485760})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got, started = 0, time.monotonic()
    try:
        while got < expected:
            for m in consumer.consume(10000, 1.0):
                if m.error() is None:
                    got += 1
            if time.monotonic() - started > 600:
                raise RuntimeError(f"read {got} of {expected} records in 600 s")
        return time.monotonic() - started
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="MB of records (default 300)")
    parser.add_argument("--size", type=int, default=10240, help="record size (default 10 KiB)")
    parser.add_argument("--runs", type=int, default=3, help="reads per listener (default 3)")
    parser.add_argument("--strom-bin", default=str(Path(sys.executable).with_name("strom")))
    args = parser.parse_args(argv)
    count = args.mb * 1_000_000 // args.size
    work = Path(tempfile.mkdtemp(prefix="strom-tls-bench-"))
    files = make_certificates(work)
    ca, store = files.ca, files.keystore
    plain, tls = _free_port(), _free_port()
    with open(work / "broker.log", "wb") as log:
        broker = subprocess.Popen(
            [args.strom_bin, "broker", "--override", f"log.dirs={work / 'data'}",
             "--override", f"listeners=PLAINTEXT://{HOST}:{plain},SSL://{HOST}:{tls}",
             "--override", "ssl.keystore.type=PEM",
             "--override", f"metrics.listener=http://{HOST}:0",
             "--override", f"ssl.keystore.location={store}"],
            stdout=subprocess.DEVNULL, stderr=log)
    try:
        bootstrap = f"{HOST}:{plain}"
        deadline = time.monotonic() + 30
        while True:  # wait until the broker serves (poll with a deadline)
            try:
                create_topic(bootstrap, TOPIC, PARTITIONS)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                             "batch.size": 1048576, "queue.buffering.max.kbytes": 1048576})
        value = b"x" * args.size
        for i in range(count):
            while True:
                try:
                    producer.produce(TOPIC, value, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(300)
        confs = {
            "PLAINTEXT": {"bootstrap.servers": bootstrap},
            "SSL": {"bootstrap.servers": f"{HOST}:{tls}", "security.protocol": "SSL",
                    "ssl.ca.location": str(ca)},
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in confs}
        for _ in range(args.runs):
            for name, conf in confs.items():
                before = cpu_seconds(broker.pid)
                seconds = _consume_all(conf, count)
                cpu = cpu_seconds(broker.pid) - before
                results[name].append((seconds, cpu))
        mb = count * args.size / 1_000_000
        rows = {}
        for name, runs in results.items():
            rows[name] = (statistics.median(mb / s for s, _ in runs),
                          statistics.median(c / (mb / 1000) for _, c in runs))
        print(f"Consume {mb:.0f} MB of {args.size}-byte records, {PARTITIONS} partitions, "
              f"{args.runs} alternating runs per listener (medians):\n")
        print("| listener | MB/s | broker CPU-s per GB |")
        print("|---|---|---|")
        for name, (mbs, cpu_gb) in rows.items():
            print(f"| {name} | {mbs:,.0f} | {cpu_gb:.2f} |")
        ratio = rows["SSL"][0] / rows["PLAINTEXT"][0]
        print(f"| SSL / PLAINTEXT | {ratio:.2f}x | {rows['SSL'][1] / rows['PLAINTEXT'][1]:.2f}x |")
        return 0
    finally:
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
