"""`strom cluster up|down|status`: a KRaft cluster of combined nodes on this host, for
developers, tests and a first look (not for production: every node is on 127.0.0.1).

``up --nodes N --dir DIR`` lays the cluster out in DIR:

- ``DIR/node-<i>/server.properties`` for node i (1..N): ``process.roles=broker,controller``,
  a PLAINTEXT listener on ``--base-port + i - 1`` and a CONTROLLER listener on
  ``--controller-base-port + i - 1`` (default: the base port + 100), every node a voter of the
  static quorum (``controller.quorum.voters``), its log dir ``DIR/node-<i>/data``, metrics on a
  port the OS picks, the internal topics replicated min(3, N) times, ``min.insync.replicas``
  min(2, N), then the ``--override`` settings;
- each node's storage formatted with the cluster's one id (the code of ``strom storage
  format``, with ``--ignore-formatted``: a stopped cluster starts again on its data);
- each node a detached ``strom broker DIR/node-<i>/server.properties`` process, its output in
  ``DIR/node-<i>/node.log``;
- ``DIR/cluster.json``: the cluster id, the nodes' ports and PIDs, the bootstrap servers.

It returns once every node answers ApiVersions and the cluster's metadata lists all N brokers
(bounded by ``--timeout``), and prints the bootstrap servers. A node that exits meanwhile: the
end of its log is printed and the others are stopped.

``down`` stops the recorded PIDs (SIGTERM, then SIGKILL after ``--timeout``; ``--kill``:
SIGKILL at once), and only those that still are ``strom broker`` processes of this DIR (their
command line names the node's server.properties: a PID the system gave to another process is
left alone). The data stays unless ``--purge``. ``status`` shows each node and the quorum's
leader (DescribeQuorum, as ``strom quorum describe`` asks it); it exits 0 only when every node
runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from strom.cli.common import (
    EXIT_ERROR,
    EXIT_UNREACHABLE,
    CliError,
    UsageError,
    err,
    handle_errors,
    out,
    parse_kv_list,
    print_table,
    warn_line,
)

app = typer.Typer(help="Start, stop and show a KRaft cluster on this host (for development).",
                  no_args_is_help=True)

HOST = "127.0.0.1"
DEFAULT_DIR = Path("strom-cluster")
DEFAULT_NODES = 3
DEFAULT_BASE_PORT = 9092
CONTROLLER_PORT_OFFSET = 100
CLUSTER_FILE = "cluster.json"
LOCK_FILE = ".cluster.lock"
PROPERTIES_FILE = "server.properties"
LOG_FILE = "node.log"
DATA_DIR = "data"
RECORD_VERSION = 1
POLL_S = 0.1  # the interval of every wait below (each is bounded by a deadline)
KILL_WAIT_S = 10.0
LOG_TAIL_LINES = 25
START_MARK = "=== strom cluster up "  # the line `up` writes into node.log at each start

# What `up` sets for each node; an --override of one of these would break the layout.
MANAGED_KEYS = frozenset({
    "process.roles", "node.id", "broker.id", "listeners", "advertised.listeners",
    "controller.listener.names", "controller.quorum.voters",
    "controller.quorum.bootstrap.servers", "log.dirs", "log.dir", "metadata.log.dir",
    "zookeeper.connect",
})


# ------------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class NodePlan:
    """Where one node listens."""

    node_id: int
    port: int  # PLAINTEXT, for clients
    controller_port: int  # CONTROLLER, for the quorum

    @property
    def broker_address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def controller_address(self) -> str:
        return f"{HOST}:{self.controller_port}"


@dataclass(frozen=True)
class ClusterPlan:
    nodes: tuple[NodePlan, ...]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.broker_address for n in self.nodes)

    @property
    def voters(self) -> str:
        return ",".join(f"{n.node_id}@{n.controller_address}" for n in self.nodes)

    def ports(self) -> list[tuple[int, str]]:
        """Every port with what it is for (for the busy-port message)."""
        out_: list[tuple[int, str]] = []
        for n in self.nodes:
            out_.append((n.port, f"node {n.node_id} PLAINTEXT"))
            out_.append((n.controller_port, f"node {n.node_id} CONTROLLER"))
        return out_


def plan_ports(nodes: int, base_port: int, controller_base_port: int | None = None) -> ClusterPlan:
    """Node i (1..nodes) on base_port + i - 1 and controller_base_port + i - 1 (default
    base_port + 100); UsageError when the ranges leave 1..65535 or overlap."""
    if nodes < 1:
        raise UsageError("--nodes must be at least 1")
    cbase = base_port + CONTROLLER_PORT_OFFSET if controller_base_port is None \
        else controller_base_port
    for name, first in (("--base-port", base_port), ("--controller-base-port", cbase)):
        if first < 1 or first + nodes - 1 > 65535:
            raise UsageError(f"{name} {first} with {nodes} nodes leaves the port range "
                             f"({first}..{first + nodes - 1} must be within 1..65535)")
    if base_port < cbase + nodes and cbase < base_port + nodes:
        raise UsageError(f"the PLAINTEXT ports {base_port}..{base_port + nodes - 1} and the "
                         f"CONTROLLER ports {cbase}..{cbase + nodes - 1} overlap: give "
                         "--controller-base-port")
    return ClusterPlan(tuple(NodePlan(i, base_port + i - 1, cbase + i - 1)
                             for i in range(1, nodes + 1)))


def check_overrides(overrides: Mapping[str, str]) -> None:
    """Refuse overrides of the settings `up` lays out itself, and text a properties file
    cannot hold."""
    managed = sorted(k for k in overrides if k in MANAGED_KEYS)
    if managed:
        raise UsageError(f"--override cannot set {', '.join(managed)}: strom cluster up sets "
                         "it for each node (see --base-port, --controller-base-port, --dir)")
    for key, value in overrides.items():
        if any(c in key for c in "=: \t\r\n\\") or key.startswith(("#", "!")):
            raise UsageError(f"invalid --override key {key!r}")
        if "\n" in value or "\r" in value or value.rstrip().endswith("\\"):
            raise UsageError(f"invalid --override value for {key}: no line breaks, and no "
                             "backslash at the end")


def node_dir(root: Path, node_id: int) -> Path:
    return root / f"node-{node_id}"


def properties_path(root: Path, node_id: int) -> Path:
    return node_dir(root, node_id) / PROPERTIES_FILE


def node_properties(plan: ClusterPlan, node: NodePlan, root: Path,
                    overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings of one node's server.properties (``root`` should be absolute)."""
    n = len(plan.nodes)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "listeners": f"PLAINTEXT://{node.broker_address},CONTROLLER://{node.controller_address}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": plan.voters,
        "log.dirs": str(node_dir(root, node.node_id) / DATA_DIR),
        # the nodes share the host: each one's metrics on a port of the OS's choosing
        "metrics.listener": f"http://{HOST}:0",
        "offsets.topic.replication.factor": str(min(3, n)),
        "transaction.state.log.replication.factor": str(min(3, n)),
        "transaction.state.log.min.isr": str(min(2, n)),
        "share.coordinator.state.topic.replication.factor": str(min(3, n)),
        "share.coordinator.state.topic.min.isr": str(min(2, n)),
        "default.replication.factor": str(min(3, n)),
        "min.insync.replicas": str(min(2, n)),
        # groups form at once, as with config/server.properties (make run)
        "group.initial.rebalance.delay.ms": "0",
    }
    props.update(overrides or {})
    return props


