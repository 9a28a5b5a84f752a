"""Sizes of every scenario and the client settings shared by both brokers.

Everything a reader needs to reproduce a number lives here, so the report can print it and the
two brokers can never be driven with different settings by accident.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# The consumer's long-poll wait: librdkafka's (and Kafka's) default. The same value serves the
# throughput consumers and the latency consumer, so a broker that answers a waiting Fetch as
# soon as data arrives shows it in the latency numbers, and one that holds every Fetch for the
# full wait shows that too.
FETCH_WAIT_MAX_MS = 500

# The producer tuned for throughput, identical for both brokers (the "unmodified client").
PRODUCER_THROUGHPUT = {
    "linger.ms": 5,
    "batch.size": 1_048_576,
    # A deep local queue so the application thread rarely meets BufferError; the client's
    # ceiling is measured with the very same settings.
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_097_152,
    # Only failures produce delivery reports: one Python callback per record would make the
    # client, not the broker, the bottleneck at 100 B.
    "delivery.report.only.error": True,
    "message.timeout.ms": 120_000,
}

# The producer tuned for latency: send every record at once.
PRODUCER_LATENCY = {
    "linger.ms": 0,
    "delivery.report.only.error": True,
    "message.timeout.ms": 30_000,
}

CONSUMER = {
    "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
    # librdkafka stops fetching a partition for fetch.queue.backoff.ms (default 1 s) whenever
    # its prefetch queue holds queued.min.messages (default 100,000) records: with small records
    # the consumer then idles, and both brokers look alike. Prefetch deeper and never back off.
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 0,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
}

PARTITIONS = 6


@dataclass(frozen=True)
class Sizes:
    """How much work each scenario does; ``full`` fits ~15 min on 2 cores, ``quick`` ~2 min."""

    rounds: int
    records_100b: int
    records_1k: int
    records_10k: int
    records_acks: int  # for the acks=all and acks=0 runs (1 KiB records)
    latency_rate: int
    latency_warmup_s: float
    latency_measure_s: float
    many_partitions: int
    many_partitions_records_each: int
    churn_connections: int
    huge_partitions: int
    share_records: int  # 1 KiB records preloaded for the share-group scenario
    warmup_records: int  # 1 KiB records through each broker before a steady-state scenario
    cluster_records: int  # 1 KiB records through the 3-broker clusters (acks=all, RF=3)
    java_perf_records: int  # 1 KiB records per kafka-producer-perf-test run (java-perf-1k)
    http_records: int  # 1 KiB records produced, then consumed, through the HTTP API (http-1k)
    iceberg_records: int  # 1 KiB records per phase of iceberg-1k (each lake topic, Spark load)
    iceberg_lag_s: float  # how long iceberg-1k's paced producer runs for the lag to a table row
    failover_repeats: int  # kills of the active controller per cluster-failover run (median)
    cluster_partitions: int  # partitions cluster-10k-partitions creates (1,000 per topic)
    cluster_partitions_rf: int  # their replication factor

    def describe(self) -> dict[str, object]:
        return asdict(self)


FULL = Sizes(
    rounds=3,
    records_100b=1_000_000,
    records_1k=300_000,
    records_10k=30_000,
    records_acks=300_000,
    latency_rate=5_000,
    latency_warmup_s=2.0,
    latency_measure_s=12.0,
    many_partitions=1_000,
    many_partitions_records_each=100,
    churn_connections=200,
    huge_partitions=10_000,
    share_records=200_000,
    warmup_records=200_000,
    cluster_records=150_000,
    java_perf_records=300_000,
    http_records=100_000,
    iceberg_records=200_000,
    iceberg_lag_s=20.0,
    failover_repeats=3,
    cluster_partitions=10_000,
    cluster_partitions_rf=3,
)

QUICK = Sizes(
    rounds=1,
    records_100b=200_000,
    records_1k=60_000,
    records_10k=6_000,
    records_acks=60_000,
    latency_rate=5_000,
    latency_warmup_s=1.0,
    latency_measure_s=4.0,
    many_partitions=1_000,
    many_partitions_records_each=100,
    churn_connections=200,
    huge_partitions=10_000,
    share_records=50_000,
    warmup_records=30_000,
    cluster_records=30_000,
    java_perf_records=60_000,
    http_records=20_000,
    iceberg_records=40_000,
    iceberg_lag_s=8.0,
    failover_repeats=1,
    cluster_partitions=10_000,
    cluster_partitions_rf=3,
)
