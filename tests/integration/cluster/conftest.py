"""Fixtures of the cluster tests: a private ZooKeeper, and clusters of real broker processes.

ZooKeeper is Debian's package (`make test` installs it), started standalone on a free port of
127.0.0.1 once per session; every test gets its own chroot, so clusters never see each other.
No test here is skipped when ZooKeeper is missing: it fails, saying how to install it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..broker import HOST, BrokerProcess, free_port
from ..conftest import DEFAULT_OVERRIDES

ZK_JAR = Path("/usr/share/java/zookeeper.jar")
ZK_CONF_DIR = Path("/etc/zookeeper/conf")
ZK_START_TIMEOUT = 30.0


class ZooKeeper:
    """`prefix` runs the server through another command (e.g. `ip netns exec NS`), on `host`."""

    def __init__(self, base: Path, *, host: str = HOST, port: int | None = None,
                 prefix: tuple[str, ...] = ()) -> None:
        self.base = base
        self.host = host
        self.port = port or free_port()
        self.prefix = prefix
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = base / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        if not ZK_JAR.exists():
            raise RuntimeError(f"{ZK_JAR} is missing: install Debian's zookeeper package "
                               "(make system-deps)")
        data = self.base / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.base / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={data}\nclientPort={self.port}\n"
                       f"clientPortAddress={self.host}\nadmin.enableServer=false\n"
                       "maxSessionTimeout=60000\nminSessionTimeout=1000\n"
                       "4lw.commands.whitelist=ruok\n")
        classpath = f"{ZK_CONF_DIR}:{ZK_JAR}"  # the jar's manifest names the rest
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, "java", "-Xmx256m", "-cp", classpath,
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.base)
        deadline = time.monotonic() + ZK_START_TIMEOUT
        while not self._ruok():
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {self.log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper did not start: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def _ruok(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory) -> Iterator[ZooKeeper]:
    zk = ZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


# Fast failure handling for tests: sessions end 4 s after a broker dies.
CLUSTER_OVERRIDES = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
}


class Cluster:
    def __init__(self, brokers: list[BrokerProcess], connect: str, *,
                 together: bool = False) -> None:
        self.brokers = brokers
        self.connect = connect
        self.together = together

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running)

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id - 1]

    def stop_all(self) -> None:
        """Stop every broker, all at once on KRaft (a quorum stopped one voter at a time
        loses its majority before the last brokers' controlled shutdowns)."""
        errors = []

        def stop(b: BrokerProcess) -> None:
            try:
                b.stop()
            except Exception as e:
                errors.append(e)

        if self.together:
            with ThreadPoolExecutor(len(self.brokers) or 1) as pool:
                list(pool.map(stop, self.brokers))
        else:
            for b in self.brokers:
                stop(b)
        if errors:
            raise errors[0]


    def discard(self) -> None:
        """kill -9 every broker still running (a test's KRaft cluster once the test is over:
        its clean shutdown is tested where a test stops brokers, and a quorum stopping all at
        once spends seconds on controlled shutdowns nobody can answer)."""
        for b in self.brokers:
            if b.running:
                b.kill()


def _wait_registered(brokers: list[BrokerProcess], timeout: float = 30.0) -> None:
    """Every broker's metadata names all the brokers: serving ApiVersions comes before a
    broker's registration reaches the others (a test creating a topic with replication factor
    3 at once met "only 2 broker(s) are registered" in CI)."""
    from confluent_kafka.admin import AdminClient

    wanted = len(brokers)
    deadline = time.monotonic() + timeout
    for b in brokers:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        while True:
            try:
                seen = len(admin.list_topics(timeout=5).brokers)
            except Exception:  # not answering yet: poll again until the deadline
                seen = 0
            if seen >= wanted:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{b.name} sees {seen} of {wanted} brokers after {timeout}s")
            time.sleep(0.05)  # poll interval, not synchronisation


# Clusters are KRaft nodes (no ZooKeeper) unless STROM_CLUSTER=zookeeper (`make
# test-zookeeper-cluster` runs the whole suite in the legacy mode). Tests about ZooKeeper mode
# itself (zookeeper_only), and its smoke test (zookeeper_smoke), always run on ZooKeeper.
CLUSTER_MODE_ENV = "STROM_CLUSTER"


def kraft_clusters() -> bool:
    """Whether tests without a ZooKeeper marker get KRaft clusters."""
    return os.environ.get(CLUSTER_MODE_ENV, "kraft") != "zookeeper"


def on_zookeeper(request) -> bool:
    node = request.node
    return (not kraft_clusters() or node.get_closest_marker("zookeeper_only") is not None
            or node.get_closest_marker("zookeeper_smoke") is not None)


@pytest.fixture
def make_cluster(tmp_path_factory, request) -> Iterator[Callable[..., Cluster]]:
    """Clusters of n broker processes: combined KRaft nodes, or brokers on a private
    ZooKeeper (see on_zookeeper)."""
    if not on_zookeeper(request):
        yield from _kraft_clusters(tmp_path_factory, request)
        return
    zookeeper = request.getfixturevalue("zookeeper")
    label = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:30].strip("-")
    clusters: list[Cluster] = []

    def make(n: int = 3, overrides: dict[str, object] | None = None,
             racks: list[str] | None = None) -> Cluster:
        chroot = f"/strom-{label}-{uuid.uuid4().hex[:8]}"
        connect = zookeeper.connect + chroot
        brokers = []
        for i in range(1, n + 1):
            name = f"{label}-b{i}"
            b = BrokerProcess(tmp_path_factory.mktemp(name), name=name)
            settings: dict[str, object] = dict(DEFAULT_OVERRIDES)
            settings.update(CLUSTER_OVERRIDES)
            settings.update({"broker.id": i, "zookeeper.connect": connect})
            if racks:
                settings["broker.rack"] = racks[i - 1]
            settings.update(overrides or {})
            b.overrides = {k: str(v) for k, v in settings.items()}
            brokers.append(b)
        cluster = Cluster(brokers, connect)
        clusters.append(cluster)
        for b in brokers:  # start them together: each waits for ZooKeeper, not for the others
            b.start(wait=False)
        for b in brokers:
            b.wait_ready()
        _wait_registered(brokers)
        return cluster

    try:
        yield make
    finally:
        for c in clusters:
            c.stop_all()