def render_properties(props: Mapping[str, str], header: str) -> str:
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def busy_ports(plan: ClusterPlan) -> list[tuple[int, str]]:
    """The ports of the plan something on 127.0.0.1 holds (bound as the broker binds them:
    SO_REUSEADDR, so a port in TIME_WAIT from a node just stopped counts as free)."""
    busy = []
    for port, what in plan.ports():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((HOST, port))
            except OSError:
                busy.append((port, what))
    return busy


# ---------------------------------------------------------------------------- cluster.json


@dataclass
class NodeRecord:
    node_id: int
    port: int
    controller_port: int
    pid: int | None = None

    @property
    def broker_address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def controller_address(self) -> str:
        return f"{HOST}:{self.controller_port}"


@dataclass
class ClusterRecord:
    """What DIR/cluster.json holds."""

    cluster_id: str
    nodes: list[NodeRecord]
    overrides: dict[str, str] = field(default_factory=dict)
    started_ms: int | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(n.broker_address for n in self.nodes)

    def plan(self) -> ClusterPlan:
        return ClusterPlan(tuple(NodePlan(n.node_id, n.port, n.controller_port)
                                 for n in self.nodes))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "cluster_id": self.cluster_id,
            "bootstrap_servers": self.bootstrap,
            "started_ms": self.started_ms,
            "nodes": [{"node_id": n.node_id, "pid": n.pid, "port": n.port,
                       "controller_port": n.controller_port} for n in self.nodes],
            "overrides": dict(self.overrides),
        }

    @classmethod
    def from_json(cls, data: Any) -> ClusterRecord:
        """ValueError for anything but what to_json writes."""
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
            raise ValueError(f"not a version {RECORD_VERSION} cluster file")
        cluster_id, nodes, overrides = data.get("cluster_id"), data.get("nodes"), \
            data.get("overrides", {})
        if not isinstance(cluster_id, str) or not cluster_id:
            raise ValueError("no cluster_id")
        if not isinstance(nodes, list) or not nodes:
            raise ValueError("no nodes")
        if not isinstance(overrides, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in overrides.items()):
            raise ValueError("overrides must map names to strings")
        records = []
        for node in nodes:
            if not isinstance(node, dict):
                raise ValueError("a node is not an object")
            node_id, port, cport, pid = (node.get(k) for k in
                                         ("node_id", "port", "controller_port", "pid"))
            if type(node_id) is not int or type(port) is not int or type(cport) is not int \
                    or not (pid is None or type(pid) is int):
                raise ValueError("a node's node_id, port, controller_port and pid must be "
                                 "integers")
            records.append(NodeRecord(node_id, port, cport, pid))
        if [n.node_id for n in records] != list(range(1, len(records) + 1)):
            raise ValueError("the nodes must be numbered 1..N")
        started = data.get("started_ms")
        return cls(cluster_id, records, dict(overrides),
                   started if type(started) is int else None)


