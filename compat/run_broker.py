"""Start throwaway brokers, run a command against them, stop them by their PIDs.

Used by `make compat-java` (Strom), `make compat-kafka` (Apache Kafka 4.4 from Maven Central's
jars), their `-cluster` variants, and tests/integration/java (which imports `Deployment`), so the
same Java suite runs against both. Standard library only.

    python compat/run_broker.py strom --strom .venv/bin/strom -- mvn test -Dbootstrap={bootstrap}
    python compat/run_broker.py kafka --kafka-libs ~/.cache/.../libs -- mvn test -Dbootstrap={bootstrap}
    python compat/run_broker.py strom-cluster -- ...   # 3 Strom KRaft broker+controller nodes
    python compat/run_broker.py strom-zk-cluster -- ...   # private ZooKeeper + 3 Strom brokers
    python compat/run_broker.py kafka-cluster --kafka-libs ... -- ...   # 3 KRaft broker+controller nodes

``{bootstrap}`` in the command is replaced by the brokers' ``127.0.0.1:<port>`` list (comma
separated); the command also gets it as ``$BOOTSTRAP``. The exit code is the command's. The brokers'
logs are printed (tail) when the command fails, and the temp directory is removed afterwards unless
``--keep`` is given or the command failed.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
KINDS = ("strom", "kafka", "strom-cluster", "strom-zk-cluster", "kafka-cluster")
CLUSTER_SIZE = 3
# Overrides every broker gets: the suite creates its own topics and wants groups to form at once.
COMMON = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"}
# Clusters: a leader moved by a test stays where it is until the test elects the preferred one
# (Kafka's default, true, would move it back after leader.imbalance.check.interval.seconds).
CLUSTER_COMMON = {"auto.leader.rebalance.enable": "false"}
# kafka-server-start.sh's heap and kafka-run-class.sh's GC flags: compat/kafka_dist.py, shared
# with the tools tests and the benchmark (loaded by path: this file runs as a script and is also
# loaded by path from tests/integration/java).
_spec = importlib.util.spec_from_file_location("compat_kafka_dist",
                                               Path(__file__).resolve().with_name("kafka_dist.py"))
assert _spec is not None and _spec.loader is not None
kafka_dist = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kafka_dist)
_spec = importlib.util.spec_from_file_location("compat_ports",
                                               Path(__file__).resolve().with_name("ports.py"))
assert _spec is not None and _spec.loader is not None
ports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ports)
KAFKA_GC = kafka_dist.KAFKA_GC
KAFKA_HEAP = kafka_dist.KAFKA_HEAP
KAFKA_CLUSTER_HEAP = ["-Xmx512m", "-Xms512m"]  # three JVMs on a small machine
ZK_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's zookeeper package (make system-deps)
ZK_CONF_DIR = Path("/etc/zookeeper/conf")
# setpriv execs a child with "SIGTERM me when my parent dies", so a killed run leaves no broker.
_SETPRIV = shutil.which("setpriv")
_DIE_WITH_PARENT = [_SETPRIV, "--pdeathsig", "TERM", "--"] if _SETPRIV else []


class StartError(RuntimeError):
    """A broker (or ZooKeeper) did not come up; the message carries its log tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, never handed out twice by this
    process nor by another pytest-xdist worker (compat/ports.py)."""
    return int(ports.free_port(HOST))


def api_versions_ok(port: int, host: str = HOST) -> bool:
    """True when the broker answers ApiVersions v0 with error code 0: the readiness probe."""
    client_id = b"run_broker"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=2.0) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _read_exact(s, 4)
            payload = _read_exact(s, struct.unpack(">i", head)[0])
    except (OSError, EOFError, struct.error):
        return False
    correlation, error = struct.unpack(">ih", payload[:6])
    return correlation == 1 and error == 0


def zookeeper_ok(port: int, host: str = HOST) -> bool:
    """ZooKeeper's `ruok` four-letter word answered `imok`."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def _read_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def java_bin() -> str:
    try:
        return kafka_dist.java_bin()
    except RuntimeError as e:
        raise StartError(f"run_broker: {e}") from None


