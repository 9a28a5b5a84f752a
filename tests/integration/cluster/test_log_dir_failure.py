"""A failed disk of a KRaft broker with several log dirs (KIP-858), with real processes.

Broker 1 keeps its logs in two dirs, the first a small tmpfs. It reports which dir keeps each
replica (AssignReplicasToDirs), so when the tmpfs fills up under an acks=all producer and goes
offline, its heartbeat tells the active controller, which moves the leadership of the
partition kept there to another in-sync replica: the producer carries on against the new
leader, DescribeTopicPartitions shows broker 1's replica offline (broker 1 itself stays up).
Once space is freed the dir comes back, the replica catches up and rejoins the ISR, and every
acknowledged record is read back exactly once. (As Kafka does; a single-dir broker whose only
dir fails loses every leadership the same way.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from .. import clients as kc
from ..disks import tmpfs
from .conftest import _wait_registered, make_kraft_nodes
from .faults import wait_for

pytestmark = pytest.mark.timeout(240)

TOPIC = "jbod"
# 6 MiB free at first, for 10 MB of records; freeing the filler leaves room for all of them
TMPFS_SIZE = "24m"
FILLER_BYTES = 18 * 1024 * 1024
VALUE_BYTES = 10_000
DEADLINE_S = 60.0


def _partition(admin: KafkaAdminClient) -> dict[str, Any] | None:
    [t] = admin.describe_topic_partitions([TOPIC])["topics"]
    return t["partitions"][0] if t["error_code"] == 0 and t["partitions"] else None


def test_a_full_log_dir_moves_its_leaderships_and_loses_nothing(tmp_path_factory) -> None:
    cluster = make_kraft_nodes(tmp_path_factory, "jbod", 3, {
        "min.insync.replicas": 2, "log.segment.bytes": 1024 * 1024})
    first = cluster.broker(1)
    with tmpfs(first.base_dir / "disk", TMPFS_SIZE) as disk:
        filler = disk / "filler"
        filler.write_bytes(b"\xff" * FILLER_BYTES)
        small = disk / "data"
        # the small disk first: the first new partition goes there (a log dir with the fewest
        # partitions takes it); the metadata log stays on the big one
        first.overrides["log.dirs"] = f"{small},{first.data_dir}"
        first.overrides["metadata.log.dir"] = str(first.data_dir)
        try:
            _run(cluster, small, filler)
        finally:
            cluster.discard()


def _run(cluster: Any, small: Path, filler: Path) -> None:
    for b in cluster.brokers:
        b.start(wait=False)
    for b in cluster.brokers:
        b.wait_ready()
    _wait_registered(cluster.brokers)
    first = cluster.broker(1)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [1, 2, 3]})])
        wait_for(lambda: (p := _partition(admin)) and len(p["isr_nodes"]) == 3, 30,
                 "jbod-0 with 3 replicas in sync")
        # a new partition's ISR is all its replicas from the start: broker 1 may not have made
        # its log yet, so wait for it to show up in one of the two dirs
        dirs = {small: small / f"{TOPIC}-0", first.data_dir: first.data_dir / f"{TOPIC}-0"}
        wait_for(lambda: any(p.is_dir() for p in dirs.values()), 30, "broker 1's log of jbod-0")
        assert dirs[small].is_dir(), "jbod-0 is not on the small disk"
        assert _partition(admin)["leader_id"] == 1
        marks = {b: b.log_size() for b in cluster.brokers}

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 60000})
        acked: dict[int, bytes] = {}
        failed: list[KafkaError] = []

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failed.append(err)
            else:
                acked[msg.offset()] = msg.value()

        # fill the small disk and go on: 10 MB in all
        for i in range(1000):
            value = f"{i:08d}".encode() + b"x" * VALUE_BYTES
            while True:
                try:
                    producer.produce(TOPIC, value, partition=0, callback=report)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        assert producer.flush(DEADLINE_S * 2) == 0, "delivery reports missing"
        assert not failed, failed[:3]
        assert len(acked) == 1000

        text = first.log_text(marks[first], limit=1 << 26)
        assert "No space left on device" in text and "is offline" in text, \
            "the small disk never filled up"
        wait_for(lambda: any("broker 1 reports log dir(s)" in b.log_text(marks[b], 1 << 26)
                             for b in cluster.brokers), 30,
                 "the active controller told of the offline dir")

        def moved() -> dict[str, Any] | None:
            p = _partition(admin)
            return p if p and p["leader_id"] in (2, 3) and p["offline_replicas"] == [1] \
                and 1 not in p["isr_nodes"] else None

        wait_for(moved, 30, "the leadership away from broker 1, its replica offline")

        # the leader does not ask, fetch after fetch, to add a replica the controller would
        # refuse (INELIGIBLE_REPLICA) while its dir is offline
        refusals = sum(b.log_text(marks[b], 1 << 26).count("INELIGIBLE_REPLICA")
                       for b in cluster.brokers)
        assert refusals <= 2, f"{refusals} ISR expansions refused"

        filler.unlink()  # space returns: the dir comes back, the replica catches up
        wait_for(lambda: (p := _partition(admin)) and p["offline_replicas"] == []
                 and sorted(p["isr_nodes"]) == [1, 2, 3], DEADLINE_S,
                 "broker 1's replica back in the ISR")
        read = kc.read_partition(cluster.bootstrap, TOPIC, 0, timeout=DEADLINE_S)
        assert [m.offset for m in read] == sorted(acked)  # each once, none missing
        assert {m.offset: m.value for m in read} == acked
    finally:
        admin.close()
