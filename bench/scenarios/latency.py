"""End-to-end latency at a fixed rate: a paced producer and a consumer in separate processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from bench.admin import create_topic
from bench.brokers import BrokerProcess
from bench.clientproc import ClientJob
from bench.config import FETCH_WAIT_MAX_MS, PARTITIONS, Sizes
from bench.procstat import cpu_delta
from bench.report import Metric, Outcome, ScenarioRows, Target
from bench.scenarios.base import Context, Scenario
from bench.targets import KAFKA, RSS_GOALS, at_most

RECORD_SIZE = 1024
T = TypeVar("T")


class Latency(Scenario):
    warm_up = True
    name = "e2e-latency"

    def title_for(self, sizes: Sizes) -> str:
        return (
            f"end-to-end latency, {sizes.latency_rate:,} records/s of 1 KiB for "
            f"{sizes.latency_measure_s:g} s (linger.ms=0, fetch.wait.max.ms={FETCH_WAIT_MAX_MS})"
        )

    def rows(self, sizes: Sizes) -> ScenarioRows:
        return ScenarioRows(
            self.name,
            self.title_for(sizes),
            (
                Metric("p50_ms", "p50", "ms", 2, Target("max", 2.0)),
                Metric("p99_ms", "p99", "ms", 2, (Target("max", 5.0), at_most(1.0, KAFKA))),
                Metric("p999_ms", "p99.9", "ms", 2),
                Metric("max_ms", "max", "ms", 2),
                Metric("cpu_pct", "broker CPU", "% of a core", 0),
                Metric("rss_mb", "broker peak RSS", "MB", 0, RSS_GOALS),
            ),
        )

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        topic = "bench-latency"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        sent, got, cpu0, cpu1 = paced_run(broker.bootstrap, topic, ctx.sizes, 1, broker.cpu_sample)
        out.failed = check_paced(sent, got)
        if out.failed:
            return
        out.metrics.update(latency_metrics(got))
        out.metrics["cpu_pct"] = 100 * cpu_delta(cpu0, cpu1) / sent["seconds"]
        late = f", producer >1 ms late {sent['late']} times" if sent["late"] else ""
        ctx.log(
            f"p50 {out.metrics['p50_ms']:.2f} ms, p99 {out.metrics['p99_ms']:.2f} ms, "
            f"max {out.metrics['max_ms']:.1f} ms, broker {out.metrics['cpu_pct']:.0f}% CPU{late}"
        )


def paced_run(
    bootstrap: str, topic: str, s: Sizes, acks: int | str, sample: Callable[[], T]
) -> tuple[dict[str, Any], dict[str, Any], T, T]:
    """A producer paced at ``s.latency_rate`` records/s of 1 KiB and a consumer reading them,
    each in its own process; returns both results and ``sample()`` taken as the producer
    starts and after both finished (the brokers' CPU)."""
    warmup = int(s.latency_rate * s.latency_warmup_s)
    total = warmup + int(s.latency_rate * s.latency_measure_s)
    seconds = s.latency_warmup_s + s.latency_measure_s
    common = {"bootstrap": bootstrap, "topic": topic}
    consumer = ClientJob(
        {
            **common,
            "job": "latency_consume",
            "expected": total,
            "warmup_records": warmup,
            "timeout": seconds + 30,
        }
    )
    producer = None
    try:
        consumer.ready(60)
        producer = ClientJob(
            {
                **common,
                "job": "latency_produce",
                "rate": s.latency_rate,
                "count": total,
                "size": RECORD_SIZE,
                "acks": acks,
            }
        )
        producer.ready(60)
        consumer.go()
        before = sample()
        producer.go()
        sent = producer.result(seconds + 60)
        got = consumer.result(60)
        after = sample()
    finally:
        consumer.kill()
        if producer is not None:
            producer.kill()
    return sent, got, before, after


def check_paced(sent: dict[str, Any], got: dict[str, Any]) -> str | None:
    """Why a paced run does not count (records lost or undelivered), or None."""
    if sent["failed"]:
        return f"{sent['failed']} records not delivered ({sent['first_error']})"
    if got["records"] != got["expected"]:
        return f"consumed {got['records']} of {got['expected']} records"
    return None


def latency_metrics(got: dict[str, Any]) -> dict[str, float]:
    """p50, p99, p99.9 and max in ms from the consumer's result (microseconds)."""
    lat = got["latencies_us"]
    return {
        "p50_ms": lat["p50"] / 1000,
        "p99_ms": lat["p99"] / 1000,
        "p999_ms": lat["p99.9"] / 1000,
        "max_ms": lat["max"] / 1000,
    }


SCENARIOS = [Latency()]
