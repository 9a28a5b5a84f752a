"""`strom topics ...`: create, list, describe, alter and delete topics (kafka-topics.sh)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from strom.cli.common import (
    INTERNAL_TOPICS,
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
    parse_kv_list,
    print_table,
    result_of,
    uuid_text,
)

app = typer.Typer(
    help="Create, list, describe, alter and delete topics.",
    no_args_is_help=True,
)

# Kafka error codes the commands react to.
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_ALREADY_EXISTS = 36

ConfigOpt = Annotated[
    list[str] | None,
    typer.Option("--config", help="A topic config override key=value (repeatable)."),
]


@app.command("create")
@handle_errors
def create(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    partitions: Annotated[
        int | None,
        typer.Option("--partitions", "-p", min=1, help="Partitions (default: the broker's num.partitions)."),
    ] = None,
    replication_factor: Annotated[
        int | None,
        typer.Option("--replication-factor", "-r", min=1,
                     help="Replicas per partition (default: default.replication.factor)."),
    ] = None,
    config: ConfigOpt = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed quietly if the topic exists.")
    ] = False,
    validate_only: Annotated[
        bool, typer.Option("--validate-only", help="Ask the broker to validate, create nothing.")
    ] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Create a topic."""
    from confluent_kafka.admin import NewTopic

    configs = parse_kv_list(config, "topic config")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    new = NewTopic(
        name,
        num_partitions=partitions if partitions is not None else -1,
        replication_factor=replication_factor if replication_factor is not None else -1,
        config=configs,
    )
    futures = admin.create_topics(
        [new], validate_only=validate_only, operation_timeout=timeout, **admin_kwargs(opts)
    )
    try:
        result_of(futures[name], opts)
    except Exception as e:
        if kafka_error_code(e) == TOPIC_ALREADY_EXISTS and if_not_exists:
            return
        if kafka_error_code(e) == TOPIC_ALREADY_EXISTS:
            raise CliError(f"Topic '{name}' already exists.") from None
        if kafka_error_code(e) is None:
            raise
        raise CliError(f"cannot create topic '{name}': {kafka_error_text(e)}") from None
    if validate_only:
        out.print(f"Topic '{name}' is valid (validate only, nothing created).", markup=False)
    else:
        out.print(f"Created topic {name}.", markup=False)


