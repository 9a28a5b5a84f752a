"""Three brokers, every partition on all of them: RF=3, min.insync.replicas=2, acks=all (issue 21).

``cluster-3``: Strom and Kafka each as three combined KRaft nodes (bench/clusters.py).
``cluster-3-zk``: the same run with Strom as three brokers on a private ZooKeeper; Strom only
(Kafka 4.4 has no ZooKeeper mode: its column is cluster-3's), so it has no goals. Tansu's memory
storage has no replication, so every row is n/a for it. One fresh cluster per run serves three
phases on two topics of 6 partitions, both created with 3 replicas and the topic config
min.insync.replicas=2:

1. produce ``cluster_records`` records of 1 KiB with acks=all as fast as the client goes
   (the throughput producer of bench/config.py), then
2. consume them all back (counted and checked as in the throughput scenarios), then
3. the e2e-latency run (bench/scenarios/latency.py: a producer paced at ``latency_rate``
   records/s, linger 0, and a consumer) on the second topic, with acks=all.

Broker CPU is the sum over the three brokers' process trees: the KRaft controllers run inside
the nodes and are counted, Strom's ZooKeeper (cluster-3-zk) is not (it has a row of its own).
Peak RSS is the sum of the three brokers' peaks.
"""

from __future__ import annotations

import time
from typing import Any

from bench import clusters
from bench.admin import create_topic
from bench.brokers import BrokerError, BrokerSpec
from bench.clientproc import ClientError, ClientJob
from bench.config import PARTITIONS, Sizes
from bench.procstat import CpuSample, cpu_delta
from bench.report import Metric, Outcome, ScenarioRows
from bench.scenarios.base import (
    MB,
    Context,
    Scenario,
    consume_problem,
    io_timeout,
    log_rates,
    produce_problem,
    record_rates,
)
from bench.scenarios.latency import check_paced, latency_metrics, paced_run
from bench.scenarios.throughput import ceiling_keys
from bench.targets import KAFKA, RSS_VS_KAFKA, at_least, at_most

RECORD_SIZE = 1024
REPLICAS = clusters.SIZE
MIN_ISR = 2
TOPIC_CONFIG = {"min.insync.replicas": str(MIN_ISR)}
READY_TIMEOUT = 120.0  # three JVMs starting at once on two cores take a while
NO_REPLICATION = "Tansu's memory storage has no replication"
KAFKA_NO_ZOOKEEPER = "Kafka 4.4 has no ZooKeeper mode: its KRaft cluster is cluster-3's column"

Samples = tuple[list[CpuSample], CpuSample | None]


