"""Produce N records as fast as the client goes, then consume them all back and count them."""

from __future__ import annotations

from bench.admin import create_topic
from bench.brokers import BrokerProcess
from bench.clientproc import ClientJob
from bench.config import PARTITIONS, Sizes
from bench.report import Metric, Outcome, ScenarioRows, Target
from bench.scenarios.base import (
    Context,
    Scenario,
    consume_problem,
    io_timeout,
    log_rates,
    measure,
    measured,
    produce_problem,
    record_rates,
    start_job,
)
from bench.targets import RATE_GOALS, RSS_GOALS

KIB = 1024


def ceiling_keys(size: int) -> tuple[str, str]:
    """Keys of the client-ceiling references (records/s, MB/s) for one record size."""
    return f"ceiling_rps.{size}", f"ceiling_mbs.{size}"


def reported_ceiling_key(size: int) -> str:
    """Key of the ceiling that also serves every record's delivery report (records/s)."""
    return f"ceiling_reported_rps.{size}"


def size_label(size: int) -> str:
    return f"{size // KIB} KiB" if size >= KIB else f"{size} B"


class Throughput(Scenario):
    warm_up = True
    def __init__(self, name: str, size: int, acks: int | str, count_field: str) -> None:
        self.name = name
        self.size = size
        self.acks = acks
        self.count_field = count_field

    def count(self, sizes: Sizes) -> int:
        return int(getattr(sizes, self.count_field))

    @property
    def title(self) -> str:  # type: ignore[override]
        acks = "all" if self.acks in (-1, "all") else self.acks
        return f"produce+consume {size_label(self.size)}, {PARTITIONS} partitions, acks={acks}"

    def rows(self, sizes: Sizes) -> ScenarioRows:
        big = self.size >= KIB
        twice = RATE_GOALS
        rps_ref, mbs_ref = ceiling_keys(self.size)
        metrics = [
            Metric(
                "produce_mbs",
                "produce",
                "MB/s",
                target=twice if big else None,
                ceiling=mbs_ref,
                client_cpu="produce_client_pct",
            ),
        ]
        if not big:
            metrics += [
                Metric(
                    "produce_rps",
                    "produce",
                    "records/s",
                    digits=0,
                    # judged against what the client can do when it also serves a delivery
                    # report per record, as every broker's run must (settled in issue 21)
                    target=Target("ref_min", 0.9, reported_ceiling_key(self.size),
                                  ref_label="client ceiling with delivery reports"),
                    ceiling=rps_ref,
                    reported_ceiling=reported_ceiling_key(self.size),
                ),
                # The two parts of the produce time, so a client-bound result reads as such:
                # the produce() calls, comparable with the ceiling, and the flush() after the
                # last one, which includes librdkafka releasing each delivered record in the
                # application's thread (the ceiling never pays for that).
                Metric(
                    "produce_loop_rps", "produce() calls alone", "records/s", 0, ceiling=rps_ref
                ),
                Metric("produce_flush_s", "flush() after the last produce()", "s", 2),
            ]
        metrics += [
            Metric("produce_rpcpu", "produce", "records/broker-CPU-s", 0, twice),
            Metric(
                "consume_mbs",
                "consume",
                "MB/s",
                target=twice if big else None,
                client_cpu="consume_client_pct",
            ),
            Metric("consume_rpcpu", "consume", "records/broker-CPU-s", 0, twice),
            Metric("rss_mb", "broker peak RSS", "MB", 0, RSS_GOALS),
        ]
        return ScenarioRows(
            self.name, f"{self.title} ({self.count(sizes):,} records)", tuple(metrics)
        )

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        n, size, topic = self.count(ctx.sizes), self.size, f"bench-{self.name}"
        create_topic(broker.bootstrap, topic, PARTITIONS, security=broker.security)
        timeout = io_timeout(n, size)
        # With acks=0 nothing tells the client its records were stored, and a broker may drop
        # requests it has not read yet when the connection closes: keep the producer connected
        # until the count is done, so the check is about storing, not about closing.
        hold = self.acks == 0
        job = {"job": "produce", "topic": topic, "size": size, "count": n, "acks": self.acks}
        producer = start_job(broker, {**job, "hold": hold}, timeout)
        try:
            self._phases(broker, ctx, out, producer, timeout)
        finally:
            producer.release()

    def _phases(
        self, broker: BrokerProcess, ctx: Context, out: Outcome, producer: ClientJob, timeout: float
    ) -> None:
        n, size, topic = self.count(ctx.sizes), self.size, f"bench-{self.name}"
        res, cpu = measure(broker, producer, timeout)
        out.failed = produce_problem(res)
        if out.failed:
            return
        record_rates(out, "produce", res, cpu, n, size)
        out.metrics["produce_loop_rps"] = n / res["loop_seconds"]
        out.metrics["produce_flush_s"] = res["seconds"] - res["loop_seconds"]
        res, cpu = measured(broker, {"job": "consume", "topic": topic, "expected": n}, timeout)
        out.failed = consume_problem(res)
        if out.failed:
            return
        record_rates(out, "consume", res, cpu, n, size)
        log_rates(ctx, out)


SCENARIOS = [
    Throughput("produce-100b", 100, 1, "records_100b"),
    Throughput("produce-1k", KIB, 1, "records_1k"),
    Throughput("produce-10k", 10 * KIB, 1, "records_10k"),
    Throughput("produce-1k-acks-all", KIB, "all", "records_acks"),
    Throughput("produce-1k-acks-0", KIB, 0, "records_acks"),
]
