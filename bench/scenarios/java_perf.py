"""The Java client as the load: Kafka's own ``kafka-producer-perf-test`` and
``kafka-consumer-perf-test`` against every broker (issue 21).

The other throughput scenarios drive the brokers with confluent-kafka (librdkafka), tuned for
throughput. This one uses the client most Kafka users run, the Java client of Kafka 4.4, through
the perf tools Kafka ships, with the tools' and the client's own defaults: only what the run
needs is set. On a fresh broker:

1. two topics of 6 partitions are created (confluent-kafka's AdminClient, as everywhere);
2. ``ProducerPerformance`` (``kafka-producer-perf-test``) writes ``java_perf_records`` records
   of 1 KiB to the first as fast as it can: ``--throughput -1 --command-property
   bootstrap.servers=... acks=1``. ``linger.ms``, ``batch.size`` (5 ms and 16 KiB in Kafka 4.4's
   client), compression (none) and the rest stay at the client's defaults, where the other
   produce scenarios use 5 ms and 1 MiB batches. Records/s, latencies (the tool's, send() to
   callback, in whole ms; percentiles over at most 500,000 samples) come from its closing line;
3. ``ConsumerPerformance`` (``kafka-consumer-perf-test``) reads them all back in a consumer
   group (``--num-records N``, the client's default ``group.protocol``, classic in 4.4). Its
   MB/s and records/s are over its ``fetch.time.ms``, the group join (``rebalance.time.ms``,
   which brokers' ``group.initial.rebalance.delay.ms`` can stretch) shown on its own row;
4. the same producer with ``acks=all`` into the second topic (the client's idempotence, on by
   default, comes with it: InitProducerId first).

MB/s are decimal megabytes of record values (records/s x 1024 / 10**6) as in every other row;
the tools print MiB/s. Broker CPU is sampled around each tool process as a whole (the JVM's
start-up included; the broker idles then), so records per broker-CPU-second = N / that CPU. The
phases run in this order on every broker; Kafka's numbers include its JIT's warm-up as in the
other scenarios, and the tools' JVM is cold every time, for every broker alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.admin import create_topic
from bench.brokers import BrokerError, BrokerProcess
from bench.config import PARTITIONS, Sizes
from bench.java_tools import (
    ProducerSummary,
    ToolRun,
    is_exception,
    java_command,
    parse_consumer_summary,
    parse_producer_summary,
    run_tool,
)
from bench.report import Metric, Outcome, ScenarioRows
from bench.scenarios.base import MB, Context, Scenario, io_timeout
from bench.targets import KAFKA, RSS_GOALS, at_least

KIB = 1024
IDLE_MS = 30_000  # ConsumerPerformance's --timeout: the longest wait for a record (default 10 s)
GROUP = "bench-java-perf"


@dataclass(frozen=True)
class ProduceRun:
    """One kafka-producer-perf-test run: its keys' prefix, its acks and its topic."""

    name: str
    acks: str
    topic: str

    @property
    def label(self) -> str:
        return f"kafka-producer-perf-test, acks={self.acks}"

    def key(self, what: str) -> str:
        return f"{self.name}_{what}"


ACKS_1 = ProduceRun("produce", "1", "bench-java-perf")
ACKS_ALL = ProduceRun("produce_all", "all", "bench-java-perf-acks-all")
PRODUCE_RUNS = (ACKS_1, ACKS_ALL)
CONSUME = "kafka-consumer-perf-test"

# Issue 21's goal for the MB/s and records/broker-CPU-s rows: >= 1.0x Kafka's (none against
# Tansu, which the 4.4 client cannot use).
VS_KAFKA = at_least(1.0, KAFKA)


def producer_command(bootstrap: str, run: ProduceRun, n: int) -> list[str]:
    """kafka-producer-perf-test without its script; the client's defaults but for acks.

    ``--command-property`` is 4.4's name for ``--producer-props`` (deprecated, same meaning).
    """
    return [
        *java_command("org.apache.kafka.tools.ProducerPerformance"),
        "--topic",
        run.topic,
        "--num-records",
        str(n),
        "--record-size",
        str(KIB),
        "--throughput",
        "-1",
        "--command-property",
        f"bootstrap.servers={bootstrap}",
        f"acks={run.acks}",
    ]


def consumer_command(bootstrap: str, topic: str, n: int) -> list[str]:
    """kafka-consumer-perf-test without its script (``--num-records``: ``--messages`` is
    deprecated in 4.4 and means the same)."""
    return [
        *java_command("org.apache.kafka.tools.ConsumerPerformance"),
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--group",
        GROUP,
        "--num-records",
        str(n),
        "--timeout",
        str(IDLE_MS),
    ]


def producer_metrics(run: ProduceRun, summary: ProducerSummary, tool: ToolRun) -> dict[str, float]:
    """The numbers of one producer run, keyed by ``run``."""
    k = run.key
    m = {
        k("rps"): summary.records_per_s,
        k("mbs"): summary.records_per_s * KIB / MB,
        k("avg_ms"): summary.avg_ms,
        k("max_ms"): summary.max_ms,
        k("p50_ms"): float(summary.p50_ms),
        k("p95_ms"): float(summary.p95_ms),
        k("p99_ms"): float(summary.p99_ms),
        k("p999_ms"): float(summary.p999_ms),
        k("cpu_s"): tool.broker_cpu_s,
    }
    if tool.client_wall_s > 0:
        m[k("client_pct")] = 100 * tool.client_cpu_s / tool.client_wall_s
    if tool.broker_cpu_s > 0:
        m[k("rpcpu")] = summary.records / tool.broker_cpu_s
    return m