class ClusterScenario(Scenario):
    name = "cluster-3"
    zookeeper = False  # Strom as KRaft nodes; True: as brokers on a ZooKeeper (cluster-3-zk)

    def title_for(self, sizes: Sizes) -> str:
        mode = "Strom on ZooKeeper, " if self.zookeeper else "KRaft nodes, "
        return (
            f"3-broker cluster ({mode}RF={REPLICAS}, min.insync.replicas={MIN_ISR}), acks=all, "
            f"1 KiB, {PARTITIONS} partitions ({sizes.cluster_records:,} records; latency at "
            f"{sizes.latency_rate:,} records/s for {sizes.latency_measure_s:g} s)"
        )

    def rows(self, sizes: Sizes) -> ScenarioRows:
        _, mbs_ref = ceiling_keys(RECORD_SIZE)
        cpu = "records/broker-CPU-s, 3 brokers"
        # issue 21's goals against Kafka; none for the ZooKeeper variant, which Kafka skips
        goal = not self.zookeeper
        metrics = [
            Metric(
                "produce_mbs",
                "produce",
                "MB/s",
                target=at_least(1.0, KAFKA) if goal else None,  # issue 21
                ceiling=mbs_ref,
                client_cpu="produce_client_pct",
            ),
            Metric("produce_rpcpu", "produce", cpu, 0),
            Metric(
                "consume_mbs",
                "consume",
                "MB/s",
                target=at_least(1.0, KAFKA) if goal else None,  # issue 21
                client_cpu="consume_client_pct",
            ),
            Metric("consume_rpcpu", "consume", cpu, 0),
            Metric("p50_ms", "e2e p50", "ms", 2),
            Metric(
                "p99_ms",
                "e2e p99",
                "ms",
                2,
                target=at_most(1.0, KAFKA) if goal else None,  # issue 21
            ),
            Metric("p999_ms", "e2e p99.9", "ms", 2),
            Metric(
                "latency_cpu_pct",
                "broker CPU during the latency run, 3 brokers",
                "% of a core",
                0,
            ),
            Metric("rss_mb", "peak RSS, sum of 3 brokers", "MB", 0,
                   RSS_VS_KAFKA if goal else None),
        ]
        if self.zookeeper:
            metrics.append(Metric(
                "zk_cpu_s", "ZooKeeper CPU in the three phases (not in broker CPU)", "CPU-s", 2
            ))  # fmt: skip
        return ScenarioRows(self.name, self.title_for(sizes), tuple(metrics))

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        out = Outcome()
        if spec.kind not in ("strom", "kafka"):
            for m in self.rows(ctx.sizes).metrics:
                out.na[m.key] = NO_REPLICATION
            return out
        if self.zookeeper and spec.kind != "strom":
            for m in self.rows(ctx.sizes).metrics:
                out.na[m.key] = KAFKA_NO_ZOOKEEPER
            return out
        cluster = None
        try:
            cluster = clusters.start(spec, ctx.workdir, READY_TIMEOUT, zookeeper=self.zookeeper)
            ctx.log(f"{len(cluster.nodes)} brokers registered ({cluster.bootstrap})")
            zk_cpu = self._warm_up(cluster, ctx, out)
            if not out.failed:
                zk_cpu += self._throughput(cluster, ctx, out)
            if not out.failed:
                zk_cpu += self._latency(cluster, ctx, out)
            if not out.failed:
                cluster.check_alive()
                out.metrics["rss_mb"] = cluster.peak_rss_bytes() / MB
                if cluster.zookeeper is not None:
                    out.metrics["zk_cpu_s"] = zk_cpu
        except (BrokerError, ClientError, TimeoutError) as e:
            out.failed = str(e)
        except Exception as e:  # a Kafka error surfacing in the harness (topic creation, ...)
            out.failed = f"{type(e).__name__}: {e}"
        finally:
            if cluster is not None:
                if out.failed:
                    ctx.log("log tails:\n    " + cluster.log_tails().replace("\n", "\n    "))
                cluster.close(keep=bool(out.failed))
        return out

    # -- phases ---------------------------------------------------------------------------------

    def _topic(self, cluster: clusters.Cluster, name: str) -> None:
        """``name`` with RF=3 and min.insync.replicas=2, every replica in sync before use."""
        create_topic(cluster.bootstrap, name, PARTITIONS, replication=REPLICAS, config=TOPIC_CONFIG)
        wait_in_sync(cluster.bootstrap, name, PARTITIONS, REPLICAS, 60.0)

    def _warm_up(self, cluster: clusters.Cluster, ctx: Context, out: Outcome) -> float:
        """``warmup_records`` through the cluster first, as the single-broker scenarios do (a
        JVM compiles its hot paths in its first seconds); returns ZooKeeper's CPU seconds."""
        n, topic = ctx.sizes.warmup_records, "bench-cluster-warmup"
        if not n:
            return 0.0
        self._topic(cluster, topic)
        timeout = io_timeout(n, RECORD_SIZE)
        job = {"job": "produce", "topic": topic, "size": RECORD_SIZE, "count": n, "acks": "all"}
        res, _, zk = measured_on(cluster, job, timeout)
        problem = produce_problem(res)
        if problem is None:
            res, _, zk_consume = measured_on(cluster, {"job": "consume", "topic": topic,
                                                       "expected": n}, timeout)  # fmt: skip
            zk += zk_consume
            problem = consume_problem(res)
        out.failed = None if problem is None else f"warm-up: {problem}"
        return zk

    def _throughput(self, cluster: clusters.Cluster, ctx: Context, out: Outcome) -> float:
        """Produce with acks=all, then consume; returns ZooKeeper's CPU seconds meanwhile."""
        n, topic = ctx.sizes.cluster_records, "bench-cluster"
        self._topic(cluster, topic)
        timeout = io_timeout(n, RECORD_SIZE)
        job = {"job": "produce", "topic": topic, "size": RECORD_SIZE, "count": n, "acks": "all"}
        res, cpu, zk = measured_on(cluster, job, timeout)
        out.failed = produce_problem(res)
        if out.failed:
            return zk
        record_rates(out, "produce", res, cpu, n, RECORD_SIZE)
        job = {"job": "consume", "topic": topic, "expected": n}
        res, cpu, zk_consume = measured_on(cluster, job, timeout)
        zk += zk_consume
        out.failed = consume_problem(res)
        if out.failed:
            return zk
        record_rates(out, "consume", res, cpu, n, RECORD_SIZE)
        log_rates(ctx, out)
        return zk

    def _latency(self, cluster: clusters.Cluster, ctx: Context, out: Outcome) -> float:
        """The paced e2e-latency run with acks=all; returns ZooKeeper's CPU seconds meanwhile."""
        topic = "bench-cluster-latency"
        self._topic(cluster, topic)
        sent, got, before, after = paced_run(
            cluster.bootstrap, topic, ctx.sizes, "all", lambda: sample(cluster)
        )
        cpu, zk = spent(before, after)
        out.failed = check_paced(sent, got)
        if out.failed:
            return zk
        out.metrics.update(latency_metrics(got))
        out.metrics["latency_cpu_pct"] = 100 * cpu / sent["seconds"]
        late = f", producer >1 ms late {sent['late']} times" if sent["late"] else ""
        ctx.log(
            f"p50 {out.metrics['p50_ms']:.2f} ms, p99 {out.metrics['p99_ms']:.2f} ms, "
            f"p99.9 {out.metrics['p999_ms']:.1f} ms, brokers "
            f"{out.metrics['latency_cpu_pct']:.0f}% CPU{late}"
        )
        return zk


