"""Produce 1 KiB Avro records to schema-validated topics (issue 31 point 5).

Every record is a value framed as Confluent's serializers write it (magic byte 0, 4-byte schema
id, Avro body) of the fixed 10-field schema bench/schemas/event10.avsc, serialized once by the
client job before the clock starts (bench/avro_records.py). Strom serves its schema registry in
this scenario; the harness registers the schema through the registry's REST API, then the same
broker takes three topics in turn, each produced to by a fresh client process:

1. ``plain``: no validation;
2. ``id``: ``confluent.value.schema.validation=true``: each value's schema id must be registered
   under ``<topic>-value``;
3. ``decode``: also ``strom.value.schema.validation.mode=decode``: each value must decode under
   its Avro schema.

Each phase's topic is deleted (and its files gone) before the next one starts, so every phase
finds the broker holding the same data. The peers have no registry: they take the same records
into an unvalidated topic once, and that run stands in each of their three rows, so the ratio
columns read as the issue's goals (id mode >= 1x and decode mode >= 0.4x Kafka's unvalidated
MB/s). Strom's own id/unvalidated ratio (goal >= 0.8) is taken within each run, the two phases
minutes apart on one broker.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from bench import avro_records
from bench.admin import create_topic
from bench.brokers import (
    BrokerProcess,
    BrokerSpec,
    free_port,
    schema_registry_url,
    with_schema_registry,
)
from bench.config import PARTITIONS, Sizes
from bench.report import Metric, Outcome, ScenarioRows
from bench.scenarios.base import (
    Context,
    Scenario,
    io_timeout,
    measured,
    produce_problem,
    record_rates,
)
from bench.scenarios.throughput import KIB, ceiling_keys
from bench.targets import (
    RSS_GOALS,
    VALIDATED_DECODE_GOAL,
    VALIDATED_ID_GOAL,
    VALIDATED_VS_UNVALIDATED,
)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# The peers have no registry: their records carry this id (any id: the bytes are all they see).
PEER_SCHEMA_ID = 1
NO_VALIDATION = "no schema validation on this broker: only its unvalidated run"


class RegistryError(RuntimeError):
    """The registry refused a request or did not answer in time."""


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        raise RegistryError(f"{req.method} {url}: {e.code} {e.read()[:300]!r}") from e


def wait_registry(url: str, timeout: float) -> None:
    """Return once the registry answers ``GET /subjects`` (its broker leads ``_schemas`` and
    has read it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _http(f"{url}/subjects", timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            return
        except (RegistryError, OSError) as e:  # not listening yet, or 5xx while loading
            if time.monotonic() > deadline:
                raise RegistryError(f"schema registry at {url} not ready in {timeout:.0f} s: "
                                    f"{e}") from e
        time.sleep(0.05)


def register(url: str, subject: str, schema: str) -> int:
    """Register an Avro ``schema`` under ``subject``; its id."""
    path = f"{url}/subjects/{urllib.parse.quote(subject, safe='')}/versions"
    answer = _http(path, {"schema": schema, "schemaType": "AVRO"})
    if not isinstance(answer, dict) or not isinstance(answer.get("id"), int):
        raise RegistryError(f"POST {path}: unexpected answer {answer!r}")
    return int(answer["id"])


@dataclass(frozen=True)
class Phase:
    key: str  # prefix of its metrics: plain_mbs, id_mbs, ...
    label: str
    config: dict[str, str]


PLAIN = Phase("plain", "unvalidated topic", {})
ID_MODE = Phase("id", "validated topic, id mode",
                {"confluent.value.schema.validation": "true"})
DECODE_MODE = Phase("decode", "validated topic, decode mode",
                    {**ID_MODE.config, "strom.value.schema.validation.mode": "decode"})
PHASES = (PLAIN, ID_MODE, DECODE_MODE)
VALIDATED = (ID_MODE, DECODE_MODE)
# Measured per phase; a peer's unvalidated run fills the validated rows with them.
PHASE_METRICS = ("mbs", "rps", "rpcpu", "client_pct", "s", "cpu_s")


def ratio_key(phase: Phase) -> str:
    return f"{phase.key}_vs_plain"


def stand_in(out: Outcome) -> None:
    """A peer's unvalidated run in its validated rows too (the goals compare Strom's validated
    topics with Kafka's unvalidated one); its same-broker ratios are n/a."""
    for ph in VALIDATED:
        for what in PHASE_METRICS:
            if f"plain_{what}" in out.metrics:
                out.metrics[f"{ph.key}_{what}"] = out.metrics[f"plain_{what}"]
        out.na[ratio_key(ph)] = NO_VALIDATION


def stored_records(broker: BrokerProcess, topic: str, timeout: float = 30.0) -> int:
    """How many records the topic holds: its partitions' high watermarks added up."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, **broker.security,
                  "group.id": "strom-bench-count", "log_level": 0})
    try:
        return sum(
            max(c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1], 0)
            for p in range(PARTITIONS)
        )
    finally:
        c.close()


def delete_topic(broker: BrokerProcess, topic: str, timeout: float = 60.0) -> None:
    """Delete ``topic`` and wait until its directories are gone from the broker's log dir
    (Strom renames them ``…-delete`` and removes them in a worker thread)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **broker.security,
                         "log_level": 0})
    admin.delete_topics([topic], operation_timeout=timeout)[topic].result(timeout)
    logs = broker.data_dir / "logs"
    deadline = time.monotonic() + timeout
    while logs.is_dir() and any(p.name.startswith(f"{topic}-") for p in logs.iterdir()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}'s files still in {logs} after {timeout:.0f} s")
        time.sleep(0.05)


