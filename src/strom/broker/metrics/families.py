"""A snapshot as Prometheus metric families, under the names Kafka's metrics get through the
Prometheus JMX exporter (``kafka.server<type=BrokerTopicMetrics, name=MessagesInPerSec,
topic=t>`` is ``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``), so dashboards
made for Kafka work. Consumer lag uses kafka_exporter's names. Runs in the scrape thread."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from strom.broker.metrics.snapshot import Snapshot
from strom.broker.metrics.stats import PHASES
from strom.metrics.primitives import HistogramSnapshot
from strom.protocol.api_keys import ApiKey

# BrokerTopicMetrics: (field of stats.TopicStats, Kafka's meter name without "PerSec")
_TOPIC_METERS = (
    ("messages_in", "messagesin", "messages appended"),
    ("bytes_in", "bytesin", "bytes appended from producers"),
    ("bytes_out", "bytesout", "bytes sent to consumers"),
    ("replication_bytes_out", "replicationbytesout", "bytes sent to follower replicas"),
    ("produce_requests", "totalproducerequests", "produce requests, per partition"),
    ("fetch_requests", "totalfetchrequests", "fetch requests answered with data, per partition"),
    ("failed_produce_requests", "failedproducerequests", "failed produce requests, per partition"),
)


def families(snap: Snapshot) -> Iterator[Metric]:
    yield from _topic_metrics(snap)
    yield from _request_metrics(snap)
    yield from _replica_metrics(snap)
    yield from _controller_metrics(snap)
    yield from _metadata_metrics(snap)
    yield from _log_metrics(snap)
    yield from _socket_metrics(snap)
    yield from lag_families(snap)
    yield from _quota_metrics(snap)


def _topic_metrics(snap: Snapshot) -> Iterator[Metric]:
    for field, name, doc in _TOPIC_METERS:
        metric = Metric(f"kafka_server_brokertopicmetrics_{name}", f"{doc}", "counter")
        total = 0
        for topic, values in sorted(snap.topics.items()):
            metric.add_sample(metric.name + "_total", {"topic": topic}, values[field])
            total += values[field]
        metric.add_sample(metric.name + "_total", {}, total)  # all topics, as Kafka's
        yield metric


def _request_metrics(snap: Snapshot) -> Iterator[Metric]:
    requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                   "requests handled, per API and version",
                                   labels=["request", "version"])
    waiting = {"Produce": 0, "Fetch": 0}
    times = {phase: HistogramMetricFamily(f"kafka_network_requestmetrics_{phase}",
                                          f"request {phase[:-6]} time in milliseconds",
                                          labels=["request"])
             for phase in PHASES}
    for key, api in sorted(snap.apis.items()):
        name = _api_name(key)
        for version, count in sorted(api.requests.items()):
            requests.add_metric([name, str(version)], count)
        for phase, hist in zip(PHASES, api.phases, strict=True):
            times[phase].add_metric([name], _buckets(hist), hist.total)
        if name in waiting:
            waiting[name] = api.waiting
    yield requests
    yield from times.values()
    purgatory = GaugeMetricFamily(
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        "requests waiting: produce for acks=all replication, fetch for min.bytes",
        labels=["delayedoperation"])
    for name, count in waiting.items():
        purgatory.add_metric([name], count)
    yield purgatory


def _api_name(key: int) -> str:
    """Kafka's request label: the API name in CamelCase (ApiKeys.name)."""
    try:
        return "".join(part.capitalize() for part in ApiKey(key).name.split("_"))
    except ValueError:
        return str(key)


def _buckets(hist: HistogramSnapshot) -> list[tuple[str, float]]:
    out = [(_le(bound), float(n)) for bound, n in zip(hist.bounds, hist.cumulative, strict=False)]
    out.append(("+Inf", float(hist.count)))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _replica_metrics(snap: Snapshot) -> Iterator[Metric]:
    prefix = "kafka_server_replicamanager_"
    yield _gauge(prefix + "partitioncount", "partitions with a replica on this broker",
                 snap.replicas)
    yield _gauge(prefix + "leadercount", "partitions this broker leads", snap.leaders)
    yield _gauge(prefix + "underreplicatedpartitions",
                 "partitions this broker leads whose ISR is smaller than their replicas",
                 snap.under_replicated)
    yield _gauge(prefix + "underminisrpartitioncount",
                 "partitions this broker leads whose ISR is below min.insync.replicas",
                 snap.under_min_isr)
    yield _counter(prefix + "isrshrinks", "ISR shrinks of partitions this broker leads",
                   snap.isr_shrinks)
    yield _counter(prefix + "isrexpands", "ISR expansions of partitions this broker leads",
                   snap.isr_expands)
    yield _gauge("kafka_server_leaderreplication_byte_rate",
                 "bytes/s this leader sends to throttled replicas", snap.leader_replication_rate)
    yield _gauge("kafka_server_followerreplication_byte_rate",
                 "bytes/s this follower fetches for throttled replicas",
                 snap.follower_replication_rate)


