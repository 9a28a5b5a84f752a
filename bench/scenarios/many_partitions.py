"""A topic with many partitions: create it, produce a few records to each, consume them all."""

from __future__ import annotations

from bench.brokers import BrokerProcess
from bench.config import Sizes
from bench.report import Metric, Outcome, ScenarioRows
from bench.scenarios.base import Context, Scenario, io_timeout, measured
from bench.targets import KAFKA, RSS_GOALS, TANSU, at_most

RECORD_SIZE = 100


class ManyPartitions(Scenario):
    name = "partitions-1k"

    def rows(self, sizes: Sizes) -> ScenarioRows:
        title = (
            f"{sizes.many_partitions:,}-partition topic: create, produce "
            f"{sizes.many_partitions_records_each} x 100 B each, consume all"
        )
        return ScenarioRows(
            self.name,
            title,
            (
                Metric("total_s", "total time", "s", 2, (at_most(0.5, TANSU), at_most(1.0, KAFKA))),
                Metric("create_s", "create topic", "s", 2),
                Metric("produce_s", "produce", "s", 2),
                Metric("consume_s", "consume", "s", 2),
                Metric("cpu_s", "broker CPU", "s", 2),
                Metric("rss_mb", "broker peak RSS", "MB", 0, RSS_GOALS),
            ),
        )

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        s = ctx.sizes
        records = s.many_partitions * s.many_partitions_records_each
        job = {
            "job": "many_partitions",
            "topic": "bench-many",
            "partitions": s.many_partitions,
            "each": s.many_partitions_records_each,
            "size": RECORD_SIZE,
            "acks": 1,
        }
        res, cpu = measured(broker, job, 120 + io_timeout(records, RECORD_SIZE))
        if res["problem"]:
            out.failed = res["problem"]
            return
        for key in ("total_s", "create_s", "produce_s", "consume_s"):
            out.metrics[key] = res[key]
        out.metrics["cpu_s"] = cpu
        ctx.log(
            f"total {res['total_s']:.2f} s (create {res['create_s']:.2f}, produce "
            f"{res['produce_s']:.2f}, consume {res['consume_s']:.2f}), {cpu:.2f} CPU-s"
        )


SCENARIOS = [ManyPartitions()]
