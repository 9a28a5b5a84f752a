"""Kafka's Java perf tools, run from the cached Kafka 4.4 jars, and the reading of their output.

Shared by the share-group scenario (``kafka-consumer-perf-test`` and
``kafka-share-consumer-perf-test``) and the Java-client scenario (``kafka-producer-perf-test``
and ``kafka-consumer-perf-test``). A tool runs as its script would run it (the tools' heap and
Kafka's JVM flags), one process at a time; the broker's CPU is sampled around the whole process
and the JVM's own CPU comes from ``wait4``.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.brokers import BrokerError, BrokerProcess
from bench.kafka_peer import load_dist
from bench.procstat import cpu_delta

TOOL_HEAP = ["-Xmx256M"]  # kafka-run-class.sh's heap for the tools (KAFKA_HEAP_OPTS unset)


def java_command(main_class: str) -> list[str]:
    """``java ... -cp <libs>/* <main_class>`` as kafka-run-class.sh builds it for a tool."""
    try:
        dist = load_dist()
        libs = Path(dist.ensure_libs())
        return [dist.java_bin(), *TOOL_HEAP, *dist.KAFKA_GC, "-cp", f"{libs}/*", main_class]
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        raise BrokerError(f"Kafka's tools unavailable: {e}") from e


@dataclass
class ToolRun:
    """One finished tool process: what it printed and what it cost."""

    output: str
    returncode: int
    client_cpu_s: float  # the JVM's user+system CPU, start-up included
    client_wall_s: float  # the JVM's whole life, start-up included
    broker_cpu_s: float  # the broker's CPU over the same span
    stopped_at: str | None = None  # the line that made the harness stop the tool, if one did
    timed_out: bool = False  # killed at its deadline

    def tail(self, chars: int = 500) -> str:
        return self.output.strip()[-chars:]

    def failure(self, tool: str) -> str:
        """Why the run gave no result, in one line for the report's notes."""
        if self.stopped_at is not None:
            return f"{tool} stopped after {self.client_wall_s:.0f} s at: {self.stopped_at}"
        if self.timed_out:
            return f"{tool} killed after {self.client_wall_s:.0f} s: {self.tail(300)}"
        return f"{tool} exited {self.returncode}: {self.tail()}"


# The first line of a Java stack trace: "<exception class>: <message>".
_EXCEPTION = re.compile(r"^[\w.$]+(Exception|Error)(: |$)")


def is_exception(line: str) -> bool:
    return _EXCEPTION.match(line.strip()) is not None


def run_tool(
    broker: BrokerProcess,
    cmd: list[str],
    timeout: float,
    stop_at: Callable[[str], bool] | None = None,
) -> ToolRun:
    """Run ``cmd`` to its end, sampling the broker's CPU around it.

    The tool is killed after ``timeout`` s, or at the first line of its output for which
    ``stop_at`` is true (e.g. a failed send: ProducerPerformance prints a stack trace per record
    and carries on, which for a broker that acknowledges nothing is one per record).
    """
    cpu0 = broker.cpu_sample()
    t0 = time.monotonic()
    timed_out = threading.Event()

    def kill(proc: subprocess.Popen) -> None:
        timed_out.set()
        proc.kill()

    stopped_at = None
    lines: list[str] = []
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    ) as proc:
        timer = threading.Timer(max(1.0, timeout), kill, (proc,))
        timer.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace")
                lines.append(line)
                if stop_at is not None and stopped_at is None and stop_at(line):
                    stopped_at = line.strip()
                    proc.kill()
        finally:
            timer.cancel()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    broker_cpu = cpu_delta(cpu0, broker.cpu_sample())
    return ToolRun(
        "".join(lines),
        proc.returncode,
        usage.ru_utime + usage.ru_stime,
        time.monotonic() - t0,
        broker_cpu,
        stopped_at,
        timed_out.is_set(),
    )


def parse_consumer_summary(text: str) -> dict[str, str]:
    """The summary line of ConsumerPerformance or ShareConsumerPerformance, by header field.

    Both print a header of comma-separated names and then one summary line with as many values
    (ShareConsumerPerformance's per-consumer lines start with "Share consumer" and are skipped).
    """
    header: list[str] | None = None
    found: dict[str, str] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if header is None:
            if fields and fields[0] == "start.time":
                header = fields
            continue
        if line.startswith("Share consumer") or len(fields) != len(header):
            continue
        found = dict(zip(header, fields, strict=True))
    return found


def consumer_seconds(fields: dict[str, str]) -> float:
    """The tool's elapsed time: ShareConsumerPerformance's fetch.time.ms is all of it;
    ConsumerPerformance splits it into rebalance.time.ms and fetch.time.ms."""
    ms = float(fields["fetch.time.ms"]) + float(fields.get("rebalance.time.ms", 0))
    return ms / 1000


@dataclass(frozen=True)
class ProducerSummary:
    """ProducerPerformance's closing line. Its MB/sec is MiB (2**20 bytes) per second."""

    records: int
    records_per_s: float
    mib_per_s: float
    avg_ms: float
    max_ms: float
    p50_ms: int
    p95_ms: int
    p99_ms: int
    p999_ms: int


# Kafka 4.4's Stats.printTotal: "%d%s records sent, %f records/sec (%.2f MB/sec), %.2f ms avg
# latency, %.2f ms max latency, %d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th." where %s is
# "" or " steady state" (only with --warmup-records). The lines printed every 5 s have no
# percentiles and do not match.
_NUM = r"(\d+(?:\.\d+)?)"
_PRODUCER_TOTAL = re.compile(
    rf"^(\d+)( steady state)? records sent, {_NUM} records/sec \({_NUM} MB/sec\), "
    rf"{_NUM} ms avg latency, {_NUM} ms max latency, (\d+) ms 50th, (\d+) ms 95th, "
    r"(\d+) ms 99th, (\d+) ms 99\.9th\.$"
)


def parse_producer_summary(text: str) -> ProducerSummary | None:
    """The whole run's closing line of ProducerPerformance (not the steady-state one), if any."""
    found = None
    for line in text.splitlines():
        m = _PRODUCER_TOTAL.match(line.strip())
        if m is None or m.group(2):
            continue
        g = m.groups()
        found = ProducerSummary(
            int(g[0]),
            float(g[2]),
            float(g[3]),
            float(g[4]),
            float(g[5]),
            *(int(x) for x in g[6:10]),
        )
    return found
