"""`strom configs ...`: describe and alter topic, broker and group configs and client quotas
(kafka-configs.sh)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from strom.cli import quotas
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
    parse_config_options,
    print_table,
    result_of,
)
from strom.cli.topics import UNKNOWN_TOPIC_OR_PARTITION, alter_topic_configs
from strom.cli.wire import connect_cluster, error_name

app = typer.Typer(help="Describe and alter topic, broker and group configs and client quotas.",
                  no_args_is_help=True)

TopicOpt = Annotated[str | None, typer.Option("--topic", help="The topic whose configs to use.")]
BrokerOpt = Annotated[int | None, typer.Option("--broker", help="The broker id whose configs to use.")]
GroupOpt = Annotated[str | None, typer.Option(
    "--group", help="The group whose configs to use (Kafka's group configs; the group need not "
                    "exist).")]
BrokerDefaultsOpt = Annotated[
    bool, typer.Option("--broker-defaults", help="The cluster-wide dynamic broker defaults.")
]
EntityTypeOpt = Annotated[list[str] | None, typer.Option(
    "--entity-type", help="Client quotas of users or clients (both: a user's client id); "
                          "each followed by --entity-name or --entity-default.")]
EntityNameOpt = Annotated[list[str] | None, typer.Option(
    "--entity-name", help="The user or client id of the --entity-type before it.")]
EntityDefaultOpt = Annotated[int, typer.Option(
    "--entity-default", count=True, show_default=False,
    help="The default user or client id (Kafka's <default>) of the --entity-type before it.")]

# What "dynamic" means per entity: the sources `configs describe` shows without --all.
_DYNAMIC_SOURCES = {
    "topic": {"DYNAMIC_TOPIC_CONFIG"},
    "broker": {"DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "DYNAMIC_BROKER_LOGGER_CONFIG"},
    "broker-defaults": {"DYNAMIC_DEFAULT_BROKER_CONFIG"},
    "group": {"DYNAMIC_GROUP_CONFIG"},
}


def _entity(topic: str | None, broker: int | None, broker_defaults: bool,
            group: str | None = None) -> tuple[str, str]:
    chosen = [x for x in (topic is not None, broker is not None, broker_defaults,
                          group is not None) if x]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --topic, --group, --broker or --broker-defaults")
    if topic is not None:
        if not topic:
            raise UsageError("--topic needs a topic name")
        return "topic", topic
    if group is not None:
        if not group:
            raise UsageError("--group needs a group id")
        return "group", group
    if broker is not None:
        return "broker", str(broker)
    return "broker-defaults", ""


# -- the cluster-wide broker defaults: resource name "", which librdkafka refuses to send ------

_BROKER_RESOURCE = 4
_DESCRIBE_CONFIGS, _INCREMENTAL_ALTER_CONFIGS = 32, 44
_SET, _DELETE = 0, 1


@dataclass
class _Entry:
    """One described config, shaped like confluent-kafka's ConfigEntry for the table."""

    name: str
    value: str | None
    source: int
    is_sensitive: bool
    is_read_only: bool


def _defaults_connection(opts: ClientOptions):
    cluster = connect_cluster(opts.bootstrap, opts.command_config, opts.timeout)
    if not cluster.brokers:
        raise CliError("the cluster has no brokers")
    return cluster, cluster.conn(min(cluster.brokers))