def tail(log: Path, lines: int = 60) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class Process:
    """One server process (a broker or ZooKeeper) logging to `<work>/<name>.log`."""

    def __init__(self, name: str, cmd: list[str], port: int, work: Path, probe=api_versions_ok,
                 host: str = HOST):
        self.name = name
        self.cmd = cmd
        self.port = port
        self.host = host
        self.work = work
        self.probe = probe
        self.log = work / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.terminated = False

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([*_DIE_WITH_PARENT, *self.cmd], stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.work)  # fmt: skip

    def wait_ready(self, deadline: float) -> None:
        """Poll the probe until it answers; fail at once if the process dies."""
        assert self.proc is not None
        while not self.probe(self.port, self.host):
            if self.proc.poll() is not None:
                raise StartError(f"run_broker: {self.name} exited with {self.proc.returncode}\n"
                                 f"{tail(self.log)}")
            if time.monotonic() > deadline:
                raise StartError(f"run_broker: {self.name} not serving after {START_TIMEOUT}s\n"
                                 f"{tail(self.log)}")
            time.sleep(0.2)  # poll interval, not synchronisation

    def terminate(self) -> None:
        """SIGTERM by PID, once (a second one may cut a clean shutdown short)."""
        if self.proc is not None and self.proc.poll() is None and not self.terminated:
            self.terminated = True
            os.kill(self.proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM by PID, then SIGKILL if it does not exit in time."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(STOP_TIMEOUT)


class Deployment:
    """A throwaway single broker or 3-broker cluster in a temp dir; a context manager.

    `kind` is one of KINDS. `strom` is the `strom` console script, `kafka_libs` the directory of
    Kafka's broker jars. Inside the `with`, `bootstrap` lists every broker. Kafka node i may
    listen on `hosts[i]` and run through the command `prefixes[i]` (tests/jepsen: each node in
    a network namespace of its own, `ip netns exec NS`); else all are on 127.0.0.1.
    """

    def __init__(self, kind: str, *, strom: str | Path | None = None,
                 kafka_libs: Path | None = None, overrides: dict[str, str] | None = None,
                 keep: bool = False, hosts: list[str] | None = None,
                 prefixes: list[list[str]] | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        if kind.startswith("kafka") and kafka_libs is None:
            raise ValueError("kafka needs kafka_libs")
        self.kind = kind
        self.strom = str(Path(strom or Path(sys.executable).with_name("strom")).resolve())
        self.kafka_libs = Path(kafka_libs).expanduser() if kafka_libs else None
        self.overrides = {**COMMON, **(CLUSTER_COMMON if self.cluster else {}), **(overrides or {})}
        self.keep = keep
        self.hosts = hosts
        self.prefixes = prefixes
        self.failed = False
        self.work = Path(tempfile.mkdtemp(prefix=f"compat-{kind}-"))
        self.servers: list[Process] = []  # ZooKeeper first, then the brokers
        self.brokers: list[Process] = []
        self._controller_ports: list[int] = []  # strom-cluster: each node's CONTROLLER port
        self._id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    @property
    def cluster(self) -> bool:
        return self.kind.endswith("-cluster")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self.brokers)

    def __enter__(self) -> Deployment:
        try:
            self.start()
        except BaseException:
            self.failed = True
            self.stop()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.failed = True
        self.stop()

    def start(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        if self.kind == "strom-zk-cluster":
            zk = self._zookeeper()
            self.servers.append(zk)
            zk.start()
            zk.wait_ready(deadline)
        n = CLUSTER_SIZE if self.cluster else 1
        if self.kind.startswith("strom"):
            self._controller_ports = [free_port() for _ in range(n)]
            self.brokers = [self._strom(i, n) for i in range(1, n + 1)]
        else:
            self.brokers = self._kafka(n)
        self.servers += self.brokers
        for b in self.brokers:  # together: each waits for ZooKeeper or the quorum, not the others
            b.start()
        for b in self.brokers:
            b.wait_ready(deadline)

    def stop(self) -> None:
        # All brokers at once (a KRaft node stopped after the others would wait for a quorum
        # that is gone), then ZooKeeper.
        for b in self.brokers:
            b.terminate()
        for s in reversed(self.servers):
            s.stop()
        if self.keep or self.failed:
            print(f"run_broker: kept {self.work}", flush=True)
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def log_tails(self, lines: int = 60) -> str:
        return "\n".join(f"--- {s.name} ({s.log}):\n{tail(s.log, lines)}" for s in self.servers)

    # ----------------------------------------------------------------------------- strom

    def _zookeeper(self) -> Process:
        if not ZK_JAR.exists():
            raise StartError(f"{ZK_JAR} is missing: install Debian's zookeeper package "
                             "(make system-deps)")
        port = free_port()
        data = self.work / "zookeeper"
        data.mkdir()
        cfg = self.work / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={data}\nclientPort={port}\n"
                       f"clientPortAddress={HOST}\nadmin.enableServer=false\n"
                       "4lw.commands.whitelist=ruok\n")
        cmd = [java_bin(), "-Xmx256m", "-cp", f"{ZK_CONF_DIR}:{ZK_JAR}",  # the manifest names the rest
               "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)]  # fmt: skip
        return Process("zookeeper", cmd, port, self.work, probe=zookeeper_ok)

    def _strom(self, node: int, n: int) -> Process:
        port = free_port()
        name = f"strom-{node}" if n > 1 else "broker"
        settings = {"listeners": f"PLAINTEXT://{HOST}:{port}",
                    "log.dirs": str(self.work / name / "data"),
                    "metrics.listener": f"http://{HOST}:0"}
        if n > 1 and self.kind == "strom-zk-cluster":
            settings["broker.id"] = str(node)
            settings["zookeeper.connect"] = f"{HOST}:{self.servers[0].port}/strom"
        elif n > 1:  # combined KRaft nodes on one static quorum, formatted first
            ports = self._controller_ports
            settings.update({
                "process.roles": "broker,controller", "node.id": str(node),
                "controller.quorum.voters": ",".join(f"{i}@{HOST}:{p}"
                                                     for i, p in enumerate(ports, 1)),
                "controller.listener.names": "CONTROLLER",
                "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{ports[node - 1]}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"})
        settings.update(self.overrides)
        (self.work / name).mkdir()
        if n > 1 and self.kind == "strom-cluster":
            self._format_strom(name, settings)
        cmd = [self.strom, "broker"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return Process(name, cmd, port, self.work / name)

    def _format_strom(self, name: str, settings: dict[str, str]) -> None:
        """`strom storage format` of a KRaft node's log dir, with the cluster's one id."""
        props = self.work / name / "format.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        done = subprocess.run([self.strom, "storage", "format", "-c", str(props), "-t",
                               self._cluster_id()], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise StartError(f"strom storage format failed: {done.stderr.strip()}")

    def _cluster_id(self) -> str:
        return self._id

    # ----------------------------------------------------------------------------- kafka

    def _kafka(self, n: int) -> list[Process]:
        """KRaft nodes, each broker and controller; formatted with Kafka's storage tool."""
        java = java_bin()
        classpath = f"{self.kafka_libs}/*"
        ports = [free_port() for _ in range(n)]
        controllers = [free_port() for _ in range(n)]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        heap = KAFKA_CLUSTER_HEAP if n > 1 else KAFKA_HEAP
        hosts = self.hosts or [HOST] * n
        rf = str(min(n, 3))
        procs: list[Process] = []
        formats: list[subprocess.Popen[str]] = []
        for i in range(n):
            node = i + 1
            name = f"kafka-{node}" if n > 1 else "broker"
            work = self.work / name
            work.mkdir()
            host = hosts[i]
            props = {
                "process.roles": "broker,controller",
                "node.id": str(node),
                "listeners": f"PLAINTEXT://{host}:{ports[i]},CONTROLLER://{host}:{controllers[i]}",
                "advertised.listeners": f"PLAINTEXT://{host}:{ports[i]}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "log.dirs": str(work / "data"),
                "num.partitions": "1",
                "offsets.topic.replication.factor": rf,
                "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": "1",
                "share.coordinator.state.topic.replication.factor": rf,
                "share.coordinator.state.topic.min.isr": "1",
                **self.overrides,
            }
            if n == 1:
                props["controller.quorum.bootstrap.servers"] = f"{HOST}:{controllers[0]}"
                fmt_mode = ["--standalone"]
            else:  # a static quorum: every node knows the voters, format needs no flag for them
                props["controller.quorum.voters"] = ",".join(
                    f"{j + 1}@{hosts[j]}:{controllers[j]}" for j in range(n))
                fmt_mode = []
            config = work / "server.properties"
            config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            fmt = [java, "-cp", classpath, "kafka.tools.StorageTool", "format", *fmt_mode,
                   f"--cluster-id={cluster_id}", "-c", str(config)]  # fmt: skip (an id may start with -)
            formats.append(subprocess.Popen(fmt, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, text=True))  # fmt: skip
            cmd = [*(self.prefixes[i] if self.prefixes else []),
                   java, *heap, *KAFKA_GC, "-cp", classpath, "kafka.Kafka", str(config)]
            procs.append(Process(name, cmd, ports[i], work, host=host))
        for f in formats:  # the nodes' formats run side by side (a JVM start each)
            try:
                out, _ = f.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                f.kill()
                out, _ = f.communicate()
            if f.returncode != 0:
                raise StartError(f"run_broker: kafka storage format failed:\n{out}")
        return procs


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(usage=f"run_broker.py {{{','.join(KINDS)}}} [options] -- command ...")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--strom", default=str(Path(sys.executable).with_name("strom")))
    parser.add_argument("--kafka-libs", type=Path, help="directory with Kafka's broker jars")
    parser.add_argument("--override", action="append", default=[], help="key=value (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the brokers' temp directory")
    if "--" not in argv:
        parser.error("no command given after --")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    args.command = argv[split + 1 :]
    if not args.command:
        parser.error("no command given after --")
    if args.kind.startswith("kafka") and not args.kafka_libs:
        parser.error("kafka needs --kafka-libs")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in args.override)
    deployment = Deployment(args.kind, strom=args.strom, kafka_libs=args.kafka_libs,
                            overrides=overrides, keep=args.keep)  # fmt: skip
    try:
        with deployment as d:
            print(f"run_broker: {args.kind} serving on {d.bootstrap} (pids "
                  f"{', '.join(str(s.proc.pid) for s in d.servers if s.proc)})", flush=True)
            command = [part.replace("{bootstrap}", d.bootstrap) for part in args.command]
            rc = subprocess.run(command, env={**os.environ, "BOOTSTRAP": d.bootstrap}).returncode
            if rc != 0:
                d.failed = True
                print(f"run_broker: command exited {rc}; log tails:\n{d.log_tails()}", flush=True)
    except StartError as e:
        print(e, file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
