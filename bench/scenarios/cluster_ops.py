"""Operating a 3-node KRaft cluster, against Kafka 4.4's (issue 30): controller failover, and
10,000 partitions created and brought back after every node is killed.

Both run on fresh clusters of bench/clusters.py (three combined nodes, Strom's on a static
quorum, Kafka's on a dynamic one) with the nodes' default timeouts; Tansu has no replication,
so every row is n/a for it.

``cluster-failover``: a topic of 6 partitions, RF=3, min.insync.replicas=2, and a producer in a
process of its own writing 1 KiB records to it at ``LOAD_RATE`` records/s with acks=all
throughout. Then ``failover_repeats`` times:

1. the active controller is found: DescribeQuorum v0 on each node's CONTROLLER listener, which
   only the quorum's leader answers without an error (:meth:`bench.clusters.Cluster.quorum_leader`,
   the same request for both systems; on Strom the node Metadata names as controller is
   logged beside it);
2. it is killed with SIGKILL; the clock starts;
3. ``leader_s``: DescribeQuorum on the two survivors until one of them leads;
4. ``failover_s``: then CreateTopics (a new topic of 1 partition, RF=2, through a new admin
   client bootstrapped from the survivors, which sends it where Metadata says the controller
   is), each attempt bounded by ``CREATE_ATTEMPT_S`` and retried under a new name with a new
   client, until one succeeds;
5. the killed node starts again on its data; ``rejoin_s``: until Metadata lists 3 brokers and
   every replica of the producer's topic is back in its ISR. ``SETTLE_S`` later the next round
   starts.

The rows are the medians over the repeats; the producer's worst delivery latency and its
undelivered records cover the whole run.

``cluster-10k-partitions``: ``cluster_partitions`` partitions as topics of 1,000 partitions
(below Kafka's 10,000 records per request), RF ``cluster_partitions_rf``, every CreateTopics
sent at once (one request per topic); ``create_s``: from the first request until Metadata shows
every partition with a leader and no error. Once every replica is in its ISR, all three nodes
are killed with SIGKILL and started again together on their data; ``registered_s``: until every
node serves Metadata listing all three, ``restart_s``: until Metadata shows every partition led
again. Metadata is read through one admin client bootstrapped from all three nodes, created
after the processes are up.
"""

from __future__ import annotations

import multiprocessing
import queue
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import clusters
from bench.admin import create_topic
from bench.brokers import BrokerError, BrokerSpec
from bench.clientproc import ClientError
from bench.config import PARTITIONS, Sizes
from bench.report import Metric, Outcome, ScenarioRows
from bench.scenarios.base import MB, Context, Scenario
from bench.scenarios.cluster import (
    MIN_ISR,
    NO_REPLICATION,
    READY_TIMEOUT,
    REPLICAS,
    TOPIC_CONFIG,
    wait_in_sync,
)
from bench.targets import KAFKA, at_most

LOAD_TOPIC = "bench-failover-load"
LOAD_RATE = 500  # records/s of 1 KiB: a steady writer, far from loading two cores
RECORD_SIZE = 1024
CREATE_ATTEMPT_S = 5.0  # one CreateTopics attempt after a kill (then again, new name)
PROBE_REPLICAS = 2  # what two surviving brokers can always hold
FAILOVER_TIMEOUT = 120.0
REJOIN_TIMEOUT = 180.0
SETTLE_S = 2.0  # after a rejoin: the restarted controller catches up on the metadata log
POLL_S = 0.01  # between DescribeQuorum rounds while the quorum elects
PER_TOPIC = 1_000
BIG_TIMEOUT = 900.0  # creating or restarting 10,000 partitions (30,000 replicas)
METADATA_POLL_S = 0.25  # a Metadata of 10,000 partitions costs the harness ~50 ms


def _na(scenario: Scenario, sizes: Sizes, why: str) -> Outcome:
    out = Outcome()
    for m in scenario.rows(sizes).metrics:
        out.na[m.key] = why
    return out


def _with_cluster(
    spec: BrokerSpec, ctx: Context, out: Outcome, body: Callable[[clusters.Cluster], None]
) -> Outcome:
    """Start a fresh KRaft cluster of ``spec``, run ``body`` on it, stop it (its logs shown and
    its data kept when the run failed)."""
    cluster = None
    try:
        cluster = clusters.start(spec, ctx.workdir, READY_TIMEOUT)
        ctx.log(f"{len(cluster.nodes)} nodes registered ({cluster.bootstrap})")
        body(cluster)
    except (BrokerError, ClientError, TimeoutError) as e:
        out.failed = str(e)
    except Exception as e:  # a Kafka error surfacing in the harness
        out.failed = f"{type(e).__name__}: {e}"
    finally:
        if cluster is not None:
            if out.failed:
                ctx.log("log tails:\n    " + cluster.log_tails().replace("\n", "\n    "))
            cluster.close(keep=bool(out.failed))
    return out


