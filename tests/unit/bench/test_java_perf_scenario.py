"""The Java-client scenario's reading of kafka-producer-perf-test and its rows (no broker, no JVM)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.java_tools import (
    ToolRun,
    is_exception,
    parse_consumer_summary,
    parse_producer_summary,
)
from bench.scenarios.java_perf import (
    ACKS_1,
    ACKS_ALL,
    PRODUCE_RUNS,
    JavaPerf,
    consumer_metrics,
    producer_command,
    producer_metrics,
)

# Kafka 4.4's ProducerPerformance: a line per 5 s window (no percentiles), then the total
# (Stats.printTotal: "%d%s records sent, %f records/sec (%.2f MB/sec), %.2f ms avg latency,
# %.2f ms max latency, %d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th.").
PRODUCER_OUTPUT = """\
Option --producer-props has been deprecated and will be removed in a future version.
152273 records sent, 30454.6 records/sec (29.74 MB/sec), 520.3 ms avg latency, 912.0 ms max latency.
300000 records sent, 36014.405762 records/sec (35.17 MB/sec), 430.12 ms avg latency, \
912.00 ms max latency, 402 ms 50th, 701 ms 95th, 768 ms 99th, 890 ms 99.9th.
"""

WARMUP_OUTPUT = """\
Warmup first 1000 records. Steady state results will print after the complete test summary.
60000 records sent, 20000.000000 records/sec (19.53 MB/sec), 5.00 ms avg latency, \
50.00 ms max latency, 4 ms 50th, 9 ms 95th, 20 ms 99th, 45 ms 99.9th.
59000 steady state records sent, 21000.000000 records/sec (20.51 MB/sec), 4.00 ms avg latency, \
30.00 ms max latency, 3 ms 50th, 8 ms 95th, 15 ms 99th, 25 ms 99.9th.
"""

CONSUMER_OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-27 21:41:02:000, 2026-11-27 21:41:06:083, 58.5938, 14.3502, 60000, 14694.9, \
3710, 373, 157.0879, 160857.9
"""


def tool(broker_cpu: float = 1.5, client_cpu: float = 3.0, wall: float = 4.0) -> ToolRun:
    return ToolRun("", 0, client_cpu, wall, broker_cpu)


def test_producer_total_line() -> None:
    s = parse_producer_summary(PRODUCER_OUTPUT)
    assert s is not None
    assert s.records == 300_000
    assert s.records_per_s == pytest.approx(36014.405762)
    assert s.mib_per_s == pytest.approx(35.17)
    assert (s.avg_ms, s.max_ms) == (pytest.approx(430.12), pytest.approx(912.0))
    assert (s.p50_ms, s.p95_ms, s.p99_ms, s.p999_ms) == (402, 701, 768, 890)


def test_producer_window_lines_alone_are_no_summary() -> None:
    window_only = PRODUCER_OUTPUT.splitlines()[1]
    assert parse_producer_summary(window_only) is None
    assert parse_producer_summary("Exception in thread main\n") is None


def test_producer_whole_run_not_steady_state() -> None:
    s = parse_producer_summary(WARMUP_OUTPUT)
    assert s is not None and s.records == 60_000 and s.p99_ms == 20


def test_send_failure_is_an_exception_line() -> None:
    assert is_exception(
        "org.apache.kafka.common.errors.TimeoutException: Expiring 15 record(s) for t-5:120198 ms"
    )
    assert is_exception("java.lang.OutOfMemoryError")
    assert not is_exception(PRODUCER_OUTPUT.splitlines()[2])
    assert not is_exception("Option --producer-props has been deprecated")
    assert not is_exception("\tat org.apache.kafka.clients.producer.KafkaProducer.send(X.java:1)")


def test_producer_metrics_decimal_mb_and_cpu() -> None:
    s = parse_producer_summary(PRODUCER_OUTPUT)
    assert s is not None
    m = producer_metrics(ACKS_1, s, tool(broker_cpu=1.5, client_cpu=3.0, wall=4.0))
    assert m["produce_rps"] == pytest.approx(36014.405762)
    assert m["produce_mbs"] == pytest.approx(36014.405762 * 1024 / 1e6)  # not the tool's MiB
    assert m["produce_p99_ms"] == 768
    assert m["produce_rpcpu"] == pytest.approx(300_000 / 1.5)
    assert m["produce_client_pct"] == pytest.approx(75.0)
    m = producer_metrics(ACKS_ALL, s, tool(broker_cpu=0.0))
    assert "produce_all_rps" in m and "produce_all_rpcpu" not in m


def test_consumer_metrics_leave_the_join_out_of_mb_s() -> None:
    fields = parse_consumer_summary(CONSUMER_OUTPUT)
    m = consumer_metrics(fields, tool(broker_cpu=0.5))
    assert m["consume_join_s"] == pytest.approx(3.71)
    assert m["consume_rps"] == pytest.approx(60_000 / 0.373)
    assert m["consume_mbs"] == pytest.approx(60_000 * 1024 / 0.373 / 1e6)
    assert m["consume_rpcpu"] == pytest.approx(120_000)


def test_rows_cover_every_metric_the_body_sets() -> None:
    from bench.config import QUICK

    rows = JavaPerf().rows(QUICK)
    keys = [m.key for m in rows.metrics]
    assert len(keys) == len(set(keys))
    for run in PRODUCE_RUNS:
        for what in ("rps", "mbs", "p99_ms", "rpcpu"):
            assert run.key(what) in keys
    for key in ("consume_mbs", "consume_rps", "consume_join_s", "consume_rpcpu", "rss_mb"):
        assert key in keys
    # issue 21: MB/s and records per broker-CPU-s >= 1.0x Kafka's (none against Tansu); RSS
    judged = {m.key: [t.peer for t in m.targets] for m in rows.metrics if m.target is not None}
    assert judged["rss_mb"] == [None, "Kafka"]
    rates = {k: v for k, v in judged.items() if k.endswith(("mbs", "rpcpu"))}
    assert len(rates) == 2 * len(PRODUCE_RUNS) + 2 and all(v == ["Kafka"] for v in rates.values())
    assert set(judged) == {*rates, "rss_mb"}
    assert "60,000 records" in rows.title


def test_producer_command_keeps_the_client_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.scenarios import java_perf

    # No jars wanted here: finding them may fetch Kafka from Maven Central.
    monkeypatch.setattr(java_perf, "java_command", lambda main: ["java", main])
    cmd = producer_command("127.0.0.1:9092", ACKS_ALL, 1000)
    tail = cmd[cmd.index("org.apache.kafka.tools.ProducerPerformance") + 1 :]
    assert tail == [
        "--topic",
        ACKS_ALL.topic,
        "--num-records",
        "1000",
        "--record-size",
        "1024",
        "--throughput",
        "-1",
        "--command-property",
        "bootstrap.servers=127.0.0.1:9092",
        "acks=all",
    ]