def read_record(root: Path) -> ClusterRecord | None:
    """DIR/cluster.json, or None when there is none; CliError when it is unreadable."""
    path = root / CLUSTER_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read {path}: {e}") from None
    try:
        return ClusterRecord.from_json(json.loads(text))
    except ValueError as e:
        raise CliError(f"{path} is damaged ({e}): remove it, or the whole directory, and "
                       "run strom cluster up again") from None


def write_record(root: Path, record: ClusterRecord) -> None:
    """Replace DIR/cluster.json in one step (a reader sees the old file or the new one)."""
    path = root / CLUSTER_FILE
    tmp = path.with_name(f".{CLUSTER_FILE}.tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def stored_cluster_id(root: Path, node_ids: Sequence[int]) -> str | None:
    """The cluster id a node's meta.properties holds (a cluster.json removed by hand)."""
    for node_id in node_ids:
        meta = node_dir(root, node_id) / DATA_DIR / "meta.properties"
        try:
            text = meta.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            key, eq, value = line.partition("=")
            if eq and key.strip() == "cluster.id" and value.strip():
                return value.strip()
    return None


# ----------------------------------------------------------------------------- the processes


def _command_line(pid: int) -> list[str] | None:
    """A process's arguments; None when there is no such process (or it is a zombie)."""
    proc = Path("/proc")
    if proc.is_dir():
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return None
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a] or None
    try:  # no /proc (macOS): ps names the command line, one string
        done = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.split() if done.returncode == 0 and done.stdout.strip() else None


def is_node_process(pid: int | None, root: Path, node_id: int) -> bool:
    """Whether `pid` is alive and is ``strom broker`` of this node's server.properties."""
    if pid is None or pid <= 0:
        return False
    args = _command_line(pid)
    return args is not None and "broker" in args and \
        str(properties_path(root, node_id)) in args


def running_nodes(root: Path, record: ClusterRecord) -> list[NodeRecord]:
    return [n for n in record.nodes if is_node_process(n.pid, root, n.node_id)]


