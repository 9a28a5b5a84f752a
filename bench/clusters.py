"""Three-broker clusters for the cluster scenario: Strom with its ZooKeeper, Kafka as KRaft nodes.

A :class:`Cluster` is three :class:`bench.brokers.BrokerProcess` (each with its own port, fresh
data directory, CPU and RSS readings) plus, for Strom, the ZooKeeper server they share.

- **Strom**: Debian's ZooKeeper package (``make system-deps``) started standalone on a free port
  of 127.0.0.1 with the zoo.cfg of docs/clusters.md, then three ``strom broker`` processes with
  the run's usual command line plus ``broker.id``, ``zookeeper.connect`` (chroot ``/strom``) and
  the replication defaults of :data:`REPLICATION`.
- **Kafka 4.4**: three combined nodes (``process.roles=broker,controller``) with the settings of
  the single-node peer (bench/kafka_peer.py: Kafka's shipped server.properties), except that the
  internal topics get Kafka's own defaults for a cluster (3 replicas, min ISR 2) instead of the
  sample file's single-node 1, and the quorum is the three nodes: each node's storage is
  formatted with the same cluster id and ``--initial-controllers`` naming all three voters
  (KIP-853's dynamic quorum, as Kafka's operations guide provisions one), and every node finds
  the quorum through ``controller.quorum.bootstrap.servers``.

Every process is stopped by its PID (SIGTERM, SIGKILL after 30 s): the brokers (Strom's one after
another, Kafka's together, see :meth:`Cluster.close`), then ZooKeeper.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import procstat
from bench.brokers import BrokerError, BrokerProcess, BrokerSpec, Command, free_port
from bench.kafka_peer import (
    FORMAT_TIMEOUT,
    SHIPPED_DEFAULTS,
    broker_command,
    cluster_id,
    load_dist,
)
from bench.tls import TlsFiles

HOST = "127.0.0.1"
SIZE = 3
ZK_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's zookeeper package (make system-deps)
ZK_CONF_DIR = Path("/etc/zookeeper/conf")  # its log4j.properties
ZK_CHROOT = "/strom"
STOP_TIMEOUT = 30.0

# Both clusters: topics created without a replication factor get 3 replicas, and acks=all needs
# 2 of them in sync. (The scenario's topics also say both explicitly.)
REPLICATION = {"default.replication.factor": "3", "min.insync.replicas": "2"}

# Kafka's built-in defaults for its internal topics, which its single-node sample
# server.properties (SHIPPED_DEFAULTS) lowers to 1; Strom's defaults are the same numbers.
KAFKA_INTERNAL_TOPICS = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}


# -- pure parts (unit-tested) ---------------------------------------------------------------


def zoo_cfg(data_dir: Path, port: int) -> str:
    """ZooKeeper's config: docs/clusters.md's, on ``port``, with `ruok` allowed for the probe."""
    return (
        f"tickTime=500\ndataDir={data_dir}\nclientPort={port}\nclientPortAddress={HOST}\n"
        "admin.enableServer=false\n4lw.commands.whitelist=ruok\n"
    )


def strom_node_overrides(node_id: int, zk_port: int) -> list[str]:
    """The ``--override`` values that make one Strom broker a member of the cluster."""
    settings = {
        "broker.id": str(node_id),
        "zookeeper.connect": f"{HOST}:{zk_port}{ZK_CHROOT}",
        **REPLICATION,
    }
    return [f"{k}={v}" for k, v in settings.items()]


def strom_node_command(
    spec: BrokerSpec, node_id: int, zk_port: int
) -> Command:
    """Node ``node_id``'s argv: the run's Strom command line (its --strom-override and
    --strom-config included) followed by the cluster's overrides."""

    def command(port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        argv = spec.command(port, data_dir, tls)
        for item in strom_node_overrides(node_id, zk_port):
            argv += ["--override", item]
        return argv

    return command


def quorum_bootstrap(controller_ports: Sequence[int]) -> str:
    """``controller.quorum.bootstrap.servers``: every controller's host:port."""
    return ",".join(f"{HOST}:{p}" for p in controller_ports)


def initial_controllers(controller_ports: Sequence[int], directory_ids: Sequence[str]) -> str:
    """The storage tool's ``--initial-controllers``: ``id@host:port:directory`` per voter, node
    ids counting from 1. Every node is formatted with the same string."""
    if len(controller_ports) != len(directory_ids):
        raise ValueError("one directory id per controller")
    return ",".join(
        f"{i}@{HOST}:{port}:{d}"
        for i, (port, d) in enumerate(zip(controller_ports, directory_ids, strict=True), start=1)
    )


def directory_id() -> str:
    """A fresh directory id (Kafka's Uuid form); never one starting with '-', which Kafka's own
    generator avoids too (it would read as an option)."""
    while True:
        d = cluster_id()
        if not d.startswith("-"):
            return d


def kafka_node_settings(
    node_id: int, port: int, controller_ports: Sequence[int], log_dir: Path
) -> dict[str, str]:
    """Node ``node_id``'s server.properties: the single-node peer's shipped settings, Kafka's
    cluster defaults for the internal topics, the replication defaults, its listeners and the
    quorum of all nodes."""
    controller = controller_ports[node_id - 1]
    endpoints = f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}"
    return {
        **SHIPPED_DEFAULTS,
        **KAFKA_INTERNAL_TOPICS,
        **REPLICATION,
        "node.id": str(node_id),
        "controller.quorum.bootstrap.servers": quorum_bootstrap(controller_ports),
        "listeners": endpoints,
        "advertised.listeners": endpoints,
        "log.dirs": str(log_dir),
    }


