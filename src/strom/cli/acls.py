"""`strom acls ...`: add, list and remove ACLs (kafka-acls.sh), through CreateAcls,
DescribeAcls and DeleteAcls. Option names follow kafka-acls: ``--allow-principal``,
``--deny-principal``, ``--operation``, ``--topic``, ``--group``, ``--cluster``,
``--transactional-id``, ``--resource-pattern-type``, ``--allow-host``/``--deny-host``.

A broker without an authorizer answers the ACL APIs with SECURITY_DISABLED; `list` says so in
one line (exit 1) rather than showing an empty table, although librdkafka hands back an empty
list for that error of DescribeAcls: an empty answer is checked against the brokers'
`authorizer.class.name`."""

from __future__ import annotations

from collections.abc import Sequence
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
    wait_all,
)

app = typer.Typer(help="Add, list and remove ACLs.", no_args_is_help=True)

SECURITY_DISABLED = 54

OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
              "DescribeConfigs", "AlterConfigs", "IdempotentWrite")

TopicOpt = Annotated[list[str] | None, typer.Option("--topic", help="Topic (repeatable; * for all).")]
GroupOpt = Annotated[list[str] | None, typer.Option("--group", help="Group (repeatable).")]
TxnOpt = Annotated[list[str] | None, typer.Option("--transactional-id",
                                                  help="Transactional id (repeatable).")]
ClusterOpt = Annotated[bool, typer.Option("--cluster", help="The cluster resource.")]
PatternOpt = Annotated[str, typer.Option(
    "--resource-pattern-type", help="literal or prefixed (list/remove also: any, match).")]
AllowOpt = Annotated[list[str] | None, typer.Option("--allow-principal",
                                                    help="User:<name> (repeatable).")]
DenyOpt = Annotated[list[str] | None, typer.Option("--deny-principal",
                                                   help="User:<name> (repeatable).")]
OperationOpt = Annotated[list[str] | None, typer.Option(
    "--operation", help=f"One of {', '.join(OPERATIONS)} (repeatable).")]
HostOpt = Annotated[str, typer.Option("--host", help="The client host the ACL applies to.")]


def _enum(kind: Any, text: str, what: str) -> Any:
    key = "".join(c for c in text.upper() if c.isalnum())
    for member in kind:
        if member.name.replace("_", "") == key:
            return member
    raise UsageError(f"unknown {what} {text!r}")


def _resources(topic: list[str] | None, group: list[str] | None, txn: list[str] | None,
               cluster: bool, required: bool) -> list[tuple[Any, str]]:
    from confluent_kafka.admin import ResourceType

    found = [(ResourceType.TOPIC, t) for t in topic or []]
    found += [(ResourceType.GROUP, g) for g in group or []]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in txn or []]
    if cluster:
        found.append((ResourceType.BROKER, "kafka-cluster"))
    if required and not found:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    return found


def _bindings(resources, pattern, allow, deny, operations, host) -> list[Any]:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType

    if not allow and not deny:
        raise UsageError("give --allow-principal or --deny-principal")
    ops = [_enum(AclOperation, o, "operation") for o in operations or []]
    if not ops:
        raise UsageError("give at least one --operation")
    out_ = []
    for rtype, name in resources:
        for principals, permission in ((allow, AclPermissionType.ALLOW),
                                       (deny, AclPermissionType.DENY)):
            for principal in principals or []:
                for op in ops:
                    out_.append(AclBinding(rtype, name, pattern, principal, host, op, permission))
    return out_


@app.command("add")
@handle_errors
def add(topic: TopicOpt = None, group: GroupOpt = None, transactional_id: TxnOpt = None,
        cluster: ClusterOpt = False, resource_pattern_type: PatternOpt = "literal",
        allow_principal: AllowOpt = None, deny_principal: DenyOpt = None,
        operation: OperationOpt = None, host: HostOpt = "*",
        bootstrap: BootstrapOpt = "localhost:9092", command_config: CommandConfigOpt = None,
        timeout: TimeoutOpt = 10.0) -> None:
    """Add ACLs: every principal x operation x resource given."""
    from confluent_kafka.admin import ResourcePatternType

    pattern = _enum(ResourcePatternType, resource_pattern_type, "pattern type")
    bindings = _bindings(_resources(topic, group, transactional_id, cluster, True), pattern,
                         allow_principal, deny_principal, operation, host)
    opts = ClientOptions(bootstrap, command_config, timeout)
    admin, _ = make_admin(opts)
    wait_all(admin.create_acls(bindings, **admin_kwargs(opts)), opts, _describe)
    out.print(f"Added {len(bindings)} ACL(s)")


