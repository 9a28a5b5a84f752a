"""The run's Target for Apache Kafka 4.4: three combined KRaft nodes from Maven Central's jars.

The cluster is compat/run_broker.py's ``kafka-cluster`` Deployment (the one `make
compat-kafka-cluster` runs; 512 MiB heap per node), with the run's settings on top. As Strom's
run, each node lives in a network namespace of its own (tests/integration/cluster/netns.py) and
the clients on the hub, so the nemesis can cut a node off; where namespaces cannot be made, the
nodes stay on 127.0.0.1 and the nemesis only kills. The replicas' log files are compared as on
Strom: Kafka's segment files hold the same record batches.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from pathlib import Path
from types import ModuleType

from ..integration.cluster.netns import NetnsLab

COMPAT = Path(__file__).resolve().parents[2] / "compat"
RESTART_TIMEOUT = 90.0
# Kafka's defaults where the run needs them (the Deployment lowers some for its suite), and a
# broker that stops heartbeating is fenced within 3 s (Strom's run: a 3 s ZooKeeper session).
KAFKA_SETTINGS = {
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.min.isr": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}


def load_run_broker() -> ModuleType:
    """compat/run_broker.py, by path (compat/ is a directory of scripts)."""
    spec = importlib.util.spec_from_file_location("compat_run_broker", COMPAT / "run_broker.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class KafkaCluster:
    name = "Apache Kafka 4.4 (3 KRaft nodes)"

    def __init__(self, deployment, lab: NetnsLab | None = None) -> None:
        self.deployment = deployment  # a started run_broker.Deployment("kafka-cluster")
        self.lab = lab  # the nodes' namespaces (made with deployment_args)
        self.can_partition = lab is not None
        self.node_ids = list(range(1, len(deployment.brokers) + 1))

    def _node(self, node_id: int):
        return self.deployment.brokers[node_id - 1]

    def bootstrap(self) -> str:
        return self.deployment.bootstrap

    def address(self, node_id: int) -> str:
        node = self._node(node_id)
        return f"{node.host}:{node.port}"

    def running(self, node_id: int) -> bool:
        proc = self._node(node_id).proc
        return proc is not None and proc.poll() is None

    def kill(self, node_id: int) -> None:
        proc = self._node(node_id).proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)

    def restart(self, node_id: int) -> None:
        node = self._node(node_id)
        node.start()
        node.wait_ready(time.monotonic() + RESTART_TIMEOUT)

    def isolate(self, node_id: int) -> None:
        if self.lab is None:
            raise NotImplementedError("no network namespaces: the nodes share 127.0.0.1")
        self.lab.isolate(node_id)

    def heal(self, node_id: int) -> None:
        if self.lab is None:
            raise NotImplementedError("no network namespaces: the nodes share 127.0.0.1")
        self.lab.heal(node_id)

    def stop_all(self) -> None:
        for node in self.deployment.brokers:  # together: a quorum stopped one by one stalls
            node.terminate()
        for node in self.deployment.brokers:
            node.stop()

    def replica_dir(self, node_id: int, topic: str, partition: int) -> Path:
        return Path(self._node(node_id).work) / "data" / f"{topic}-{partition}"


def deployment_args(lab: NetnsLab) -> dict:
    """Deployment's ``hosts`` and ``prefixes``: node i on its namespace's address."""
    return {"hosts": [lab.address(i) for i in lab.names],
            "prefixes": [list(lab.prefix(ns)) for ns in lab.names.values()]}
