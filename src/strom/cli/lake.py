"""`strom lake maintain`: snapshot expiry and small-file compaction of the Iceberg topics'
tables (docs/lakehouse.md, strom.lake.maintain). It reads the broker's server.properties (and
--override) as the broker does, so it opens the catalog the broker's lake writer writes.

pyiceberg is imported only when the command runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from strom.cli.common import (
    EXIT_ERROR,
    CliError,
    UsageError,
    err,
    handle_errors,
    out,
    parse_kv_list,
    print_table,
)

if TYPE_CHECKING:
    from strom.lake.maintain import Report

app = typer.Typer(help="The Iceberg tables of Iceberg topics (see docs/lakehouse.md).",
                  no_args_is_help=True)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
                "w": 7 * 86_400_000}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def parse_duration_ms(text: str, what: str) -> int:
    """`7d`, `12h`, `30m`, `45s`, `500ms`, `1w`, or a sum such as `1d12h`."""
    value = text.strip().replace(" ", "")
    parts = _DURATION.findall(value)
    if not value or "".join(n + u for n, u in parts).lower() != value.lower():
        raise UsageError(f"invalid {what} {text!r}: expected a duration such as 7d, 12h, 30m, "
                         "45s or 500ms")
    return int(sum(float(n) * _DURATION_MS[u.lower()] for n, u in parts))


def parse_size(text: str, what: str) -> int:
    """Bytes: `536870912`, `512MiB`, `512m`, `1GB` (k, m, g, t: powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"invalid {what} {text!r}: expected a size such as 512MiB, 128m or "
                         "1GiB")
    size = int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))
    if size <= 0:
        raise UsageError(f"invalid {what} {text!r}: must be more than 0 bytes")
    return size


def _size_text(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def _report_table(reports: list[Report]) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column, justify in (("Table", "left"), ("Snapshots", "right"), ("Expired", "right"),
                            ("Files deleted", "right"), ("Data files", "right"),
                            ("Partitions compacted", "right"), ("Rows rewritten", "right"),
                            ("Note", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in reports:
        snapshots = f"{r.snapshots_before} -> {r.snapshots_after}" \
            if r.snapshots_after != r.snapshots_before else str(r.snapshots_before)
        files = f"{r.data_files_before} -> {r.data_files_after}" \
            if r.data_files_after != r.data_files_before else str(r.data_files_before)
        table.add_row(r.table, snapshots, str(r.expired), str(r.files_deleted), files,
                      str(r.partitions_compacted), str(r.rows_rewritten), "; ".join(r.notes))
    return table


@app.command("maintain")
@handle_errors
def maintain(
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="The broker's server.properties: its iceberg.* and log.dirs say "
        "where the catalog is.", show_default=False)] = None,
    override: Annotated[list[str] | None, typer.Option(
        "--override", help="A broker property key=value that wins over the file (repeatable), "
        "as for strom broker.", show_default=False)] = None,
    table: Annotated[list[str] | None, typer.Option(
        "--table", "-t", help="A table (a topic's name) of the namespace (repeatable; default: "
        "all).", show_default=False)] = None,
    expire_older_than: Annotated[str, typer.Option(
        "--expire-older-than", help="Expire snapshots older than this (7d, 12h, 30m, 0s).")]
    = "7d",
    retain_last: Annotated[int, typer.Option(
        "--retain-last", help="Keep at least this many of the newest snapshots, however old.")]
    = 1,
    target_file_size: Annotated[str, typer.Option(
        "--target-file-size", help="The size compacted files aim at; files below 3/4 of it are "
        "small.")] = "512MiB",
    min_input_files: Annotated[int, typer.Option(
        "--min-input-files", help="Compact a partition (day) once it has this many small "
        "files.")] = 5,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Say what would be done; change nothing.")] = False,
) -> None:
    """Compact the small data files of the Iceberg topics' tables and expire their old
    snapshots, keeping the snapshot each table's writer resumes from."""
    if config is not None and not config.is_file():
        raise UsageError(f"broker config file not found: {config}")
    if retain_last < 1:
        raise UsageError("--retain-last must be at least 1")
    if min_input_files < 2:
        raise UsageError("--min-input-files must be at least 2")
    overrides = parse_kv_list(override, "override")
    older_than = parse_duration_ms(expire_older_than, "--expire-older-than")
    target = parse_size(target_file_size, "--target-file-size")
    try:
        from strom.lake import maintain as lake
    except ImportError as exc:
        raise CliError(f"pyiceberg is not installed ({exc}): pip install 'strom[iceberg]'") \
            from None
    from strom.config.broker import BrokerConfig
    from strom.config.defs import ConfigError

    try:
        broker_config = BrokerConfig.load(config, overrides)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    options = lake.Options(expire_older_than_ms=older_than, retain_last=retain_last,
                           target_file_size=target, min_input_files=min_input_files,
                           dry_run=dry_run)
    try:
        catalog, namespace = lake.open_catalog(broker_config)
        names = lake.table_names(catalog, namespace, table or ())
    except lake.MaintainError as exc:
        raise CliError(str(exc)) from None
    if not names:
        out.print(f"No tables in the namespace {namespace}.", markup=False)
        return
    reports = _run(lake, catalog, namespace, names, options)
    print_table(_report_table(reports))
    if dry_run:
        out.print("Dry run: nothing was changed (the counts are what a run would do, with "
                  f"files below {_size_text(options.small_file_size)} as small).", markup=False)
    if any(r.failed for r in reports):
        raise typer.Exit(EXIT_ERROR)


def _run(lake: Any, catalog: Any, namespace: str, names: list[str], options: Any
         ) -> list[Report]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    reports = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("maintaining", total=len(names))
        for name in names:
            def step(text: str) -> None:
                progress.update(task, description=text)

            try:
                reports.append(lake.maintain(catalog, namespace, name, options, step=step))
            except Exception as exc:  # one table's failure does not stop the others
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                reports.append(lake.Report(f"{namespace}.{name}", notes=[f"failed: {first}"],
                                           failed=True))
            progress.advance(task)
    return reports