def sample(cluster: clusters.Cluster) -> Samples:
    return cluster.cpu_samples(), cluster.zookeeper_sample()


def spent(before: Samples, after: Samples) -> tuple[float, float]:
    """(CPU seconds of the brokers, added up; ZooKeeper's, 0 without one) between two samples."""
    brokers = clusters.cpu_sum(before[0], after[0])
    zk = 0.0 if before[1] is None or after[1] is None else cpu_delta(before[1], after[1])
    return brokers, zk


def measured_on(
    cluster: clusters.Cluster, job: dict[str, Any], timeout: float
) -> tuple[dict[str, Any], float, float]:
    """Run a client job against the whole cluster, sampling every broker's CPU (and
    ZooKeeper's) right before GO and after RESULT: (result, brokers' CPU-s, ZooKeeper's CPU-s).
    """
    client = ClientJob({"timeout": timeout, **job, "bootstrap": cluster.bootstrap})
    try:
        client.ready(60)
        before = sample(cluster)
        client.go()
        result = client.result(timeout + 60)
        cpu, zk = spent(before, sample(cluster))
    finally:
        client.kill()
    return result, cpu, zk


def wait_in_sync(
    bootstrap: str, topic: str, partitions: int, replicas: int, timeout: float
) -> None:
    """Until Metadata shows every partition of ``topic`` with all its replicas in the ISR."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = admin.list_topics(topic, timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            if clusters.all_replicas_in_sync(md, topic, partitions, replicas):
                return
        except Exception:  # KafkaException while the topic settles
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{topic}: not all {replicas} replicas in sync after {timeout:.0f} s"
            )
        time.sleep(0.05)


class ClusterScenarioZooKeeper(ClusterScenario):
    """cluster-3 with Strom's brokers on a ZooKeeper (Strom only)."""

    name = "cluster-3-zk"
    zookeeper = True


SCENARIOS = [ClusterScenario(), ClusterScenarioZooKeeper()]