def broker_command(props: Path) -> list[str]:
    """``strom broker <props>`` with this Python (the `strom` console script runs the same
    function, strom.cli.main:main)."""
    return [sys.executable, "-m", "strom.cli.main", "broker", str(props)]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a node's log, from the last start `up` made on (its header line)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    all_lines = text.splitlines()
    starts = [i for i, line in enumerate(all_lines) if line.startswith(START_MARK)]
    if starts:
        all_lines = all_lines[starts[-1]:]
    return all_lines[-lines:]


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One `up` or `down` at a time in a directory."""
    with open(root / LOCK_FILE, "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise CliError(f"another strom cluster command is working on {root}") from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _resolve(directory: Path) -> Path:
    return directory.expanduser().resolve()


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def stop_nodes(root: Path, nodes: Sequence[NodeRecord], *, timeout: float, kill: bool) -> \
        list[NodeRecord]:
    """Signal the nodes' processes (those still ours), wait for them to end, SIGKILL any left
    at the deadline; returns the nodes that had to be killed that way."""
    alive = [n for n in nodes if is_node_process(n.pid, root, n.node_id)]
    for n in alive:
        assert n.pid is not None
        _signal(n.pid, signal.SIGKILL if kill else signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        time.sleep(POLL_S)  # poll interval: the processes are not our children
        alive = [n for n in alive if is_node_process(n.pid, root, n.node_id)]
    killed = list(alive)
    for n in killed:
        assert n.pid is not None
        _signal(n.pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while alive and time.monotonic() < deadline:
        time.sleep(POLL_S)
        alive = [n for n in alive if is_node_process(n.pid, root, n.node_id)]
    if alive:
        raise CliError(f"node {alive[0].node_id} (pid {alive[0].pid}) did not exit even after "
                       "SIGKILL")
    return killed


def _stop_children(procs: Mapping[int, subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    """Stop the nodes this `up` started (its children): SIGTERM, then SIGKILL."""
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + timeout
    for p in procs.values():
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(KILL_WAIT_S)


# ------------------------------------------------------------------------------------ waiting


def node_serves(node: NodePlan, timeout: float) -> bool:
    """Whether the node answers ApiVersions on its PLAINTEXT listener."""
    from strom.cli.wire import Connection

    try:
        conn = Connection(HOST, node.port, timeout)
    except (CliError, OSError):
        return False
    conn.close()
    return True


def registered_brokers(node: NodePlan, timeout: float) -> int:
    """How many brokers the node's metadata lists (-1 when it does not answer)."""
    from strom.cli.wire import METADATA, Connection

    try:
        conn = Connection(HOST, node.port, timeout)
    except (CliError, OSError):
        return -1
    try:
        meta = conn.call(METADATA, conn.version(METADATA, 1, "Metadata"), {"topics": []})
        return len(meta.brokers)
    except (CliError, OSError):
        return -1
    finally:
        conn.close()