def _filter(topic, group, txn, cluster, pattern_text, principal, operation) -> list[Any]:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    pattern = _enum(ResourcePatternType, pattern_text, "pattern type")
    resources: Sequence[tuple[Any, str | None]] = _resources(topic, group, txn, cluster, False)
    if not resources:
        resources = [(ResourceType.ANY, None)]
    op = _enum(AclOperation, operation, "operation") if operation else AclOperation.ANY
    return [AclBindingFilter(rtype, name, pattern, principal, None, op, AclPermissionType.ANY)  # type: ignore[arg-type]  # confluent types a filter's fields as AclBinding's str; None matches any
            for rtype, name in resources]


@app.command("list")
@handle_errors
def list_acls(topic: TopicOpt = None, group: GroupOpt = None, transactional_id: TxnOpt = None,
              cluster: ClusterOpt = False, resource_pattern_type: PatternOpt = "any",
              principal: Annotated[str | None, typer.Option("--principal")] = None,
              bootstrap: BootstrapOpt = "localhost:9092",
              command_config: CommandConfigOpt = None, timeout: TimeoutOpt = 10.0) -> None:
    """List ACLs (all, or those of the resources and principal given)."""
    opts = ClientOptions(bootstrap, command_config, timeout)
    admin, _ = make_admin(opts)
    table = Table(box=None, pad_edge=False)
    for column in ("RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION",
                   "PERMISSION"):
        table.add_column(column)
    listed = 0
    for f in _filter(topic, group, transactional_id, cluster, resource_pattern_type, principal,
                     None):
        try:
            found = result_of(admin.describe_acls(f, **admin_kwargs(opts)), opts)
        except CliError:
            raise
        except Exception as e:
            if kafka_error_code(e) == SECURITY_DISABLED:
                raise CliError(_no_authorizer_text(1)) from None
            raise CliError(kafka_error_text(e)) from None
        listed += len(found)
        for b in sorted(found, key=_describe):
            table.add_row(_name(b.restype), b.name, _name(b.resource_pattern_type), b.principal,
                          b.host, _name(b.operation), _name(b.permission_type))
    if not listed:
        brokers = _brokers_without_authorizer(admin, opts)
        if brokers:
            raise CliError(_no_authorizer_text(brokers))
    print_table(table)


def _no_authorizer_text(brokers: int) -> str:
    where = "this broker" if brokers == 1 else f"the {brokers} brokers"
    return (f"no authorizer on {where}: ACLs are not enforced (authorizer.class.name is "
            "empty)")


def _brokers_without_authorizer(admin: Any, opts: ClientOptions) -> int:
    """How many brokers there are when none has an authorizer (their `authorizer.class.name`
    is empty), else 0; 0 too when the configs cannot be read (no DescribeConfigs permission)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    try:
        brokers = admin.list_topics(timeout=opts.timeout).brokers
        resources = [ConfigResource(ConfigResource.Type.BROKER, str(b)) for b in brokers]
        futures = admin.describe_configs(resources, **admin_kwargs(opts)) if resources else {}
        for future in futures.values():
            entry = result_of(future, opts).get("authorizer.class.name")
            if entry is None or entry.value:
                return 0
    except KafkaException:
        return 0
    return len(futures)


@app.command("remove")
@handle_errors
def remove(topic: TopicOpt = None, group: GroupOpt = None, transactional_id: TxnOpt = None,
           cluster: ClusterOpt = False, resource_pattern_type: PatternOpt = "literal",
           principal: Annotated[str | None, typer.Option("--principal")] = None,
           operation: Annotated[str | None, typer.Option("--operation")] = None,
           bootstrap: BootstrapOpt = "localhost:9092", command_config: CommandConfigOpt = None,
           timeout: TimeoutOpt = 10.0) -> None:
    """Remove the ACLs of the resources given (optionally of one principal and operation)."""
    if not (topic or group or transactional_id or cluster):
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    opts = ClientOptions(bootstrap, command_config, timeout)
    admin, _ = make_admin(opts)
    filters = _filter(topic, group, transactional_id, cluster, resource_pattern_type, principal,
                      operation)
    removed = 0
    for _f, future in admin.delete_acls(filters, **admin_kwargs(opts)).items():
        try:
            removed += len(result_of(future, opts))
        except CliError:
            raise
        except Exception as e:
            raise CliError(kafka_error_text(e)) from None
    out.print(f"Removed {removed} ACL(s)")


def _name(value: Any) -> str:
    return str(getattr(value, "name", value))


def _describe(b: Any) -> str:
    return (f"{_name(b.restype)}:{b.name}:{_name(b.resource_pattern_type)}:{b.principal}:"
            f"{b.host}:{_name(b.operation)}:{_name(b.permission_type)}")
