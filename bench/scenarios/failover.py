"""Produce latency of a bystander partition while leadership of 1,000 partitions moves (issue 28).

A broker that takes over or gives up many partitions at once, or deletes a large topic, does
per-partition work: if any of it (a leader-epoch checkpoint fsynced, a directory renamed) runs
on its event loop, every client of that broker waits behind it. This scenario watches one such
client.

One fresh 3-broker Strom cluster (bench/clusters.py). Broker 1 holds a 1-partition probe topic
alone (RF 1, acks=1), so its produce latency is broker 1's own. A second topic of
``many_partitions`` partitions is assigned [2, 1] (broker 2 preferred, broker 1 following).
A paced producer (``PROBE_RATE`` records/s, linger 0) writes to the probe throughout, and the
worst latency of the records sent in each phase is reported:

1. ``gain``: broker 2 stops (SIGTERM, a controlled shutdown): broker 1 becomes the leader of
   all 1,000 partitions at once;
2. ``restart``: broker 2 starts again and catches up: broker 1, leading, adds it back to 1,000
   ISRs;
3. ``elect``: a preferred-leader election moves the 1,000 leaderships back to broker 2: broker
   1 becomes their follower;
4. ``delete``: the 1,000-partition topic is deleted: broker 1 deletes its 1,000 logs.

Each phase lasts until Metadata shows its effect, plus ``SETTLE_S``. Only Strom runs it: the
goal is an absolute one (issue 28: under 20 ms), not a ratio to a peer.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from typing import Any

from bench import clusters
from bench.brokers import BrokerError, BrokerSpec
from bench.clientproc import ClientError
from bench.config import Sizes
from bench.report import Metric, Outcome, ScenarioRows, Target
from bench.scenarios.base import Context, Scenario

PROBE = "bench-stall-probe"
MOVING = "bench-stall-moving"
PROBE_RATE = 200  # records/s: one every 5 ms, so a stall of 20 ms catches several
RECORD_SIZE = 100
SETTLE_S = 1.5  # after a phase's effect shows, for work that trails it (deletions, fsyncs)
PHASE_TIMEOUT = 60.0
READY_TIMEOUT = 120.0
GOAL_MS = 20.0
PHASES = ("gain", "restart", "elect", "delete")
ONLY_STROM = "Strom's own goal (issue 28), not a comparison"


class ProbeProducer:
    """A paced acks=1 producer to one partition, in a process of its own (spawned: the
    harness's metadata polls of 1,000 partitions hold its GIL for milliseconds, which would
    show up as latency): every record's (send time, latency ms), librdkafka's own measure from
    produce() to the delivery report, served while it waits for the next send."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop, self._ready = ctx.Event(), ctx.Event()
        self._results = ctx.Queue()
        self._proc = ctx.Process(
            target=_probe, name="stall-probe", daemon=True,
            args=(bootstrap, topic, rate, self._stop, self._ready, self._results))
        self.samples: list[tuple[float, float]] = []
        self.failures: list[str] = []

    def start(self, timeout: float = 60.0) -> None:
        """Start the process and return once its first record is delivered."""
        self._proc.start()
        if not self._ready.wait(timeout):
            self._proc.kill()
            raise TimeoutError(f"the probe delivered nothing in {timeout:.0f} s")

    def stop(self) -> None:
        self._stop.set()
        try:
            self.samples, self.failures = self._results.get(timeout=90)
        except queue.Empty:
            self.failures = ["the probe process sent no results"]
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()

    def worst_between(self, t0: float, t1: float) -> float | None:
        """The largest latency of the records sent in [t0, t1] (None: none sent)."""
        got = [ms for sent, ms in self.samples if t0 <= sent <= t1]
        return max(got) if got else None


def _probe(bootstrap: str, topic: str, rate: int, stop: Any, ready: Any, results: Any) -> None:
    """The probe process's body (see ProbeProducer)."""
    from confluent_kafka import Producer

    samples: list[tuple[float, float]] = []
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            samples.append((time.monotonic() - msg.latency(), msg.latency() * 1000))
            ready.set()

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0,
                  "enable.idempotence": False, "log_level": 0})  # fmt: skip
    pad = b"x" * RECORD_SIZE
    interval, start, seq = 1.0 / rate, time.monotonic(), 0
    while not stop.is_set():
        due = start + seq * interval
        while (wait := due - time.monotonic()) > 0:
            p.poll(wait)  # delivery reports are taken as they come (poll returns after one)
        p.produce(topic, pad, partition=0, on_delivery=delivered)
        p.poll(0)
        seq += 1
    left = p.flush(30)
    if left:
        failures.append(f"{left} records undelivered")
    results.put((samples, failures))