def _wait_serving(root: Path, display: Path, plan: ClusterPlan,
                  procs: Mapping[int, subprocess.Popen[bytes]], timeout: float,
                  stopped: str) -> None:
    """Poll until every node serves and lists every broker; CliError (after printing the end
    of the node's log) when a node exits, or at the deadline. ``stopped``: what the caller
    then stops, for the message."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    deadline = time.monotonic() + timeout
    serving: set[int] = set()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("starting", total=None)
        while True:
            for node_id, p in procs.items():
                if p.poll() is not None:
                    progress.stop()
                    _print_tail(node_dir(root, node_id) / LOG_FILE,
                                node_dir(display, node_id) / LOG_FILE, node_id)
                    raise CliError(f"node {node_id} exited with code {p.returncode} while "
                                   f"starting (its log above); {stopped}")
            for node in plan.nodes:
                if node.node_id not in serving and node_serves(node, 1.0):
                    serving.add(node.node_id)
            n = len(plan.nodes)
            if len(serving) == n:
                listed = registered_brokers(plan.nodes[0], 1.0)
                if listed >= n:
                    return
                what = f"{n} nodes serve; {max(0, listed)} of {n} brokers registered"
            else:
                waiting = ", ".join(str(x.node_id) for x in plan.nodes
                                    if x.node_id not in serving)
                what = f"{len(serving)} of {n} nodes serve (waiting for node {waiting})"
            progress.update(task, description=what)
            if time.monotonic() >= deadline:
                progress.stop()
                raise CliError(f"the cluster did not come up within {timeout:g} s ({what}; "
                               f"the nodes' logs: {display}/node-*/{LOG_FILE}); {stopped}",
                               EXIT_UNREACHABLE)
            time.sleep(POLL_S)  # poll interval, not synchronisation


def _print_tail(path: Path, shown: Path, node_id: int) -> None:
    lines = log_tail(path)
    err.print(f"--- the end of node {node_id}'s log ({shown}) ---", markup=False,
              highlight=False)
    for line in lines:
        err.print(line, markup=False, highlight=False)
    err.print("---", markup=False, highlight=False)


# ------------------------------------------------------------------------------------ commands

DirOpt = Annotated[Path, typer.Option("--dir", "-d", help="The cluster's directory.")]


@app.command("up")
@handle_errors
def up(
    nodes: Annotated[int | None, typer.Option(
        "--nodes", "-n", min=1,
        help=f"How many combined (broker and controller) nodes (default {DEFAULT_NODES}, or "
             "as many as the stopped cluster in --dir has).", show_default=False)] = None,
    directory: DirOpt = DEFAULT_DIR,
    base_port: Annotated[int | None, typer.Option(
        "--base-port",
        help=f"Node i's PLAINTEXT port is this + i - 1 (default {DEFAULT_BASE_PORT}, or the "
             "stopped cluster's ports).", show_default=False)] = None,
    controller_base_port: Annotated[int | None, typer.Option(
        "--controller-base-port",
        help=f"Node i's CONTROLLER port is this + i - 1 (default the base port + "
             f"{CONTROLLER_PORT_OFFSET}).", show_default=False)] = None,
    override: Annotated[list[str] | None, typer.Option(
        "--override", help="A broker property key=value for every node (repeatable; added to "
                           "the stopped cluster's).", show_default=False)] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=1.0, help="Seconds to wait for the nodes to serve.")] = 120.0,
) -> None:
    """Start a cluster of N combined KRaft nodes on 127.0.0.1; print its bootstrap servers.

    Its data and logs go into --dir; a stopped cluster in --dir starts again on its data, and
    a cluster some of whose nodes stopped gets those started again."""
    overrides = parse_kv_list(override, "override")
    check_overrides(overrides)
    root = _resolve(directory)
    created = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CliError(f"{directory} exists and is not a directory") from None
    try:
        with _locked(root):
            _up(root, directory, nodes, base_port, controller_base_port, overrides, timeout)
    except BaseException:
        if created and [p.name for p in root.iterdir()] == [LOCK_FILE]:
            # refused before writing anything (busy ports, ...): leave no empty directory
            with contextlib.suppress(OSError):
                (root / LOCK_FILE).unlink()
                root.rmdir()
        raise


def _up(root: Path, display: Path, nodes: int | None, base_port: int | None,
        controller_base_port: int | None, overrides: dict[str, str], timeout: float) -> None:
    record = read_record(root)
    if record is not None:
        running = running_nodes(root, record)
        if running and len(running) == len(record.nodes):
            pids = ", ".join(f"node {n.node_id} pid {n.pid}" for n in running)
            raise CliError(f"{display} already has a running cluster ({pids}): strom cluster "
                           f"status --dir {display} shows it, strom cluster down --dir "
                           f"{display} stops it")
        if running:
            if (nodes is not None and nodes != len(record.nodes)) or base_port is not None \
                    or controller_base_port is not None or overrides:
                raise CliError(f"{display} has nodes running: `up` starts the stopped ones "
                               "as they were, with no --nodes, ports or --override (strom "
                               f"cluster down --dir {display} first to change them)")
            _start_stopped(root, display, record, running, timeout)
            return
        if nodes is not None and nodes != len(record.nodes):
            raise CliError(f"{display} holds a cluster of {len(record.nodes)} nodes: start it "
                           f"with --nodes {len(record.nodes)}, or remove it first (strom "
                           f"cluster down --dir {display} --purge)")
        count = len(record.nodes)
        if base_port is None and controller_base_port is None:
            plan = record.plan()
        else:
            plan = plan_ports(count, base_port if base_port is not None else
                              record.nodes[0].port, controller_base_port)
        overrides = {**record.overrides, **overrides}
        cluster_id = record.cluster_id
    else:
        count = nodes if nodes is not None else DEFAULT_NODES
        plan = plan_ports(count, base_port if base_port is not None else DEFAULT_BASE_PORT,
                          controller_base_port)
        cluster_id = stored_cluster_id(root, [n.node_id for n in plan.nodes]) or ""
        if not cluster_id:
            from strom.cli.storage import random_directory_id

            cluster_id = random_directory_id()

    busy = busy_ports(plan)
    if busy:
        what = ", ".join(f"{port} ({name})" for port, name in busy)
        raise CliError(f"port{'s' if len(busy) > 1 else ''} in use on {HOST}: {what}; pick "
                       "free ones with --base-port / --controller-base-port")

    _write_and_format(root, plan, cluster_id, overrides)

    record = ClusterRecord(cluster_id, [NodeRecord(n.node_id, n.port, n.controller_port)
                                        for n in plan.nodes], overrides,
                           int(time.time() * 1000))
    _start_nodes(root, display, record, record.nodes, timeout, "the nodes were stopped")
    out.print(f"Strom cluster {cluster_id}: {count} node{'s' if count > 1 else ''} in "
              f"{display} (logs: {display}/node-*/{LOG_FILE})", markup=False, highlight=False)
    out.print(f"bootstrap servers: {plan.bootstrap}", markup=False, highlight=False)


def _start_stopped(root: Path, display: Path, record: ClusterRecord,
                   running: Sequence[NodeRecord], timeout: float) -> None:
    """A cluster some of whose nodes died or were killed: start those again, on their data
    and with the properties they had, and wait until the whole cluster serves."""
    up_ids = {n.node_id for n in running}
    stopped = [n for n in record.nodes if n.node_id not in up_ids]
    plan = record.plan()
    busy = busy_ports(ClusterPlan(tuple(n for n in plan.nodes if n.node_id not in up_ids)))
    if busy:
        what = ", ".join(f"{port} ({name})" for port, name in busy)
        raise CliError(f"port{'s' if len(busy) > 1 else ''} of the stopped nodes in use on "
                       f"{HOST}: {what}")
    _start_nodes(root, display, record, stopped, timeout,
                 "the nodes this `up` started were stopped, the others left running")
    names = ", ".join(str(n.node_id) for n in stopped)
    out.print(f"Strom cluster {record.cluster_id}: started node{'s' if len(stopped) > 1 else ''}"
              f" {names} again in {display} ({len(running)} kept running)", markup=False,
              highlight=False)
    out.print(f"bootstrap servers: {plan.bootstrap}", markup=False, highlight=False)


def _start_nodes(root: Path, display: Path, record: ClusterRecord,
                 nodes: Sequence[NodeRecord], timeout: float, stopped: str) -> None:
    """Start ``nodes`` of ``record`` (their PIDs recorded before waiting, so `down` can stop
    what runs) and wait until the whole cluster serves; on failure stop them again and record
    them stopped. ``stopped``: what the failure message says was stopped."""
    procs: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for n in nodes:
            procs[n.node_id] = _start_node(root, n.node_id)
            n.pid = procs[n.node_id].pid
        write_record(root, record)
        _wait_serving(root, display, record.plan(), procs, timeout, stopped)
    except BaseException:
        _stop_children(procs)
        for n in nodes:
            n.pid = None
        with contextlib.suppress(OSError):
            write_record(root, record)
        raise


def _write_and_format(root: Path, plan: ClusterPlan, cluster_id: str,
                      overrides: Mapping[str, str]) -> None:
    """Each node's server.properties, and its storage formatted (once) with the cluster id."""
    from strom.cli.storage import FormatOptions, format_storage

    header = ("Written by strom cluster up (rewritten at every start of the cluster).\n"
              "One node by hand: strom broker <this file>")
    for node in plan.nodes:
        path = properties_path(root, node.node_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_properties(node_properties(plan, node, root, overrides), header),
                        encoding="utf-8")
        try:
            format_storage(FormatOptions(config=path, cluster_id=cluster_id,
                                         ignore_formatted=True))
        except CliError as e:
            raise CliError(f"node {node.node_id}: {e.message}", e.exit_code) from None


