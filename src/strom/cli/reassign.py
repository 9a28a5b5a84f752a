"""`strom reassign-partitions`: move partitions between brokers and change their replication
factor, like Kafka's kafka-reassign-partitions.sh and with its JSON files.

librdkafka has no AlterPartitionReassignments / ListPartitionReassignments, so this speaks
Metadata and the two APIs itself (cli/wire.py); it works against any Kafka cluster that has them.

- `--generate`: a proposal that spreads the topics in `--topics-to-move-json-file` over the
  brokers in `--broker-list` (rack-aware, as topic creation places replicas);
- `--execute`: start the reassignment in `--reassignment-json-file` (and print the current
  assignment, to keep for a rollback); `--wait` follows it to the end with a progress bar;
- `--verify`: is each partition of the file where the file wants it? (exit 1 while not);
- `--list`: every reassignment under way; `--cancel`: stop those in the file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from strom.cli.common import (
    EXIT_ERROR,
    BootstrapOpt,
    CliError,
    CommandConfigOpt,
    TimeoutOpt,
    UsageError,
    handle_errors,
)
from strom.cli.wire import Cluster, connect_cluster, error_name

ALTER, LIST = 45, 46
NO_REASSIGNMENT_IN_PROGRESS = 85

Move = tuple[str, int]  # (topic, partition)


# -- Kafka's JSON files -------------------------------------------------------------------------


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UsageError(f"{path} is not valid JSON ({what}): {e}") from None


def parse_topics_to_move(data: Any) -> list[str]:
    """{"version":1,"topics":[{"topic":"foo"},...]} -> topic names."""
    if not isinstance(data, dict) or not isinstance(data.get("topics"), list):
        raise UsageError('the topics-to-move file needs {"version":1,"topics":[{"topic":...}]}')
    names = []
    for entry in data["topics"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise UsageError(f"bad entry in the topics-to-move file: {entry!r}")
        names.append(entry["topic"])
    if not names:
        raise UsageError("the topics-to-move file lists no topics")
    if len(set(names)) != len(names):
        raise UsageError("the topics-to-move file lists a topic twice")
    return names


def parse_reassignment(data: Any) -> dict[Move, list[int]]:
    """{"version":1,"partitions":[{"topic","partition","replicas"[,"log_dirs"]}]} -> moves."""
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        raise UsageError('the reassignment file needs {"version":1,"partitions":[...]}')
    if data.get("version", 1) != 1:
        raise UsageError(f"unsupported reassignment file version {data.get('version')!r}")
    moves: dict[Move, list[int]] = {}
    for entry in data["partitions"]:
        try:
            key = (entry["topic"], entry["partition"])
            replicas = entry["replicas"]
        except (KeyError, TypeError):
            raise UsageError(f"a partition entry needs topic, partition and replicas: "
                             f"{entry!r}") from None
        if not isinstance(key[0], str) or not isinstance(key[1], int) or \
                not isinstance(replicas, list) or not all(isinstance(r, int) for r in replicas):
            raise UsageError(f"bad partition entry: {entry!r}")
        if key in moves:
            raise UsageError(f"partition {key[0]}-{key[1]} appears twice in the file")
        if not replicas:
            raise UsageError(f"partition {key[0]}-{key[1]} has an empty replica list")
        if len(set(replicas)) != len(replicas):
            raise UsageError(f"partition {key[0]}-{key[1]} lists a broker twice: {replicas}")
        dirs = entry.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or len(dirs) != len(replicas)):
            raise UsageError(f"partition {key[0]}-{key[1]}: log_dirs must have one entry per "
                             "replica")
        if dirs is not None and any(d != "any" for d in dirs):
            raise UsageError(f"partition {key[0]}-{key[1]}: moving replicas between log "
                             'directories is not supported (use "any")')
        moves[key] = replicas
    if not moves:
        raise UsageError("the reassignment file lists no partitions")
    return moves


def format_reassignment(assignment: dict[Move, list[int]]) -> str:
    """Kafka's one-line JSON, partitions sorted."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())]}, separators=(",", ":"))


def _names(keys: Iterable[Move]) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(keys))


# -- talking to the cluster -----------------------------------------------------------------------