def wait_until(check: Callable[[], Any], timeout: float, what: str, pause: float = POLL_S) -> Any:
    """Poll ``check`` until it returns something truthy (returned); TimeoutError after
    ``timeout`` s. An exception from ``check`` counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
            if got:
                return got
        except Exception:  # KafkaException while nodes come and go
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} after {timeout:.0f} s")
        time.sleep(pause)


# -- cluster-failover ---------------------------------------------------------------------------


class PacedLoad:
    """An acks=all producer at ``rate`` records/s of 1 KiB, in a process of its own (spawned,
    so the harness's polls do not delay it): each record's delivery latency, librdkafka's own
    measure from produce() to the delivery report, and the records it could not deliver."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop, self._ready = ctx.Event(), ctx.Event()
        self._results = ctx.Queue()
        self._proc = ctx.Process(target=_load, name="failover-load", daemon=True,
                                 args=(bootstrap, topic, rate, self._stop, self._ready,
                                       self._results))  # fmt: skip
        self.latencies_ms: list[float] = []
        self.failures: list[str] = []

    def start(self, timeout: float = 60.0) -> None:
        """Start the process and return once its first record is delivered."""
        self._proc.start()
        if not self._ready.wait(timeout):
            self._proc.kill()
            raise TimeoutError(f"the producer delivered nothing in {timeout:.0f} s")

    def stop(self) -> None:
        self._stop.set()
        try:
            self.latencies_ms, self.failures = self._results.get(timeout=150)
        except queue.Empty:
            self.failures = ["the producer process sent no results"]
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()


def _load(bootstrap: str, topic: str, rate: int, stop: Any, ready: Any, results: Any) -> None:
    """The producer process's body (see PacedLoad)."""
    from confluent_kafka import Producer

    latencies: list[float] = []
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies.append(msg.latency() * 1000)
            ready.set()

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 120_000, "log_level": 0})  # fmt: skip
    value = b"x" * RECORD_SIZE
    interval, start, seq = 1.0 / rate, time.monotonic(), 0
    while not stop.is_set():
        due = start + seq * interval
        while (wait := due - time.monotonic()) > 0:
            p.poll(wait)
        try:
            p.produce(topic, value, on_delivery=delivered)
        except BufferError:
            p.poll(0.1)
            continue
        p.poll(0)
        seq += 1
    left = p.flush(130)
    if left:
        failures.append(f"{left} records still queued at the end")
    results.put((latencies, failures))