def consumer_metrics(fields: dict[str, str], tool: ToolRun) -> dict[str, float]:
    """The numbers of the consumer run, from ConsumerPerformance's summary line."""
    records = int(fields["data.consumed.in.nMsg"])
    fetch_s = float(fields["fetch.time.ms"]) / 1000
    m = {
        "consume_join_s": float(fields["rebalance.time.ms"]) / 1000,
        "consume_cpu_s": tool.broker_cpu_s,
    }
    if fetch_s > 0:
        m["consume_rps"] = records / fetch_s
        m["consume_mbs"] = records * KIB / fetch_s / MB
    if tool.client_wall_s > 0:
        m["consume_client_pct"] = 100 * tool.client_cpu_s / tool.client_wall_s
    if tool.broker_cpu_s > 0:
        m["consume_rpcpu"] = records / tool.broker_cpu_s
    return m


class JavaPerf(Scenario):
    name = "java-perf-1k"

    @property
    def title(self) -> str:  # type: ignore[override]
        return f"Java client: Kafka's perf tools, 1 KiB, {PARTITIONS} partitions"

    def rows(self, sizes: Sizes) -> ScenarioRows:
        n = int(sizes.java_perf_records)
        metrics: list[Metric] = []
        for run in PRODUCE_RUNS:
            metrics += [
                Metric(run.key("rps"), run.label, "records/s", 0),
                Metric(run.key("mbs"), run.label, "MB/s", target=VS_KAFKA,
                       client_cpu=run.key("client_pct")),
                Metric(run.key("p99_ms"), f"{run.label}, p99 latency", "ms", 0),
                Metric(run.key("rpcpu"), run.label, "records/broker-CPU-s", 0, VS_KAFKA),
            ]
        metrics += [
            Metric("consume_mbs", CONSUME, "MB/s", target=VS_KAFKA, client_cpu="consume_client_pct"),
            Metric("consume_rps", CONSUME, "records/s", 0),
            Metric("consume_join_s", f"{CONSUME}, group join", "s", 2),
            Metric("consume_rpcpu", CONSUME, "records/broker-CPU-s", 0, VS_KAFKA),
            Metric("rss_mb", "broker peak RSS", "MB", 0, RSS_GOALS),
        ]
        return ScenarioRows(self.name, f"{self.title} ({n:,} records)", tuple(metrics))

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        n = int(ctx.sizes.java_perf_records)
        for run in PRODUCE_RUNS:
            create_topic(broker.bootstrap, run.topic, PARTITIONS)
        timeout = io_timeout(n, KIB) + IDLE_MS / 1000
        self._produce(broker, ctx, out, ACKS_1, n, timeout)
        cmd = consumer_command(broker.bootstrap, ACKS_1.topic, n)
        tool = run_tool(broker, cmd, timeout)  # it gives up by itself after IDLE_MS idle
        fields = parse_consumer_summary(tool.output)
        if tool.returncode != 0 or not fields:
            raise BrokerError(tool.failure("ConsumerPerformance"))
        got = int(fields["data.consumed.in.nMsg"])
        if got < n:
            raise BrokerError(f"ConsumerPerformance read {got} of {n} records: {tool.tail(300)}")
        out.metrics.update(consumer_metrics(fields, tool))
        ctx.log(
            f"{CONSUME}: {out.metrics.get('consume_mbs', 0):.1f} MB/s, join "
            f"{out.metrics['consume_join_s']:.2f} s, broker {tool.broker_cpu_s:.2f} CPU-s"
        )
        self._produce(broker, ctx, out, ACKS_ALL, n, timeout)

    def _produce(
        self,
        broker: BrokerProcess,
        ctx: Context,
        out: Outcome,
        run: ProduceRun,
        n: int,
        timeout: float,
    ) -> None:
        cmd = producer_command(broker.bootstrap, run, n)
        # A failed send is final (the client retried it for delivery.timeout.ms, 2 min, or
        # waited max.block.ms, 60 s, for buffer space): stop at its stack trace rather than
        # wait for one per record.
        tool = run_tool(broker, cmd, timeout, stop_at=is_exception)
        summary = parse_producer_summary(tool.output)
        if tool.stopped_at is not None or tool.returncode != 0 or summary is None:
            raise BrokerError(tool.failure(f"ProducerPerformance ({run.label})"))
        if summary.records < n:  # failed sends print a stack trace and are not counted
            raise BrokerError(
                f"{run.label}: {summary.records} of {n} records acknowledged: {tool.tail(300)}"
            )
        out.metrics.update(producer_metrics(run, summary, tool))
        ctx.log(
            f"{run.label}: {summary.records_per_s:,.0f} records/s "
            f"({out.metrics[run.key('mbs')]:.1f} MB/s), p99 {summary.p99_ms} ms, "
            f"broker {tool.broker_cpu_s:.2f} CPU-s"
        )


SCENARIOS = [JavaPerf()]