def current_assignment(cluster: Cluster, topics: list[str]) -> dict[Move, list[int]]:
    found = cluster.topics(topics)
    missing = [t for t in topics if t not in found]
    if missing:
        raise CliError(f"unknown topic(s): {', '.join(sorted(missing))}")
    return {(t, p): r for t, parts in found.items() for p, r in parts.items()}


def ongoing(cluster: Cluster, keys: Iterable[Move] | None = None) -> dict[Move, Any]:
    """Reassignments under way (among `keys`, or all)."""
    conn = cluster.any_conn()
    body: dict[str, Any] = {"timeout": int(cluster.timeout * 1000), "topics": None}
    if keys is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in keys:
            by_topic.setdefault(t, []).append(p)
        body["topics"] = [{"name": t, "partition_indexes": sorted(ps)}
                          for t, ps in sorted(by_topic.items())]
    resp = conn.call(LIST, conn.version(LIST, 0, "ListPartitionReassignments"), body)
    if resp.error_code:
        raise CliError(f"listing reassignments failed: {error_name(resp.error_code)}"
                       + (f" ({resp.error_message})" if resp.error_message else ""))
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


def alter(cluster: Cluster, moves: dict[Move, list[int] | None]) -> dict[Move, tuple[int, str]]:
    """Send the reassignments (None cancels); per partition (error code, message)."""
    conn = cluster.any_conn()
    version = conn.version(ALTER, 1, "AlterPartitionReassignments")
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), replicas in sorted(moves.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    body = {"timeout": int(cluster.timeout * 1000), "allow_replication_factor_change": True,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
    resp = conn.call(ALTER, version, body)
    if resp.error_code:
        raise CliError(f"the reassignment was refused: {error_name(resp.error_code)}"
                       + (f" ({resp.error_message})" if resp.error_message else ""))
    return {(t.name, p.partition_index): (p.error_code, p.error_message or "")
            for t in resp.responses for p in t.partitions}


# -- the command ----------------------------------------------------------------------------------


@handle_errors
def reassign_partitions(
    generate: Annotated[bool, typer.Option("--generate", help="Propose an assignment of the "
                                           "topics in --topics-to-move-json-file over "
                                           "--broker-list.")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Start the reassignment in "
                                          "--reassignment-json-file.")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Check whether the reassignment in "
                                         "--reassignment-json-file is done (exit 1 while not)."
                                         )] = False,
    list_: Annotated[bool, typer.Option("--list", help="Show every reassignment under way."
                                        )] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Cancel the reassignments in "
                                         "--reassignment-json-file (back to the original "
                                         "replicas).")] = False,
    reassignment_json_file: Annotated[Path | None, typer.Option(
        "--reassignment-json-file", dir_okay=False,
        help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}'
    )] = None,
    topics_to_move_json_file: Annotated[Path | None, typer.Option(
        "--topics-to-move-json-file", dir_okay=False,
        help='{"version":1,"topics":[{"topic":"t"}]}')] = None,
    broker_list: Annotated[str | None, typer.Option(
        "--broker-list", help="Brokers to spread the topics over, e.g. 1,2,3 (--generate).")
                           ] = None,
    disable_rack_aware: Annotated[bool, typer.Option(
        "--disable-rack-aware", help="Ignore broker racks when generating.")] = False,
    additional: Annotated[bool, typer.Option(
        "--additional", help="Execute even though other reassignments are under way.")
                          ] = False,
    throttle: Annotated[int | None, typer.Option(
        "--throttle", min=1, help="With --execute: move the data at most this fast, in "
        "bytes/s (sets leader.replication.throttled.rate and follower.replication.throttled."
        "rate on the brokers involved and the throttled replicas on the topics; --verify "
        "removes them once done).")] = None,
    preserve_throttles: Annotated[bool, typer.Option(
        "--preserve-throttles", help="With --verify or --cancel: leave the throttles set.")
    ] = False,
    wait: Annotated[bool, typer.Option(
        "--wait", help="After --execute, follow the reassignment until it completes.")
                    ] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Move partitions between brokers or change their replication factor."""
    actions = [n for n, on in (("--generate", generate), ("--execute", execute),
                               ("--verify", verify), ("--list", list_), ("--cancel", cancel))
               if on]
    if len(actions) != 1:
        raise UsageError("choose exactly one of --generate, --execute, --verify, --list and "
                         "--cancel")
    if wait and not execute:
        raise UsageError("--wait goes with --execute")
    if throttle is not None and not execute:
        raise UsageError("--throttle goes with --execute")
    if preserve_throttles and not (verify or cancel):
        raise UsageError("--preserve-throttles goes with --verify or --cancel")
    if generate:
        if topics_to_move_json_file is None or broker_list is None:
            raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
        topics = parse_topics_to_move(_read_json(topics_to_move_json_file, "topics to move"))
        brokers = _parse_broker_list(broker_list)
        with _cluster(bootstrap_server, command_config, timeout) as cluster:
            _generate(cluster, topics, brokers, not disable_rack_aware)
        return
    if list_:
        with _cluster(bootstrap_server, command_config, timeout) as cluster:
            _list(cluster)
        return
    if reassignment_json_file is None:
        raise UsageError(f"{actions[0]} needs --reassignment-json-file")
    moves = parse_reassignment(_read_json(reassignment_json_file, "reassignment"))
    with _cluster(bootstrap_server, command_config, timeout) as cluster:
        if execute:
            _execute(cluster, moves, additional, throttle)
            if wait:
                _wait(cluster, moves)
                if throttle is not None:
                    _clear_throttles(cluster, moves)
        elif verify:
            _verify(cluster, moves, preserve_throttles)
        else:
            _cancel(cluster, moves)
            if not preserve_throttles:
                _clear_throttles(cluster, moves)


class _cluster:
    def __init__(self, bootstrap: str, command_config: Path | None, timeout: float) -> None:
        self.cluster = connect_cluster(bootstrap, command_config, timeout)

    def __enter__(self) -> Cluster:
        return self.cluster

    def __exit__(self, *exc: object) -> None:
        self.cluster.close()


def _parse_broker_list(text: str) -> list[int]:
    try:
        ids = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--broker-list must be broker ids like 1,2,3, not {text!r}") from None
    if not ids or len(set(ids)) != len(ids):
        raise UsageError(f"--broker-list must name distinct brokers: {text!r}")
    return ids


def _generate(cluster: Cluster, topics: list[str], brokers: list[int], rack_aware: bool) -> None:
    from strom.cluster.placement import assign_replicas

    unknown = [b for b in brokers if b not in cluster.brokers]
    if unknown:
        raise CliError(f"unknown broker(s) {unknown}; the cluster has "
                       f"{sorted(cluster.brokers)}")
    current = current_assignment(cluster, topics)
    racks = {b: cluster.racks.get(b) for b in brokers} if rack_aware else {}
    if rack_aware and any(r is not None for r in racks.values()) and \
            any(r is None for r in racks.values()):
        raise CliError("some of the brokers have a rack and some do not; add "
                       "--disable-rack-aware to ignore racks")
    proposed: dict[Move, list[int]] = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        if rf > len(brokers):
            raise CliError(f"{topic} has replication factor {rf}, more than the "
                           f"{len(brokers)} broker(s) in --broker-list")
        plan = assign_replicas(sorted(brokers), racks, len(parts), rf)
        proposed.update({(topic, p): plan[i] for i, p in enumerate(parts)})
    typer.echo("Current partition replica assignment")
    typer.echo(format_reassignment(current))
    typer.echo("")
    typer.echo("Proposed partition reassignment configuration")
    typer.echo(format_reassignment(proposed))


def _execute(cluster: Cluster, moves: dict[Move, list[int]], additional: bool,
             throttle: int | None = None) -> None:
    unknown = sorted({b for r in moves.values() for b in r if b not in cluster.brokers})
    if unknown:
        raise CliError(f"unknown broker(s) {unknown}; the cluster has "
                       f"{sorted(cluster.brokers)}")
    current = current_assignment(cluster, sorted({t for t, _ in moves}))
    missing = [k for k in moves if k not in current]
    if missing:
        raise CliError(f"no such partition(s): {_names(missing)}")
    if not additional and ongoing(cluster):
        raise CliError("other partition reassignments are under way (see --list); add "
                       "--additional to start this one as well")
    typer.echo("Current partition replica assignment")
    typer.echo("")
    typer.echo(format_reassignment({k: current[k] for k in moves}))
    typer.echo("")
    typer.echo("Save this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        _set_throttles(cluster, throttle, {k: current[k] for k in moves}, moves)
        typer.echo(f"The inter-broker throttle limit was set to {throttle} B/s")
    results = alter(cluster, dict(moves))
    failed = {k: r for k, r in results.items() if r[0]}
    started = [k for k in moves if k not in failed]
    if started:
        typer.echo(f"Successfully started partition reassignments for {_names(started)}")
    if failed:
        for (t, p), (code, message) in sorted(failed.items()):
            typer.echo(f"Error reassigning partition {t}-{p}: {error_name(code)}"
                       + (f" ({message})" if message else ""), err=True)
        raise typer.Exit(EXIT_ERROR)


def _wait(cluster: Cluster, moves: dict[Move, list[int]]) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("reassigning"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("partitions done"), transient=True) as progress:
        task = progress.add_task("", total=len(moves))
        while True:
            done = _done(cluster, moves)
            progress.update(task, completed=len(done))
            if len(done) == len(moves):
                break
            time.sleep(0.5)
    typer.echo(f"Reassignment of {len(moves)} partition(s) completed")


def _done(cluster: Cluster, moves: dict[Move, list[int]]) -> set[Move]:
    under_way = ongoing(cluster, moves)
    current = cluster.topics(sorted({t for t, _ in moves}))
    return {k for k, target in moves.items()
            if k not in under_way and current.get(k[0], {}).get(k[1]) == target}


def _verify(cluster: Cluster, moves: dict[Move, list[int]], preserve_throttles: bool = False
            ) -> None:
    under_way = ongoing(cluster, moves)
    current = cluster.topics(sorted({t for t, _ in moves}))
    typer.echo("Status of partition reassignment:")
    all_done = True
    for (t, p), target in sorted(moves.items()):
        replicas = current.get(t, {}).get(p)
        if (t, p) in under_way:
            typer.echo(f"Reassignment of partition {t}-{p} is still in progress.")
            all_done = False
        elif replicas == target:
            typer.echo(f"Reassignment of partition {t}-{p} is completed.")
        elif replicas is None:
            typer.echo(f"Partition {t}-{p} does not exist.")
            all_done = False
        else:
            typer.echo(f"There is no active reassignment of partition {t}-{p}, but its replica "
                       f"set is {replicas} rather than {target}.")
            all_done = False
    if not all_done:
        raise typer.Exit(EXIT_ERROR)
    if not preserve_throttles:  # as Kafka's tool: a finished reassignment drops its throttles
        _clear_throttles(cluster, moves)


def _list(cluster: Cluster) -> None:
    under_way = ongoing(cluster)
    if not under_way:
        typer.echo("No partition reassignments found.")
        return
    typer.echo("Current partition reassignments:")
    for (t, p), r in sorted(under_way.items()):
        typer.echo(f"{t}-{p}: replicas: {_ids(r.replicas)}. adding: {_ids(r.adding_replicas)}. "
                   f"removing: {_ids(r.removing_replicas)}.")


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def _cancel(cluster: Cluster, moves: dict[Move, list[int]]) -> None:
    results = alter(cluster, {k: None for k in moves})
    cancelled = [k for k, (code, _) in results.items() if code == 0]
    idle = [k for k, (code, _) in results.items() if code == NO_REASSIGNMENT_IN_PROGRESS]
    failed = {k: r for k, r in results.items() if r[0] not in (0, NO_REASSIGNMENT_IN_PROGRESS)}
    if cancelled:
        typer.echo(f"Successfully cancelled partition reassignments for: {_names(cancelled)}")
    if idle:
        typer.echo(f"No reassignment was under way for: {_names(idle)}")
    for (t, p), (code, message) in sorted(failed.items()):
        typer.echo(f"Error cancelling the reassignment of {t}-{p}: {error_name(code)}"
                   + (f" ({message})" if message else ""), err=True)
    if failed:
        raise typer.Exit(EXIT_ERROR)


# -- replication throttles (Kafka's kafka-reassign-partitions --throttle) ---------------------

_DESCRIBE_CONFIGS, _INCREMENTAL_ALTER_CONFIGS = 32, 44
_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4
_SET, _DELETE = 0, 1
_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def throttled_replicas(current: dict[Move, list[int]], moves: dict[Move, list[int]]
                       ) -> dict[str, tuple[str, str]]:
    """Per topic, the leader and follower throttled replicas Kafka's tool sets: the replicas a
    partition has now send throttled, the ones it gains fetch throttled."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for (topic, p), target in sorted(moves.items()):
        existing = current.get((topic, p), [])
        leaders.setdefault(topic, []).extend(f"{p}:{b}" for b in existing)
        followers.setdefault(topic, []).extend(f"{p}:{b}" for b in target if b not in existing)
    return {t: (",".join(leaders[t]), ",".join(followers.get(t, []))) for t in leaders}