class FailoverStall(Scenario):
    name = "failover-stall"

    def rows(self, sizes: Sizes) -> ScenarioRows:
        n = sizes.many_partitions
        title = (f"Produce latency of a bystander partition on broker 1 (3-broker cluster) "
                 f"while {n:,} partitions move leader and are deleted ({PROBE_RATE} records/s, "
                 "acks=1)")  # fmt: skip
        return ScenarioRows(
            self.name,
            title,
            (
                Metric("worst_ms", "worst produce latency, all phases", "ms", 1,
                       Target("max", GOAL_MS)),
                Metric("gain_ms", f"worst while broker 1 becomes leader of {n:,}", "ms", 1),
                Metric("restart_ms", f"worst while broker 2 rejoins {n:,} ISRs", "ms", 1),
                Metric("elect_ms", f"worst while {n:,} leaderships move back", "ms", 1),
                Metric("delete_ms", f"worst while the {n:,}-partition topic is deleted", "ms",
                       1),
                Metric("p99_ms", "p99 over all phases", "ms", 2),
            ),
        )

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        out = Outcome()
        if spec.kind != "strom":
            for m in self.rows(ctx.sizes).metrics:
                out.na[m.key] = ONLY_STROM
            return out
        cluster = None
        try:
            cluster = clusters.start(spec, ctx.workdir, READY_TIMEOUT)
            self._phases(cluster, ctx, out)
        except (BrokerError, ClientError, TimeoutError) as e:
            out.failed = str(e)
        except Exception as e:  # a Kafka error surfacing in the harness
            out.failed = f"{type(e).__name__}: {e}"
        finally:
            if cluster is not None:
                if out.failed:
                    ctx.log("log tails:\n    " + cluster.log_tails().replace("\n", "\n    "))
                cluster.close(keep=bool(out.failed) or bool(os.environ.get("STROM_BENCH_KEEP")))
        return out

    def _phases(self, cluster: clusters.Cluster, ctx: Context, out: Outcome) -> None:
        from confluent_kafka import ElectionType, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        n = ctx.sizes.many_partitions
        one, two = cluster.nodes[0], cluster.nodes[1]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(PROBE, 1, replica_assignment=[[1]])])[PROBE].result(60)
        moving = NewTopic(MOVING, n, replica_assignment=[[2, 1]] * n,
                          config={"min.insync.replicas": "1"})
        admin.create_topics([moving], operation_timeout=60)[MOVING].result(120)
        _Leaders(cluster.bootstrap, PROBE, 1).wait(lambda s: s.all_led_by(1), "led by broker 1")
        view = _Leaders(cluster.bootstrap, MOVING, n)
        view.wait(lambda s: s.all_led_by(2) and s.all_isr(2), "led by broker 2, in sync")
        probe = ProbeProducer(one.bootstrap, PROBE, PROBE_RATE)
        probe.start()
        windows: dict[str, tuple[float, float]] = {}
        cpu = _PhaseCpu(cluster)
        try:
            time.sleep(SETTLE_S)  # the producer's connection and first batches
            t0 = cpu.start()
            two.stop()
            view.wait(lambda s: s.all_led_by(1), "broker 1 leading all")
            windows["gain"] = (t0, _settle())
            cpu.end("gain")
            t0 = cpu.start()
            two.start()
            view.wait(lambda s: s.all_isr(2), "broker 2 back in every ISR")
            windows["restart"] = (t0, _settle())
            cpu.end("restart")
            t0 = cpu.start()
            parts = [TopicPartition(MOVING, p) for p in range(n)]
            admin.elect_leaders(ElectionType.PREFERRED, parts).result(60)
            view.wait(lambda s: s.all_led_by(2), "broker 2 leading all again")
            windows["elect"] = (t0, _settle())
            cpu.end("elect")
            t0 = cpu.start()
            admin.delete_topics([MOVING], operation_timeout=60)[MOVING].result(60)
            view.wait(lambda s: s.gone, "the topic gone")
            windows["delete"] = (t0, _settle())
            cpu.end("delete")
        finally:
            probe.stop()
        ctx.log("brokers' CPU per phase (s, brokers 1/2/3; a broker stopped or restarted in a "
                "phase counts from its start in it): " + "; ".join(cpu.lines))
        if probe.failures:
            out.failed = f"probe: {len(probe.failures)} failed ({probe.failures[0]})"
            return
        for phase, (t0, t1) in windows.items():
            worst = probe.worst_between(t0, t1)
            if worst is not None:
                out.metrics[f"{phase}_ms"] = worst
        measured = [out.metrics[f"{p}_ms"] for p in PHASES if f"{p}_ms" in out.metrics]
        if len(measured) != len(PHASES):
            missing = [p for p in PHASES if f"{p}_ms" not in out.metrics]
            out.failed = (f"no probe record sent during {', '.join(missing)} "
                          f"({len(probe.samples)} records in all)")
            return
        out.metrics["worst_ms"] = max(measured)
        lat = sorted(ms for sent, ms in probe.samples
                     if windows["gain"][0] <= sent <= windows["delete"][1])
        out.metrics["p99_ms"] = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        cluster.check_alive()
        ctx.log("worst produce latency (ms): " + ", ".join(
            f"{p} {out.metrics[p + '_ms']:.1f}" for p in PHASES) + f"; p99 {out.metrics['p99_ms']:.1f}")


