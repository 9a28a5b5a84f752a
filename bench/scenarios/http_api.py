"""Strom's HTTP API (issue 32 point 6): records/s through HTTP against the Kafka protocol on the
same broker, and what HTTP load costs the Kafka protocol's clients.

One Strom broker with ``rest.listeners=http://127.0.0.1:0`` (the port it picks is read from its
start-up line), warmed up like the other steady-state scenarios, then, every client a process
of its own (bench/http_client.py for HTTP, bench/client.py for the Kafka protocol), each phase
on a 6-partition topic of its own:

1. produce ``http_records`` records of 1 KiB through the v3 API, streamed (one chunked
   request, one delivery report per record read back while the records are sent; a short
   stream to another topic first, so the HTTP API's producer exists), and
   ``records_acks`` records with confluent-kafka's producer at acks=all, the HTTP API's own
   producer setting; both topics are checked to hold every record;
2. consume each topic back from the beginning: through a v2 consumer instance (binary format,
   all partitions assigned, ``fetch.min.bytes`` 1 so a read returns with what has arrived,
   ``max_bytes`` 64 MiB) and through confluent-kafka's consumer; the HTTP reader checks offsets
   for gaps and duplicates;
3. the Kafka-protocol producer of phase 1 three times: alone, while an HTTP stream produces at
   half the rate measured in phase 1 (paced; it runs before the producer starts and stops
   after it ends), and alone again; the goal compares the loaded run with the mean of the
   two alone runs, so a drift over the sitting cancels out.

Broker CPU (records per CPU-second) counts the broker's whole process tree, its HTTP process
included. Kafka and Tansu have no HTTP API: every row is n/a for them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.admin import create_topic
from bench.brokers import BrokerProcess, BrokerSpec, rest_api_url, with_rest_api
from bench.config import PARTITIONS, Sizes
from bench.procstat import cpu_delta, cpu_sample, helper_pid, peak_rss_bytes
from bench.report import Metric, Outcome, ScenarioRows, Target
from bench.scenarios.base import (
    MB,
    WARMUP_TOPIC,
    Context,
    Scenario,
    consume_problem,
    io_timeout,
    measured,
    produce_problem,
    record_rates,
    start_job,
)
from bench.scenarios.schema_validation import stored_records
from bench.scenarios.throughput import KIB
from bench.targets import HTTP_LOAD_COST_GOAL, RSS_LIMIT_MB

# One stream takes all the HTTP API's process gives: 1, 2 and 4 concurrent streams produced at
# the same rate in a first look (its one event loop is busy the whole time).
STREAMS = 1
# A read returns as soon as records are there, never waiting consumer.request.timeout.ms (1 s).
FETCH_MIN_BYTES = 1
MAX_BYTES = 64 * 1024 * 1024  # the v2 API's largest response (consumer.request.max.bytes)
LOAD_SHARE = 0.5  # of phase 1's HTTP rate, for the loaded run
LOAD_RAMP_S = 1.0  # the HTTP load runs this long before the measured producer starts
WARM_RECORDS = 1_000


def no_http_api(label: str) -> str:
    return f"{label} has no HTTP API"


class HttpApi(Scenario):
    name = "http-1k"
    size = KIB
    warm_up = True

    @property
    def title(self) -> str:  # type: ignore[override]
        return (f"Strom's HTTP API against the Kafka protocol, 1 KiB, {PARTITIONS} partitions, "
                "acks=all, one broker")

    def rows(self, sizes: Sizes) -> ScenarioRows:
        plural = "s" if STREAMS > 1 else ""
        metrics = (
            Metric("http_produce_rps", f"produce through HTTP (v3, {STREAMS} chunked "
                   f"stream{plural}, a delivery report per record)", "records/s", 0,
                   client_cpu="http_produce_client_pct"),
            Metric("native_produce_rps", "produce through the Kafka protocol (acks=all)",
                   "records/s", 0, client_cpu="native_produce_client_pct"),
            Metric("http_vs_native_produce", "produce, HTTP / Kafka protocol", "x", 3),
            Metric("http_consume_rps", "consume through HTTP (v2 consumer instance, binary)",
                   "records/s", 0, client_cpu="http_consume_client_pct"),
            Metric("native_consume_rps", "consume through the Kafka protocol", "records/s", 0,
                   client_cpu="native_consume_client_pct"),
            Metric("http_vs_native_consume", "consume, HTTP / Kafka protocol", "x", 3),
            *(Metric(f"{way}_{what}_rpcpu", f"{what} through {label}, broker and its HTTP "
                     "process", "records/broker-CPU-s", 0)
              for what in ("produce", "consume")
              for way, label in (("http", "HTTP"), ("native", "the Kafka protocol"))),
            Metric("alone_rps", "Kafka-protocol produce alone (mean of the runs before and "
                   "after the loaded one)", "records/s", 0),
            Metric("loaded_rps", "Kafka-protocol produce while HTTP produces at half its "
                   "maximum", "records/s", 0, client_cpu="loaded_client_pct"),
            Metric("load_rps", "HTTP produce meanwhile (paced)", "records/s", 0),
            Metric("load_vs_http_max", "HTTP load held / HTTP produce maximum", "x", 2),
            Metric("load_rest_pct", "the HTTP process's CPU meanwhile", "% of a core", 0),
            Metric("load_cpu_pct", "the HTTP process's and the HTTP load client's CPU "
                   "meanwhile", "% of a core", 0),
            Metric("loaded_vs_alone", "Kafka-protocol produce, with HTTP load / alone", "x", 2,
                   HTTP_LOAD_COST_GOAL),
            Metric("burned_vs_alone", "control: Kafka-protocol produce beside a busy loop using "
                   "the CPU the HTTP load used / alone", "x", 2),
            Metric("burn_pct", "the busy loop's CPU meanwhile", "% of a core", 0),
            Metric("rss_mb", "broker peak RSS, its HTTP process included", "MB", 0,
                   Target("max", RSS_LIMIT_MB)),
            Metric("rest_rss_mb", "the HTTP process's peak RSS", "MB", 0),
        )
        title = (f"{self.title} ({sizes.http_records:,} records through HTTP, "
                 f"{sizes.records_acks:,} per Kafka-protocol run)")
        return ScenarioRows(self.name, title, metrics)

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        """Strom (subject, or a Strom peer) with its HTTP API on; n/a for the other brokers."""
        if spec.kind != "strom":
            out = Outcome()
            for m in self.rows(ctx.sizes).metrics:
                out.na[m.key] = no_http_api(spec.label)
            return out
        return super().run(with_rest_api(spec), ctx)

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        url = rest_api_url(broker)
        if url is None:
            out.failed = f"no 'HTTP API at' in the start-up line: {broker.log_tail(3)}"
            return
        for phase in ("http", "native", "alone1", "loaded", "alone2", "burned", "load"):
            create_topic(broker.bootstrap, self.topic(phase), PARTITIONS,
                         security=broker.security)
        os.sync()  # the warm-up's writes on disk, not during the first phase
        steps = (self._produce, self._consume, self._loaded)
        for step in steps:
            step(broker, ctx, out, url)
            if out.failed:
                return
        rest = rest_pid(broker.pid)
        if rest is not None:
            out.metrics["rest_rss_mb"] = peak_rss_bytes(rest) / MB

    def topic(self, phase: str) -> str:
        return f"bench-{self.name}-{phase}"

    def _produce(self, broker: BrokerProcess, ctx: Context, out: Outcome, url: str) -> None:
        """Phase 1: HTTP produce, then Kafka-protocol produce."""
        n_http, n = ctx.sizes.http_records, ctx.sizes.records_acks
        job = {"job": "http_produce", "url": url, "topic": self.topic("http"), "size": self.size,
               "count": n_http, "streams": STREAMS, "warm_topic": WARMUP_TOPIC,
               "warm_records": WARM_RECORDS}
        res, cpu = measured(broker, job, io_timeout(n_http, self.size))
        out.failed = checked(produce_problem(res), broker, self.topic("http"), n_http)
        if out.failed:
            out.failed = f"HTTP produce: {out.failed}"
            return
        record_rates(out, "http_produce", res, cpu, n_http, self.size)
        if not self._native(broker, out, "native", "native_produce", n):
            return
        m = out.metrics
        m["http_vs_native_produce"] = m["http_produce_rps"] / m["native_produce_rps"]
        ctx.log(f"produce records/s: HTTP {m['http_produce_rps']:,.0f}, Kafka protocol "
                f"{m['native_produce_rps']:,.0f} ({m['http_vs_native_produce']:.3f}x)")

    def _native(self, broker: BrokerProcess, out: Outcome, phase: str, key: str,
                n: int) -> bool:
        """A Kafka-protocol produce of ``n`` records (acks=all) into the phase's topic; its
        rates under ``key``; False (and ``out.failed``) if it failed."""
        topic = self.topic(phase)
        job = {"job": "produce", "topic": topic, "size": self.size, "count": n, "acks": "all"}
        res, cpu = measured(broker, job, io_timeout(n, self.size))
        out.failed = checked(produce_problem(res), broker, topic, n)
        if out.failed:
            out.failed = f"Kafka-protocol produce ({phase}): {out.failed}"
            return False
        record_rates(out, key, res, cpu, n, self.size)
        return True

    def _consume(self, broker: BrokerProcess, ctx: Context, out: Outcome, url: str) -> None:
        """Phase 2: each topic of phase 1 read back, through HTTP and the Kafka protocol."""
        n_http, n = ctx.sizes.http_records, ctx.sizes.records_acks
        job = {"job": "http_consume", "url": url, "topic": self.topic("http"),
               "expected": n_http, "partitions": PARTITIONS, "min_bytes": FETCH_MIN_BYTES,
               "max_bytes": MAX_BYTES}
        res, cpu = measured(broker, job, io_timeout(n_http, self.size))
        out.failed = consume_problem(res)
        if out.failed:
            out.failed = f"HTTP consume: {out.failed}"
            return
        record_rates(out, "http_consume", res, cpu, n_http, self.size)
        job = {"job": "consume", "topic": self.topic("native"), "expected": n}
        res, cpu = measured(broker, job, io_timeout(n, self.size))
        out.failed = consume_problem(res)
        if out.failed:
            out.failed = f"Kafka-protocol consume: {out.failed}"
            return
        record_rates(out, "native_consume", res, cpu, n, self.size)
        m = out.metrics
        m["http_vs_native_consume"] = m["http_consume_rps"] / m["native_consume_rps"]
        ctx.log(f"consume records/s: HTTP {m['http_consume_rps']:,.0f}, Kafka protocol "
                f"{m['native_consume_rps']:,.0f} ({m['http_vs_native_consume']:.3f}x)")

    def _loaded(self, broker: BrokerProcess, ctx: Context, out: Outcome, url: str) -> None:
        """Phase 3: Kafka-protocol produce alone, under HTTP load at half its maximum, alone."""
        n = ctx.sizes.records_acks
        if not self._native(broker, out, "alone1", "alone1", n):
            return
        rate = LOAD_SHARE * out.metrics["http_produce_rps"]
        load_job = {"job": "http_load", "url": url, "topic": self.topic("load"),
                    "size": self.size, "rate": rate, "streams": STREAMS, "ramp_s": LOAD_RAMP_S}
        timeout = io_timeout(n, self.size)
        rest = rest_pid(broker.pid)
        load = start_job(broker, load_job, timeout)
        try:
            load.ready(60 + LOAD_RAMP_S)  # READY: the load runs
            before, t0 = (cpu_sample(rest) if rest else None), time.monotonic()
            client_before = cpu_sample(load.proc.pid)
            ok = self._native(broker, out, "loaded", "loaded", n)
            elapsed = time.monotonic() - t0
            client_used = cpu_delta(client_before, cpu_sample(load.proc.pid))
            if rest is not None and before is not None:
                used = cpu_delta(before, cpu_sample(rest))
                out.metrics["load_rest_pct"] = 100 * used / elapsed
                out.metrics["load_cpu_pct"] = 100 * (used + client_used) / elapsed
            load.go()  # GO: the load stops
            res = load.result(timeout)
        finally:
            load.kill()
        if not ok:
            return
        if res["failed"]:
            out.failed = f"HTTP load: {res['failed']} records not stored ({res['first_error']})"
            return
        if not self._native(broker, out, "alone2", "alone2", n):
            return
        m = out.metrics
        m["alone_rps"] = (m["alone1_rps"] + m["alone2_rps"]) / 2
        if "load_cpu_pct" in m and not self._burned(broker, out, n, m["load_cpu_pct"] / 100):
            return
        m["load_rps"] = res["window_rps"]
        m["load_vs_http_max"] = m["load_rps"] / m["http_produce_rps"]
        m["loaded_vs_alone"] = m["loaded_rps"] / m["alone_rps"]
        ctx.log(f"Kafka-protocol produce records/s: alone {m['alone1_rps']:,.0f} and "
                f"{m['alone2_rps']:,.0f}, with HTTP load of {m['load_rps']:,.0f}/s "
                f"{m['loaded_rps']:,.0f} ({m['loaded_vs_alone']:.2f}x)"
                + (f", beside a busy loop at {m['burn_pct']:.0f}% of a core "
                   f"{m['burned_rps']:,.0f} ({m['burned_vs_alone']:.2f}x)"
                   if "burned_vs_alone" in m else ""))

    def _burned(self, broker: BrokerProcess, out: Outcome, n: int, cores: float) -> bool:
        """The control: the same producer beside a plain busy loop that takes the CPU the HTTP
        load took (its process and its client). If the ratio is the same as with the HTTP
        load, the loaded row measures CPU taken on a full machine, not interference inside
        the broker."""
        burner = BusyLoop(cores)
        try:
            before, t0 = burner.cpu(), time.monotonic()
            ok = self._native(broker, out, "burned", "burned", n)
            out.metrics["burn_pct"] = 100 * (burner.cpu() - before) / (time.monotonic() - t0)
        finally:
            burner.stop()
        if ok:
            out.metrics["burned_vs_alone"] = out.metrics["burned_rps"] / out.metrics["alone_rps"]
        return ok


class BusyLoop:
    """Processes that use ``cores`` of CPU: each spins whenever its CPU time falls behind its
    share of the time since it started, and sleeps a millisecond otherwise. Like the HTTP
    process with a backlog, it catches up on CPU the scheduler gave others meanwhile."""

    PERIOD_S = 0.001
    CODE = ("import sys, time\n"
            "share, period = float(sys.argv[1]), float(sys.argv[2])\n"
            "start, used = time.monotonic(), time.process_time()\n"
            "while True:\n"
            "    while time.process_time() - used < share * (time.monotonic() - start):\n"
            "        pass\n"
            "    time.sleep(period)\n")

    def __init__(self, cores: float) -> None:
        shares = [1.0] * int(cores) + ([cores - int(cores)] if cores % 1 else [])
        self.procs = [subprocess.Popen([sys.executable, "-c", self.CODE, str(share),
                                        str(self.PERIOD_S)]) for share in shares if share > 0]

    def cpu(self) -> float:
        return sum(cpu_sample(p.pid).ticks_s for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait(10)


def checked(problem: str | None, broker: BrokerProcess, topic: str, n: int) -> str | None:
    """A produce job's problem, or, when it had none, whether ``topic`` holds the ``n``
    records."""
    if problem is not None:
        return problem
    stored = stored_records(broker, topic)
    return None if stored == n else f"the topic holds {stored} records, not {n}"


def rest_pid(broker_pid: int) -> int | None:
    """The broker's HTTP API process (``python -m strom.rest``), if it runs."""
    return helper_pid(broker_pid, "strom.rest")


SCENARIOS = [HttpApi()]
