"""`strom quorum describe`: the KRaft controller quorum (what kafka-metadata-quorum shows).

It speaks to the CONTROLLER listener (`--bootstrap-controller`, KIP-919) with Strom's codec over
a plain TCP connection: DescribeCluster with endpoint type 2 names the controllers and the
active one; DescribeQuorum, which only the active controller (the Raft leader) answers, gives
the leader, its epoch, the high watermark and each replica's log end offset and fetch times.
A controller too old for DescribeCluster v1 is asked DescribeQuorum directly, each bootstrap
controller in turn. Only PLAINTEXT listeners.

`--status` (the default) prints one line per fact; `--replication` one row per replica:
voters first (the leader, then followers by id), then observers.
"""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from rich.table import Table

from strom.cli.common import (
    EXIT_UNREACHABLE,
    CliError,
    TimeoutOpt,
    UsageError,
    handle_errors,
    print_table,
)
from strom.cli.wire import Connection, error_name

app = typer.Typer(help="Describe the KRaft controller quorum (kafka-metadata-quorum).",
                  no_args_is_help=True)

DESCRIBE_QUORUM, DESCRIBE_CLUSTER = 55, 60
CONTROLLER_ENDPOINT = 2
METADATA_TOPIC = "__cluster_metadata"
NOT_LEADER_OR_FOLLOWER = 6


@dataclass(frozen=True)
class Replica:
    """One replica of the metadata log as the leader sees it (DescribeQuorum's ReplicaState)."""

    node_id: int
    directory_id: str
    log_end_offset: int
    last_fetch_ms: int
    last_caught_up_ms: int


@dataclass
class QuorumView:
    """What `describe` prints: the leader's DescribeQuorum answer plus the cluster id."""

    cluster_id: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[Replica]
    observers: list[Replica]
    # node id -> its endpoints as `LISTENER://host:port` (DescribeQuorum v2's nodes)
    endpoints: dict[int, list[str]] = field(default_factory=dict)

    @property
    def leader(self) -> Replica | None:
        return next((r for r in self.voters if r.node_id == self.leader_id), None)

    def lag(self, replica: Replica) -> int:
        """Records behind the leader's log end (0 when either end is unknown)."""
        leader = self.leader
        if leader is None or leader.log_end_offset < 0 or replica.log_end_offset < 0:
            return 0
        return max(0, leader.log_end_offset - replica.log_end_offset)

    def _most_behind(self) -> Replica | None:
        """The voter with the lowest log end offset (the leader on a tie, if it is one)."""
        if not self.voters:
            return None
        return min(self.voters, key=lambda r: (r.log_end_offset, r.node_id != self.leader_id))

    def max_follower_lag(self) -> int:
        """Records the most behind voter lacks (observers do not count, as in Kafka's tool)."""
        behind = self._most_behind()
        return 0 if behind is None else self.lag(behind)

    def max_follower_lag_time_ms(self) -> int:
        """How much older the most behind voter's last catch-up is than the leader's; -1 when
        either is unknown."""
        leader, behind = self.leader, self._most_behind()
        if leader is None or behind is None or behind is leader:
            return 0
        if leader.last_caught_up_ms < 0 or behind.last_caught_up_ms < 0:
            return -1
        return leader.last_caught_up_ms - behind.last_caught_up_ms


# ------------------------------------------------------------------------------------- parsing


def _directory_text(value: Any) -> str:
    """Kafka's textual id (URL-safe base64, no padding) of a directory id."""
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")
    return "" if value is None else str(value)


def _replicas(states: Any) -> list[Replica]:
    return [Replica(node_id=int(s["replica_id"]),
                    directory_id=_directory_text(s.get("replica_directory_id")),
                    log_end_offset=int(s["log_end_offset"]),
                    last_fetch_ms=int(s.get("last_fetch_timestamp", -1)),
                    last_caught_up_ms=int(s.get("last_caught_up_timestamp", -1)))
            for s in states or []]


