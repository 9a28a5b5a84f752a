"""Replication throttles on a real cluster: `strom reassign-partitions --throttle` moves a
partition's data to a new replica at the set rate, producers with acks=all keep writing to it
meanwhile (the throttle holds back only replicas out of the ISR), and `--verify` clears the
throttles once the move is done."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from .faults import wait_for
from .test_reassignment import _assigned, _create, _plan_file, _strom

pytestmark = pytest.mark.timeout(240)
RATE = 200 * 1024  # bytes/s
KIB = 1024


def _replica_bytes(data_dir: Path, topic: str, partition: int) -> int:
    d = data_dir / f"{topic}-{partition}"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.is_dir() else 0


def _topic_configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(30)
    return {k: e.value for k, e in entries.items()}


def test_a_throttled_reassignment_moves_data_at_the_set_rate(make_cluster, tmp_path) -> None:
    # small follower fetches, so the moved bytes grow smoothly rather than in 1 MiB steps
    cluster = make_cluster(3, {"replica.fetch.max.bytes": 32 * KIB,
                               "replica.fetch.response.max.bytes": 32 * KIB})
    topic = f"throttled-{uuid.uuid4().hex[:6]}"
    _create(cluster, topic, [[1]])
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for _ in range(800):  # 8 MB: 40 s at the throttle
        p.produce(topic, b"v" * 10_000, partition=0)
    assert p.flush(60) == 0
    plan = _plan_file(tmp_path, "plan.json", {(topic, 0): [1, 2]})
    _strom("reassign-partitions", "--execute", "--throttle", str(RATE),
           "--reassignment-json-file", plan, "--bootstrap-server", cluster.bootstrap)
    configs = _topic_configs(cluster.bootstrap, topic)
    assert configs["leader.replication.throttled.replicas"] == "0:1"
    assert configs["follower.replication.throttled.replicas"] == "0:2"

    follower = cluster.broker(2).data_dir
    wait_for(lambda: _replica_bytes(follower, topic, 0) > 0, 30, "the new replica started")
    time.sleep(3)  # past the first window's burst: measuring, not synchronising
    begin_bytes, begin = _replica_bytes(follower, topic, 0), time.monotonic()
    # meanwhile acks=all producers are served: the new replica is out of the ISR
    for _ in range(20):
        p.produce(topic, b"w" * 1000, partition=0)
    assert p.flush(30) == 0
    while time.monotonic() < begin + 15:
        time.sleep(0.2)  # the measured interval
    moved = (_replica_bytes(follower, topic, 0) - begin_bytes) / (time.monotonic() - begin)
    assert 0.7 * RATE <= moved <= 1.3 * RATE, f"moved {moved / KIB:.0f} KiB/s"
    assert _assigned(cluster.bootstrap, topic)[0][1] == [1], "still catching up"

    # --verify while under way: not done, and the throttles stay
    assert _strom("reassign-partitions", "--verify", "--reassignment-json-file", plan,
                  "--bootstrap-server", cluster.bootstrap, check=False).returncode == 1
    # lift the rate on both brokers: the move completes
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for broker in (1, 2):
        res = ConfigResource(ConfigResource.Type.BROKER, str(broker), incremental_configs=[
            ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
            for name in ("leader.replication.throttled.rate",
                         "follower.replication.throttled.rate")])
        admin.incremental_alter_configs([res])[res].result(30)
    wait_for(lambda: _assigned(cluster.bootstrap, topic)[0] == ([1, 2], [1, 2]), 60,
             "the reassignment completed")
    done = _strom("reassign-partitions", "--verify", "--reassignment-json-file", plan,
                  "--bootstrap-server", cluster.bootstrap)
    assert "Throttles cleared" in done.stdout
    configs = _topic_configs(cluster.bootstrap, topic)
    assert not configs.get("leader.replication.throttled.replicas")
    assert not configs.get("follower.replication.throttled.replicas")
