"""`strom groups ...`: list, describe, delete consumer groups and reset their offsets
(kafka-consumer-groups.sh); list and describe share groups too (kafka-share-groups.sh).

Everything goes through librdkafka's AdminClient, so the commands work against any Kafka
broker, except for share groups, which librdkafka's admin client does not know: those are
listed and described with Strom's own wire client (ListGroups v5, ShareGroupDescribe,
DescribeShareGroupOffsets; PLAINTEXT listeners only). `reset-offsets` is a dry run unless `--execute` is given, and refuses to touch a group
that still has members, as Kafka's tool does.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from strom.cli.common import (
    BootstrapOpt,
    ClientOptions,
    CliError,
    CommandConfigOpt,
    TimeoutOpt,
    UsageError,
    admin_kwargs,
    handle_errors,
    kafka_error_code,
    kafka_error_text,
    make_admin,
    out,
    print_table,
    result_of,
    warn_line,
)

app = typer.Typer(help="List, describe and delete consumer groups; reset their offsets.",
                  no_args_is_help=True)

GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
UNKNOWN_TOPIC_OR_PARTITION = 3

# librdkafka's state enum -> Kafka's state names (what the broker and Kafka's tool print)
_STATE_NAMES = {"PREPARING_REBALANCING": "PreparingRebalance",
                "COMPLETING_REBALANCING": "CompletingRebalance", "STABLE": "Stable",
                "DEAD": "Dead", "EMPTY": "Empty", "UNKNOWN": "Unknown"}
KNOWN_STATES = ("Empty", "Stable", "PreparingRebalance", "CompletingRebalance", "Dead",
                "Assigning", "Reconciling")


def state_name(state: Any) -> str:
    name = getattr(state, "name", None) or str(state)
    return _STATE_NAMES.get(name, name)


def type_name(group_type: Any) -> str:
    name = getattr(group_type, "name", None) or str(group_type)
    return name.lower()


# --------------------------------------------------------------------------------------------
# list
# --------------------------------------------------------------------------------------------


@app.command("list")
@handle_errors
def list_(
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help="Only groups in this state (repeatable; Stable, Empty, "
                                     "PreparingRebalance, CompletingRebalance, Assigning, "
                                     "Reconciling, Dead). Also prints each group's state."),
    ] = None,
    group_type: Annotated[
        str | None, typer.Option("--type", help="Only groups of this type: classic, consumer or "
                                                "share.")
    ] = None,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """List consumer groups, one per line (with --state: a table of groups and states)."""
    wanted = set()
    for s in state or ():
        match = [k for k in KNOWN_STATES if k.lower() == s.strip().lower()]
        if not match:
            raise UsageError(f"unknown group state {s!r}: expected one of "
                             f"{', '.join(KNOWN_STATES)}")
        wanted.add(match[0])
    if group_type is not None and group_type.lower() not in ("classic", "consumer", "share"):
        raise UsageError(f"unknown group type {group_type!r}: expected classic, consumer or share")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    listings: list[tuple[str, str, str]] = []  # (group, state, type)
    if group_type is None or group_type.lower() != "share":
        admin, _ = make_admin(opts)
        result = result_of(admin.list_consumer_groups(**admin_kwargs(opts)), opts)
        for error in result.errors:
            warn_line(f"cannot list the groups of one broker: {kafka_error_text(error)}")
        listings = [(g.group_id, state_name(g.state), type_name(g.type)) for g in result.valid]
    if group_type is None or group_type.lower() == "share":
        listings += [(g, s, "share") for g, s in list_share_groups(opts, quiet=group_type is None)]
    listings.sort()
    if group_type is not None:
        listings = [g for g in listings if g[2] == group_type.lower()]
    if wanted:
        listings = [g for g in listings if g[1] in wanted]
    if state is None:
        for g in listings:
            out.print(g[0], markup=False, highlight=False)
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("GROUP", "STATE", "TYPE"):
        table.add_column(col)
    for g in listings:
        table.add_row(*g)
    print_table(table)


# --------------------------------------------------------------------------------------------
# share groups (KIP-932): Strom's wire client, librdkafka's admin client has no share APIs
# --------------------------------------------------------------------------------------------

LIST_GROUPS, FIND_COORDINATOR = 16, 10
SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_GROUP_OFFSETS = 77, 90


def _share_cluster(opts: ClientOptions, *, quiet: bool = False) -> Any | None:
    from strom.cli.wire import connect_cluster

    try:
        return connect_cluster(opts.bootstrap, opts.command_config, opts.timeout)
    except UsageError as exc:  # not PLAINTEXT: share groups cannot be reached
        if not quiet:
            warn_line(f"share groups are left out: {exc}")
        return None


def list_share_groups(opts: ClientOptions, *, quiet: bool = False) -> list[tuple[str, str]]:
    """(group, state) of every share group, from every broker (ListGroups v5, type share);
    `quiet`: nothing said when the listener is not PLAINTEXT (share groups left out)."""
    cluster = _share_cluster(opts, quiet=quiet)
    if cluster is None:
        return []
    found: dict[str, str] = {}
    try:
        for broker_id in sorted(cluster.brokers):
            conn = cluster.conn(broker_id)
            if conn.versions.get(LIST_GROUPS, (0, 0))[1] < 5:
                continue  # no group types before v5: a broker without share groups
            r = conn.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
            if r.error_code:
                warn_line(f"cannot list the share groups of broker {broker_id}: error "
                          f"{r.error_code}")
            found.update({g.group_id: g.group_state for g in r.groups if g.group_type == "share"})
    finally:
        cluster.close()
    return sorted(found.items())


@dataclass
class ShareView:
    group_id: str
    state: str
    coordinator: str
    assignor: str
    members: list[Any]
    offsets: list[tuple[str, int, int, int]]  # (topic, partition, start offset, lag); -1: none


def describe_share_group(opts: ClientOptions, group: str) -> ShareView | None:
    """A share group's members and start offsets (None: no share group of that name)."""
    from strom.cli.wire import error_name

    cluster = _share_cluster(opts, quiet=True)
    if cluster is None:
        return None
    try:
        conn = cluster.any_conn()
        if conn.versions.get(SHARE_GROUP_DESCRIBE) is None:
            return None  # a broker without share groups
        found = conn.call(FIND_COORDINATOR, conn.version(FIND_COORDINATOR, 4, "FindCoordinator"),
                          {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
        if found.error_code or found.node_id not in cluster.brokers:
            return None
        conn = cluster.conn(found.node_id)
        (desc,) = conn.call(SHARE_GROUP_DESCRIBE, 1, {
            "group_ids": [group], "include_authorized_operations": False}).groups
        if desc.error_code == GROUP_ID_NOT_FOUND:
            return None
        if desc.error_code:
            raise CliError(f"cannot describe share group '{group}': {error_name(desc.error_code)}"
                           f"{': ' + desc.error_message if desc.error_message else ''}")
        (offsets,) = conn.call(DESCRIBE_SHARE_GROUP_OFFSETS, 1, {
            "groups": [{"group_id": group, "topics": None}]}).groups
        rows = [(t.topic_name, p.partition_index, p.start_offset, p.lag)
                for t in offsets.topics for p in t.partitions if not p.error_code]
        return ShareView(group, desc.group_state, f"{found.host}:{found.port} ({found.node_id})",
                         desc.assignor_name or "-", list(desc.members), sorted(rows))
    finally:
        cluster.close()


def _print_share(view: ShareView, what: str) -> None:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    if what == "state":
        for col in ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "TYPE",
                    "#MEMBERS"):
            table.add_column(col, justify="right" if col == "#MEMBERS" else "left")
        table.add_row(view.group_id, view.coordinator, view.assignor, view.state, "share",
                      str(len(view.members)))
    elif what == "members":
        for col in ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"):
            table.add_column(col, justify="right" if col == "#PARTITIONS" else "left")
        for m in view.members:
            tps = m.assignment.topic_partitions if m.assignment else []
            assignment = ", ".join(f"{t.topic_name}({','.join(map(str, sorted(t.partitions)))})"
                                   for t in sorted(tps, key=lambda t: t.topic_name)) or "-"
            table.add_row(view.group_id, m.member_id, m.client_host, m.client_id,
                          str(sum(len(t.partitions) for t in tps)), assignment)
    else:
        if not view.members:
            out.print(f"Share group '{view.group_id}' has no active members.", markup=False)
        if not view.offsets:
            out.print(f"Share group '{view.group_id}' has not started on any partition.",
                      markup=False)
            return
        for col in ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"):
            table.add_column(col, justify="left" if col in ("GROUP", "TOPIC") else "right")
        for topic, partition, start, lag in view.offsets:
            table.add_row(view.group_id, topic, str(partition), "-" if start < 0 else str(start),
                          "-" if lag < 0 else str(lag))
    print_table(table)


# --------------------------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------------------------


@dataclass
class GroupView:
    group_id: str
    state: str
    group_type: str
    assignor: str
    coordinator: str
    members: list[Any]
    committed: dict[tuple[str, int], int]
    log_end: dict[tuple[str, int], int]

    def owner(self, topic: str, partition: int) -> Any | None:
        for m in self.members:
            for tp in m.assignment.topic_partitions:
                if tp.topic == topic and tp.partition == partition:
                    return m
        return None


def describe_group(admin: Any, opts: ClientOptions, group: str, *, offsets: bool = True,
                   missing_ok: bool = False) -> GroupView | None:
    """Group description, committed offsets and log-end offsets (None: no such group)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    try:
        desc = result_of(admin.describe_consumer_groups([group], **admin_kwargs(opts))[group],
                         opts)
    except Exception as exc:
        if kafka_error_code(exc) == GROUP_ID_NOT_FOUND:
            if missing_ok:
                return None
            raise CliError(f"Consumer group '{group}' does not exist.") from None
        if kafka_error_code(exc) is None:
            raise
        raise CliError(f"cannot describe group '{group}': {kafka_error_text(exc)}") from None
    state = state_name(desc.state)
    if state == "Dead" and not desc.members:
        if missing_ok:
            return None
        raise CliError(f"Consumer group '{group}' does not exist.")
    node = desc.coordinator
    coordinator = f"{node.host}:{node.port} ({node.id})" if node is not None else "-"
    view = GroupView(group, state, type_name(getattr(desc, "type", "")),
                     desc.partition_assignor or "", coordinator, list(desc.members), {}, {})
    if not offsets:
        return view
    request = [ConsumerGroupTopicPartitions(group)]
    listed = result_of(admin.list_consumer_group_offsets(request, **admin_kwargs(opts))[group],
                       opts)
    for tp in listed.topic_partitions or ():
        if tp.error is None and tp.offset >= 0:
            view.committed[(tp.topic, tp.partition)] = tp.offset
    partitions = set(view.committed)
    for m in view.members:
        partitions |= {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
    view.log_end = log_end_offsets(admin, opts, partitions, OffsetSpec.latest(), TopicPartition)
    return view


def log_end_offsets(admin: Any, opts: ClientOptions, partitions: set[tuple[str, int]], spec: Any,
                    tp_type: Any) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    futures = admin.list_offsets({tp_type(t, p): spec for t, p in partitions},
                                 **admin_kwargs(opts))
    out_: dict[tuple[str, int], int] = {}
    for tp, fut in futures.items():
        try:
            out_[(tp.topic, tp.partition)] = result_of(fut, opts).offset
        except Exception as exc:
            if kafka_error_code(exc) is None:
                raise
    return out_


@app.command("describe")
@handle_errors
def describe(
    groups: Annotated[list[str], typer.Argument(help="Group id(s).", show_default=False)],
    members: Annotated[
        bool, typer.Option("--members", help="One row per member: id, host, client, assignment.")
    ] = False,
    state: Annotated[
        bool, typer.Option("--state", help="Only the group's state, coordinator and size.")
    ] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Describe groups: per partition the committed offset, log-end offset, lag and owner."""
    if members and state:
        raise UsageError("give at most one of --members and --state")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    for i, group in enumerate(groups):
        if i:
            out.print()
        view = describe_group(admin, opts, group, offsets=not state and not members,
                              missing_ok=True)
        if view is None:  # not a consumer group: a share group?
            share = describe_share_group(opts, group)
            if share is None:
                raise CliError(f"Consumer group '{group}' does not exist.")
            _print_share(share, "state" if state else "members" if members else "offsets")
            continue
        if state:
            _print_state(view)
        elif members:
            _print_members(view)
        else:
            _print_offsets(view)


def _print_state(view: GroupView) -> None:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "TYPE", "#MEMBERS"):
        table.add_column(col, justify="right" if col == "#MEMBERS" else "left")
    table.add_row(view.group_id, view.coordinator, view.assignor or "-", view.state,
                  view.group_type, str(len(view.members)))
    print_table(table)