def _start_node(root: Path, node_id: int) -> subprocess.Popen[bytes]:
    """``strom broker`` for the node, detached (its own session: a Ctrl-C in this terminal
    later does not reach it), its output appended to node.log."""
    cmd = broker_command(properties_path(root, node_id))
    with open(node_dir(root, node_id) / LOG_FILE, "ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"{START_MARK}{stamp}: {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(cmd, cwd=node_dir(root, node_id), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@app.command("down")
@handle_errors
def down(
    directory: DirOpt = DEFAULT_DIR,
    kill: Annotated[bool, typer.Option(
        "--kill", help="SIGKILL at once instead of SIGTERM (no clean shutdown).")] = False,
    purge: Annotated[bool, typer.Option(
        "--purge", help="Then delete the nodes' directories and cluster.json (the data).")]
    = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.0, help="Seconds to wait after SIGTERM before SIGKILL.")] = 30.0,
) -> None:
    """Stop the cluster in --dir (the data stays unless --purge)."""
    root = _resolve(directory)
    record = read_record(root) if root.is_dir() else None
    if record is None:
        raise CliError(f"no cluster in {directory} (no {CLUSTER_FILE}): strom cluster up "
                       f"--dir {directory} starts one")
    with _locked(root):
        running = running_nodes(root, record)
        killed = stop_nodes(root, running, timeout=0.0 if kill else timeout, kill=kill)
        for n in killed:
            if not kill:
                warn_line(f"node {n.node_id} (pid {n.pid}) did not stop within {timeout:g} s "
                          "of SIGTERM: killed")
        for n in record.nodes:
            n.pid = None
        write_record(root, record)
        stopped = {n.node_id for n in running}
        for n in record.nodes:
            state = "stopped" if n.node_id in stopped else "was not running"
            out.print(f"node {n.node_id}: {state}", markup=False, highlight=False)
        if purge:
            _purge(root, record)
            out.print(f"deleted the cluster's files in {directory}", markup=False,
                      highlight=False)
        else:
            out.print(f"data kept in {directory}: strom cluster up --dir {directory} starts "
                      "the cluster again", markup=False, highlight=False)


def _purge(root: Path, record: ClusterRecord) -> None:
    """Delete what `up` made (not the whole directory: --dir may hold other files)."""
    import shutil

    for n in record.nodes:
        shutil.rmtree(node_dir(root, n.node_id), ignore_errors=True)
    for name in (CLUSTER_FILE, LOCK_FILE):
        with contextlib.suppress(FileNotFoundError):
            (root / name).unlink()
    with contextlib.suppress(OSError):
        root.rmdir()  # only when nothing else is in it


@app.command("status")
@handle_errors
def status(
    directory: DirOpt = DEFAULT_DIR,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.1, help="Seconds to wait for the quorum's answer.")] = 5.0,
) -> None:
    """Show each node of the cluster in --dir, whether it runs, and the quorum's leader.

    The exit code is 0 only when every node runs."""
    root = _resolve(directory)
    record = read_record(root) if root.is_dir() else None
    if record is None:
        raise CliError(f"no cluster in {directory} (no {CLUSTER_FILE}): strom cluster up "
                       f"--dir {directory} starts one")
    running = {n.node_id for n in running_nodes(root, record)}
    leader_id, quorum_note = -1, ""
    if running:
        from strom.cli.quorum import fetch_view

        controllers = ",".join(n.controller_address for n in record.nodes
                               if n.node_id in running)
        try:
            view = fetch_view(controllers, timeout)
            leader_id = view.leader_id
            quorum_note = f"quorum leader: node {view.leader_id} (epoch {view.leader_epoch}, " \
                          f"high watermark {view.high_watermark})" if leader_id >= 0 else \
                          "quorum leader: none right now"
        except CliError as e:
            quorum_note = f"quorum: {e.message}"
    print_table(status_table(record, running, leader_id))
    out.print(f"cluster id: {record.cluster_id}", markup=False, highlight=False)
    if quorum_note:
        out.print(quorum_note, markup=False, highlight=False)
    out.print(f"bootstrap servers: {record.bootstrap}", markup=False, highlight=False)
    if len(running) < len(record.nodes):
        raise typer.Exit(EXIT_ERROR)


STATUS_COLUMNS = ("NODE", "PID", "STATE", "BROKER", "CONTROLLER", "QUORUM")


def status_rows(record: ClusterRecord, running: set[int], leader_id: int) -> \
        list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for n in record.nodes:
        up_ = n.node_id in running
        role = "-" if not up_ or leader_id < 0 else \
            "leader" if n.node_id == leader_id else "follower"
        rows.append((str(n.node_id), str(n.pid) if up_ and n.pid else "-",
                     "running" if up_ else "stopped", n.broker_address, n.controller_address,
                     role))
    return rows


def status_table(record: ClusterRecord, running: set[int], leader_id: int) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in STATUS_COLUMNS:
        table.add_column(col, justify="right" if col in ("NODE", "PID") else "left")
    for row in status_rows(record, running, leader_id):
        table.add_row(*row)
    return table


__all__ = [
    "ClusterPlan",
    "ClusterRecord",
    "NodePlan",
    "NodeRecord",
    "app",
    "busy_ports",
    "check_overrides",
    "is_node_process",
    "node_properties",
    "plan_ports",
    "read_record",
    "render_properties",
    "write_record",
]