@app.command("list")
@handle_errors
def list_(
    exclude_internal: Annotated[
        bool, typer.Option("--exclude-internal", help="Leave out internal topics (__consumer_offsets, ...).")
    ] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """List topic names, one per line."""
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    md = admin.list_topics(timeout=timeout)
    for topic in sorted(md.topics):
        if exclude_internal and topic in INTERNAL_TOPICS:
            continue
        out.print(topic, markup=False)


@dataclass
class PartitionRow:
    partition: int
    leader: int | None
    replicas: list[int]
    isr: list[int]
    offline: list[int]


@dataclass
class TopicInfo:
    name: str
    topic_id: str
    internal: bool
    partitions: list[PartitionRow]
    configs: dict[str, str]
    min_isr: int | None


def _node_id(node: Any) -> int | None:
    if node is None:
        return None
    node_id = getattr(node, "id", node)
    return None if node_id is None or node_id < 0 else int(node_id)


def _describe(admin: Any, names: list[str], opts: ClientOptions) -> tuple[list[TopicInfo], set[int]]:
    """Describe topics (partitions from DescribeTopics, overrides from DescribeConfigs)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import ConfigResource, ResourceType

    live = {n.id for n in result_of(admin.describe_cluster(**admin_kwargs(opts)), opts).nodes}
    futures = admin.describe_topics(TopicCollection(names), **admin_kwargs(opts))
    descs = {}
    for name in names:
        try:
            descs[name] = result_of(futures[name], opts)
        except Exception as e:
            if kafka_error_code(e) == UNKNOWN_TOPIC_OR_PARTITION:
                raise CliError(f"Topic '{name}' does not exist.") from None
            if kafka_error_code(e) is None:
                raise
            raise CliError(f"cannot describe topic '{name}': {kafka_error_text(e)}") from None
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    config_futures = admin.describe_configs(resources, **admin_kwargs(opts)) if resources else {}
    configs: dict[str, dict[str, Any]] = {}
    for res, fut in config_futures.items():
        try:
            configs[res.name] = result_of(fut, opts)
        except Exception as e:
            if kafka_error_code(e) is None:
                raise
            configs[res.name] = {}  # the partition layout is still worth showing
    infos = []
    for name in names:
        d = descs[name]
        entries = configs.get(name, {})
        overrides = {
            k: ("[hidden]" if e.is_sensitive else (e.value or ""))
            for k, e in sorted(entries.items())
            if not e.is_default
        }
        min_isr = None
        if "min.insync.replicas" in entries and entries["min.insync.replicas"].value:
            try:
                min_isr = int(entries["min.insync.replicas"].value)
            except ValueError:
                min_isr = None
        rows = []
        for p in sorted(d.partitions, key=lambda p: p.id):
            replicas = [r for r in (_node_id(n) for n in p.replicas) if r is not None]
            isr = [r for r in (_node_id(n) for n in p.isr) if r is not None]
            rows.append(PartitionRow(
                partition=p.id,
                leader=_node_id(p.leader),
                replicas=replicas,
                isr=isr,
                offline=[r for r in replicas if r not in live],
            ))
        infos.append(TopicInfo(name, uuid_text(d.topic_id), bool(d.is_internal), rows, overrides, min_isr))
    return infos, live


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)


@app.command("describe")
@handle_errors
def describe(
    names: Annotated[list[str] | None, typer.Argument(help="Topics to describe (default: all).")] = None,
    under_replicated_partitions: Annotated[
        bool, typer.Option("--under-replicated-partitions", help="Only partitions whose ISR is smaller than the replica set.")
    ] = False,
    unavailable_partitions: Annotated[
        bool, typer.Option("--unavailable-partitions", help="Only partitions without a live leader.")
    ] = False,
    under_min_isr_partitions: Annotated[
        bool, typer.Option("--under-min-isr-partitions", help="Only partitions whose ISR is below min.insync.replicas.")
    ] = False,
    at_min_isr_partitions: Annotated[
        bool, typer.Option("--at-min-isr-partitions", help="Only partitions whose ISR equals min.insync.replicas.")
    ] = False,
    topics_with_overrides: Annotated[
        bool, typer.Option("--topics-with-overrides", help="Only topics that have config overrides (no partitions).")
    ] = False,
    exclude_internal: Annotated[
        bool, typer.Option("--exclude-internal", help="Leave out internal topics when describing all.")
    ] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Describe topics: id, partition count, config overrides, and leader/replicas/ISR per partition."""
    filters = [under_replicated_partitions, unavailable_partitions, under_min_isr_partitions,
               at_min_isr_partitions, topics_with_overrides]
    if sum(filters) > 1:
        raise UsageError("choose at most one of the partition filters")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    if names:
        wanted = list(dict.fromkeys(names))
    else:
        md = admin.list_topics(timeout=timeout)
        wanted = sorted(t for t in md.topics if not (exclude_internal and t in INTERNAL_TOPICS))
    if not wanted:
        return
    infos, live = _describe(admin, wanted, opts)
    partition_filter = any(filters[:4])
    for info in infos:
        if topics_with_overrides and not info.configs:
            continue
        rows = info.partitions
        if under_replicated_partitions:
            rows = [r for r in rows if len(r.isr) < len(r.replicas)]
        elif unavailable_partitions:
            rows = [r for r in rows if r.leader is None or r.leader not in live]
        elif under_min_isr_partitions:
            rows = [r for r in rows if info.min_isr is not None and len(r.isr) < info.min_isr]
        elif at_min_isr_partitions:
            rows = [r for r in rows if info.min_isr is not None and len(r.isr) == info.min_isr]
        if partition_filter and not rows:
            continue
        rf = len(info.partitions[0].replicas) if info.partitions else 0
        configs = ",".join(f"{k}={v}" for k, v in info.configs.items())
        out.print(
            f"[bold]Topic:[/] {info.name}\t[bold]TopicId:[/] {info.topic_id}\t"
            f"[bold]PartitionCount:[/] {len(info.partitions)}\t[bold]ReplicationFactor:[/] {rf}\t"
            f"[bold]Configs:[/] {configs}",
            highlight=False,
        )
        if topics_with_overrides:
            continue
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col in ("Partition", "Leader", "Replicas", "Isr", "Offline"):
            table.add_column(col, justify="right" if col == "Partition" else "left")
        for r in rows:
            leader = "none" if r.leader is None else str(r.leader)
            table.add_row(str(r.partition), leader, _ids(r.replicas), _ids(r.isr), _ids(r.offline))
        print_table(table)


@app.command("alter")
@handle_errors
def alter(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    partitions: Annotated[
        int | None, typer.Option("--partitions", "-p", min=1, help="New (larger) partition count.")
    ] = None,
    config: ConfigOpt = None,
    delete_config: Annotated[
        list[str] | None, typer.Option("--delete-config", help="Remove a config override (repeatable).")
    ] = None,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Add partitions and/or change config overrides (IncrementalAlterConfigs)."""
    from confluent_kafka.admin import NewPartitions

    configs = parse_kv_list(config, "topic config")
    deletes = list(dict.fromkeys(delete_config or ()))
    if partitions is None and not configs and not deletes:
        raise UsageError("nothing to alter: give --partitions, --config or --delete-config")
    both = sorted(set(configs) & set(deletes))
    if both:
        raise UsageError(f"config {both[0]!r} is both set and deleted")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    md = admin.list_topics(topic=name, timeout=timeout)
    tmd = md.topics.get(name)
    if tmd is None or (tmd.error is not None and tmd.error.code() == UNKNOWN_TOPIC_OR_PARTITION):
        raise CliError(f"Topic '{name}' does not exist.")
    if partitions is not None:
        current = len(tmd.partitions)
        if partitions < current:
            raise CliError(f"Topic '{name}' has {current} partitions; the count can only grow.")
        if partitions > current:
            futures = admin.create_partitions([NewPartitions(name, partitions)],
                                              operation_timeout=timeout, **admin_kwargs(opts))
            try:
                result_of(futures[name], opts)
            except Exception as e:
                if kafka_error_code(e) is None:
                    raise
                raise CliError(f"cannot add partitions to '{name}': {kafka_error_text(e)}") from None
            out.print(f"Topic '{name}' now has {partitions} partitions.", markup=False)
        else:
            out.print(f"Topic '{name}' already has {partitions} partitions.", markup=False)
    if configs or deletes:
        alter_topic_configs(admin, name, configs, deletes, opts)
        out.print(f"Updated configs for topic '{name}'.", markup=False)


def alter_topic_configs(admin: Any, name: str, sets: dict[str, str], deletes: list[str],
                        opts: ClientOptions, resource_type: str = "topic") -> None:
    """IncrementalAlterConfigs: SET each of `sets`, DELETE each of `deletes`."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    rtype = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}.get(
        resource_type, ResourceType.BROKER)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
    resource = ConfigResource(rtype, name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], **admin_kwargs(opts))
    for fut in futures.values():
        try:
            result_of(fut, opts)
        except Exception as e:
            if kafka_error_code(e) == UNKNOWN_TOPIC_OR_PARTITION:
                raise CliError(f"Topic '{name}' does not exist.") from None
            if kafka_error_code(e) is None:
                raise
            raise CliError(f"cannot alter configs of {resource_type} '{name}': {kafka_error_text(e)}") from None


@app.command("delete")
@handle_errors
def delete(
    names: Annotated[list[str], typer.Argument(help="Topics to delete.")],
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="Succeed quietly for topics that do not exist.")
    ] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Delete topics."""
    names = list(dict.fromkeys(names))
    bad_internal = [n for n in names if n in INTERNAL_TOPICS]
    if bad_internal:
        raise CliError(f"Topic '{bad_internal[0]}' is internal and cannot be deleted.")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    futures = admin.delete_topics(names, operation_timeout=timeout, **admin_kwargs(opts))
    failures: list[str] = []
    for name in names:
        try:
            result_of(futures[name], opts)
            out.print(f"Deleted topic {name}.", markup=False)
        except Exception as e:
            code = kafka_error_code(e)
            if code == UNKNOWN_TOPIC_OR_PARTITION:
                if not if_exists:
                    failures.append(f"Topic '{name}' does not exist.")
                continue
            if code is None:
                raise
            failures.append(f"cannot delete topic '{name}': {kafka_error_text(e)}")
    if failures:
        raise CliError(failures[0] if len(failures) == 1 else "; ".join(failures))
