"""All scenarios, in the order they run and appear in the report."""

from __future__ import annotations

from bench.scenarios import (
    ceiling,
    churn,
    cluster,
    cluster_ops,
    failover,
    http_api,
    huge_broker,
    iceberg,
    java_perf,
    latency,
    many_partitions,
    schema_validation,
    share,
    throughput,
    tls,
)
from bench.scenarios.base import Context, Scenario

ALL: list[Scenario] = [
    *ceiling.SCENARIOS,
    *throughput.SCENARIOS,
    *tls.SCENARIOS,
    *schema_validation.SCENARIOS,
    *http_api.SCENARIOS,
    *iceberg.SCENARIOS,
    *latency.SCENARIOS,
    *many_partitions.SCENARIOS,
    *churn.SCENARIOS,
    *share.SCENARIOS,
    *cluster.SCENARIOS,
    *cluster_ops.SCENARIOS,
    *failover.SCENARIOS,
    *java_perf.SCENARIOS,
    *huge_broker.SCENARIOS,
]

BY_NAME = {s.name: s for s in ALL}

__all__ = ["ALL", "BY_NAME", "Context", "Scenario"]
