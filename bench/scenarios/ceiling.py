"""The client's own ceiling: produce() into librdkafka's queue with no broker at all.

It shows when a produce result is limited by the Python client rather than by the broker. The
ceiling is slightly optimistic: without metadata the client skips choosing a partition. A
second figure adds the time the application's thread spends serving one delivery report per
record, which any broker's run pays and the plain ceiling does not.
"""

from __future__ import annotations

from bench.brokers import BrokerSpec, free_port
from bench.clientproc import ClientError, run_job
from bench.config import Sizes
from bench.report import Metric, Outcome, ScenarioRows
from bench.scenarios.base import MB, Context, Scenario
from bench.scenarios.throughput import KIB, ceiling_keys, reported_ceiling_key, size_label


def _counts(sizes: Sizes) -> list[tuple[int, int]]:
    return [(100, sizes.records_100b), (KIB, sizes.records_1k), (10 * KIB, sizes.records_10k)]


class Ceiling(Scenario):
    name = "client-ceiling"
    title = "client ceiling (produce() with no broker)"
    needs_broker = False

    def rows(self, sizes: Sizes) -> ScenarioRows:
        metrics = []
        for size, _ in _counts(sizes):
            rps, mbs = ceiling_keys(size)
            metrics.append(Metric(rps, f"{size_label(size)} records", "records/s", 0))
            metrics.append(Metric(mbs, f"{size_label(size)} records", "MB/s"))
            metrics.append(
                Metric(reported_ceiling_key(size), f"{size_label(size)} records", "records/s", 0)
            )
        return ScenarioRows(self.name, self.title, tuple(metrics))

    def run(self, spec: BrokerSpec | None, ctx: Context) -> Outcome:
        out = Outcome()
        # Nothing listens on a port just freed: the client queues records it can never send.
        job = {"job": "ceiling", "bootstrap": f"127.0.0.1:{free_port()}", "topic": "ceiling"}
        job["sizes"] = _counts(ctx.sizes)
        try:
            res = run_job(job, timeout=300)
        except ClientError as e:
            out.failed = str(e)
            return out
        for size, _ in _counts(ctx.sizes):
            r = res[str(size)]
            rps_key, mbs_key = ceiling_keys(size)
            out.metrics[rps_key] = r["records"] / r["seconds"]
            out.metrics[mbs_key] = r["records"] * size / r["seconds"] / MB
            reported = r["seconds"] + r["report_seconds"]
            out.metrics[reported_ceiling_key(size)] = r["records"] / reported
        ctx.log(
            ", ".join(
                f"{size_label(s)}: {out.metrics[ceiling_keys(s)[0]]:,.0f} rec/s"
                for s, _ in _counts(ctx.sizes)
            )
        )
        return out


SCENARIOS = [Ceiling()]