def _set_throttles(cluster: Cluster, rate: int, current: dict[Move, list[int]],
                   moves: dict[Move, list[int]]) -> None:
    brokers = sorted({b for r in (*current.values(), *moves.values()) for b in r})
    for broker in brokers:
        _alter(cluster, broker, _BROKER_RESOURCE, str(broker),
               [(name, _SET, str(rate)) for name in _RATES])
    for topic, (leader, follower) in throttled_replicas(current, moves).items():
        changes: list[tuple[str, int, str | None]] = [(_REPLICAS[0], _SET, leader)]
        changes.append((_REPLICAS[1], _SET, follower) if follower else (_REPLICAS[1], _DELETE, None))
        _alter(cluster, None, _TOPIC_RESOURCE, topic, changes)


def _clear_throttles(cluster: Cluster, moves: dict[Move, list[int]]) -> None:
    """Remove the throttles a --throttle execution set: the topics' throttled replicas and the
    brokers' rates. Nothing is touched when the topics have no throttled replicas (no
    throttled move); a broker that cannot be reached keeps its rate, said on stderr."""
    topics = sorted({t for t, _ in moves})
    if not _throttled_topics(cluster, topics):
        return
    for topic in topics:
        _alter(cluster, None, _TOPIC_RESOURCE, topic, [(name, _DELETE, None) for name in _REPLICAS])
    cleared = []
    for broker in sorted(cluster.brokers):
        try:
            _alter(cluster, broker, _BROKER_RESOURCE, str(broker),
                   [(name, _DELETE, None) for name in _RATES])
            cleared.append(broker)
        except CliError as e:
            typer.echo(f"Could not clear the throttle rates of broker {broker} ({e}); run this "
                       "again once it is back", err=True)
    typer.echo("Throttles cleared (brokers: " + ",".join(map(str, cleared))
               + "; topics: " + ",".join(topics) + ")")


