"""A snapshot becomes Kafka's metric names (as the Prometheus JMX exporter spells them)."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from strom.broker.metrics.families import families
from strom.broker.metrics.snapshot import ApiSnapshot, LagRow, LogRow, Snapshot
from strom.controller.loader import MetadataProgress
from strom.metrics.primitives import Histogram
from strom.protocol.api_keys import ApiKey


class Fixed:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self):
        return families(self.snap)


def samples(snap: Snapshot) -> dict[tuple[str, frozenset], float]:
    registry = CollectorRegistry()
    registry.register(Fixed(snap))
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def snapshot() -> Snapshot:
    produce = Histogram()
    produce.observe(3.0)
    phases = tuple(produce.snapshot() for _ in range(5))
    return Snapshot(
        broker_id=1,
        topics={"clicks": {"messages_in": 7, "bytes_in": 900, "bytes_out": 300,
                           "replication_bytes_out": 0, "produce_requests": 2,
                           "fetch_requests": 1, "failed_produce_requests": 0},
                "views": {"messages_in": 3, "bytes_in": 100, "bytes_out": 0,
                          "replication_bytes_out": 0, "produce_requests": 1,
                          "fetch_requests": 0, "failed_produce_requests": 1}},
        apis={int(ApiKey.PRODUCE): ApiSnapshot({9: 2}, phases, 1),
              int(ApiKey.OFFSET_COMMIT): ApiSnapshot({8: 1}, phases, 0)},
        connections={"PLAINTEXT": (3, 10)},
        logs=[LogRow("clicks", 0, 4096, 0, 7, 1)],
        flush=Histogram().snapshot(),
        leaders=4, replicas=6, under_replicated=1, under_min_isr=0, isr_shrinks=2,
        isr_expands=1, active_controller=True, offline_partitions=1, global_partitions=9,
        global_topics=3, leader_elections=5, unclean_leader_elections=1,
        lag=[LagRow("g", "clicks", 0, 2, 7, 12.5), LagRow("g", "clicks", 1, 5, 5, 0.0),
             LagRow("h", "views", 0, 9, 3, None)],
    )


def test_topic_meters_per_topic_and_for_all_topics() -> None:
    s = samples(snapshot())
    name = "kafka_server_brokertopicmetrics_messagesin_total"
    assert s[(name, frozenset({("topic", "clicks")}))] == 7
    assert s[(name, frozenset())] == 10
    assert s[("kafka_server_brokertopicmetrics_bytesout_total", frozenset())] == 300
    assert s[("kafka_server_brokertopicmetrics_failedproducerequests_total",
              frozenset({("topic", "views")}))] == 1


def test_requests_use_kafkas_request_names() -> None:
    s = samples(snapshot())
    assert s[("kafka_network_requestmetrics_requests_total",
              frozenset({("request", "Produce"), ("version", "9")}))] == 2
    assert s[("kafka_network_requestmetrics_requests_total",
              frozenset({("request", "OffsetCommit"), ("version", "8")}))] == 1
    assert s[("kafka_network_requestmetrics_totaltimems_count",
              frozenset({("request", "Produce")}))] == 1
    assert s[("kafka_network_requestmetrics_localtimems_bucket",
              frozenset({("request", "Produce"), ("le", "5.0")}))] == 1
    assert s[("kafka_network_requestmetrics_localtimems_bucket",
              frozenset({("request", "Produce"), ("le", "2.5")}))] == 0
    assert s[("kafka_server_delayedoperationpurgatory_purgatorysize",
              frozenset({("delayedoperation", "Produce")}))] == 1


def test_replica_controller_log_and_socket_gauges() -> None:
    s = samples(snapshot())
    expected = {
        "kafka_server_replicamanager_leadercount": 4,
        "kafka_server_replicamanager_partitioncount": 6,
        "kafka_server_replicamanager_underreplicatedpartitions": 1,
        "kafka_server_replicamanager_underminisrpartitioncount": 0,
        "kafka_server_replicamanager_isrshrinks_total": 2,
        "kafka_server_replicamanager_isrexpands_total": 1,
        "kafka_controller_kafkacontroller_activecontrollercount": 1,
        "kafka_controller_kafkacontroller_offlinepartitionscount": 1,
        "kafka_controller_kafkacontroller_globalpartitioncount": 9,
        "kafka_controller_controllerstats_leaderelectionrateandtimems_count": 5,
        "kafka_controller_controllerstats_uncleanleaderelections_total": 1,
        "kafka_log_logflushstats_logflushrateandtimems_count": 0,
    }
    assert {name: s[(name, frozenset())] for name in expected} == expected
    part = frozenset({("topic", "clicks"), ("partition", "0")})
    assert s[("kafka_log_log_size", part)] == 4096
    assert s[("kafka_log_log_logendoffset", part)] == 7
    listener = frozenset({("listener", "PLAINTEXT")})
    assert s[("kafka_server_socketservermetrics_connection_count", listener)] == 3
    assert s[("kafka_server_socketservermetrics_connection_creation_total", listener)] == 10


def test_kraft_metadata_progress_under_the_broker_and_the_controller_names() -> None:
    """KIP-835: every KRaft node's broker-metadata-metrics, and a controller's KafkaController
    gauges besides; a node without KRaft has neither."""
    assert not any(name.startswith("kafka_server_brokermetadatametrics")
                   for name, _ in samples(snapshot()))
    snap = snapshot()
    snap.metadata = MetadataProgress(41, 1_700_000_000_000, 42, apply_errors=1)
    snap.metadata_lag_ms = 120
    broker_only = {name: v for (name, _), v in samples(snap).items()
                   if "lastapplied" in name or "last_applied" in name}
    assert broker_only == {
        "kafka_server_brokermetadatametrics_last_applied_record_offset": 41,
        "kafka_server_brokermetadatametrics_last_applied_record_timestamp": 1_700_000_000_000,
        "kafka_server_brokermetadatametrics_last_applied_record_lag_ms": 120}
    assert s_of(snap, "kafka_server_brokermetadatametrics_metadata_apply_error_count") == 1
    snap.controller_role = True
    s = samples(snap)
    assert s[("kafka_controller_kafkacontroller_lastappliedrecordoffset", frozenset())] == 41
    assert s[("kafka_controller_kafkacontroller_lastcommittedrecordoffset", frozenset())] == 42
    assert s[("kafka_controller_kafkacontroller_lastappliedrecordtimestamp", frozenset())] == \
        1_700_000_000_000
    assert s[("kafka_controller_kafkacontroller_lastappliedrecordlagms", frozenset())] == 120
    assert s[("kafka_controller_kafkacontroller_metadataerrorcount", frozenset())] == 1


def s_of(snap: Snapshot, name: str) -> float:
    return samples(snap)[(name, frozenset())]


def test_consumer_lag_per_partition_and_per_group() -> None:
    s = samples(snapshot())

    def lag(group: str, topic: str, p: int) -> float:
        return s[("kafka_consumergroup_lag", frozenset(
            {("consumergroup", group), ("topic", topic), ("partition", str(p))}))]

    assert (lag("g", "clicks", 0), lag("g", "clicks", 1)) == (5, 0)
    assert lag("h", "views", 0) == 0, "a commit past the high watermark is no negative lag"
    assert s[("kafka_consumergroup_lag_sum", frozenset({("consumergroup", "g")}))] == 5
    assert s[("kafka_consumergroup_lag_max", frozenset({("consumergroup", "g")}))] == 5
    assert s[("kafka_consumergroup_lag_seconds", frozenset(
        {("consumergroup", "g"), ("topic", "clicks"), ("partition", "0")}))] == 12.5
    assert ("kafka_consumergroup_lag_seconds", frozenset(
        {("consumergroup", "h"), ("topic", "views"), ("partition", "0")})) not in s
    assert s[("kafka_consumergroup_lag_seconds_max", frozenset({("consumergroup", "g")}))] == 12.5