# KRaft clusters: fast failure handling as above, with broker sessions instead of ZooKeeper's.
# An election timeout of 300 ms (Kafka's 1,000): a fresh quorum's first election, and one that
# split, take a third of the time (a 3-node cluster starts about a second sooner); a follower
# still waits the fetch timeout before it doubts its leader.
KRAFT_OVERRIDES = {
    **{k: v for k, v in CLUSTER_OVERRIDES.items() if not k.startswith("zookeeper.")},
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "2000",
}


def make_kraft_nodes(tmp_path_factory, label: str, n: int,
                     overrides: dict[str, object] | None = None,
                     racks: list[str] | None = None) -> Cluster:
    """n combined KRaft nodes (broker and controller) on one static quorum of all of them,
    not started."""
    brokers = [BrokerProcess(tmp_path_factory.mktemp(f"{label}-k{i}"), name=f"{label}-k{i}",
                             kraft=True) for i in range(1, n + 1)]
    voters = ",".join(f"{i}@{HOST}:{b.controller_port}" for i, b in enumerate(brokers, 1))
    for i, b in enumerate(brokers, 1):
        settings: dict[str, object] = dict(DEFAULT_OVERRIDES)
        settings.update(KRAFT_OVERRIDES)
        settings.update({"node.id": i, "controller.quorum.voters": voters})
        if racks:
            settings["broker.rack"] = racks[i - 1]
        for key, value in (overrides or {}).items():  # a ZooKeeper session is a broker's
            if key == "zookeeper.session.timeout.ms":
                settings["broker.session.timeout.ms"] = value
            elif not key.startswith("zookeeper."):
                settings[key] = value
        b.overrides = {k: str(v) for k, v in settings.items()}
    return Cluster(brokers, "", together=True)


@pytest.fixture
def make_kraft_cluster(tmp_path_factory, request) -> Iterator[Callable[..., Cluster]]:
    """Like make_cluster, without ZooKeeper: combined KRaft nodes."""
    yield from _kraft_clusters(tmp_path_factory, request)


def _kraft_clusters(tmp_path_factory, request) -> Iterator[Callable[..., Cluster]]:
    label = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:30].strip("-")
    clusters: list[Cluster] = []

    def make(n: int = 3, overrides: dict[str, object] | None = None,
             racks: list[str] | None = None) -> Cluster:
        cluster = make_kraft_nodes(tmp_path_factory, label, n, overrides, racks)
        clusters.append(cluster)
        for b in cluster.brokers:  # together: each waits for a quorum of the others
            b.start(wait=False)
        for b in cluster.brokers:
            b.wait_ready()
        _wait_registered(cluster.brokers)
        return cluster

    try:
        yield make
    finally:
        for c in clusters:
            c.discard()
