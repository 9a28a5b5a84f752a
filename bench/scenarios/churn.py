"""Connection churn: many short-lived producers, each connecting, producing one record, closing."""

from __future__ import annotations

from bench.admin import create_topic
from bench.brokers import BrokerProcess
from bench.config import Sizes
from bench.report import Metric, Outcome, ScenarioRows
from bench.scenarios.base import Context, Scenario, measured
from bench.targets import RSS_GOALS, TANSU, at_most

RECORD_SIZE = 100


class Churn(Scenario):
    name = "connection-churn"

    def rows(self, sizes: Sizes) -> ScenarioRows:
        title = (
            f"{sizes.churn_connections} short-lived producers "
            "(connect, produce 1 record, flush, close; one after another)"
        )
        return ScenarioRows(
            self.name,
            title,
            (
                Metric("total_s", "total time", "s", 2, at_most(1.0, TANSU)),
                Metric("per_conn_ms", "per connection", "ms", 1),
                Metric("median_ms", "per connection, median", "ms", 2),
                Metric("slow", "producers over 50 ms (librdkafka's 100 ms metadata retry)", "", 0),
                Metric("cpu_s", "broker CPU", "s", 2),
                Metric("rss_mb", "broker peak RSS", "MB", 0, RSS_GOALS),
            ),
        )

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        n, topic = ctx.sizes.churn_connections, "bench-churn"
        create_topic(broker.bootstrap, topic, 1)
        job = {"job": "churn", "topic": topic, "connections": n, "size": RECORD_SIZE}
        res, cpu = measured(broker, job, 60 + n * 1.0)
        if res["delivered"] != n:
            out.failed = f"{res['delivered']} of {n} records delivered ({res['first_error']})"
            return
        check, _ = measured(broker, {"job": "consume", "topic": topic, "expected": n}, 60)
        if check["problem"]:
            out.failed = check["problem"]
            return
        out.metrics.update(
            total_s=res["seconds"],
            per_conn_ms=1000 * res["seconds"] / n,
            median_ms=1000 * res["median_s"],
            slow=res["slow"],
            cpu_s=cpu,
        )
        ctx.log(
            f"{n} connections in {res['seconds']:.2f} s ({res['slow']} over 50 ms), "
            f"{cpu:.2f} CPU-s"
        )


SCENARIOS = [Churn()]