class ClusterFailover(Scenario):
    name = "cluster-failover"

    def rows(self, sizes: Sizes) -> ScenarioRows:
        n = sizes.failover_repeats
        title = (f"Controller failover, 3 KRaft nodes: kill -9 of the active controller while a "
                 f"producer writes ({LOAD_RATE} records/s of 1 KiB, acks=all, RF={REPLICAS}, "
                 f"min.insync.replicas={MIN_ISR}); median of {n} "
                 f"kill{'s' if n > 1 else ''}")  # fmt: skip
        return ScenarioRows(
            self.name,
            title,
            (
                Metric("failover_s", "kill -9 to a new quorum leader and a topic created", "s",
                       2, at_most(1.0, KAFKA)),  # issue 30
                Metric("leader_s", "kill -9 to a new quorum leader (DescribeQuorum)", "s", 2),
                Metric("rejoin_s", "restart of the killed node to all replicas in sync", "s", 1),
                Metric("load_worst_ms", "producer's worst delivery latency, whole run", "ms", 0),
                Metric("load_failed", "records the producer could not deliver", "records", 0),
            ),
        )

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        if spec.kind not in ("strom", "kafka"):
            return _na(self, ctx.sizes, NO_REPLICATION)
        out = Outcome()
        return _with_cluster(spec, ctx, out, lambda c: self._body(c, ctx, out))

    def _body(self, cluster: clusters.Cluster, ctx: Context, out: Outcome) -> None:
        create_topic(cluster.bootstrap, LOAD_TOPIC, PARTITIONS, replication=REPLICAS,
                     config=TOPIC_CONFIG)  # fmt: skip
        wait_in_sync(cluster.bootstrap, LOAD_TOPIC, PARTITIONS, REPLICAS, 60.0)
        load = PacedLoad(cluster.bootstrap, LOAD_TOPIC, LOAD_RATE)
        load.start()
        runs: list[tuple[float, float, float]] = []
        try:
            time.sleep(SETTLE_S)
            for i in range(ctx.sizes.failover_repeats):
                runs.append(self._once(cluster, ctx, i))
        finally:
            load.stop()
        for key, values in zip(("leader_s", "failover_s", "rejoin_s"), zip(*runs, strict=True),
                               strict=True):  # fmt: skip
            out.metrics[key] = statistics.median(values)
        out.metrics["load_worst_ms"] = max(load.latencies_ms, default=0.0)
        out.metrics["load_failed"] = float(len(load.failures))
        if load.failures:
            ctx.log(f"producer: {len(load.failures)} records not delivered ({load.failures[0]})")
        ctx.log(f"median of {len(runs)}: new leader {out.metrics['leader_s']:.2f} s, topic "
                f"created {out.metrics['failover_s']:.2f} s; producer worst "
                f"{out.metrics['load_worst_ms']:.0f} ms over {len(load.latencies_ms)} "
                "records")  # fmt: skip

    def _once(self, cluster: clusters.Cluster, ctx: Context, i: int) -> tuple[float, float, float]:
        """One kill of the active controller: (leader_s, failover_s, rejoin_s)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        old, epoch = wait_until(cluster.quorum_leader, 60.0, "a quorum leader", 0.1)
        victim = cluster.nodes[old - 1]
        survivors = ",".join(n.bootstrap for n in cluster.nodes if n is not victim)
        if cluster.kind == "strom":
            md = AdminClient({"bootstrap.servers": survivors, "log_level": 0}).list_topics(
                timeout=30)
            ctx.log(f"Metadata names node {md.controller_id} as controller, DescribeQuorum "
                    f"node {old} (epoch {epoch})")  # fmt: skip
        t0 = time.monotonic()
        victim.kill9()
        new, new_epoch = wait_until(
            lambda: (found := cluster.quorum_leader(0.5)) and found[0] != old and found,
            FAILOVER_TIMEOUT, "a new quorum leader")  # fmt: skip
        leader_s = time.monotonic() - t0
        deadline = t0 + FAILOVER_TIMEOUT
        attempt, last = 0, ""
        while True:
            name = f"bench-failover-{i}-{attempt}"
            attempt += 1
            # a new client each time: one that timed out may hold on to a dead controller
            admin = AdminClient({"bootstrap.servers": survivors, "log_level": 0})
            try:
                fut = admin.create_topics([NewTopic(name, 1, PROBE_REPLICAS)],
                                          request_timeout=CREATE_ATTEMPT_S,
                                          operation_timeout=CREATE_ATTEMPT_S)[name]  # fmt: skip
                fut.result(timeout=CREATE_ATTEMPT_S + 1)
                break
            except Exception as e:  # KafkaException (timeout, NOT_CONTROLLER, ...)
                last = str(e)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no topic created {FAILOVER_TIMEOUT:.0f} s after the kill "
                                   f"of node {old} ({attempt} attempts; last: {last})")  # fmt: skip
            time.sleep(POLL_S)
        failover_s = time.monotonic() - t0
        ctx.log(f"kill {i + 1}: node {old} (epoch {epoch}) killed; node {new} leads (epoch "
                f"{new_epoch}) after {leader_s:.2f} s, topic created after {failover_s:.2f} s "
                f"({attempt} attempt{'s' if attempt > 1 else ''})")  # fmt: skip
        t1 = time.monotonic()
        victim.start()
        cluster.wait_ready(REJOIN_TIMEOUT)
        wait_in_sync(cluster.bootstrap, LOAD_TOPIC, PARTITIONS, REPLICAS, REJOIN_TIMEOUT)
        rejoin_s = time.monotonic() - t1
        time.sleep(SETTLE_S)
        cluster.check_alive()
        return leader_s, failover_s, rejoin_s


# -- cluster-10k-partitions ---------------------------------------------------------------------


def topic_sizes(partitions: int, per_topic: int = PER_TOPIC) -> list[int]:
    """``partitions`` as topics of ``per_topic`` (the last one holds the rest)."""
    if partitions < 1 or per_topic < 1:
        raise ValueError("at least one partition per topic")
    full, rest = divmod(partitions, per_topic)
    return [per_topic] * full + ([rest] if rest else [])


def led_partitions(md: Any, topics: dict[str, int]) -> int:
    """How many partitions of ``topics`` (name -> partition count) Metadata shows with a
    leader and no error."""
    led = 0
    for name in topics:
        t = md.topics.get(name)
        if t is None or t.error is not None:
            continue
        led += sum(1 for p in t.partitions.values() if p.leader >= 0 and p.error is None)
    return led


def in_sync_partitions(md: Any, topics: dict[str, int], replicas: int) -> int:
    """How many partitions of ``topics`` have all ``replicas`` replicas in their ISR."""
    return sum(
        1
        for name in topics
        if (t := md.topics.get(name)) is not None and t.error is None
        for p in t.partitions.values()
        if p.leader >= 0 and p.error is None and len(p.isrs) == replicas
    )


class ClusterPartitions(Scenario):
    name = "cluster-10k-partitions"

    def rows(self, sizes: Sizes) -> ScenarioRows:
        n, rf = sizes.cluster_partitions, sizes.cluster_partitions_rf
        topics = len(topic_sizes(n))
        title = (f"{n:,} partitions in a 3-node KRaft cluster ({topics} topic"
                 f"{'s' if topics > 1 else ''} of up to {PER_TOPIC:,}, RF={rf}): create, then "
                 "kill -9 of all 3 nodes and restart")  # fmt: skip
        return ScenarioRows(
            self.name,
            title,
            (
                Metric("create_s", f"create {n:,} partitions until every one is led", "s", 2,
                       at_most(1.0, KAFKA)),  # issue 30
                Metric("restart_s", "kill -9 of all 3, restart until every partition is led",
                       "s", 2, at_most(1.0, KAFKA)),  # issue 30
                Metric("registered_s", "restart until all 3 nodes serve Metadata", "s", 2),
                Metric("rss_mb", "peak RSS, sum of 3 nodes", "MB", 0),
            ),
        )

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        if spec.kind not in ("strom", "kafka"):
            return _na(self, ctx.sizes, NO_REPLICATION)
        out = Outcome()
        return _with_cluster(spec, ctx, out, lambda c: self._body(c, ctx, out))

    def _body(self, cluster: clusters.Cluster, ctx: Context, out: Outcome) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        n, rf = ctx.sizes.cluster_partitions, ctx.sizes.cluster_partitions_rf
        topics = {f"bench-10k-{i}": count for i, count in enumerate(topic_sizes(n))}
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        admin.list_topics(timeout=30)  # connected before the clock starts
        t0 = time.monotonic()
        futures = [
            admin.create_topics([NewTopic(name, count, rf)], request_timeout=BIG_TIMEOUT,
                                operation_timeout=BIG_TIMEOUT)[name]
            for name, count in topics.items()
        ]  # one request per topic, all in flight together
        for f in futures:
            f.result(timeout=BIG_TIMEOUT)
        wait_until(lambda: led_partitions(admin.list_topics(timeout=30), topics) == n,
                   max(1.0, t0 + BIG_TIMEOUT - time.monotonic()), f"all {n:,} partitions led",
                   METADATA_POLL_S)  # fmt: skip
        out.metrics["create_s"] = time.monotonic() - t0
        ctx.log(f"{n:,} partitions (RF={rf}) created and led in {out.metrics['create_s']:.2f} s")
        wait_until(lambda: in_sync_partitions(admin.list_topics(timeout=30), topics, rf) == n,
                   BIG_TIMEOUT, f"every replica of the {n:,} partitions in sync",
                   METADATA_POLL_S)  # fmt: skip
        rss = cluster.peak_rss_bytes()
        del admin
        for node in cluster.nodes:
            node.kill9()
        t0 = time.monotonic()
        for node in cluster.nodes:
            node.start()
        cluster.wait_ready(BIG_TIMEOUT)
        out.metrics["registered_s"] = time.monotonic() - t0
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        wait_until(lambda: led_partitions(admin.list_topics(timeout=30), topics) == n,
                   max(1.0, t0 + BIG_TIMEOUT - time.monotonic()),
                   f"all {n:,} partitions led after the restart", METADATA_POLL_S)  # fmt: skip
        out.metrics["restart_s"] = time.monotonic() - t0
        cluster.check_alive()
        out.metrics["rss_mb"] = max(rss, cluster.peak_rss_bytes()) / MB
        ctx.log(f"restart after kill -9 of all 3: registered in "
                f"{out.metrics['registered_s']:.2f} s, all led in {out.metrics['restart_s']:.2f} s; RSS {out.metrics['rss_mb']:.0f} MB")


SCENARIOS = [ClusterFailover(), ClusterPartitions()]
