"""Client quotas for `strom configs`: Kafka's kafka-configs entity syntax, and the wire calls.

``--entity-type users|clients`` each followed by ``--entity-name NAME`` or ``--entity-default``;
as in kafka-configs, names pair with types by their order on the command line (click collects
each option separately, so the order is read from the raw arguments, see `OrderedCommand`).
librdkafka has no client quota admin API: DescribeClientQuotas and AlterClientQuotas are
spoken through strom.cli.wire.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer
from rich.table import Table
from typer.core import TyperCommand

from strom.cli.common import ClientOptions, CliError, UsageError, out, print_table
from strom.cli.wire import connect_cluster, error_name

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
WHOLE_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate"})
# kafka-configs' entity types -> the protocol's
TYPES = {"users": "user", "clients": "client-id"}
RAW_ARGS = "strom.raw_args"


class Any_:
    """An entity type given without a name: describe every name (never in an alteration)."""

    def __repr__(self) -> str:
        return "ANY"


ANY = Any_()
Name = str | None | Any_


class OrderedCommand(TyperCommand):
    """Keeps the raw arguments in the context (``ctx.meta[RAW_ARGS]``): the pairing of
    --entity-type with --entity-name/--entity-default is positional."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta[RAW_ARGS] = list(args)
        return super().parse_args(ctx, args)


def raw_args(ctx: typer.Context) -> list[str]:
    return list(ctx.meta.get(RAW_ARGS, ()))


