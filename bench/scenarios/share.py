"""Share-group consumption (KIP-932) with Kafka's own Java perf tools, against a preloaded topic.

One topic of one partition is filled with ``share_records`` records of 1 KiB (the bench's
Python producer). Then, on the same broker, one Java tool run at a time, each with a fresh group
that starts at the earliest offset:

- ``ConsumerPerformance`` (``kafka-consumer-perf-test``), one consumer in a plain consumer group
  (``group.protocol=consumer``, KIP-848: it joins by heartbeat as a share consumer does, without
  the classic protocol's initial rebalance delay): the baseline with no per-record state;
- ``ShareConsumerPerformance`` (``kafka-share-consumer-perf-test``) with 1, 4 and 16 share
  consumers (its ``--threads``: one KafkaShareConsumer per thread, one JVM), implicit
  acknowledgement (the tool's and the client's default: every record is ACCEPTed with the next
  ShareFetch);
- the same with 1 consumer and ``--fetch-size 52428800``: the tools set ``fetch.max.bytes`` to
  1 MiB, an application keeps the client's default of 50 MiB, and a broker that reads more of
  the log than it can hand out shows it only then.

Records/s is the tool's own count over its own clock, which starts before the consumers
subscribe: the group join is inside it, for the plain consumer too (its rebalance time plus its
fetch time). Broker CPU is sampled around the whole tool process, the JVM's start-up included
(the broker is idle then). The share group's ``share.auto.offset.reset=earliest`` is set as a
group config (IncrementalAlterConfigs on the GROUP resource) before it first fetches. The
order of the four runs rotates from one round to the next, so no run always meets a cold broker
(Kafka's JIT) or always comes last.

The acknowledgement overhead is the share run at 1 consumer against the plain consumer (both
with 1 MiB fetches): its records/s and the broker CPU per record. Tansu 0.6.0 has no share groups: n/a.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.admin import create_topic
from bench.brokers import BrokerError, BrokerProcess, BrokerSpec
from bench.clientproc import run_job
from bench.java_tools import consumer_seconds, java_command, parse_consumer_summary
from bench.java_tools import run_tool as run_java_tool
from bench.report import Metric, Outcome, ScenarioRows
from bench.scenarios.base import MB, Context, Scenario, io_timeout
from bench.targets import RSS_GOALS

KIB = 1024
TOOL_FETCH_BYTES = 1_048_576  # the perf tools' --fetch-size default (their fetch.max.bytes)
CLIENT_FETCH_BYTES = 52_428_800  # the Java client's own fetch.max.bytes default
IDLE_MS = 30_000  # the tools' --timeout: the longest wait for a record before giving up
NO_SHARE_GROUPS = "Tansu 0.6.0 has no share groups (KIP-932)"


@dataclass(frozen=True)
class Run:
    """One tool run: a plain consumer group (``consumers`` 0) or a share group of N consumers."""

    name: str
    consumers: int
    fetch_bytes: int = TOOL_FETCH_BYTES

    @property
    def share(self) -> bool:
        return self.consumers > 0

    @property
    def label(self) -> str:
        if not self.share:
            return "consumer group, 1 consumer"
        plural = "s" if self.consumers > 1 else ""
        extra = ", fetch.max.bytes 50 MiB" if self.fetch_bytes != TOOL_FETCH_BYTES else ""
        return f"share group, {self.consumers} consumer{plural}{extra}"

    def key(self, what: str) -> str:
        return f"{self.name}_{what}"


PLAIN = Run("plain", 0)
SHARE1 = Run("share1", 1)
# The same with the client's default fetch.max.bytes, as an application would fetch (the tool
# sets 1 MiB): a broker that reads more of the log than it hands out shows it here.
RUNS = (
    PLAIN,
    SHARE1,
    Run("share4", 4),
    Run("share16", 16),
    Run("share1big", 1, CLIENT_FETCH_BYTES),
)


@dataclass
class ToolResult:
    records: int
    seconds: float  # the tool's elapsed time, group join included
    client_cpu_s: float  # the JVM's user+system CPU, start-up included
    client_wall_s: float  # the JVM's whole life, start-up included
    broker_cpu_s: float
    output: str
    join_s: float | None = None  # ConsumerPerformance's rebalance.time.ms (share: not split out)


class ShareConsume(Scenario):
    name = "share-consume"

    def __init__(self) -> None:
        self._runs: dict[str, int] = {}  # runs so far per broker label: the order's rotation

    @property
    def title(self) -> str:  # type: ignore[override]
        return "share group consume 1 KiB, 1 partition, Kafka's Java perf tools"

    def rows(self, sizes) -> ScenarioRows:
        n = int(sizes.share_records)
        metrics: list[Metric] = []
        for run in RUNS:
            metrics.append(
                Metric(
                    run.key("rps"),
                    run.label,
                    "records/s",
                    0,
                    client_cpu=run.key("client_pct"),
                )
            )
        for run in RUNS:
            metrics.append(Metric(run.key("rpcpu"), run.label, "records/broker-CPU-s", 0))
        metrics += [
            Metric("ack_rps_ratio", "share (1 consumer) / consumer group, records/s", "x", 2),
            Metric(
                "ack_cpu_us",
                "share (1 consumer) minus consumer group, broker CPU per record",
                "µs",
                2,
            ),
            Metric("rss_mb", "broker peak RSS", "MB", 0, RSS_GOALS),
        ]
        return ScenarioRows(self.name, f"{self.title} ({n:,} records)", tuple(metrics))

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        if spec.kind == "tansu":
            out = Outcome()
            for m in self.rows(ctx.sizes).metrics:
                out.na[m.key] = NO_SHARE_GROUPS
            return out
        return super().run(spec, ctx)

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        n, topic = int(ctx.sizes.share_records), "bench-share"
        create_topic(broker.bootstrap, topic, 1)
        res = run_job(
            {
                "job": "produce",
                "topic": topic,
                "size": KIB,
                "count": n,
                "acks": 1,
                "bootstrap": broker.bootstrap,
            },
            io_timeout(n, KIB),
        )
        if res["failed"]:
            out.failed = f"preload: {res['failed']} records not delivered ({res['first_error']})"
            return
        label = broker.spec.label
        turn = self._runs.get(label, 0)
        self._runs[label] = turn + 1
        runs = list(RUNS)
        runs = runs[turn % len(runs) :] + runs[: turn % len(runs)]
        for run in runs:
            group = f"bench-{run.name}"
            if run.share:
                set_share_earliest(broker.bootstrap, group)
            got = run_tool(broker, topic, group, run, n)
            if got.records < n:
                out.failed = (
                    f"{run.label}: {got.records} of {n} records ({got.output.strip()[-300:]})"
                )
                return
            out.metrics[run.key("rps")] = got.records / got.seconds
            out.metrics[run.key("client_pct")] = 100 * got.client_cpu_s / got.client_wall_s
            out.metrics[run.key("cpu_s")] = got.broker_cpu_s
            if got.broker_cpu_s > 0:
                out.metrics[run.key("rpcpu")] = got.records / got.broker_cpu_s
            ctx.log(
                f"{run.label}: {got.records / got.seconds:,.0f} records/s "
                f"({got.records * KIB / got.seconds / MB:.1f} MB/s), broker "
                f"{got.broker_cpu_s:.2f} CPU-s, client {got.client_cpu_s:.1f} CPU-s"
                + (f", join {got.join_s:.2f} s" if got.join_s is not None else "")
            )
        m = out.metrics
        m["ack_rps_ratio"] = m[SHARE1.key("rps")] / m[PLAIN.key("rps")]
        m["ack_cpu_us"] = (m[SHARE1.key("cpu_s")] - m[PLAIN.key("cpu_s")]) / n * 1e6


def set_share_earliest(bootstrap: str, group: str, timeout: float = 30.0) -> None:
    """share.auto.offset.reset=earliest for ``group``, before its first ShareFetch."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout)


