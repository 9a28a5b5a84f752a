"""Three-node clusters for the cluster scenarios: Strom's and Kafka's as KRaft nodes, and Strom's
on a ZooKeeper for ``cluster-3-zk``.

A :class:`Cluster` is three :class:`bench.brokers.BrokerProcess` (each with its own port, fresh
data directory, CPU and RSS readings) plus, for Strom on ZooKeeper, the ZooKeeper server they
share.

- **Strom, KRaft** (the default): three combined nodes (``process.roles=broker,controller``) on
  a static quorum: ``controller.quorum.voters`` lists the three CONTROLLER listeners (one free
  port of 127.0.0.1 per node), ``controller.listener.names=CONTROLLER``, each node's clients'
  listener and CONTROLLER listener in ``listeners``, and the replication defaults of
  :data:`REPLICATION`, all as ``--override`` after the run's usual command line. Before the
  first start each node's storage is formatted with the same new cluster id by ``strom storage
  format`` (the three side by side), from a properties file holding what the node's command
  line sets (:func:`format_properties`).
- **Strom, ZooKeeper**: Debian's ZooKeeper package (``make system-deps``) started standalone on
  a free port of 127.0.0.1 with the zoo.cfg of docs/clusters.md, then three ``strom broker``
  processes with the run's usual command line plus ``broker.id``, ``zookeeper.connect``
  (chroot ``/strom``) and the replication defaults of :data:`REPLICATION`.
- **Kafka 4.4**: three combined nodes (``process.roles=broker,controller``) with the settings of
  the single-node peer (bench/kafka_peer.py: Kafka's shipped server.properties), except that the
  internal topics get Kafka's own defaults for a cluster (3 replicas, min ISR 2) instead of the
  sample file's single-node 1, and the quorum is the three nodes: each node's storage is
  formatted with the same cluster id and ``--initial-controllers`` naming all three voters
  (KIP-853's dynamic quorum, as Kafka's operations guide provisions one), and every node finds
  the quorum through ``controller.quorum.bootstrap.servers``.

Every process is stopped by its PID (SIGTERM, SIGKILL after 30 s): the brokers (Strom's on
ZooKeeper one after another, KRaft nodes together, see :meth:`Cluster.close`), then ZooKeeper.

The quorum's leader (the active controller) is read the same way on both KRaft clusters:
DescribeQuorum v0 on each live node's CONTROLLER listener, which only the leader answers
without an error (:func:`describe_quorum`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
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
    """The ``--override`` values that make one Strom broker a member of the ZooKeeper cluster."""
    settings = {
        "broker.id": str(node_id),
        "zookeeper.connect": f"{HOST}:{zk_port}{ZK_CHROOT}",
        **REPLICATION,
    }
    return [f"{k}={v}" for k, v in settings.items()]


def static_voters(controller_ports: Sequence[int]) -> str:
    """``controller.quorum.voters``: ``id@host:port`` per node, node ids counting from 1."""
    return ",".join(f"{i}@{HOST}:{p}" for i, p in enumerate(controller_ports, start=1))


def strom_kraft_settings(
    node_id: int, port: int, controller_ports: Sequence[int]
) -> dict[str, str]:
    """What makes one Strom node (``node_id``, clients on ``port``) a combined KRaft node of the
    static quorum of all ``controller_ports``; its log dir is the run's (bench/brokers.py)."""
    controller = controller_ports[node_id - 1]
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": static_voters(controller_ports),
        **REPLICATION,
    }


def strom_kraft_overrides(node_id: int, port: int, controller_ports: Sequence[int]) -> list[str]:
    """:func:`strom_kraft_settings` as ``--override`` values."""
    return [f"{k}={v}" for k, v in strom_kraft_settings(node_id, port, controller_ports).items()]


