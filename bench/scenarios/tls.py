"""The 1 KiB produce-and-consume run of ``produce-1k``, with every client on an SSL listener.

Same topic (6 partitions), acks=1, record count and client settings (bench/config.py) as
``produce-1k``; only the broker's clients' listener differs: SSL, from a PEM key store
(bench/tls.py makes a throwaway CA and a certificate for 127.0.0.1 once per sitting, in its
workdir). Strom listens on SSL alone; Kafka keeps its PLAINTEXT inter-broker listener on another
port (bench/kafka_peer.py). The harness's readiness probe, topic creation and every client
connect over SSL. Tansu 0.6.0 has no TLS listener: its rows say n/a.
"""

from __future__ import annotations

import dataclasses

from bench.brokers import BrokerSpec
from bench.config import PARTITIONS, Sizes
from bench.report import Outcome, ScenarioRows
from bench.scenarios.base import Context
from bench.scenarios.throughput import KIB, Throughput, size_label
from bench.targets import TANSU
from bench.tls import TlsFiles, sitting_certificates


class ThroughputOverTls(Throughput):
    """A :class:`Throughput` run whose clients connect over SSL."""

    @property
    def title(self) -> str:  # type: ignore[override]
        acks = "all" if self.acks in (-1, "all") else self.acks
        return (
            f"produce+consume {size_label(self.size)} over SSL, {PARTITIONS} partitions, "
            f"acks={acks}"
        )

    def rows(self, sizes: Sizes) -> ScenarioRows:
        """The rows of the plaintext run (MB/s and records per broker-CPU-second, produce and
        consume, client ceiling and client CPU in the notes) with its goals against Kafka
        (issue 21: >= 1.0x Kafka's over SSL) and RSS's; Tansu has no TLS to compare with."""
        rows = super().rows(sizes)
        metrics = tuple(
            dataclasses.replace(m, target=tuple(t for t in m.targets if t.peer != TANSU) or None)
            for m in rows.metrics
        )
        return dataclasses.replace(rows, metrics=metrics)

    def tls(self, ctx: Context) -> TlsFiles | None:
        return sitting_certificates(ctx.workdir)

    def run(self, spec: BrokerSpec, ctx: Context) -> Outcome:
        if spec.no_tls:  # nothing to start: every row is n/a, with the reason
            return Outcome(na={m.key: spec.no_tls for m in self.rows(ctx.sizes).metrics})
        return super().run(spec, ctx)


SCENARIOS = [ThroughputOverTls("produce-1k-ssl", KIB, 1, "records_1k")]