def _controller_metrics(snap: Snapshot) -> Iterator[Metric]:
    prefix = "kafka_controller_kafkacontroller_"
    yield _gauge(prefix + "activecontrollercount", "1 on the active controller",
                 int(snap.active_controller))
    yield _gauge(prefix + "offlinepartitionscount",
                 "partitions without a leader (on the active controller)",
                 snap.offline_partitions)
    yield _gauge(prefix + "globalpartitioncount", "partitions in the cluster",
                 snap.global_partitions)
    yield _gauge(prefix + "globaltopiccount", "topics in the cluster", snap.global_topics)
    stats = "kafka_controller_controllerstats_"
    elections = Metric(stats + "leaderelectionrateandtimems",
                       "leader elections made by this broker as the controller", "unknown")
    elections.add_sample(elections.name + "_count", {}, snap.leader_elections)
    yield elections
    yield _counter(stats + "uncleanleaderelections",
                   "leader elections outside the ISR made by this broker as the controller",
                   snap.unclean_leader_elections)


def _metadata_metrics(snap: Snapshot) -> Iterator[Metric]:
    """KIP-835: how far a KRaft node's metadata image is, the broker's and (on a node with the
    controller role) the controller's names for it. The active controller's no-op records
    keep the lag under about metadata.max.idle.interval.ms on a node that keeps up."""
    progress = snap.metadata
    if progress is None:
        return
    offset, stamp, lag = (progress.last_applied_offset, progress.last_applied_timestamp_ms,
                          snap.metadata_lag_ms)
    gauges = [
        ("kafka_server_brokermetadatametrics_last_applied_record_offset",
         "offset of the last metadata record in this node's image", offset),
        ("kafka_server_brokermetadatametrics_last_applied_record_timestamp",
         "when the quorum's leader appended that record (epoch ms)", stamp),
        ("kafka_server_brokermetadatametrics_last_applied_record_lag_ms",
         "how old that record is: grows on a node cut off from the quorum", lag),
        ("kafka_server_brokermetadatametrics_metadata_apply_error_count",
         "committed metadata this node failed to apply (each logged at ERROR)",
         progress.apply_errors)]
    if snap.controller_role:
        gauges += [
            ("kafka_controller_kafkacontroller_lastappliedrecordoffset",
             "offset of the last metadata record this controller applied", offset),
            ("kafka_controller_kafkacontroller_lastcommittedrecordoffset",
             "offset of the last metadata record the quorum committed",
             progress.last_committed_offset),
            ("kafka_controller_kafkacontroller_lastappliedrecordtimestamp",
             "when the quorum's leader appended the last applied record (epoch ms)", stamp),
            ("kafka_controller_kafkacontroller_lastappliedrecordlagms",
             "how old the last applied record is", lag),
            ("kafka_controller_kafkacontroller_metadataerrorcount",
             "committed metadata this controller failed to apply", progress.apply_errors)]
    for name, doc, value in gauges:
        yield _gauge(name, doc, value)


def _log_metrics(snap: Snapshot) -> Iterator[Metric]:
    size = GaugeMetricFamily("kafka_log_log_size", "bytes of a partition's log on this broker",
                             labels=["topic", "partition"])
    start = GaugeMetricFamily("kafka_log_log_logstartoffset", "a partition's log start offset",
                              labels=["topic", "partition"])
    end = GaugeMetricFamily("kafka_log_log_logendoffset", "a partition's log end offset",
                            labels=["topic", "partition"])
    segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "segments of a partition's log",
                                 labels=["topic", "partition"])
    for row in snap.logs:
        labels = [row.topic, str(row.partition)]
        size.add_metric(labels, row.size)
        start.add_metric(labels, row.start_offset)
        end.add_metric(labels, row.end_offset)
        segments.add_metric(labels, row.segments)
    yield from (size, start, end, segments)
    if snap.flush is not None:
        flush = HistogramMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                      "time to flush a log to disk, in milliseconds")
        flush.add_metric([], _buckets(snap.flush), snap.flush.total)
        yield flush


