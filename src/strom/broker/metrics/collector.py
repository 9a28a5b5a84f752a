"""The broker's Prometheus collector and endpoint: a scrape asks the event loop for a snapshot
(taken in slices) and formats it in the scrape's own thread."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

import strom
from strom.broker.core import Broker
from strom.broker.metrics.families import families
from strom.broker.metrics.leader_ends import LeaderEnds
from strom.broker.metrics.snapshot import Listening, take_from_thread
from strom.metrics.exposition import MetricsServer

log = logging.getLogger(__name__)

SNAPSHOT_TIMEOUT_S = 10.0


class LoopBusy:
    """How busy the event loop's thread is, from its CPU time in /proc (Kafka's idle ratios:
    NetworkProcessorAvgIdlePercent, RequestHandlerAvgIdlePercent). Between two scrapes."""

    def __init__(self, thread_id: int) -> None:
        self._stat = f"/proc/self/task/{thread_id}/stat"
        self._tick = os.sysconf("SC_CLK_TCK")
        self._last = (time.monotonic(), self._cpu_s())

    def _cpu_s(self) -> float:
        try:
            with open(self._stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime
        except (OSError, IndexError, ValueError):
            return 0.0

    def idle_ratio(self) -> float:
        now, cpu = time.monotonic(), self._cpu_s()
        then, cpu_then = self._last
        self._last = (now, cpu)
        if now - then <= 0:
            return 1.0
        return min(max(1.0 - (cpu - cpu_then) / (now - then), 0.0), 1.0)


class BrokerCollector(Collector):
    def __init__(self, broker: Broker, listeners: Sequence[Listening],
                 loop: asyncio.AbstractEventLoop, loop_thread_id: int) -> None:
        self._broker = broker
        self._listeners = listeners
        self._loop = loop
        self._busy = LoopBusy(loop_thread_id)
        # a cluster's lag of partitions held elsewhere is asked of their leaders
        self._leaders = LeaderEnds(broker) if broker.replicas is not None else None
        self._lock = threading.Lock()  # one idle-ratio window at a time

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily("strom_build", "the Strom version serving these metrics")
        info.add_metric([], {"version": strom.__version__,
                             "broker_id": str(self._broker.broker_id)})
        yield info
        with self._lock:
            idle = self._busy.idle_ratio()
        for name in ("kafka_network_socketserver_networkprocessoravgidlepercent",
                     "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent"):
            yield GaugeMetricFamily(name, "share of time the event loop's thread was idle "
                                    "since the previous scrape (one thread does both)", value=idle)
        snap = take_from_thread(self._loop, self._broker, self._listeners, SNAPSHOT_TIMEOUT_S,
                                self._leaders)
        yield from families(snap)


def start_metrics(broker: Broker, listeners: Sequence[Listening], host: str,
                  port: int) -> MetricsServer:
    """Serve the broker's metrics on host:port (from the event loop's thread)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker, listeners, asyncio.get_running_loop(),
                                      threading.get_native_id()))
    registry.register(ProcessCollector(registry=None))
    server = MetricsServer(registry, host, port)
    server.start()
    return server
