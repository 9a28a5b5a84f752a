"""Produce latency while segments roll: does disk work on the broker's event loop show up?

A real Strom broker runs with small segments (``log.segment.bytes``, 1 MiB by default here), so
under a steady produce load a segment rolls every fraction of a second and the rolled segments,
their indexes, producer snapshots and checkpoints are fsynced while requests keep coming. A
confluent-kafka producer (acks=1) sends at a fixed rate for a while and every record's latency
(librdkafka's own, produce() to delivery report) is collected; the tail (p99.9, max) is what
a blocking fsync on the event loop costs everyone whose request waited behind it.

    .venv/bin/python -m bench.roll_latency                 # 20 s at 4000 x 1 KiB records/s
    .venv/bin/python -m bench.roll_latency --seconds 10 --rate 2000 --runs 3
    .venv/bin/python -m bench.roll_latency --syscalls      # also: disk syscalls per thread

On a busy shared machine the latency tail mostly measures CPU contention. ``--syscalls``
attaches ``strace`` to the broker while it is loaded and adds, for the event-loop thread and
for all other threads, the count, total and longest time of fsync and the file calls around
it: a figure that does not depend on the neighbours.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.admin import create_topic
from bench.brokers import BrokerProcess, strom_spec

TOPIC = "roll-latency"
TRACED = ("fsync", "fdatasync", "syncfs", "openat", "pwrite64", "rename", "unlink", "ftruncate")
# "<tid> <time> call(args) = result <seconds>", or the "<... call resumed>" half of one
_TRACE_LINE = re.compile(r"^(\d+)\s+\S+\s+(?:<\.\.\. )?(\w+)(?:\(| resumed>).*<([\d.]+)>$")
# the kind of file a call touches (strace -y names descriptors): a segment file's suffix
# (".log", ".index", ".snapshot.tmp", ".log.deleted", ...) or a checkpoint's name
_FILE_KIND = re.compile(r"\d{20}(\.[a-z.]+[a-z])|/([a-z][a-z.-]+)[\">]")
_CWD = re.compile(r"AT_FDCWD<[^>]*>")


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``values``."""
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _produce(bootstrap: str, seconds: float, rate: int, size: int, partitions: int) -> list[float]:
    """Send ``rate`` records a second for ``seconds``; return every record's latency in ms."""
    from confluent_kafka import Producer

    latencies: list[float] = []
    failures: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies.append(msg.latency() * 1000)

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 1,
                  "enable.idempotence": False, "log_level": 0})  # fmt: skip
    pad = os.urandom(size)
    total = int(seconds * rate)
    interval = 1.0 / rate
    start = time.monotonic()
    for seq in range(total):
        wait = start + seq * interval - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        p.produce(TOPIC, pad, partition=seq % partitions, on_delivery=delivered)
        p.poll(0)
    left = p.flush(30)
    if failures or left:
        raise RuntimeError(f"{len(failures)} failed, {left} undelivered: {failures[:1]}")
    return latencies


def _start_strace(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """Follow every thread of ``pid``, timing the calls in ``TRACED``."""
    argv = ["strace", "-f", "-y", "-p", str(pid), "--seccomp-bpf", "-T", "-tt",
            "-e", "trace=" + ",".join(TRACED), "-o", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:  # attached once it writes
        time.sleep(0.05)
    return proc


def _file_kind(line: str) -> str:
    k = _FILE_KIND.search(_CWD.sub("", line))
    return "?" if k is None else (k.group(1) or k.group(2))


def _syscall_table(trace: Path, loop_tid: int) -> list[str]:
    """Per (thread kind, call, file kind): count, total ms, longest ms."""
    agg: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    started: dict[tuple[str, str], str] = {}  # (tid, call) -> file kind of an unfinished call
    with open(trace, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.endswith("<unfinished ...>"):
                parts = line.split(None, 3)
                if len(parts) == 4:
                    started[(parts[0], parts[2].partition("(")[0])] = _file_kind(line)
                continue
            m = _TRACE_LINE.match(line)
            if m is None:
                continue
            who = "loop" if int(m.group(1)) == loop_tid else "other"
            kind = started.pop((m.group(1), m.group(2)), None) if "resumed>" in line else None
            a = agg[(who, m.group(2), kind or _file_kind(line))]
            secs = float(m.group(3))
            a[0] += 1
            a[1] += secs
            a[2] = max(a[2], secs)
    return [f"    {who:5s} {call:9s} {kind:18s} n={n:6.0f} total={tot * 1000:8.1f} ms "
            f"longest={mx * 1000:6.2f} ms"
            for (who, call, kind), (n, tot, mx) in sorted(agg.items())]  # fmt: skip


def run_once(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, float], list[str]]:
    overrides = [f"log.segment.bytes={args.segment_bytes}", *args.override]
    broker = BrokerProcess(strom_spec(args.strom_bin, overrides=overrides), workdir)
    broker.start()
    table: list[str] = []
    try:
        broker.wait_ready()
        create_topic(broker.bootstrap, TOPIC, args.partitions)
        trace = workdir / f"strace-{broker.pid}.txt"
        strace = _start_strace(broker.pid, trace) if args.syscalls else None
        try:
            lat = sorted(_produce(broker.bootstrap, args.seconds, args.rate, args.size,
                                  args.partitions))  # fmt: skip
        finally:
            if strace is not None:
                strace.send_signal(signal.SIGINT)  # detaches; the broker runs on
                strace.wait(30)
        if strace is not None:
            table = _syscall_table(trace, broker.pid)
        segments = sum(1 for _ in (broker.data_dir / "logs").glob(f"{TOPIC}-*/*.log"))
    finally:
        broker.close()
    return {
        "records": len(lat), "segments": segments, "p50": _percentile(lat, 0.5),
        "p99": _percentile(lat, 0.99), "p99.9": _percentile(lat, 0.999), "max": lat[-1],
    }, table  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.roll_latency", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=4000, help="records per second")
    ap.add_argument("--size", type=int, default=1024, help="record value bytes")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--segment-bytes", type=int, default=1 << 20)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--strom-bin", default=str(Path(sys.executable).with_name("strom")))
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="another broker setting (repeatable)")
    ap.add_argument("--syscalls", action="store_true",
                    help="strace the broker: disk syscalls of the event loop vs other threads")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="strom-roll-"))
    print("run  records  segments   p50 ms   p99 ms  p99.9 ms   max ms", flush=True)
    try:
        for i in range(args.runs):
            r, table = run_once(args, workdir)
            print(f"{i + 1:3d} {r['records']:8.0f} {r['segments']:9.0f} {r['p50']:8.2f} "
                  f"{r['p99']:8.2f} {r['p99.9']:9.2f} {r['max']:8.2f}", flush=True)  # fmt: skip
            for row in table:
                print(row, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