def entity_tokens(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """("type", t), ("name", n) and ("default", None) in command line order."""
    tokens: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        option, eq, value = arg.partition("=")
        if option in ("--entity-type", "--entity-name"):
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            tokens.append(("type" if option == "--entity-type" else "name", value))
        elif arg == "--entity-default":
            tokens.append(("default", None))
        elif arg in ("--add-config", "--delete-config", "--bootstrap-server", "-b", "--topic",
                     "--broker", "--command-config", "--timeout"):
            i += 1  # its value may look like anything
        i += 1
    return tokens


def pair_entity(tokens: Sequence[tuple[str, str | None]], *, alter: bool
                ) -> list[tuple[str, Name]]:
    """(protocol entity type, name | None for the default | ANY) per --entity-type, with
    kafka-configs' checks and messages."""
    types = [v or "" for k, v in tokens if k == "type"]
    names: list[str | None] = [v for k, v in tokens if k != "type"]
    if len(names) > len(types):
        raise UsageError("More entity names specified than entity types")
    duplicated = sorted({t for t in types if types.count(t) > 1})
    if duplicated:
        raise UsageError(f"Duplicate entity type(s) specified: {', '.join(duplicated)}")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise UsageError("Only 'users' and 'clients' entity types may be specified together")
    for t in types:
        if t == "ips":
            raise UsageError("Strom does not enforce connection_creation_rate: quotas of ip "
                             "entities are not supported")
        if t not in TYPES:
            raise UsageError(f"--entity-type {t!r}: use users or clients (for topic and broker "
                             "configs, --topic, --broker or --broker-defaults)")
    if alter and len(names) < len(types):
        if len(types) == 1:
            raise UsageError("An entity-name or default entity must be specified with --alter "
                             "of users, clients, brokers or ips")
        raise UsageError("An entity name must be specified for every entity type")
    for name in names:
        if name == "":
            raise UsageError("--entity-name needs a name (the default entity: --entity-default)")
    padded: list[Name] = [*names, *[ANY] * (len(types) - len(names))]
    return [(TYPES[t], n) for t, n in zip(types, padded, strict=True)]


def entity_label(parts: Sequence[tuple[str, Name]]) -> str:
    """As kafka-configs says it: "user-principal 'alice', client-id 'app'", "the default
    user-principal", "every client-id"."""
    words = {"user": "user-principal", "client-id": "client-id"}
    shown = []
    for i, (t, n) in enumerate(sorted(parts, key=lambda p: p[0] != "user")):
        if n is None:
            shown.append(f"{'the ' if i == 0 else ''}default {words[t]}")
        elif isinstance(n, Any_):
            shown.append(f"every {words[t]}")
        else:
            shown.append(f"{words[t]} '{n}'")
    return ", ".join(shown)


def parse_quota_values(kind: str, sets: dict[str, str]) -> dict[str, float]:
    """--add-config values as numbers; only quota keys (kafka-configs' messages)."""
    unexpected = sorted(k for k in sets if k not in QUOTA_KEYS)
    if unexpected:
        raise UsageError(f"Only quota configs can be added for '{kind}' using "
                         f"--bootstrap-server. Unexpected config names: {', '.join(unexpected)}")
    values: dict[str, float] = {}
    for k, v in sets.items():
        try:
            values[k] = float(v)
        except ValueError:
            raise UsageError(f"Cannot parse quota configuration value for {k}: {v}") from None
    return values


def format_value(key: str, value: float) -> str:
    if key in WHOLE_KEYS and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return repr(value)


@dataclass(frozen=True)
class QuotaEntry:
    parts: tuple[tuple[str, str | None], ...]
    values: dict[str, float]


def _call(opts: ClientOptions, api_key: int, name: str, body: dict[str, Any]) -> Any:
    cluster = connect_cluster(opts.bootstrap, opts.command_config, opts.timeout)
    try:
        conn = cluster.any_conn()
        return conn.call(api_key, conn.version(api_key, 1, name), body)
    finally:
        cluster.close()


def describe_quotas(opts: ClientOptions, parts: Sequence[tuple[str, Name]]) -> list[QuotaEntry]:
    """The entities with exactly these parts (kafka-configs asks strictly too)."""
    components = []
    for t, n in parts:
        if isinstance(n, Any_):
            components.append({"entity_type": t, "match_type": MATCH_SPECIFIED, "match": None})
        elif n is None:
            components.append({"entity_type": t, "match_type": MATCH_DEFAULT, "match": None})
        else:
            components.append({"entity_type": t, "match_type": MATCH_EXACT, "match": n})
    resp = _call(opts, DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas",
                 {"components": components, "strict": True})
    if resp.error_code:
        raise CliError(resp.error_message or error_name(resp.error_code))
    entries = [QuotaEntry(tuple(sorted((e.entity_type, e.entity_name) for e in x.entity)),
                          {v.key: v.value for v in x.values}) for x in resp.entries or ()]
    return sorted(entries, key=lambda e: [(t != "user", n is not None, n or "")
                                          for t, n in sorted(e.parts, key=lambda p: p[0] != "user")])


def alter_quotas(opts: ClientOptions, parts: Sequence[tuple[str, str | None]],
                 sets: dict[str, float], deletes: Sequence[str]) -> None:
    ops = [{"key": k, "value": v, "remove": False} for k, v in sets.items()]
    ops += [{"key": k, "value": 0.0, "remove": True} for k in deletes]
    resp = _call(opts, ALTER_CLIENT_QUOTAS, "AlterClientQuotas", {
        "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in parts],
                     "ops": ops}],
        "validate_only": False})
    for entry in resp.entries:
        if entry.error_code:
            raise CliError(entry.error_message or error_name(entry.error_code))


def print_quotas(parts: Sequence[tuple[str, Name]], entries: Sequence[QuotaEntry]) -> None:
    out.print(f"Quota configs for {entity_label(parts)}:", markup=False)
    if not entries:
        out.print("  (none)", markup=False)
        return
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    types = [t for t, _ in sorted(parts, key=lambda p: p[0] != "user")]
    headers = {"user": "User", "client-id": "Client-id"}
    for t in types:
        table.add_column(headers[t])
    table.add_column("Quota")
    table.add_column("Value")
    for e in entries:
        names = dict(e.parts)
        shown = ["<default>" if names.get(t) is None else str(names[t]) for t in types]
        for key, value in sorted(e.values.items()):
            table.add_row(*shown, key, format_value(key, value))
    print_table(table)