def _throttled_topics(cluster: Cluster, topics: list[str]) -> list[str]:
    """The topics among ``topics`` with throttled replicas set."""
    conn = cluster.any_conn()
    version = conn.version(_DESCRIBE_CONFIGS, 4, "DescribeConfigs")
    resp = conn.call(_DESCRIBE_CONFIGS, version, {
        "resources": [{"resource_type": _TOPIC_RESOURCE, "resource_name": t,
                       "configuration_keys": list(_REPLICAS)} for t in topics],
        "include_synonyms": False, "include_documentation": False})
    return [r.resource_name for r in resp.results
            if not r.error_code and any(c.value for c in r.configs if c.name in _REPLICAS)]


def _alter(cluster: Cluster, broker: int | None, resource_type: int, name: str,
           changes: list[tuple[str, int, str | None]]) -> None:
    """IncrementalAlterConfigs of one resource; a broker's own configs go to that broker."""
    conn = cluster.conn(broker) if broker is not None else cluster.any_conn()
    version = conn.version(_INCREMENTAL_ALTER_CONFIGS, 1, "IncrementalAlterConfigs")
    resp = conn.call(_INCREMENTAL_ALTER_CONFIGS, version, {
        "resources": [{"resource_type": resource_type, "resource_name": name,
                       "configs": [{"name": k, "config_operation": op, "value": v}
                                   for k, op, v in changes]}],
        "validate_only": False})
    result = resp.responses[0]
    if result.error_code:
        raise CliError(f"cannot set the replication throttle on {name}: "
                       f"{result.error_message or error_name(result.error_code)}")
