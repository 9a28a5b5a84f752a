"""What every scenario shares: the context it runs in, a fresh broker, a measured client phase."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.admin import create_topic
from bench.brokers import BrokerError, BrokerProcess, BrokerSpec
from bench.clientproc import ClientError, ClientJob
from bench.config import PARTITIONS, Sizes
from bench.procstat import cpu_delta
from bench.report import Outcome, ScenarioRows
from bench.tls import TlsFiles

MB = 1e6  # throughput is reported in decimal megabytes of record values per second


@dataclass
class Context:
    sizes: Sizes
    workdir: Path
    log: Callable[[str], None]
    ready_timeout: float = 60.0


class Scenario:
    """One scenario. Subclasses set ``name``/``title`` and implement :meth:`rows` and :meth:`body`."""

    name = ""
    title = ""
    needs_broker = True
    # Steady-state scenarios first push ``sizes.warmup_records`` through every broker: a JVM
    # broker compiles its hot paths in the first seconds, and a user compares brokers that
    # have been up for a while, not ones measured during their own start.
    warm_up = False

    def rows(self, sizes: Sizes) -> ScenarioRows:
        raise NotImplementedError

    def tls(self, ctx: Context) -> TlsFiles | None:
        """The TLS files when this scenario's clients connect over SSL; None: PLAINTEXT."""
        return None

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        """Start a broker with fresh storage, run :meth:`body`, record its peak RSS, stop it."""
        out = Outcome()
        try:
            broker = BrokerProcess(spec, ctx.workdir, tls=self.tls(ctx))
        except Exception as e:  # no TLS on this broker, certificates not made, ...
            out.failed = f"{type(e).__name__}: {e}"
            return out
        try:
            broker.start()
            broker.wait_ready(ctx.ready_timeout)
            if self.warm_up and ctx.sizes.warmup_records:
                out.failed = warm(broker, ctx.sizes.warmup_records)
            if not out.failed:
                self.body(broker, ctx, out)
            if broker.proc is not None and broker.proc.poll() is None:
                rss = broker.peak_rss_bytes() / MB
                out.metrics["rss_mb"] = max(rss, out.metrics.get("rss_mb", 0.0))
            elif not out.failed:
                out.failed = f"broker died: {broker.log_tail(5)}"
        except (BrokerError, ClientError, TimeoutError) as e:
            out.failed = str(e)
        except Exception as e:  # a Kafka error surfacing in the harness (topic creation, ...)
            out.failed = f"{type(e).__name__}: {e}"
        finally:
            if out.failed:
                tail = broker.log_tail(8)
                if tail:
                    ctx.log("broker log tail:\n    " + tail.replace("\n", "\n    "))
            broker.close(keep=bool(out.failed))
        return out

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        raise NotImplementedError


WARMUP_TOPIC = "bench-warmup"


def warm(broker: BrokerProcess, records: int) -> str | None:
    """Produce ``records`` of 1 KiB to a topic of its own and read them back; None, or what
    went wrong (the run then fails with it)."""
    create_topic(broker.bootstrap, WARMUP_TOPIC, PARTITIONS, security=broker.security)
    timeout = io_timeout(records, 1024)
    job = {"job": "produce", "topic": WARMUP_TOPIC, "size": 1024, "count": records, "acks": 1}
    res, _ = measured(broker, job, timeout)
    problem = produce_problem(res)
    if problem is None:
        res, _ = measured(broker, {"job": "consume", "topic": WARMUP_TOPIC, "expected": records},
                          timeout)  # fmt: skip
        problem = consume_problem(res)
    return None if problem is None else f"warm-up: {problem}"


def produce_problem(res: dict[str, Any]) -> str | None:
    """Why a produce job's result must not count, or None."""
    return f"{res['failed']} records not delivered ({res['first_error']})" if res["failed"] else None


def consume_problem(res: dict[str, Any]) -> str | None:
    """Why a consume job's result must not count (wrong count, errors), or None."""
    if res["problem"] or res["errors"]:
        return res["problem"] or f"{res['errors']} errors ({res['first_error']})"
    return None


def record_rates(out: Outcome, phase: str, res: dict[str, Any], cpu: float, records: int,
                 size: int) -> None:
    """A produce or consume phase's numbers: ``{phase}_s``, ``_mbs``, ``_rps``, ``_cpu_s``,
    ``_client_pct`` and, when the broker used CPU, ``_rpcpu`` (records per broker-CPU-s)."""
    seconds = res["seconds"]
    out.metrics[f"{phase}_s"] = seconds
    out.metrics[f"{phase}_mbs"] = records * size / seconds / MB
    out.metrics[f"{phase}_rps"] = records / seconds
    out.metrics[f"{phase}_cpu_s"] = cpu
    out.metrics[f"{phase}_client_pct"] = 100 * res["client_cpu_s"] / seconds
    if cpu > 0:
        out.metrics[f"{phase}_rpcpu"] = records / cpu


def log_rates(ctx: Context, out: Outcome) -> None:
    m = out.metrics
    ctx.log(f"produce {m['produce_mbs']:.1f} MB/s ({m['produce_cpu_s']:.2f} CPU-s), "
            f"consume {m['consume_mbs']:.1f} MB/s ({m['consume_cpu_s']:.2f} CPU-s)")


def measured(broker: BrokerProcess, job: dict[str, Any], timeout: float) -> tuple[dict, float]:
    """Run a client job, sampling the broker's CPU seconds right before GO and after RESULT.

    The job gets ``timeout`` as its own deadline; the harness waits a little longer, so a slow
    broker yields the job's own account of what went wrong rather than a bare timeout.
    """
    client = start_job(broker, job, timeout)
    try:
        return measure(broker, client, timeout)
    finally:
        client.kill()


def start_job(broker: BrokerProcess, job: dict[str, Any], timeout: float) -> ClientJob:
    """Spawn a client job against ``broker`` (over SSL when its listener is, see
    :attr:`BrokerProcess.security`)."""
    reach: dict[str, Any] = {"bootstrap": broker.bootstrap}
    if broker.security:
        reach["security"] = broker.security
    return ClientJob({"timeout": timeout, **job, **reach})


def measure(broker: BrokerProcess, client: ClientJob, timeout: float) -> tuple[dict, float]:
    """Handshake with a started job and return (its result, broker CPU seconds it took)."""
    client.ready(60)
    cpu0 = broker.cpu_sample()
    client.go()
    result = client.result(timeout + 60)
    return result, cpu_delta(cpu0, broker.cpu_sample())


def io_timeout(records: int, size: int) -> float:
    """A deadline for moving ``records`` x ``size`` bytes that only a stuck broker misses."""
    return 60.0 + records * size / (2 * MB) + records / 20_000