def view_from_response(response: dict[str, Any], cluster_id: str,
                       fallback_endpoints: dict[int, list[str]] | None = None) -> QuorumView:
    """A QuorumView from a DescribeQuorum response (as a dict); CliError for its errors."""
    if response.get("error_code"):
        raise CliError(f"DescribeQuorum failed: {_error_text(response)}")
    topics = response.get("topics") or []
    partitions = [p for t in topics for p in (t.get("partitions") or [])]
    if len(partitions) != 1:
        raise CliError("DescribeQuorum answered no metadata partition")
    p = partitions[0]
    if p.get("error_code"):
        raise CliError(f"DescribeQuorum failed: {_error_text(p)}")
    endpoints: dict[int, list[str]] = {}
    for node in response.get("nodes") or []:
        endpoints[int(node["node_id"])] = [f"{ln['name']}://{ln['host']}:{ln['port']}"
                                           for ln in node.get("listeners") or []]
    for node_id, eps in (fallback_endpoints or {}).items():
        endpoints.setdefault(node_id, eps)
    return QuorumView(cluster_id=cluster_id, leader_id=int(p["leader_id"]),
                      leader_epoch=int(p["leader_epoch"]),
                      high_watermark=int(p["high_watermark"]),
                      voters=_replicas(p.get("current_voters")),
                      observers=_replicas(p.get("observers")), endpoints=endpoints)


def _error_text(obj: dict[str, Any]) -> str:
    code = int(obj.get("error_code") or 0)
    message = obj.get("error_message")
    return f"{error_name(code)}: {message}" if message else error_name(code)


# ------------------------------------------------------------------------------------ rendering


def _node_text(view: QuorumView, replica: Replica) -> str:
    eps = view.endpoints.get(replica.node_id)
    return f"{replica.node_id} ({', '.join(eps)})" if eps else str(replica.node_id)


def status_rows(view: QuorumView) -> list[tuple[str, str]]:
    """The `--status` facts, in kafka-metadata-quorum's order and with its names."""
    voters = sorted(view.voters, key=lambda r: r.node_id)
    observers = sorted(view.observers, key=lambda r: r.node_id)
    return [
        ("ClusterId", view.cluster_id or "-"),
        ("LeaderId", str(view.leader_id)),
        ("LeaderEpoch", str(view.leader_epoch)),
        ("HighWatermark", str(view.high_watermark)),
        ("MaxFollowerLag", str(view.max_follower_lag())),
        ("MaxFollowerLagTimeMs", str(view.max_follower_lag_time_ms())),
        ("CurrentVoters", ", ".join(_node_text(view, r) for r in voters) or "-"),
        ("CurrentObservers", ", ".join(_node_text(view, r) for r in observers) or "-"),
    ]


REPLICATION_COLUMNS = ("NODE-ID", "DIRECTORY-ID", "LOG-END-OFFSET", "LAG", "LAST-FETCH",
                       "LAST-CAUGHT-UP", "STATUS")


def _time_text(ms: int, now_ms: int | None) -> str:
    if ms < 0:
        return "-"
    if now_ms is None:
        return str(ms)
    return f"{max(0, now_ms - ms)} ms ago"


def replication_rows(view: QuorumView, now_ms: int | None = None) -> list[tuple[str, ...]]:
    """One row per replica: the leader, the other voters by id, then observers by id.
    Timestamps are epoch milliseconds, or "N ms ago" when `now_ms` is given."""
    leader = view.leader
    followers = sorted((r for r in view.voters if r.node_id != view.leader_id),
                       key=lambda r: r.node_id)
    ordered = [(r, "Follower") for r in followers]
    if leader is not None:
        ordered.insert(0, (leader, "Leader"))
    ordered += [(r, "Observer") for r in sorted(view.observers, key=lambda r: r.node_id)]
    return [(str(r.node_id), r.directory_id or "-", str(r.log_end_offset), str(view.lag(r)),
             _time_text(r.last_fetch_ms, now_ms), _time_text(r.last_caught_up_ms, now_ms),
             status) for r, status in ordered]


def status_table(view: QuorumView) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, show_header=False)
    table.add_column("FIELD", style="bold")
    table.add_column("VALUE")
    for key, value in status_rows(view):
        table.add_row(f"{key}:", value)
    return table


def replication_table(view: QuorumView, now_ms: int | None = None) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in REPLICATION_COLUMNS:
        table.add_column(col, justify="left" if col in ("DIRECTORY-ID", "STATUS") else "right")
    for row in replication_rows(view, now_ms):
        table.add_row(*row)
    return table


# ------------------------------------------------------------------------------------- the wire


def parse_servers(bootstrap: str) -> list[tuple[str, int]]:
    servers = []
    for server in [s.strip() for s in bootstrap.split(",") if s.strip()]:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"invalid bootstrap controller {server!r}: expected host:port")
        servers.append((host.strip("[]"), int(port)))
    if not servers:
        raise UsageError("--bootstrap-controller needs at least one host:port")
    return servers


