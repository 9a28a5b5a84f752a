"""`strom transactions ...`: list and describe transactions (kafka-transactions.sh).

librdkafka has no ListTransactions/DescribeTransactions admin calls, so these commands speak
the two APIs themselves over a plain TCP connection, with Strom's Kafka protocol codec: Metadata
for the brokers, ListTransactions on every broker (each coordinates a slice of
`__transaction_state`), FindCoordinator + DescribeTransactions for single ids. They work against
any Kafka broker that has the APIs (Kafka 3.0+). Only PLAINTEXT listeners are supported.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Annotated, Any

import typer
from rich.console import JustifyMethod
from rich.table import Table

from strom.cli.common import (
    EXIT_UNREACHABLE,
    BootstrapOpt,
    CliError,
    CommandConfigOpt,
    TimeoutOpt,
    UsageError,
    error_line,
    handle_errors,
    print_table,
    warn_line,
)
from strom.cli.wire import Cluster, connect_cluster, error_name

app = typer.Typer(help="List and describe transactions (their coordinators' view).",
                  no_args_is_help=True)

FIND_COORDINATOR = 10
LIST_TRANSACTIONS, DESCRIBE_TRANSACTIONS = 66, 65
TRANSACTION_KEY = 1
KNOWN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                "CompleteAbort", "PrepareEpochFence")
_RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def _ms_text(ms: int) -> str:
    if ms < 0:
        return "None"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


# --------------------------------------------------------------------------------------------
# list
# --------------------------------------------------------------------------------------------


@app.command("list")
@handle_errors
def list_(
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help="Only transactions in this state (repeatable): "
                                     + ", ".join(KNOWN_STATES) + "."),
    ] = None,
    producer_id: Annotated[
        list[int] | None,
        typer.Option("--producer-id", help="Only transactions of this producer id (repeatable)."),
    ] = None,
    duration_ms: Annotated[
        int | None,
        typer.Option("--duration-ms", min=0,
                     help="Only transactions running longer than this (ListTransactions v1+)."),
    ] = None,
    pattern: Annotated[
        str | None,
        typer.Option("--pattern", help="Only transactional ids matching this regular "
                                       "expression (ListTransactions v2+)."),
    ] = None,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """List the transactional ids every coordinator knows, with producer id and state."""
    wanted_states = []
    for s in state or ():
        match = [k for k in KNOWN_STATES if k.lower() == s.strip().lower()]
        if not match:
            raise UsageError(f"unknown transaction state {s!r}: expected one of "
                             f"{', '.join(KNOWN_STATES)}")
        wanted_states.append(match[0])
    cluster = connect_cluster(bootstrap_server, command_config, timeout)
    rows = []
    try:
        for broker_id in sorted(cluster.brokers):
            conn = cluster.conn(broker_id)
            want = 2 if pattern is not None else 1 if duration_ms is not None else 0
            version = conn.version(LIST_TRANSACTIONS, 2, "ListTransactions")
            if version < want:
                raise CliError(f"broker {conn.address} does not support "
                               f"{'--pattern' if want == 2 else '--duration-ms'}")
            body = {"state_filters": wanted_states, "producer_id_filters": producer_id or [],
                    "duration_filter": -1 if duration_ms is None else duration_ms,
                    "transactional_id_pattern": pattern}
            resp = _retry(lambda conn=conn, body=body, version=version:
                          conn.call(LIST_TRANSACTIONS, version, body), timeout)
            if resp.error_code:
                warn_line(f"cannot list the transactions of broker {broker_id}: "
                          f"{error_name(resp.error_code)}")
                continue
            rows += [(t.transactional_id, broker_id, t.producer_id, t.transaction_state)
                     for t in resp.transaction_states]
    finally:
        cluster.close()
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("TRANSACTIONAL-ID", "left"), ("COORDINATOR", "right"), ("PRODUCER-ID", "right"),
        ("STATE", "left"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for tid, broker_id, pid, st in sorted(rows):
        table.add_row(tid, str(broker_id), str(pid), st)
    print_table(table)


def _retry(call: Any, timeout: float) -> Any:
    """Repeat a call while its coordinator is loading (COORDINATOR_LOAD_IN_PROGRESS)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = call()
        if getattr(resp, "error_code", 0) != 14 or time.monotonic() >= deadline:
            return resp
        time.sleep(0.1)  # backoff between retries, not synchronisation


# --------------------------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------------------------


def _describe_one(cluster: Cluster, tid: str, timeout: float) -> tuple[int, Any]:
    """(coordinator id, DescribeTransactions state) of one transactional id."""
    deadline = time.monotonic() + timeout
    any_broker = next(iter(sorted(cluster.brokers)))
    while True:
        conn = cluster.conn(any_broker)
        version = conn.version(FIND_COORDINATOR, 3, "FindCoordinator")
        found = conn.call(FIND_COORDINATOR, version, {"key": tid, "key_type": TRANSACTION_KEY})
        code = found.error_code
        if not code:
            coordinator = found.node_id
            cluster.brokers.setdefault(coordinator, (found.host, found.port))
            c = cluster.conn(coordinator)
            resp = c.call(DESCRIBE_TRANSACTIONS,
                          c.version(DESCRIBE_TRANSACTIONS, 0, "DescribeTransactions"),
                          {"transactional_ids": [tid]})
            state = resp.transaction_states[0]
            code = state.error_code
            if not code:
                return coordinator, state
        if code not in _RETRIABLE or time.monotonic() >= deadline:
            raise CliError(f"cannot describe transactional id {tid!r}: {error_name(code)}")
        time.sleep(0.1)  # backoff between retries, not synchronisation


@app.command("describe")
@handle_errors
def describe(
    transactional_ids: Annotated[list[str], typer.Argument(help="Transactional id(s).",
                                                           show_default=False)],
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Describe transactions: producer id and epoch, state, timeout, start and partitions."""
    cluster = connect_cluster(bootstrap_server, command_config, timeout)
    rows = []
    failed: list[str] = []
    try:
        for tid in transactional_ids:
            try:
                rows.append((tid, *_describe_one(cluster, tid, timeout)))
            except CliError as e:
                if e.exit_code == EXIT_UNREACHABLE:
                    raise
                failed.append(e.message)
    finally:
        cluster.close()
    now = int(time.time() * 1000)
    if rows:
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col in ("COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE",
                    "TIMEOUT-MS", "START-TIME", "DURATION-MS", "PARTITIONS"):
            table.add_column(col, justify="right" if col in ("COORDINATOR", "PRODUCER-ID",
                                                             "EPOCH", "TIMEOUT-MS",
                                                             "DURATION-MS") else "left")
        for tid, coordinator, s in rows:
            start = s.transaction_start_time
            ongoing = s.transaction_state not in ("Empty", "CompleteCommit", "CompleteAbort")
            partitions = ",".join(f"{t.topic}-{p}" for t in s.topics for p in t.partitions)
            table.add_row(str(coordinator), tid, str(s.producer_id), str(s.producer_epoch),
                          s.transaction_state, str(s.transaction_timeout), _ms_text(start),
                          str(now - start) if ongoing and start >= 0 else "None",
                          partitions or "-")
        print_table(table)
    for message in failed:
        error_line(message)
    if failed:
        raise typer.Exit(1)