def _describe_defaults(opts: ClientOptions) -> dict[str, _Entry]:
    cluster, conn = _defaults_connection(opts)
    try:
        version = conn.version(_DESCRIBE_CONFIGS, 4, "DescribeConfigs")
        resp = conn.call(_DESCRIBE_CONFIGS, version, {
            "resources": [{"resource_type": _BROKER_RESOURCE, "resource_name": "",
                           "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
    finally:
        cluster.close()
    result = resp.results[0]
    if result.error_code:
        raise CliError("cannot describe the broker defaults: "
                       f"{result.error_message or error_name(result.error_code)}")
    return {c.name: _Entry(c.name, c.value, c.config_source, c.is_sensitive, c.read_only)
            for c in result.configs}


def _alter_defaults(opts: ClientOptions, sets: dict[str, str], deletes: list[str]) -> None:
    changes = [{"name": k, "config_operation": _SET, "value": v} for k, v in sets.items()]
    changes += [{"name": k, "config_operation": _DELETE, "value": None} for k in deletes]
    cluster, conn = _defaults_connection(opts)
    try:
        version = conn.version(_INCREMENTAL_ALTER_CONFIGS, 1, "IncrementalAlterConfigs")
        resp = conn.call(_INCREMENTAL_ALTER_CONFIGS, version, {
            "resources": [{"resource_type": _BROKER_RESOURCE, "resource_name": "",
                           "configs": changes}],
            "validate_only": False})
    finally:
        cluster.close()
    result = resp.responses[0]
    if result.error_code:
        raise CliError("cannot alter the broker defaults: "
                       f"{result.error_message or error_name(result.error_code)}")


def _source_name(source: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    if source == 8:  # confluent-kafka's GROUP_CONFIG, as Kafka's tools name it
        return "DYNAMIC_GROUP_CONFIG"
    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def _quota_entity(ctx: typer.Context, types: list[str] | None, topic: str | None,
                  broker: int | None, broker_defaults: bool, *, alter: bool,
                  group: str | None = None) -> list[tuple[str, quotas.Name]] | None:
    """The client quota entity the arguments name (None: they name a topic or broker)."""
    tokens = quotas.entity_tokens(quotas.raw_args(ctx))
    if not types:
        if tokens:
            raise UsageError("--entity-name and --entity-default need an --entity-type before "
                             "them")
        return None
    if topic is not None or broker is not None or broker_defaults or group is not None:
        raise UsageError("give either --entity-type or one of --topic, --group, --broker or "
                         "--broker-defaults")
    return quotas.pair_entity(tokens, alter=alter)


def _require_broker(admin: Any, name: str, opts: ClientOptions) -> None:
    """A broker id the cluster does not have fails at once, in one line: the admin client
    would wait its whole timeout for a connection to a node that does not exist."""
    brokers = sorted(admin.list_topics(timeout=opts.timeout).brokers)
    if int(name) not in brokers:
        raise CliError(f"broker {name} is not in the cluster (its brokers: "
                       f"{', '.join(map(str, brokers)) or 'none'})")


@app.command("describe", cls=quotas.OrderedCommand)
@handle_errors
def describe(
    ctx: typer.Context,
    topic: TopicOpt = None,
    group: GroupOpt = None,
    broker: BrokerOpt = None,
    broker_defaults: BrokerDefaultsOpt = False,
    entity_type: EntityTypeOpt = None,
    entity_name: EntityNameOpt = None,
    entity_default: EntityDefaultOpt = 0,
    all_: Annotated[bool, typer.Option("--all", help="Show every config, not only the dynamic ones.")] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Describe the configs of a topic, a group or a broker, or client quotas."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    opts = ClientOptions(bootstrap_server, command_config, timeout)
    parts = _quota_entity(ctx, entity_type, topic, broker, broker_defaults, alter=False,
                          group=group)
    if parts is not None:
        if all_:
            raise UsageError("--all applies to topic and broker configs, not to client quotas")
        quotas.print_quotas(parts, quotas.describe_quotas(opts, parts))
        return
    kind, name = _entity(topic, broker, broker_defaults, group)
    entries: dict[str, Any] = {}
    futures = {}
    if kind == "broker-defaults":
        entries = _describe_defaults(opts)
    else:
        admin, _ = make_admin(opts)
        if kind == "broker":
            _require_broker(admin, name, opts)
        rtype = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}.get(
            kind, ResourceType.BROKER)
        futures = admin.describe_configs([ConfigResource(rtype, name)], **admin_kwargs(opts))
    for fut in futures.values():
        try:
            entries = result_of(fut, opts)
        except Exception as e:
            code = kafka_error_code(e)
            if code == UNKNOWN_TOPIC_OR_PARTITION:
                raise CliError(f"Topic '{name}' does not exist.") from None
            if code is None:
                raise
            raise CliError(f"cannot describe configs of {kind} '{name}': {kafka_error_text(e)}") from None
    shown = [
        e for _, e in sorted(entries.items())
        if all_ or _source_name(e.source) in _DYNAMIC_SOURCES[kind]
    ]
    label = {"topic": f"topic {name}", "broker": f"broker {name}", "group": f"group {name}",
             "broker-defaults": "the default broker"}[kind]
    out.print(f"{'All' if all_ else 'Dynamic'} configs for {label}:", markup=False)
    if not shown:
        out.print("  (none)", markup=False)
        return
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for col in ("Name", "Value", "Source", "Sensitive", "Read-only"):
        table.add_column(col)
    for entry in shown:
        value = ("[hidden]" if entry.is_sensitive
                 else "null" if entry.value is None else entry.value)
        table.add_row(entry.name, value, _source_name(entry.source),
                      str(entry.is_sensitive).lower(), str(entry.is_read_only).lower())
    print_table(table)


@app.command("alter", cls=quotas.OrderedCommand)
@handle_errors
def alter(
    ctx: typer.Context,
    topic: TopicOpt = None,
    group: GroupOpt = None,
    broker: BrokerOpt = None,
    broker_defaults: BrokerDefaultsOpt = False,
    entity_type: EntityTypeOpt = None,
    entity_name: EntityNameOpt = None,
    entity_default: EntityDefaultOpt = 0,
    add_config: Annotated[
        list[str] | None,
        typer.Option("--add-config", help="k=v[,k2=v2] (Kafka syntax: lists in \\[a,b]); repeatable."),
    ] = None,
    delete_config: Annotated[
        list[str] | None, typer.Option("--delete-config", help="k[,k2] to remove; repeatable.")
    ] = None,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Set or remove configs of a topic, a group or a broker (IncrementalAlterConfigs), or
    client quotas (AlterClientQuotas)."""
    parts = _quota_entity(ctx, entity_type, topic, broker, broker_defaults, alter=True,
                          group=group)
    sets = parse_config_options(add_config)
    deletes = [k.strip() for item in delete_config or () for k in item.split(",") if k.strip()]
    if not sets and not deletes:
        raise UsageError("nothing to alter: give --add-config or --delete-config")
    if parts is not None:
        _alter_quotas(ClientOptions(bootstrap_server, command_config, timeout), parts, sets,
                      list(dict.fromkeys(deletes)))
        return
    kind, name = _entity(topic, broker, broker_defaults, group)
    both = sorted(set(sets) & set(deletes))
    if both:
        raise UsageError(f"config {both[0]!r} is both added and deleted")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    if kind == "broker-defaults":
        _alter_defaults(opts, sets, list(dict.fromkeys(deletes)))
    else:
        admin, _ = make_admin(opts)
        if kind == "broker":
            _require_broker(admin, name, opts)
        alter_topic_configs(admin, name, sets, list(dict.fromkeys(deletes)), opts,
                            resource_type=kind)
    label = {"topic": f"topic '{name}'", "broker": f"broker {name}", "group": f"group '{name}'",
             "broker-defaults": "the default broker"}[kind]
    out.print(f"Completed updating configs for {label}.", markup=False)


def _alter_quotas(opts: ClientOptions, parts: list[tuple[str, quotas.Name]],
                  sets: dict[str, str], deletes: list[str]) -> None:
    both = sorted(set(sets) & set(deletes))
    if both:
        raise UsageError(f"Invalid config(s): {', '.join(both)}")
    kind = "users" if dict(parts).keys() == {"user"} else "clients"
    values = quotas.parse_quota_values(kind, sets)
    named = [(t, n) for t, n in parts if not isinstance(n, quotas.Any_)]
    quotas.alter_quotas(opts, named, values, deletes)
    out.print(f"Completed updating quotas for {quotas.entity_label(parts)}.", markup=False)