class _PhaseCpu:
    """CPU seconds each broker used in each phase: on 2 cores, what the other brokers do
    decides how long broker 1 waits for a core."""

    def __init__(self, cluster: clusters.Cluster) -> None:
        self.cluster = cluster
        self.before: list[float | None] = []
        self.lines: list[str] = []

    def _sample(self) -> list[float | None]:
        out: list[float | None] = []
        for node in self.cluster.nodes:
            try:
                out.append(node.cpu_sample().ticks_s if node.proc is not None
                           and node.proc.poll() is None else None)
            except (OSError, AssertionError):
                out.append(None)
        return out

    def start(self) -> float:
        self.before = self._sample()
        return time.monotonic()

    def end(self, phase: str) -> None:
        after = self._sample()
        cells = []
        for b, a in zip(self.before, after, strict=True):
            if a is None:  # stopped in this phase
                cells.append("-")
            else:  # a broker (re)started in this phase counts from its start
                cells.append(f"{a - b if b is not None and a >= b else a:.2f}")
        self.lines.append(f"{phase} {'/'.join(cells)}")


def _settle() -> float:
    time.sleep(SETTLE_S)
    return time.monotonic()


class _Leaders:
    """Metadata of the moving topic, polled until a condition holds."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        self.topic, self.partitions = topic, partitions
        self.state: dict[int, tuple[int, list[int]]] = {}
        self.gone = False

    def refresh(self) -> None:
        # every topic: asking for this one by name would create it again once deleted
        # (auto.create.topics.enable, as librdkafka's Metadata request allows it)
        md = self.admin.list_topics(timeout=5)
        t = md.topics.get(self.topic)
        self.gone = t is None or (t.error is not None and not t.partitions)
        self.state = {} if t is None else {p: (m.leader, list(m.isrs))
                                            for p, m in t.partitions.items()}

    def all_led_by(self, broker: int) -> bool:
        return len(self.state) == self.partitions and all(
            leader == broker for leader, _ in self.state.values())

    def all_isr(self, broker: int) -> bool:
        return len(self.state) == self.partitions and all(
            broker in isr for _, isr in self.state.values())

    def wait(self, done: Callable[[_Leaders], bool], what: str) -> None:
        deadline = time.monotonic() + PHASE_TIMEOUT
        while True:
            try:
                self.refresh()
                if done(self):
                    return
            except Exception:  # KafkaException while brokers come and go
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.topic}: not {what} after {PHASE_TIMEOUT:.0f} s")
            time.sleep(0.2)  # a Metadata of 1,000 partitions costs the harness CPU


SCENARIOS = [FailoverStall()]
