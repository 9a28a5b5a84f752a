"""The describe APIs on a 3-broker cluster: every replica answers DescribeProducers and
DescribeLogDirs from its own log (as Kafka's followers do), and DescribeTopicPartitions shows a
stopped broker's replica offline and without leadership."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic

from .. import clients as kc
from ..clients import Msg
from .faults import wait_for

pytestmark = pytest.mark.timeout(180)


def _admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def _partition(admin: KafkaAdminClient, topic: str):
    [t] = admin.describe_topic_partitions([topic])["topics"]
    return t["error_code"] == 0 and t["partitions"] and t["partitions"][0]


def test_replicas_describe_their_logs_and_a_stopped_broker_is_offline(make_cluster):
    cluster = make_cluster(3)
    probe = _admin(cluster.brokers[0].bootstrap)
    try:
        wait_for(lambda: len(probe.describe_cluster()["brokers"]) == 3, 30, "3 brokers")
    finally:
        probe.close()
    # kafka-python's admin keeps the brokers of its first metadata for minutes: one made before
    # all three had registered cannot address broker 2 (UnknownBrokerIdError, seen once)
    admin = _admin(cluster.brokers[0].bootstrap)
    try:
        admin.create_topics([NewTopic("rep", 1, 3)])
        wait_for(lambda: (p := _partition(admin, "rep")) and len(p["isr_nodes"]) == 3, 30,
                 "rep with 3 replicas in sync")
        kc.kp_produce(cluster.bootstrap, "rep", [Msg(None, b"v%d" % i) for i in range(4)],
                      enable_idempotence=True, acks="all")
        tp = TopicPartition("rep", 0)
        for broker_id in (1, 2, 3):
            def producers(broker_id=broker_id):
                state = admin.describe_producers([tp], broker_id=broker_id)[tp]
                return [(p.last_sequence, p.current_transaction_start_offset)
                        for p in state.active_producers] == [(3, -1)]

            wait_for(producers, 30, f"the producer on broker {broker_id}")

            def log_dir(broker_id=broker_id):
                [answer] = admin.describe_log_dirs({"rep": [0]}, brokers=[broker_id])
                [d] = answer["log_dirs"]
                [t] = d["topics"]
                [p] = t["partitions"]
                return p["partition_size"] > 0 and p["offset_lag"] == 0

            wait_for(log_dir, 30, f"the log of rep-0 on broker {broker_id}")

        victim = next(r for r in _partition(admin, "rep")["replica_nodes"] if r != 1)
        cluster.broker(victim).stop()

        def offline():
            p = _partition(admin, "rep")
            return (p and p["offline_replicas"] == [victim] and victim not in p["isr_nodes"]
                    and p["leader_id"] not in (-1, victim) and len(p["replica_nodes"]) == 3)

        wait_for(offline, 60, f"broker {victim} offline in DescribeTopicPartitions")
    finally:
        admin.close()