class AvroProduce(Scenario):
    name = "produce-1k-avro"
    size = KIB
    warm_up = True

    def count(self, sizes: Sizes) -> int:
        return sizes.records_1k

    def topic(self, phase: Phase) -> str:
        return f"bench-{self.name}-{phase.key}"

    def rows(self, sizes: Sizes) -> ScenarioRows:
        mbs_ref = ceiling_keys(self.size)[1]
        goals = {ID_MODE.key: VALIDATED_ID_GOAL, DECODE_MODE.key: VALIDATED_DECODE_GOAL}
        metrics = []
        for ph in PHASES:
            label = f"produce, {ph.label}" + ("" if ph is PLAIN else " (peers: unvalidated)")
            metrics.append(Metric(f"{ph.key}_mbs", label, "MB/s", target=goals.get(ph.key),
                                  ceiling=mbs_ref, client_cpu=f"{ph.key}_client_pct"))
        metrics += [
            Metric(ratio_key(ID_MODE), "id mode / unvalidated, same broker", "x", 2,
                   VALIDATED_VS_UNVALIDATED),
            Metric(ratio_key(DECODE_MODE), "decode mode / unvalidated, same broker", "x", 2),
        ]
        metrics += [
            Metric(f"{ph.key}_rpcpu", f"produce, {ph.label}", "records/broker-CPU-s", 0)
            for ph in PHASES
        ]
        metrics.append(Metric("rss_mb", "broker peak RSS", "MB", 0, RSS_GOALS))
        title = (f"produce 1 KiB Avro records (10 fields, Confluent framing), {PARTITIONS} "
                 f"partitions, acks=1, to an unvalidated topic, then (Strom) to validated ones "
                 f"({self.count(sizes):,} records each)")
        return ScenarioRows(self.name, title, tuple(metrics))

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        """Strom (subject, or a Strom peer) serves a schema registry in this scenario."""
        if spec.kind == "strom":
            spec = with_schema_registry(spec, f"http://127.0.0.1:{free_port()}")
        return super().run(spec, ctx)

    def body(self, broker: BrokerProcess, ctx: Context, out: Outcome) -> None:
        url = schema_registry_url(broker.spec)
        if url is None:  # a peer: its unvalidated run stands in every row
            self._phase(broker, ctx, out, PLAIN, PEER_SCHEMA_ID)
            stand_in(out)
            return
        wait_registry(url, ctx.ready_timeout)
        schema = avro_records.schema_text()
        ids = {register(url, f"{self.topic(ph)}-value", schema) for ph in VALIDATED}
        if len(ids) != 1:  # the same schema under two subjects keeps one id
            out.failed = f"the schema got ids {sorted(ids)} under two subjects"
            return
        schema_id = ids.pop()
        for ph in PHASES:
            self._phase(broker, ctx, out, ph, schema_id)
            if out.failed:
                return
            delete_topic(broker, self.topic(ph))
        for ph in VALIDATED:
            out.metrics[ratio_key(ph)] = out.metrics[f"{ph.key}_mbs"] / out.metrics["plain_mbs"]
        m = out.metrics
        ctx.log(f"MB/s: unvalidated {m['plain_mbs']:.1f}, id {m['id_mbs']:.1f} "
                f"({m['id_vs_plain']:.2f}x), decode {m['decode_mbs']:.1f} "
                f"({m['decode_vs_plain']:.2f}x)")

    def _phase(self, broker: BrokerProcess, ctx: Context, out: Outcome, phase: Phase,
               schema_id: int) -> None:
        """Produce the records to a fresh topic with the phase's configs; its rates in
        ``out.metrics`` under ``{phase.key}_…``, or ``out.failed``."""
        n, topic = self.count(ctx.sizes), self.topic(phase)
        create_topic(broker.bootstrap, topic, PARTITIONS, security=broker.security,
                     config=phase.config)
        os.sync()  # the warm-up's (or the last phase's) writes on disk, not during this one
        job = {"job": "produce", "topic": topic, "size": self.size, "count": n, "acks": 1,
               "avro": schema_id}
        res, cpu = measured(broker, job, io_timeout(n, self.size))
        problem = produce_problem(res)
        if problem is None:
            stored = stored_records(broker, topic)
            problem = None if stored == n else f"the topic holds {stored} records, not {n}"
        if problem is not None:
            out.failed = f"{phase.label}: {problem}"
            return
        record_rates(out, phase.key, res, cpu, n, self.size)
        ctx.log(f"{phase.label}: {out.metrics[f'{phase.key}_mbs']:.1f} MB/s, "
                f"{out.metrics[f'{phase.key}_cpu_s']:.2f} broker CPU-s")


SCENARIOS = [AvroProduce()]