def tool_command(bootstrap: str, topic: str, group: str, run: Run, n: int) -> list[str]:
    """kafka-consumer-perf-test or kafka-share-consumer-perf-test, without the scripts."""
    common = [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--num-records",
        str(n),
        "--timeout",
        str(IDLE_MS),
        "--fetch-size",
        str(run.fetch_bytes),
    ]
    if not run.share:
        return [
            *java_command("org.apache.kafka.tools.ConsumerPerformance"),
            *common,
            "--command-property",
            "group.protocol=consumer",
        ]
    return [
        *java_command("org.apache.kafka.tools.ShareConsumerPerformance"),
        *common,
        "--threads",
        str(run.consumers),
    ]


def run_tool(broker: BrokerProcess, topic: str, group: str, run: Run, n: int) -> ToolResult:
    cmd = tool_command(broker.bootstrap, topic, group, run, n)
    done = run_java_tool(broker, cmd, io_timeout(n, KIB) + IDLE_MS / 1000)
    if done.returncode != 0:
        tool = "ShareConsumerPerformance" if run.share else "ConsumerPerformance"
        raise BrokerError(done.failure(tool))
    fields = parse_consumer_summary(done.output)
    if not fields:
        raise BrokerError(f"no summary line in the tool's output: {done.tail()}")
    return ToolResult(
        int(fields["data.consumed.in.nMsg"]),
        consumer_seconds(fields),
        done.client_cpu_s,
        done.client_wall_s,
        done.broker_cpu_s,
        done.output,
        float(fields["rebalance.time.ms"]) / 1000 if "rebalance.time.ms" in fields else None,
    )


SCENARIOS = [ShareConsume()]
