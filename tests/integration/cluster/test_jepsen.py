"""Jepsen-style run on a 3-broker Strom cluster (issue 28): real clients, kill -9 of the
transaction coordinator, the group coordinator and partition leaders, a network partition; the
checker of tests/jepsen judges what the clients saw and the replicas' log files.

Every broker lives in its own network namespace (test_network_partition.py's layout: ZooKeeper
and the clients on the hub), so a broker can be cut off while it runs.

`make test` runs a short fixed-seed run: 3 kills of each role, 1 partition, at least 500
committed transactions. `make jepsen` runs a long randomized one: JEPSEN_SECONDS of random
faults (a quarter of the kills restarted at once, before the cluster noticed), seed
JEPSEN_SEED (else a random one, printed).
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from ...jepsen.nemesis import KILLS, PARTITION, Timing
from ...jepsen.run import BROKER_SETTINGS, Settings, run
from ..conftest import DEFAULT_OVERRIDES
from .conftest import CLUSTER_OVERRIDES, KRAFT_OVERRIDES, Cluster, ZooKeeper, kraft_clusters
from .netns import HUB_ADDRESS, NetnsLab
from .test_network_partition import PORT, NamespacedBroker, lab  # noqa: F401  (fixture)

LONG = "JEPSEN_SECONDS" in os.environ
SHORT_SEED = 28
SHORT_SECONDS = 100.0  # a cap: the run stops once the plan is done and 500 committed
MIN_COMMITTED = 500
# A killed broker's ZooKeeper session ends (and its roles move) within 2 s.
JEPSEN_OVERRIDES = {"zookeeper.session.timeout.ms": "2000"}
# KRaft: a killed broker is fenced within 2 s; a killed controller is replaced within 1.5 s
# and an election, which then gives every broker a new session of 2 s.
JEPSEN_KRAFT_OVERRIDES = {"broker.session.timeout.ms": "2000",
                          "broker.heartbeat.interval.ms": "300",
                          "controller.quorum.fetch.timeout.ms": "1500",
                          "controller.quorum.election.timeout.ms": "750"}
# A cap: KRaft's failovers of a controller take longer than ZooKeeper's of a broker.
SHORT_SECONDS_KRAFT = 130.0
CONTROLLER_PORT = 9093

pytestmark = pytest.mark.timeout(
    float(os.environ["JEPSEN_SECONDS"]) + 300 if LONG else 270)


class StromInNamespaces:
    """The run's Target: ZooKeeper on the hub, broker i in namespace i."""

    name = "Strom (3 brokers, ZooKeeper, network namespaces)"
    can_partition = True

    def __init__(self, netns: NetnsLab, base: Path) -> None:
        self.lab = netns
        self.node_ids = [1, 2, 3]
        self.zk = ZooKeeper(base / "zk", host=HUB_ADDRESS, port=2181,
                            prefix=netns.prefix(netns.hub))
        self.brokers: dict[int, NamespacedBroker] = {}
        for i, ns in netns.names.items():
            b = NamespacedBroker(base / f"b{i}", name=f"jepsen-b{i}", host=netns.address(i),
                                 prefix=netns.prefix(ns))
            b.overrides = {k: str(v) for k, v in {
                **DEFAULT_OVERRIDES, **CLUSTER_OVERRIDES, **BROKER_SETTINGS, **JEPSEN_OVERRIDES,
                "broker.id": i,
                "zookeeper.connect": f"{self.zk.connect}/strom",
                "listeners": f"PLAINTEXT://{netns.address(i)}:{PORT}"}.items()}
            self.brokers[i] = b

    def start(self) -> None:
        self.zk.start()
        for b in self.brokers.values():  # together: each waits for ZooKeeper, not the others
            b.start(wait=False)
        for b in self.brokers.values():
            b.wait_ready()

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def address(self, node_id: int) -> str:
        return self.brokers[node_id].bootstrap

    def running(self, node_id: int) -> bool:
        return self.brokers[node_id].running

    def kill(self, node_id: int) -> None:
        self.brokers[node_id].kill()

    def restart(self, node_id: int) -> None:
        self.brokers[node_id].start()

    def isolate(self, node_id: int) -> None:
        self.lab.isolate(node_id)

    def heal(self, node_id: int) -> None:
        self.lab.heal(node_id)

    def stop_all(self) -> None:
        for b in self.brokers.values():
            b.stop()

    def replica_dir(self, node_id: int, topic: str, partition: int) -> Path:
        return self.brokers[node_id].data_dir / f"{topic}-{partition}"

    def close(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.zk.stop()


class NamespacedKRaftNode(NamespacedBroker):
    """A combined KRaft node in its namespace: the CONTROLLER listener on its own address."""

    def __init__(self, base: Path, *, host: str, prefix: tuple[str, ...], name: str) -> None:
        super().__init__(base, host=host, prefix=prefix, name=name)
        self.kraft = True
        self.controller_port = CONTROLLER_PORT

    def kraft_settings(self, settings: dict[str, str]) -> dict[str, str]:
        out = super().kraft_settings(settings)
        out["listeners"] = (f"{settings['listeners']},"
                            f"CONTROLLER://{self.host}:{CONTROLLER_PORT}")
        return out


class StromKRaftInNamespaces(StromInNamespaces):
    """The run's Target without ZooKeeper: combined KRaft node i (broker and controller, one
    quorum of the three) in namespace i; isolating a node cuts its controller off too."""

    name = "Strom (3 combined KRaft nodes, network namespaces)"

    def __init__(self, netns: NetnsLab, base: Path) -> None:
        self.lab = netns
        self.node_ids = [1, 2, 3]
        voters = ",".join(f"{i}@{netns.address(i)}:{CONTROLLER_PORT}" for i in netns.names)
        self.brokers = {}
        for i, ns in netns.names.items():
            b = NamespacedKRaftNode(base / f"k{i}", name=f"jepsen-k{i}", host=netns.address(i),
                                    prefix=netns.prefix(ns))
            b.overrides = {k: str(v) for k, v in {
                **DEFAULT_OVERRIDES, **KRAFT_OVERRIDES, **BROKER_SETTINGS,
                **JEPSEN_KRAFT_OVERRIDES, "node.id": i, "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://{netns.address(i)}:{PORT}"}.items()}
            self.brokers[i] = b

    def start(self) -> None:
        for b in self.brokers.values():  # together: each waits for a quorum of the others
            b.start(wait=False)
        for b in self.brokers.values():
            b.wait_ready()

    def stop_all(self) -> None:  # together: a quorum stopped one by one loses its majority
        Cluster(list(self.brokers.values()), "", together=True).stop_all()

    def close(self) -> None:
        for b in self.brokers.values():
            b.kill()


def test_jepsen(lab, tmp_path):  # noqa: F811  (the lab fixture)
    if LONG:
        seed = int(os.environ.get("JEPSEN_SEED") or random.SystemRandom().randrange(10**6))
        settings = Settings(seed, float(os.environ["JEPSEN_SECONDS"]), kills_each=None,
                            timing=Timing(quick=0.25))
    else:
        seed = int(os.environ.get("JEPSEN_SEED") or SHORT_SEED)
        settings = Settings(seed, SHORT_SECONDS_KRAFT if kraft_clusters() else SHORT_SECONDS,
                            min_committed=MIN_COMMITTED)
    print(f"jepsen seed {seed} (JEPSEN_SEED={seed} repeats this run)", flush=True)
    target = (StromKRaftInNamespaces if kraft_clusters() else StromInNamespaces)(lab, tmp_path)
    try:
        with lab.entered():
            try:
                started = time.monotonic()
                target.start()
                print(f"cluster serving after {time.monotonic() - started:.1f} s", flush=True)
                report = run(target, settings, history_path=tmp_path / "history.json")
            finally:
                target.close()
        print(report.summary(), flush=True)
        _check(report)
    except Exception:  # a failed check, or the run itself
        try:
            print(f"the brokers' logs and the history are kept in "
                  f"{_keep(target, tmp_path, seed)}", flush=True)
        except OSError as e:  # never hide the failure itself
            print(f"could not keep the brokers' logs: {e}", flush=True)
        raise


def _keep(target: Any, tmp_path: Path, seed: int) -> Path:
    """Copy a failed run's broker logs and history out of pytest's temporary directories
    (only the last three sessions' are kept: a one-off failure was lost that way)."""
    kept = Path(os.environ.get("JEPSEN_KEEP_DIR", "/tmp")) / f"strom-jepsen-{seed}-{os.getpid()}"
    kept.mkdir(parents=True, exist_ok=True)
    files = [(f"node-{i}-{b.log_path.name}", b.log_path) for i, b in target.brokers.items()]
    for name, path in [*files, ("history.json", tmp_path / "history.json")]:
        if path.exists():
            shutil.copy2(path, kept / name)
    return kept


def _check(report: Any) -> None:
    assert not report.crashed, report.crashed
    if not LONG:
        assert all(report.faults[k] >= 3 for k in KILLS) and report.faults[PARTITION] >= 1, \
            report.summary()
        assert report.committed_transactions() >= MIN_COMMITTED, report.summary()
    assert report.result.valid, report.summary()
    # and live: after every fault the cluster was whole again (a long run once showed a node
    # that could not follow the quorum after a partition healed, with no anomaly to show it)
    assert not report.unhealed, report.summary()