def properties_text(settings: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def kafka_format_command(
    java: str, libs: Path, config: Path, cid: str, controllers: str
) -> list[str]:
    """``kafka-storage.sh format --initial-controllers ...`` for one node of the quorum."""
    return [
        java,
        "-cp",
        f"{libs}/*",
        "kafka.tools.StorageTool",
        "format",
        f"--cluster-id={cid}",
        f"--initial-controllers={controllers}",
        "-c",
        str(config),
    ]  # --opt=value: an id may start with '-'


def cpu_sum(before: Sequence[procstat.CpuSample], after: Sequence[procstat.CpuSample]) -> float:
    """CPU seconds of several processes between two rounds of samples, added up."""
    if len(before) != len(after):
        raise ValueError("one sample per process in both rounds")
    return sum(procstat.cpu_delta(b, a) for b, a in zip(before, after, strict=True))


def all_replicas_in_sync(md: object, topic: str, partitions: int, replicas: int) -> bool:
    """Whether Metadata shows ``topic`` with ``partitions`` partitions, each led and with all
    ``replicas`` replicas in its ISR."""
    t = md.topics.get(topic)  # type: ignore[attr-defined]
    if t is None or t.error is not None or len(t.partitions) != partitions:
        return False
    return all(
        p.error is None
        and p.leader >= 0
        and len(p.replicas) == replicas
        and len(p.isrs) == replicas
        for p in t.partitions.values()
    )


# -- ZooKeeper ------------------------------------------------------------------------------


def zookeeper_ok(port: int) -> bool:
    """ZooKeeper's `ruok` four-letter word answered `imok`."""
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def _java() -> str:
    try:
        return str(load_dist().java_bin())
    except (RuntimeError, OSError, BrokerError):
        found = shutil.which("java")
        if found is None:
            raise BrokerError("no java for ZooKeeper") from None
        return found


class ZooKeeper:
    """A private standalone ZooKeeper in a fresh directory under ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="zookeeper-", dir=workdir))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "zookeeper.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "ZooKeeper not started"
        return self.proc.pid

    def start(self, timeout: float) -> None:
        if not ZK_JAR.exists():
            raise BrokerError(f"{ZK_JAR} is missing: install Debian's zookeeper package "
                              "(make system-deps)")  # fmt: skip
        data = self.dir / "data"
        data.mkdir()
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(zoo_cfg(data, self.port))
        cmd = [_java(), "-Xmx256m", "-cp", f"{ZK_CONF_DIR}:{ZK_JAR}",  # the manifest names the rest
               "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)]  # fmt: skip
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, cwd=self.dir)  # fmt: skip
            except OSError as e:
                raise BrokerError(f"cannot start ZooKeeper: {e}") from e
        deadline = time.monotonic() + timeout
        while not zookeeper_ok(self.port):
            if self.proc.poll() is not None:
                raise BrokerError(
                    f"ZooKeeper exited with {self.proc.returncode}: {self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise BrokerError(f"ZooKeeper not serving after {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.05)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_sample(self) -> procstat.CpuSample:
        return procstat.cpu_sample(self.pid)

    def log_tail(self, lines: int = 8) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def close(self, keep: bool = False) -> None:
        try:
            self.stop()
        finally:
            if not keep:
                shutil.rmtree(self.dir, ignore_errors=True)


# -- the cluster ------------------------------------------------------------------------------


class Cluster:
    """Three brokers (and Strom's ZooKeeper) of one run; :meth:`close` stops them all."""

    def __init__(self, kind: str, nodes: list[BrokerProcess], zookeeper: ZooKeeper | None) -> None:
        self.kind = kind
        self.nodes = nodes
        self.zookeeper = zookeeper

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def start_all(self, timeout: float) -> None:
        """Start every node together (each waits for its ZooKeeper or quorum, not for the
        others) and return once all are registered."""
        for n in self.nodes:
            n.start()
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> float:
        """Every node serves Metadata and Metadata lists all of them; seconds it took."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        for n in self.nodes:
            n.wait_ready(max(1.0, deadline - time.monotonic()))
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while True:
            self.check_alive()
            try:
                md = admin.list_topics(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
                if len(md.brokers) == len(self.nodes):
                    return time.monotonic() - t0
            except Exception:  # KafkaException while brokers register
                pass
            if time.monotonic() > deadline:
                raise BrokerError(f"{self.kind} cluster: not all {len(self.nodes)} brokers "
                                  f"registered after {timeout:.0f} s")  # fmt: skip
            time.sleep(0.1)

    def check_alive(self) -> None:
        for n in self.nodes:
            if n.proc is None or n.proc.poll() is not None:
                code = None if n.proc is None else n.proc.returncode
                raise BrokerError(f"{n.spec.label} exited with {code}: {n.log_tail(5)}")
        if self.zookeeper is not None and not self.zookeeper.running():
            raise BrokerError(f"ZooKeeper exited: {self.zookeeper.log_tail(5)}")

    def cpu_samples(self) -> list[procstat.CpuSample]:
        """One sample per broker (ZooKeeper is sampled apart: :meth:`zookeeper_sample`)."""
        return [n.cpu_sample() for n in self.nodes]

    def zookeeper_sample(self) -> procstat.CpuSample | None:
        return self.zookeeper.cpu_sample() if self.zookeeper is not None else None

    def peak_rss_bytes(self) -> int:
        """Peak RSS of the brokers, added up (ZooKeeper not included)."""
        return sum(n.peak_rss_bytes() for n in self.nodes)

    def log_tails(self, lines: int = 6) -> str:
        parts = [f"{n.spec.label}:\n{n.log_tail(lines)}" for n in self.nodes]
        if self.zookeeper is not None:
            parts.append(f"ZooKeeper:\n{self.zookeeper.log_tail(lines)}")
        return "\n".join(parts)

    def close(self, keep: bool = False) -> None:
        """Stop the brokers, then ZooKeeper; delete the storage unless ``keep`` (see
        BrokerProcess.close).

        Strom's brokers stop one after another: each moves its leaderships away first, which
        takes a fraction of a second while a controller is up, but up to the ZooKeeper session
        timeout (18 s) when the controller is stopping at the same moment. Kafka's nodes stop
        together: a KRaft node stopped after the others would wait for a quorum that is gone.
        """
        live = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        if self.kind == "strom":
            for n in live:
                n.stop(STOP_TIMEOUT)
        else:
            for n in live:
                with contextlib.suppress(ProcessLookupError):
                    n.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            deadline = time.monotonic() + STOP_TIMEOUT
            for n in live:
                try:
                    n.proc.wait(max(0.1, deadline - time.monotonic()))  # type: ignore[union-attr]
                except subprocess.TimeoutExpired:
                    n.kill9()
        try:
            for n in self.nodes:
                n.close(keep=keep)  # exited already: deletes the data and syncs
        finally:
            if self.zookeeper is not None:
                self.zookeeper.close(keep=keep)


def _node_spec(
    spec: BrokerSpec, node_id: int, command: Command
) -> BrokerSpec:
    return dataclasses.replace(spec, label=f"{spec.label}-{node_id}", command=command, prepare=None)


def start_strom(spec: BrokerSpec, workdir: Path, timeout: float) -> Cluster:
    """ZooKeeper, then three Strom brokers started together; returns once all are registered."""
    zk = ZooKeeper(workdir)
    cluster = Cluster("strom", [], zk)
    try:
        zk.start(timeout)
        cluster.nodes = [
            BrokerProcess(_node_spec(spec, i, strom_node_command(spec, i, zk.port)), workdir)
            for i in range(1, SIZE + 1)
        ]
        cluster.start_all(timeout)
    except BaseException:
        cluster.close(keep=True)
        raise
    return cluster


def start_kafka(spec: BrokerSpec, workdir: Path, timeout: float) -> Cluster:
    """Three combined KRaft nodes: configs written, storage formatted (side by side, one JVM
    each), nodes started together; returns once all are registered."""
    dist = load_dist()
    try:
        libs = Path(dist.ensure_libs())
        java = str(dist.java_bin())
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        raise BrokerError(f"Kafka peer unavailable: {e}") from e
    env = {**os.environ, **spec.env}

    def command(port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        return broker_command(java, libs, data_dir / "server.properties")  # PLAINTEXT only

    cluster = Cluster("kafka", [], None)
    try:
        cluster.nodes = [
            BrokerProcess(_node_spec(spec, i, command), workdir) for i in range(1, SIZE + 1)
        ]
        controllers = [free_port() for _ in cluster.nodes]
        voters = initial_controllers(controllers, [directory_id() for _ in cluster.nodes])
        cid = cluster_id()
        formats = []
        for i, n in enumerate(cluster.nodes, start=1):
            config = n.data_dir / "server.properties"
            settings = kafka_node_settings(i, n.port, controllers, n.data_dir / "logs")
            config.write_text(properties_text(settings))
            formats.append(subprocess.Popen(
                kafka_format_command(java, libs, config, cid, voters), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))  # fmt: skip
        try:
            for f in formats:
                try:
                    out, _ = f.communicate(timeout=FORMAT_TIMEOUT)
                except subprocess.TimeoutExpired:
                    raise BrokerError(
                        f"kafka storage format took over {FORMAT_TIMEOUT:.0f} s"
                    ) from None
                if f.returncode != 0:
                    raise BrokerError(f"kafka storage format failed:\n{out}")
        finally:  # a failed or slow format: the others are not left running
            for f in formats:
                if f.poll() is None:
                    f.kill()
                    f.wait(10)
        cluster.start_all(timeout)
    except BaseException:
        cluster.close(keep=True)
        raise
    return cluster


def start(spec: BrokerSpec, workdir: Path, timeout: float) -> Cluster:
    """A fresh three-broker cluster of ``spec``'s kind (Strom or Kafka)."""
    if spec.kind == "strom":
        return start_strom(spec, workdir, timeout)
    if spec.kind == "kafka":
        return start_kafka(spec, workdir, timeout)
    raise BrokerError(f"no cluster of {spec.kind}")
