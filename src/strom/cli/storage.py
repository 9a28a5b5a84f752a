"""`strom storage format` and `strom storage random-uuid`: Kafka 4.4's ``kafka-storage``.

A KRaft node refuses to start on log dirs nobody formatted (strom.controller.node). `format`
takes the node's server.properties and the cluster's id and writes, in every log dir
(``log.dirs`` and ``metadata.log.dir``, default the first log dir):

- ``meta.properties``: ``version=1``, ``cluster.id``, ``node.id`` and ``directory.id`` (a new
  random base64url UUID per dir; with ``--initial-controllers`` the metadata dir takes the id
  listed for this node). strom.broker.wiring reads the same file.
- on a node with the controller role, in the metadata dir, the bootstrap snapshot
  ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`` (raft/snapshot.py):
  its header batch holds KRaftVersionRecord(1) unless ``controller.quorum.voters`` is set (a
  static quorum, kraft.version 0: no record), and a VotersRecord only with ``--standalone``
  (this node, the metadata dir's id, its advertised controller listeners) or
  ``--initial-controllers``. Its data batch holds one FeatureLevelRecord per feature whose level
  is not 0: ``metadata.version`` from ``--release-version`` (default Kafka 4.4's 4.4-IV2 = 33,
  short names such as ``4.0`` mean the last level of that release), then the other features at
  the defaults Kafka gives that metadata version, overridden by ``--feature name=level``;
  then one UserScramCredentialRecord per ``--add-scram`` (strom.cluster.scram_records): the
  cluster starts with those SCRAM users, so brokers can authenticate each other with SCRAM
  from their first start.

The FeatureLevelRecords use Kafka's own metadata record encoding (frame version 1, api key 12,
version 0, then the flexible v0 body), not the JSON values of Strom's later metadata records
(cluster/records.py): it costs a few bytes of code and lets Kafka's tools
(kafka-metadata-shell, kafka-dump-log) read Strom's bootstrap snapshot. Checked against the
files Kafka 4.4's tool writes for the same flags (tests/unit/cli/test_storage_format.py).

Where Strom differs from Kafka 4.4's tool, on purpose:
- ``eligible.leader.replicas.version`` is not written (Strom does not implement ELR, so it
  does not advertise the feature: strom.cluster.features); ``--feature`` accepts only the
  features Strom supports, at levels it supports.
- the cluster id must be non-empty and made of base64url characters (Kafka takes any string,
  even an empty one, and the nodes then fail later).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

import strom
from strom.cli.common import CliError, UsageError, handle_errors
from strom.cli.kraft_layout import (
    DEFAULT_MV_LEVEL,
    KRAFT_VERSION,
    MAX_LEVELS,
    META_PROPERTIES,
    METADATA_VERSION,
    MV_NAMES,
    SUPPORTED_FEATURES,
    default_feature_levels,
    metadata_version_level,
    mv_name,
    random_directory_id,
    read_meta,
)
from strom.cluster.features import feature_level_record, parse_feature_level_record
from strom.cluster.scram_records import (
    ScramArgumentError,
    parse_add_scram,
    user_scram_credential_record,
)
from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.raft.config import QuorumConfig, parse_initial_controllers
from strom.raft.control import Endpoint, Voter, VotersRecord
from strom.raft.snapshot import BOOTSTRAP_SNAPSHOT_ID, write_snapshot
from strom.raft.storage import METADATA_DIR_NAME
from strom.storage.checkpoints import topic_id_from_str, topic_id_to_str, write_atomic

app = typer.Typer(help="Format log dirs for KRaft (kafka-storage).", no_args_is_help=True)

_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]+")

@dataclass
class FormatOptions:
    config: Path
    cluster_id: str
    standalone: bool = False
    initial_controllers: str | None = None
    no_initial_controllers: bool = False
    release_version: str | None = None
    features: list[str] = field(default_factory=list)
    add_scram: list[str] = field(default_factory=list)
    ignore_formatted: bool = False


def _parse_features(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, eq, level = item.partition("=")
        name = name.strip()
        if not eq or not level.strip().lstrip("-").isdigit():
            raise UsageError(f"Can't parse feature={item}. The format is feature=level, "
                             "e.g. group.version=1")
        if name == METADATA_VERSION:
            raise UsageError("Use --release-version to set metadata.version, not --feature")
        if name not in SUPPORTED_FEATURES:
            raise CliError(f"Unsupported feature: {name}. Supported features are: "
                           f"{', '.join(SUPPORTED_FEATURES)}")
        value = int(level)
        top = MAX_LEVELS.get(name, 1)
        if not 0 <= value <= top:
            raise CliError(f"No feature:{name} with feature level {value} (Strom supports "
                           f"levels 0 to {top})")
        out[name] = value
    return out


def _controller_endpoints(config: BrokerConfig, quorum: QuorumConfig) -> tuple[Endpoint, ...]:
    """This controller's advertised controller listeners (for --standalone's voter)."""
    from strom.config.listeners import controller_endpoints

    try:
        found = controller_endpoints(config, quorum.controller_listener_names)
    except ConfigError as e:
        raise CliError(str(e)) from None
    if not found:
        raise CliError("--standalone needs a controller listener (controller.listener.names "
                       "naming one of the 'listeners') to put in the voter set")
    return tuple(Endpoint(name, host, port) for name, host, port in found)


def format_storage(opts: FormatOptions) -> list[str]:
    """Check everything, then format the dirs; returns the lines to print. Raises CliError
    (one line, as Kafka's tool words it where it has words)."""
    dynamic_flags = [f for f, on in (("--standalone/-s", opts.standalone),
                                     ("--initial-controllers/-I",
                                      opts.initial_controllers is not None),
                                     ("--no-initial-controllers/-N",
                                      opts.no_initial_controllers)) if on]
    if len(dynamic_flags) > 1:
        raise UsageError(f"argument {dynamic_flags[1]}: not allowed with argument "
                         f"{dynamic_flags[0]}")
    try:
        scram_users = [parse_add_scram(a) for a in opts.add_scram]
    except ScramArgumentError as e:
        raise CliError(str(e)) from None
    cluster_id = opts.cluster_id.strip()
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise CliError(f"Invalid cluster id {opts.cluster_id!r}: use a base64url UUID such as "
                       "one from 'strom storage random-uuid'")
    if not opts.config.is_file():
        raise CliError(f"config file not found: {opts.config}")
    try:
        config = BrokerConfig.load(opts.config)
        quorum = QuorumConfig.from_config(config.get)
    except ConfigError as e:
        raise CliError(str(e)) from None
    if not quorum.process_roles:
        raise CliError('Missing required configuration "process.roles" which has no default '
                       "value.")
    problems = quorum.problems()
    if problems:
        raise CliError(problems[0])
    assert quorum.node_id is not None  # problems() checked it
    node_id = quorum.node_id
    static = bool(quorum.voters)

    if not quorum.is_controller:
        if opts.standalone:
            raise CliError("You can only use --standalone on a controller.")
        if opts.initial_controllers is not None:
            raise CliError("You can only use --initial-controllers on a controller.")
    if static and (opts.standalone or opts.initial_controllers is not None):
        raise CliError("You cannot specify controller.quorum.voters and format the node with "
                       "--initial-controllers or --standalone. If you want to use dynamic "
                       "quorum, please remove controller.quorum.voters and specify "
                       "controller.quorum.bootstrap.servers instead.")
    if quorum.is_controller and not static and not dynamic_flags:
        raise CliError("Because controller.quorum.voters is not set on this controller, you "
                       "must specify one of the following: --standalone, "
                       "--initial-controllers, or --no-initial-controllers.")

    mv = (metadata_version_level(opts.release_version) if opts.release_version is not None
          else DEFAULT_MV_LEVEL)
    levels = default_feature_levels(mv)
    overrides = _parse_features(opts.features)
    kraft_version = 0 if static else 1
    wanted_kraft = overrides.pop(KRAFT_VERSION, kraft_version)
    if wanted_kraft != kraft_version:
        if wanted_kraft == 0:
            raise CliError("Cannot set kraft.version to 0 if controller.quorum.voters is empty "
                           "and one of the flags --standalone, --initial-controllers, or "
                           "--no-initial-controllers is used. For dynamic controllers support, "
                           "try removing the --feature flag for kraft.version.")
        raise CliError("Cannot set kraft.version to 1 when controller.quorum.voters is set "
                       "(a static quorum); use controller.quorum.bootstrap.servers instead")
    levels.update(overrides)

    initial = None
    if opts.initial_controllers is not None:
        try:
            initial = parse_initial_controllers(opts.initial_controllers)
        except ConfigError as e:
            raise CliError(str(e)) from None

    metadata_dir = Path(config.get("metadata.log.dir") or config.log_dirs[0])
    dirs = list(dict.fromkeys([*config.log_dirs, metadata_dir]))

    # Every formatted dir must already be this cluster's and this node's.
    formatted = []
    for d in dirs:
        meta = d / META_PROPERTIES
        if not meta.exists():
            continue
        props = read_meta(meta)
        if props.get("cluster.id", cluster_id) != cluster_id:
            raise CliError(f"Invalid cluster.id in: {meta}. Expected {cluster_id}, but read "
                           f"{props['cluster.id']}")
        stored = props.get("node.id", props.get("broker.id"))
        if stored is not None and stored != str(node_id):
            raise CliError(f"Invalid node.id in: {meta}. Expected {node_id}, but read {stored}")
        formatted.append(d)
    if formatted and not opts.ignore_formatted:
        raise CliError(f"Log directory {formatted[0]} is already formatted. Use "
                       "--ignore-formatted to ignore this directory and format the others.")
    todo = [d for d in dirs if d not in formatted]
    if not todo:
        return ["All of the log directories are already formatted."]

    mine = next((v for v in initial or () if v.node_id == node_id), None)
    dir_ids = {d: random_directory_id() for d in todo}
    if metadata_dir in dir_ids and mine is not None and mine.directory_id is not None:
        dir_ids[metadata_dir] = topic_id_to_str(mine.directory_id)

    voters: VotersRecord | None = None
    if metadata_dir in dir_ids and quorum.is_controller:
        if opts.standalone:
            voters = VotersRecord((Voter(node_id, topic_id_from_str(dir_ids[metadata_dir]),
                                         _controller_endpoints(config, quorum)),))
        elif initial is not None:
            listener = quorum.controller_listener_names[0].strip().upper()
            voters = VotersRecord(tuple(
                Voter(v.node_id, v.directory_id or uuid.UUID(int=0),
                      (Endpoint(listener, v.host, v.port),))
                for v in initial))

    lines = []
    version = mv_name(mv)
    for d in todo:
        d.mkdir(parents=True, exist_ok=True)
        if d == metadata_dir and quorum.is_controller:
            values = [feature_level_record(METADATA_VERSION, mv)]
            values += [feature_level_record(name, level)
                       for name, level in sorted(levels.items()) if level != 0]
            values += [user_scram_credential_record(u) for u in scram_users]
            now = int(time.time() * 1000)
            # The snapshot first: a crash in between leaves the dir unformatted, not half.
            write_snapshot(d / METADATA_DIR_NAME, BOOTSTRAP_SNAPSHOT_ID, values,
                           last_contained_log_timestamp=now, kraft_version=kraft_version,
                           voters=voters, timestamp=now)
        write_atomic(d / META_PROPERTIES,
                     f"#Written by strom storage format ({strom.__version__})\nversion=1\n"
                     f"cluster.id={cluster_id}\nnode.id={node_id}\n"
                     f"directory.id={dir_ids[d]}\n", fsync=True, fsync_dir=True)
        if d != metadata_dir:
            kind = "data directory"
        elif voters is not None and any(v.voter_id == node_id for v in voters.voters):
            kind = "dynamic metadata voter directory"
        elif voters is not None:
            kind = "dynamic metadata directory"
        else:
            kind = "metadata directory"
        lines.append(f"Formatting {kind} {d} with metadata.version {version}.")
    return lines


@app.command("format")
@handle_errors
def format_command(
    config: Annotated[Path, typer.Option("--config", "-c", help="The node's server.properties.",
                                         show_default=False)],
    cluster_id: Annotated[str, typer.Option("--cluster-id", "-t", help="The cluster's id "
                                            "(strom storage random-uuid makes one).",
                                            show_default=False)],
    standalone: Annotated[bool, typer.Option(
        "--standalone", "-s",
        help="A dynamic quorum whose only voter is this controller.")] = False,
    initial_controllers: Annotated[str | None, typer.Option(
        "--initial-controllers", "-I",
        help="The initial voters of a dynamic quorum: id@host:port:directoryId,...",
        show_default=False)] = None,
    no_initial_controllers: Annotated[bool, typer.Option(
        "--no-initial-controllers", "-N",
        help="A controller of a dynamic quorum that joins later (no initial voter set).")]
    = False,
    release_version: Annotated[str | None, typer.Option(
        "--release-version", "-r",
        help=f"The metadata.version to start at, e.g. 3.9 or 4.4-IV2 (default "
             f"{MV_NAMES[-1]}).", show_default=False)] = None,
    feature: Annotated[list[str] | None, typer.Option(
        "--feature", "-f", help="A feature level, name=level (repeatable).",
        show_default=False)] = None,
    add_scram: Annotated[list[str] | None, typer.Option(
        "--add-scram", "-S",
        help="A SCRAM user the cluster starts with (repeatable), e.g. "
             "'SCRAM-SHA-256=\\[name=alice,password=alice-secret]' or "
             "'SCRAM-SHA-512=\\[name=alice,iterations=8192,salt=\"N3E=\",saltedpassword=\"YCE=\"]'.",
        show_default=False)] = None,
    ignore_formatted: Annotated[bool, typer.Option(
        "--ignore-formatted", "-g",
        help="Skip the dirs already formatted instead of failing.")] = False,
) -> None:
    """Format the log dirs of a KRaft node: meta.properties everywhere, and on a controller
    the bootstrap snapshot with the feature levels (and the initial voters)."""
    lines = format_storage(FormatOptions(
        config=config, cluster_id=cluster_id, standalone=standalone,
        initial_controllers=initial_controllers, no_initial_controllers=no_initial_controllers,
        release_version=release_version, features=list(feature or ()),
        add_scram=list(add_scram or ()), ignore_formatted=ignore_formatted))
    for line in lines:
        typer.echo(line)


@app.command("migrate-from-zookeeper")
@handle_errors
def migrate_from_zookeeper(
    config: Annotated[Path, typer.Option("--config", "-c", help="The node's new KRaft "
                                         "server.properties (node.id = its broker.id, same "
                                         "log.dirs).", show_default=False)],
    zookeeper_connect: Annotated[str, typer.Option(
        "--zookeeper-connect", "-z", help="The old cluster's zookeeper.connect (with its "
        "chroot).", show_default=False)],
) -> None:
    """Strom's own: make a stopped ZooKeeper-mode broker's log dirs a KRaft node's, with the
    cluster's whole metadata from ZooKeeper (run it on every node of the old cluster)."""
    from strom.cli.zk_migration import migrate

    for line in migrate(config, zookeeper_connect):
        typer.echo(line)


@app.command("random-uuid")
@handle_errors
def random_uuid() -> None:
    """Print a new random UUID (base64url) for --cluster-id or a directory id."""
    typer.echo(random_directory_id())


__all__ = [
    "FormatOptions",
    "app",
    "feature_level_record",
    "format_storage",
    "metadata_version_level",
    "parse_feature_level_record",
    "random_directory_id",
]
