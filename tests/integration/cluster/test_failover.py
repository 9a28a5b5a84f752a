"""Broker failures with acks=all producers: nothing acknowledged is lost, replicas agree.

A numbered idempotent producer (acks=all, RF 3, min.insync.replicas=2) writes while brokers are
killed (-9), frozen (SIGSTOP) and restarted; afterwards every acknowledged record is read back
exactly once and in order, and every replica of every partition holds the same records.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from .faults import (
    NumberedProducer,
    check_exactly_once_in_order,
    compare_replicas,
    read_all,
    wait_for,
)

TOPIC_CONFIG = {"min.insync.replicas": "2"}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(cluster, name: str, partitions: int) -> None:
    wait_for(lambda: len(_admin(cluster.bootstrap).list_topics(timeout=10).brokers) == 3, 30,
          "3 live brokers")
    admin = _admin(cluster.bootstrap)  # keep the handle alive until the future resolves
    fut = admin.create_topics(
        [NewTopic(name, partitions, 3, config=TOPIC_CONFIG)], operation_timeout=30)[name]
    fut.result(40)
    wait_for(lambda: _fully_replicated(cluster, name, partitions), 30, "full ISRs")


def _fully_replicated(cluster, name: str, partitions: int) -> bool:
    t = _admin(cluster.bootstrap).list_topics(name, timeout=10).topics.get(name)
    return (t is not None and len(t.partitions) == partitions
            and all(p.leader > 0 and len(p.isrs) == 3 for p in t.partitions.values()))


def _leader(cluster, name: str, partition: int) -> int:
    t = _admin(cluster.bootstrap).list_topics(name, timeout=10).topics[name]
    return t.partitions[partition].leader


def _finish_and_check(cluster, producer: NumberedProducer, name: str, partitions: int) -> None:
    left = producer.stop()
    assert left == 0, f"{left} records never got a delivery report"
    assert producer.fatal is None, producer.fatal
    assert producer.total_acked() > 0
    for b in cluster.brokers:
        if not b.running:
            b.start()
    wait_for(lambda: _fully_replicated(cluster, name, partitions), 60, "ISRs full again")
    got = read_all(cluster.bootstrap, name, partitions)
    check_exactly_once_in_order(producer.acked, got)
    # let followers catch up to the leaders' log ends, then compare the files
    wait_for(lambda: _fully_replicated(cluster, name, partitions), 30, "ISRs still full")
    for b in cluster.brokers:
        b.stop()
    for p in range(partitions):
        compare_replicas([b.data_dir / f"{name}-{p}" for b in cluster.brokers])


@pytest.mark.timeout(240)
def test_killing_the_leader_loses_no_acknowledged_write(make_cluster):
    cluster = make_cluster(3)
    _create(cluster, "kill-leader", 3)
    producer = NumberedProducer(cluster.bootstrap, "kill-leader", 3, rate_per_s=300)
    producer.start()
    wait_for(lambda: producer.total_acked() >= 300, 30, "some acknowledged records")
    victim = cluster.broker(_leader(cluster, "kill-leader", 0))
    victim.kill()
    acked = producer.total_acked()
    wait_for(lambda: producer.total_acked() >= acked + 600, 60, "progress after the kill")
    victim.start()
    wait_for(lambda: _fully_replicated(cluster, "kill-leader", 3), 60, "the victim back in the ISRs")
    _finish_and_check(cluster, producer, "kill-leader", 3)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_nemesis_kills_freezes_and_restarts_brokers(make_cluster):
    """40 s of faults (STROM_NEMESIS_SECONDS for a longer soak), the leader of partition 0
    picked most often; at most one broker is down at a time so min.insync.replicas=2 can still
    be met."""
    cluster = make_cluster(3)
    name = "nemesis"
    _create(cluster, name, 4)
    producer = NumberedProducer(cluster.bootstrap, name, 4, rate_per_s=300)
    producer.start()
    rng = random.Random(int(os.environ.get("STROM_NEMESIS_SEED", "7")))
    end = time.monotonic() + float(os.environ.get("STROM_NEMESIS_SECONDS", "40"))
    faults = []
    while time.monotonic() < end:
        try:
            target = cluster.broker(_leader(cluster, name, 0)) if rng.random() < 0.6 \
                else rng.choice(cluster.brokers)
        except Exception:
            target = rng.choice(cluster.brokers)
        action = rng.choice(["kill", "stop", "bounce"])
        faults.append((action, target.name))
        acked = producer.total_acked()
        if action == "kill":
            target.kill()
            wait_for(lambda a=acked: producer.total_acked() > a + 100, 60, "progress without a broker")
            target.start()
        elif action == "stop":
            os.kill(target.pid, signal.SIGSTOP)
            try:
                wait_for(lambda a=acked: producer.total_acked() > a + 100, 60,
                      "progress with a frozen broker")
            finally:
                os.kill(target.pid, signal.SIGCONT)
        else:
            target.restart()
        wait_for(lambda: _fully_replicated(cluster, name, 4), 60, f"full ISRs after {action}")
    _finish_and_check(cluster, producer, name, 4)
    assert len(faults) >= 3, faults