def _connect(host: str, port: int, timeout: float) -> Connection:
    try:
        return Connection(host, port, timeout)
    except CliError as e:
        reason = e.message.split(f"{host}:{port}: ", 1)[-1]
        raise CliError(f"cannot reach controller {host}:{port}: {reason}",
                       EXIT_UNREACHABLE) from None


def _describe_quorum(conn: Connection) -> dict[str, Any]:
    version = conn.version(DESCRIBE_QUORUM, 2, "DescribeQuorum")
    body = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}
    response: dict[str, Any] = conn.call(DESCRIBE_QUORUM, version, body).to_dict()
    return response


def _describe_cluster(conn: Connection) -> Any | None:
    """DescribeCluster for the controllers, or None when the node lacks v1 (no endpoint type)."""
    theirs = conn.versions.get(DESCRIBE_CLUSTER)
    if theirs is None or theirs[1] < 1:
        return None
    version = conn.version(DESCRIBE_CLUSTER, 2, "DescribeCluster")
    resp = conn.call(DESCRIBE_CLUSTER, version, {
        "include_cluster_authorized_operations": False, "endpoint_type": CONTROLLER_ENDPOINT,
        "include_fenced_brokers": False})
    if resp.error_code:
        text = error_name(resp.error_code)
        hint = (" (is it a CONTROLLER listener? --bootstrap-controller takes the "
                "controllers' addresses)") if text == "MISMATCHED_ENDPOINT_TYPE" else ""
        raise CliError(f"controller {conn.address} refused DescribeCluster: {text}{hint}")
    return resp


def fetch_view(bootstrap: str, timeout: float) -> QuorumView:
    """The active controller's view of the quorum, found through the bootstrap controllers."""
    last: CliError | None = None
    for host, port in parse_servers(bootstrap):
        try:
            conn = _connect(host, port, timeout)
        except CliError as e:
            last = e
            continue
        try:
            cluster = _describe_cluster(conn)
            if cluster is None:  # an old controller: ask it, the leader answers
                try:
                    return view_from_response(_describe_quorum(conn), "")
                except CliError as e:
                    last = e
                    continue
            if cluster.controller_id < 0:
                raise CliError(f"the quorum has no leader right now (asked {conn.address})")
            controllers = {b.broker_id: (b.host, b.port) for b in cluster.brokers}
            endpoints = {i: [f"{h}:{p}"] for i, (h, p) in controllers.items()}
            if cluster.controller_id not in controllers:
                raise CliError(f"the active controller {cluster.controller_id} has no "
                               f"endpoint in {conn.address}'s answer")
            lhost, lport = controllers[cluster.controller_id]
            if (lhost, lport) == (host, port):
                response = _describe_quorum(conn)
            else:
                leader = _connect(lhost, lport, timeout)
                try:
                    response = _describe_quorum(leader)
                finally:
                    leader.close()
            return view_from_response(response, cluster.cluster_id, endpoints)
        finally:
            conn.close()
    if last is not None:
        if len(parse_servers(bootstrap)) > 1 and last.exit_code == EXIT_UNREACHABLE:
            raise CliError(f"cannot reach any controller of {bootstrap} (last: {last.message})",
                           EXIT_UNREACHABLE)
        raise last
    raise UsageError("--bootstrap-controller needs at least one host:port")  # pragma: no cover


# ------------------------------------------------------------------------------------- commands


@app.command("describe")
@handle_errors
def describe(
    bootstrap_controller: Annotated[
        str,
        typer.Option("--bootstrap-controller", help="Controllers to ask, host:port[,host:port]: "
                                                    "their CONTROLLER listeners."),
    ],
    status: Annotated[
        bool, typer.Option("--status", help="The quorum's state (the default)."),
    ] = False,
    replication: Annotated[
        bool, typer.Option("--replication", help="Each replica's log end offset, lag and "
                                                 "fetch times."),
    ] = False,
    human_readable: Annotated[
        bool, typer.Option("--human-readable", help="With --replication: times as 'N ms ago'."),
    ] = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Describe the metadata quorum: its leader, epoch, high watermark, voters and observers."""
    if status and replication:
        raise UsageError("give either --status or --replication, not both")
    if human_readable and not replication:
        raise UsageError("--human-readable only applies to --replication")
    view = fetch_view(bootstrap_controller, timeout)
    if replication:
        now = int(time.time() * 1000) if human_readable else None
        print_table(replication_table(view, now))
    else:
        print_table(status_table(view))