def _socket_metrics(snap: Snapshot) -> Iterator[Metric]:
    count = GaugeMetricFamily("kafka_server_socketservermetrics_connection_count",
                              "open connections per listener", labels=["listener"])
    created = CounterMetricFamily("kafka_server_socketservermetrics_connection_creation",
                                  "connections accepted per listener", labels=["listener"])
    for listener, (opened, made) in sorted(snap.connections.items()):
        count.add_metric([listener], opened)
        created.add_metric([listener], made)
    yield count
    yield created


def lag_families(snap: Snapshot) -> Iterator[Metric]:
    """Consumer lag, with kafka_exporter's names (dashboards for it work unchanged)."""
    lag = GaugeMetricFamily("kafka_consumergroup_lag",
                            "messages a group has not consumed yet: high watermark - committed",
                            labels=["consumergroup", "topic", "partition"])
    seconds = GaugeMetricFamily(
        "kafka_consumergroup_lag_seconds",
        "age of the first record a group has not consumed (from its batch's timestamp)",
        labels=["consumergroup", "topic", "partition"])
    current = GaugeMetricFamily("kafka_consumergroup_current_offset", "a group's committed offset",
                                labels=["consumergroup", "topic", "partition"])
    total = GaugeMetricFamily("kafka_consumergroup_lag_sum", "a group's lag over its partitions",
                              labels=["consumergroup"])
    worst = GaugeMetricFamily("kafka_consumergroup_lag_max",
                              "a group's largest lag of one partition", labels=["consumergroup"])
    worst_seconds = GaugeMetricFamily("kafka_consumergroup_lag_seconds_max",
                                      "a group's oldest record not consumed, in seconds",
                                      labels=["consumergroup"])
    per_group: dict[str, tuple[int, int, float]] = {}
    for row in snap.lag:
        labels = [row.group, row.topic, str(row.partition)]
        lag.add_metric(labels, row.lag)
        current.add_metric(labels, row.committed)
        if row.lag_seconds is not None:
            seconds.add_metric(labels, row.lag_seconds)
        s, m, sec = per_group.get(row.group, (0, 0, 0.0))
        per_group[row.group] = (s + row.lag, max(m, row.lag), max(sec, row.lag_seconds or 0.0))
    for group, (s, m, sec) in sorted(per_group.items()):
        total.add_metric([group], s)
        worst.add_metric([group], m)
        worst_seconds.add_metric([group], sec)
    yield from (lag, seconds, current, total, worst, worst_seconds)


# Kafka's per-client quota metrics (type=Produce|Fetch|Request|ControllerMutation, user,
# client-id): the throttle time and the measured rate
_QUOTA_NAMES = {"Produce": ("produce", "byte_rate", "bytes per second"),
                "Fetch": ("fetch", "byte_rate", "bytes per second"),
                "Request": ("request", "request_time", "% of the event loop's time"),
                "ControllerMutation": ("controllermutation", "mutation_rate",
                                       "partitions created or deleted per second")}


def _quota_metrics(snap: Snapshot) -> Iterator[Metric]:
    labels = ["user", "client_id"]
    families: dict[str, tuple[GaugeMetricFamily, GaugeMetricFamily]] = {}
    for kind, (prefix, rate, unit) in _QUOTA_NAMES.items():
        families[kind] = (
            GaugeMetricFamily(f"kafka_server_{prefix}_throttle_time",
                              f"average throttle time (ms) of a client's {kind} quota",
                              labels=labels),
            GaugeMetricFamily(f"kafka_server_{prefix}_{rate}",
                              f"a client's measured rate against its {kind} quota ({unit})",
                              labels=labels))
    for row in snap.quotas:
        throttle, measured = families[row.kind]
        throttle.add_metric([row.user, row.client_id], row.throttle_ms)
        measured.add_metric([row.user, row.client_id], row.rate)
    for pair in families.values():
        yield from pair