def _print_members(view: GroupView) -> None:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                "ASSIGNMENT"):
        table.add_column(col, justify="right" if col == "#PARTITIONS" else "left")
    for m in view.members:
        tps = m.assignment.topic_partitions
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        assignment = ", ".join(f"{t}({','.join(map(str, sorted(ps)))})"
                               for t, ps in sorted(by_topic.items())) or "-"
        table.add_row(view.group_id, m.member_id, m.group_instance_id or "-", m.host,
                      m.client_id, str(len(tps)), assignment)
    print_table(table)


def _print_offsets(view: GroupView) -> None:
    if not view.members:
        out.print(f"Consumer group '{view.group_id}' has no active members.", markup=False)
    rows = sorted(set(view.committed) | set(view.log_end))
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                "CONSUMER-ID", "HOST", "CLIENT-ID"):
        right = col in ("PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
        table.add_column(col, justify="right" if right else "left")
    for topic, partition in rows:
        current = view.committed.get((topic, partition))
        end = view.log_end.get((topic, partition))
        lag = end - current if current is not None and end is not None else None
        owner = view.owner(topic, partition)
        table.add_row(view.group_id, topic, str(partition), _num(current), _num(end), _num(lag),
                      owner.member_id if owner else "-", owner.host if owner else "-",
                      owner.client_id if owner else "-")
    if not rows:
        out.print(f"Consumer group '{view.group_id}' has no committed offsets and no assigned "
                  "partitions.", markup=False)
        return
    print_table(table)


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


# --------------------------------------------------------------------------------------------
# delete
# --------------------------------------------------------------------------------------------


@app.command("delete")
@handle_errors
def delete(
    groups: Annotated[list[str], typer.Argument(help="Group id(s).", show_default=False)],
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Delete groups (and their committed offsets); only groups without members."""
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    futures = admin.delete_consumer_groups(list(groups), **admin_kwargs(opts))
    failed = []
    for group in groups:
        try:
            result_of(futures[group], opts)
        except Exception as exc:
            code = kafka_error_code(exc)
            if code is None:
                raise
            reason = {GROUP_ID_NOT_FOUND: "the group does not exist",
                      NON_EMPTY_GROUP: "the group is not empty"}.get(code, kafka_error_text(exc))
            failed.append(f"'{group}' ({reason})")
    done = [g for g in groups if all(not f.startswith(f"'{g}'") for f in failed)]
    if done:
        out.print("Deletion of requested consumer groups ("
                  + ", ".join(f"'{g}'" for g in done) + ") was successful.", markup=False)
    if failed:
        raise CliError("cannot delete group " + ", ".join(failed))


# --------------------------------------------------------------------------------------------
# reset-offsets
# --------------------------------------------------------------------------------------------

_DURATION = re.compile(
    r"^(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?:T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?(?:(?P<s>[-+]?\d+(?:[.,]\d{1,9})?)S)?)?$",
    re.IGNORECASE)


def parse_duration(text: str) -> dt.timedelta:
    """ISO-8601 durations as Java's Duration.parse reads them: PnDTnHnMn.nS (e.g. PT1H30M)."""
    m = _DURATION.match(text.strip())
    if m is None or text.strip().upper().endswith("T") or not any(
            m.group(k) for k in ("d", "h", "m", "s")):
        raise UsageError(f"invalid duration {text!r}: expected ISO-8601 like P1DT2H or PT30M")
    delta = dt.timedelta(days=int(m.group("d") or 0), hours=int(m.group("h") or 0),
                         minutes=int(m.group("m") or 0),
                         seconds=float((m.group("s") or "0").replace(",", ".")))
    return -delta if m.group("sign") == "-" else delta


def parse_datetime(text: str) -> int:
    """An ISO-8601 date-time (local time when it has no offset) -> epoch milliseconds."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"invalid date-time {text!r}: expected ISO-8601 like "
                         "2024-05-01T12:00:00 or 2024-05-01T12:00:00.000+02:00") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time zone, as Kafka's tool
    return int(when.timestamp() * 1000)


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """`topic` or `topic:0,1,2`."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise UsageError(f"invalid --topic {spec!r}: expected TOPIC or TOPIC:P[,P...]")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in parts.split(",") if p.strip() != ""})
    except ValueError:
        raise UsageError(f"invalid partitions in --topic {spec!r}") from None
    if not partitions or any(p < 0 for p in partitions):
        raise UsageError(f"invalid partitions in --topic {spec!r}")
    return topic, partitions


@app.command("reset-offsets")
@handle_errors
def reset_offsets(
    group: Annotated[str, typer.Option("--group", "-g", help="The group whose offsets to reset.",
                                       show_default=False)],
    topic: Annotated[
        list[str] | None,
        typer.Option("--topic", help="TOPIC or TOPIC:P[,P...] (repeatable)."),
    ] = None,
    all_topics: Annotated[
        bool, typer.Option("--all-topics", help="Every topic the group has offsets for.")
    ] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="The log start.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="The log end.")] = False,
    to_offset: Annotated[
        int | None, typer.Option("--to-offset", help="This offset (kept within the log).")
    ] = None,
    shift_by: Annotated[
        int | None, typer.Option("--shift-by", help="The committed offset plus N (N may be < 0).")
    ] = None,
    to_datetime: Annotated[
        str | None,
        typer.Option("--to-datetime", help="The first offset at or after this ISO-8601 time."),
    ] = None,
    by_duration: Annotated[
        str | None,
        typer.Option("--by-duration", help="The first offset at or after now minus this "
                                           "ISO-8601 duration (PnDTnHnMnS)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show the new offsets (the default).")
    ] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Commit the new offsets.")] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Move a group's committed offsets; the group must have no active members."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    scenarios = [to_earliest, to_latest, to_offset is not None, shift_by is not None,
                 to_datetime is not None, by_duration is not None]
    if sum(scenarios) != 1:
        raise UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, "
                         "--shift-by, --to-datetime, --by-duration")
    if dry_run and execute:
        raise UsageError("give at most one of --dry-run and --execute")
    if bool(topic) == all_topics:
        raise UsageError("give --topic (repeatable) or --all-topics")
    specs = [parse_topic_spec(t) for t in topic or ()]
    timestamp = None
    if to_datetime is not None:
        timestamp = parse_datetime(to_datetime)
    elif by_duration is not None:
        timestamp = int((dt.datetime.now(dt.UTC)
                         - parse_duration(by_duration)).timestamp() * 1000)

    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    view = describe_group(admin, opts, group, offsets=False, missing_ok=True)
    if view is not None and (view.members or view.state not in ("Empty", "Dead")):
        raise CliError(f"Assignments can only be reset if the group '{group}' is inactive, but "
                       f"the current state is {view.state}.")
    committed = _committed(admin, opts, group, ConsumerGroupTopicPartitions)
    partitions = _target_partitions(admin, opts, specs, committed, all_topics)
    earliest = log_end_offsets(admin, opts, partitions, OffsetSpec.earliest(), TopicPartition)
    latest = log_end_offsets(admin, opts, partitions, OffsetSpec.latest(), TopicPartition)
    by_time: dict[tuple[str, int], int] = {}
    if timestamp is not None:
        by_time = log_end_offsets(admin, opts, partitions, OffsetSpec.for_timestamp(timestamp),
                                  TopicPartition)
    plan: dict[tuple[str, int], int] = {}
    for tp in sorted(partitions):
        lo, hi = earliest.get(tp), latest.get(tp)
        if lo is None or hi is None:
            raise CliError(f"cannot read the offsets of {tp[0]}-{tp[1]}")
        if to_earliest:
            new = lo
        elif to_latest:
            new = hi
        elif to_offset is not None:
            new = to_offset
        elif shift_by is not None:
            if tp not in committed:
                raise CliError(f"cannot shift the offset of {tp[0]}-{tp[1]}: the group has no "
                               "committed offset for it")
            new = committed[tp] + shift_by
        else:
            found = by_time.get(tp, -1)
            new = found if found >= 0 else hi
        plan[tp] = min(max(new, lo), hi)
    if execute:
        request = [ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, off) for (t, p), off in plan.items()])]
        try:
            result_of(admin.alter_consumer_group_offsets(request, **admin_kwargs(opts))[group],
                      opts)
        except Exception as exc:
            if kafka_error_code(exc) is None:
                raise
            raise CliError(f"cannot reset the offsets of group '{group}': "
                           f"{kafka_error_text(exc)}") from None
    else:
        warn_line("nothing was changed: this is a dry run (add --execute to commit the new "
                  "offsets)")
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"):
        table.add_column(col, justify="left" if col in ("GROUP", "TOPIC") else "right")
    for (t, p), new in plan.items():
        table.add_row(group, t, str(p), _num(committed.get((t, p))), str(new))
    print_table(table)


def _committed(admin: Any, opts: ClientOptions, group: str, cgtp: Any) -> dict[tuple[str, int], int]:
    listed = result_of(admin.list_consumer_group_offsets([cgtp(group)],
                                                         **admin_kwargs(opts))[group], opts)
    return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions or ()
            if tp.error is None and tp.offset >= 0}


def _target_partitions(admin: Any, opts: ClientOptions, specs: list[tuple[str, list[int] | None]],
                       committed: dict[tuple[str, int], int], all_topics: bool
                       ) -> set[tuple[str, int]]:
    if all_topics:
        if not committed:
            raise CliError("the group has no committed offsets: name the topics with --topic")
        return set(committed)
    metadata = admin.list_topics(timeout=opts.timeout)
    out_: set[tuple[str, int]] = set()
    for name, partitions in specs:
        info = metadata.topics.get(name)
        if info is None or info.error is not None:
            raise CliError(f"Topic '{name}' does not exist.")
        existing = set(info.partitions)
        for p in partitions if partitions is not None else sorted(existing):
            if p not in existing:
                raise CliError(f"Topic '{name}' has no partition {p}.")
            out_.add((name, p))
    return out_
