"""The lake writer (`iceberg.enable=true`): a process of its own (`python -m strom.lake`),
started, watched and stopped by the broker as the HTTP API's is (strom.broker.helper_process).

It reaches this broker as a Kafka client through a PLAINTEXT listener (else an SSL one, as the
HTTP API does: `LoopbackTls`) and gets the broker's
config on stdin. If it dies it is started again (an ERROR line says so): it resumes from what
its tables hold. When the broker stops, closing the process's stdin makes it commit what it has
read and exit; a broker killed with -9 takes it along the same way.

A partition this broker starts leading nudges it (a line on its stdin): it looks at the topics
at once, so a new Iceberg topic's records start landing without waiting for its periodic look.

Every second or so it reports each Iceberg topic's lag, commit failures and last commit on its
stdout (one JSON line); the broker serves them with its own metrics (`LakeCollector`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from strom.broker.core import Broker
from strom.broker.helper_process import HelperProcess
from strom.broker.server import BrokerServer
from strom.broker.wiring import StartupError
from strom.config.defs import ConfigError
from strom.lake.settings import CatalogConfigError, Handoff, catalog_properties
from strom.security.listeners import ListenerSettings
from strom.security.tls import loopback_tls

log = logging.getLogger("strom.lake")

STOP_S = 30.0  # it commits what it holds before it exits
NUDGE_DELAY_S = 0.1  # leadership changes that come together are one nudge to the writer


class LakeStatus:
    """The lake writer's latest report: topic -> {"lag_records", "commit_failures",
    "last_commit_s"} (replaced whole by each report; a line that is not one is ignored)."""

    def __init__(self) -> None:
        self.topics: dict[str, dict[str, Any]] = {}

    def take(self, line: str) -> None:
        try:
            report = json.loads(line)
        except ValueError:
            return
        if isinstance(report, dict) and isinstance(report.get("lake"), dict):
            self.topics = report["lake"]


class LakeCollector(Collector):
    def __init__(self, status: LakeStatus) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily("strom_lake_lag_records", "records of an Iceberg topic not in "
                                "its table yet (high watermark minus the table's offsets, "
                                "summed over the partitions this broker writes)",
                                labels=["topic"])
        failures = CounterMetricFamily("strom_lake_commit_failures", "commits to an Iceberg "
                                       "topic's table that failed (retried with a back-off)",
                                       labels=["topic"])
        last = GaugeMetricFamily("strom_lake_last_commit_timestamp_seconds", "when the lake "
                                 "writer last committed to the topic's table (Unix time)",
                                 labels=["topic"])
        for topic, t in sorted(self.status.topics.items()):
            if t.get("lag_records") is not None:
                lag.add_metric([topic], float(t["lag_records"]))
            failures.add_metric([topic], float(t.get("commit_failures", 0)))
            if t.get("last_commit_s") is not None:
                last.add_metric([topic], float(t["last_commit_s"]))
        yield from (lag, failures, last)


def _client_listener(servers: Sequence[BrokerServer]) -> BrokerServer:
    """A PLAINTEXT listener, else an SSL one (`LoopbackTls`): the lake writer has no SASL
    credentials of its own."""
    for tls in (False, True):
        for server in servers:
            listener = server.security.listener
            if listener.tls == tls and not listener.sasl:
                return server
    raise StartupError("iceberg.enable=true needs a PLAINTEXT or SSL listener: the lake writer "
                       "reads the topics through it")


def start_lake_listener(broker: Broker, servers: Sequence[BrokerServer]
                        ) -> tuple[HelperProcess, LakeStatus] | None:
    config = broker.config
    if not config.get("iceberg.enable"):
        return None
    try:
        catalog_properties(config)  # refused here, not in a writer process restarted forever
    except CatalogConfigError as exc:
        raise StartupError(str(exc)) from None
    missing = [m for m in ("pyiceberg", "pyiceberg_core", "sqlalchemy", "pyarrow")
               if importlib.util.find_spec(m) is None]  # found, not imported
    if missing:
        raise StartupError(f"iceberg.enable=true needs {', '.join(missing)} installed "
                           "(pyiceberg[sql-sqlite,pyiceberg-core,pyarrow])")
    server = _client_listener(servers)
    listener = server.security.listener
    loopback = None
    if listener.tls:
        try:
            loopback = loopback_tls(ListenerSettings(config, listener).get)
        except ConfigError as exc:
            raise StartupError(f"iceberg.enable: the lake writer reaches the broker through "
                               f"its TLS listener {listener.name}: {exc}") from None
    host = "127.0.0.1" if server.host in ("", "0.0.0.0") else \
        "::1" if server.host == "::" else server.host
    shown = f"[{host}]" if ":" in host else host
    handoff = Handoff(config=dict(config.raw), bootstrap=f"{shown}:{server.port}",
                      security_protocol=listener.protocol, registry_url=broker.info.registry_url,
                      tls=asdict(loopback) if loopback is not None else None)
    status = LakeStatus()
    lake = HelperProcess("the lake writer's process", "strom.lake", handoff.to_line(), log,
                         stop_s=STOP_S, on_line=status.take)
    lake.start()
    _nudge_on_leadership(broker, lake)
    return lake, status


def _nudge_on_leadership(broker: Broker, lake: HelperProcess) -> None:
    """A partition this broker starts leading (a topic created, a leadership moved here) may
    be an Iceberg topic's: the writer looks at the topics at once instead of at its next
    periodic look (LakeSettings.refresh_s). A burst of them (a 1,000-partition topic, a
    failover) is one nudge, NUDGE_DELAY_S after its first."""
    loop = asyncio.get_running_loop()
    pending = threading.Event()

    def send() -> None:
        pending.clear()
        lake.nudge()

    def on_leadership(topic: str, partition: int, leader: bool, epoch: int) -> None:
        if leader and not pending.is_set() and not topic.startswith("__"):
            pending.set()
            loop.call_soon_threadsafe(loop.call_later, NUDGE_DELAY_S, send)

    broker.partitions.add_leadership_listener(on_leadership, replay=False)