@dataclasses.dataclass(frozen=True)
class StromNodeCommand:
    """A cluster node's argv: the run's Strom command line (its --strom-override and
    --strom-config included) followed by the cluster's overrides for this node (a later
    ``--override`` of a key wins, so ``listeners`` gains the CONTROLLER listener)."""

    spec: BrokerSpec
    node_id: int
    zk_port: int | None = None  # ZooKeeper mode; None: KRaft
    controller_ports: tuple[int, ...] = ()  # KRaft mode

    def __call__(self, port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        argv = self.spec.command(port, data_dir, tls)
        if self.zk_port is not None:
            items = strom_node_overrides(self.node_id, self.zk_port)
        else:
            items = strom_kraft_overrides(self.node_id, port, self.controller_ports)
        for item in items:
            argv += ["--override", item]
        return argv


def strom_node_command(spec: BrokerSpec, node_id: int, zk_port: int) -> Command:
    """Node ``node_id``'s argv in a ZooKeeper cluster (see :class:`StromNodeCommand`)."""
    return StromNodeCommand(spec, node_id, zk_port=zk_port)


def strom_kraft_command(spec: BrokerSpec, node_id: int, controller_ports: Sequence[int]) -> Command:
    """Node ``node_id``'s argv in a KRaft cluster (see :class:`StromNodeCommand`)."""
    return StromNodeCommand(spec, node_id, controller_ports=tuple(controller_ports))


def _read_text(path: str) -> str:
    return Path(path).read_text()


def format_properties(argv: Sequence[str], read: Callable[[str], str] = _read_text) -> str:
    """The properties ``strom storage format`` reads for a node started with ``argv``: the text
    of its ``--config`` file (``read`` gives it), then every ``--override`` as a line of its own.
    Properties files let a later line of a key win, as a later ``--override`` does."""
    parts: list[str] = []
    for flag, value in itertools.pairwise(argv):
        if flag in ("--config", "-c"):
            parts.append(read(value).rstrip("\n") + "\n")
        elif flag == "--override":
            parts.append(value + "\n")
    return "".join(parts)


def strom_format_command(exe: str, config: Path, cid: str) -> list[str]:
    """``strom storage format`` of one node (``--cluster-id=``: an id may start with '-')."""
    return [exe, "storage", "format", "-c", str(config), f"--cluster-id={cid}"]


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


# -- the quorum's leader: DescribeQuorum v0 ---------------------------------------------------

DESCRIBE_QUORUM = 55  # api key; v0 is flexible (compact strings and arrays, tagged fields)
METADATA_TOPIC = "__cluster_metadata"
CLIENT_ID = b"strom-bench"


@dataclasses.dataclass(frozen=True)
class QuorumAnswer:
    """What a controller said of the metadata partition: an error code (0: it leads) and the
    leader it names (-1: none known)."""

    error: int
    leader_id: int
    leader_epoch: int


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = _read_uvarint(buf, pos)  # tag
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos


def describe_quorum_request(correlation: int) -> bytes:
    """A size-prefixed DescribeQuorum v0 request for partition 0 of the metadata topic
    (request header v2: api key, version, correlation id, client id, no tags)."""
    header = struct.pack(">hhih", DESCRIBE_QUORUM, 0, correlation, len(CLIENT_ID)) + CLIENT_ID
    header += _uvarint(0)
    topic = METADATA_TOPIC.encode()
    body = (_uvarint(2) + _uvarint(len(topic) + 1) + topic  # one topic
            + _uvarint(2) + struct.pack(">i", 0) + _uvarint(0)  # one partition, its tags
            + _uvarint(0) + _uvarint(0))  # the topic's tags, the request's  # fmt: skip
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def parse_describe_quorum(payload: bytes, correlation: int) -> QuorumAnswer:
    """A DescribeQuorum v0 response (after its size prefix) as far as the leader's epoch; the
    top-level error when there is one, else the partition's. ValueError when it is not one."""
    try:
        (got,) = struct.unpack_from(">i", payload, 0)
        if got != correlation:
            raise ValueError(f"correlation id {got}, expected {correlation}")
        pos = _skip_tags(payload, 4)  # response header v1
        (error,) = struct.unpack_from(">h", payload, pos)
        pos += 2
        topics, pos = _read_uvarint(payload, pos)
        if error or topics < 2:
            return QuorumAnswer(error or -1, -1, -1)
        name_len, pos = _read_uvarint(payload, pos)
        pos += name_len - 1
        partitions, pos = _read_uvarint(payload, pos)
        if partitions < 2:
            return QuorumAnswer(-1, -1, -1)
        _index, p_error, leader, epoch = struct.unpack_from(">ihii", payload, pos)
    except (struct.error, IndexError) as e:
        raise ValueError(f"not a DescribeQuorum v0 response: {e}") from None
    return QuorumAnswer(p_error, leader, epoch)


def describe_quorum(port: int, timeout: float = 1.0) -> QuorumAnswer | None:
    """Ask the controller listening on ``port``; None when it does not answer."""
    correlation = 7
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.sendall(describe_quorum_request(correlation))
            (size,) = struct.unpack(">i", _recv_exact(s, 4))
            return parse_describe_quorum(_recv_exact(s, size), correlation)
    except (OSError, EOFError, ValueError, struct.error):
        return None


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def leader_from(answers: Sequence[QuorumAnswer | None]) -> tuple[int, int] | None:
    """(leader id, epoch) from the answers of several controllers: the one that answered
    without an error is the leader (a follower says NOT_LEADER_OR_FOLLOWER); None: no leader."""
    for a in answers:
        if a is not None and a.error == 0 and a.leader_id >= 0:
            return a.leader_id, a.leader_epoch
    return None


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
    """Three brokers (and Strom's ZooKeeper, in that mode) of one run; :meth:`close` stops them
    all. ``controller_ports``: the KRaft nodes' CONTROLLER listeners, node i's at i - 1."""

    def __init__(
        self,
        kind: str,
        nodes: list[BrokerProcess],
        zookeeper: ZooKeeper | None,
        controller_ports: Sequence[int] = (),
    ) -> None:
        self.kind = kind
        self.nodes = nodes
        self.zookeeper = zookeeper
        self.controller_ports = list(controller_ports)

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

    def running(self) -> list[BrokerProcess]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def quorum_leader(self, timeout: float = 1.0) -> tuple[int, int] | None:
        """(node id, epoch) of the KRaft quorum's leader as the running nodes' controllers
        answer DescribeQuorum (:func:`describe_quorum`); None while none leads."""
        if not self.controller_ports:
            raise BrokerError(f"{self.kind} cluster: no KRaft quorum")
        answers = [describe_quorum(self.controller_ports[self.nodes.index(n)], timeout)
                   for n in self.running()]  # fmt: skip
        return leader_from(answers)

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

        Strom's brokers on ZooKeeper stop one after another: each moves its leaderships away
        first, which takes a fraction of a second while a controller is up, but up to the
        ZooKeeper session timeout (18 s) when the controller is stopping at the same moment.
        KRaft nodes (Kafka's, Strom's) stop together: a node stopped after the others would wait
        for a quorum that is gone.
        """
        live = self.running()
        if self.zookeeper is not None:
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


def start_strom_zookeeper(spec: BrokerSpec, workdir: Path, timeout: float) -> Cluster:
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


def _run_formats(commands: Sequence[list[str]], env: dict[str, str], tool: str) -> None:
    """Run the storage formats side by side; BrokerError when one fails or is slow."""
    formats = [
        subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env)
        for cmd in commands
    ]
    try:
        for f in formats:
            try:
                out, _ = f.communicate(timeout=FORMAT_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise BrokerError(f"{tool} took over {FORMAT_TIMEOUT:.0f} s") from None
            if f.returncode != 0:
                raise BrokerError(f"{tool} failed:\n{out}")
    finally:  # a failed or slow format: the others are not left running
        for f in formats:
            if f.poll() is None:
                f.kill()
                f.wait(10)


def start_strom(spec: BrokerSpec, workdir: Path, timeout: float) -> Cluster:
    """Three combined Strom KRaft nodes: storage formatted with one cluster id (side by side),
    nodes started together; returns once all are registered."""
    cluster = Cluster("strom", [], None)
    try:
        controllers = [free_port() for _ in range(SIZE)]
        cluster.controller_ports = controllers
        cluster.nodes = [
            BrokerProcess(_node_spec(spec, i, strom_kraft_command(spec, i, controllers)), workdir)
            for i in range(1, SIZE + 1)
        ]
        cid = cluster_id()
        commands = []
        for n in cluster.nodes:
            argv = n.spec.command(n.port, n.data_dir)
            config = n.data_dir / "format.properties"
            config.write_text(format_properties(argv))
            commands.append(strom_format_command(argv[0], config, cid))
        _run_formats(commands, {**os.environ, **spec.env}, "strom storage format")
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
        cluster.controller_ports = controllers
        voters = initial_controllers(controllers, [directory_id() for _ in cluster.nodes])
        cid = cluster_id()
        commands = []
        for i, n in enumerate(cluster.nodes, start=1):
            config = n.data_dir / "server.properties"
            settings = kafka_node_settings(i, n.port, controllers, n.data_dir / "logs")
            config.write_text(properties_text(settings))
            commands.append(kafka_format_command(java, libs, config, cid, voters))
        _run_formats(commands, env, "kafka storage format")
        cluster.start_all(timeout)
    except BaseException:
        cluster.close(keep=True)
        raise
    return cluster


def start(spec: BrokerSpec, workdir: Path, timeout: float, zookeeper: bool = False) -> Cluster:
    """A fresh three-node cluster of ``spec``'s kind: KRaft nodes, or for Strom with
    ``zookeeper`` three brokers on a private ZooKeeper (Kafka 4.4 has no ZooKeeper mode)."""
    if spec.kind == "strom":
        if zookeeper:
            return start_strom_zookeeper(spec, workdir, timeout)
        return start_strom(spec, workdir, timeout)
    if spec.kind == "kafka" and not zookeeper:
        return start_kafka(spec, workdir, timeout)
    raise BrokerError(f"no {'ZooKeeper ' if zookeeper else ''}cluster of {spec.kind}")
