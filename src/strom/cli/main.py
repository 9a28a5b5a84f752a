"""The `strom` command line: one typer app with a sub-app per Kafka tool it stands in for."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from strom.cli import configs, consume, dump_log, groups, pipeline, produce, topics
from strom.cli.common import UsageError, error_line, handle_errors, parse_kv_list

if TYPE_CHECKING:  # the click that typer vendors: its error hook is called with its errors
    from typer._click import ClickException


def _one_line_usage_error(self: ClickException) -> None:
    """Usage errors as one `Error: ...` line with a help hint, instead of typer's boxed panel.
    (It replaces typer's `rich_format_error(self)`, hence the parameter's name.)"""
    if type(self).__name__ == "NoArgsIsHelpError":
        return _rich_format_error(self)
    message = " ".join(self.format_message().split())
    ctx = getattr(self, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    error_line(f"{message}{hint}")
    return None


try:  # typer formats click usage errors through this hook when rich is installed
    from typer import rich_utils as _rich_utils

    _rich_format_error = _rich_utils.rich_format_error
    _rich_utils.rich_format_error = _one_line_usage_error
except (ImportError, AttributeError):  # pragma: no cover - other typer versions keep their format
    pass

app = typer.Typer(
    name="strom",
    help="Strom: a Kafka-compatible broker and its tools.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(topics.app, name="topics")
app.add_typer(configs.app, name="configs")
app.add_typer(groups.app, name="groups")
app.add_typer(pipeline.app, name="pipeline")
app.add_typer(importlib.import_module("strom.cli.users").app, name="users")
app.add_typer(importlib.import_module("strom.cli.acls").app, name="acls")
app.add_typer(importlib.import_module("strom.cli.transactions").app, name="transactions")
app.add_typer(importlib.import_module("strom.cli.quorum").app, name="quorum")
app.add_typer(importlib.import_module("strom.cli.storage").app, name="storage")
app.add_typer(importlib.import_module("strom.cli.schemas").app, name="schemas")
app.command("produce")(produce.produce)
app.command("consume")(consume.consume)
app.command("dump-log")(dump_log.dump_log)
app.command("reassign-partitions")(
    importlib.import_module("strom.cli.reassign").reassign_partitions)
app.command("leader-election")(importlib.import_module("strom.cli.leader_election").leader_election)
app.command("console")(importlib.import_module("strom.cli.console").console)


@app.command("broker")
@handle_errors
def broker(
    config_file: Annotated[
        Path | None,
        typer.Argument(help="server.properties (same as --config).", show_default=False),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Broker properties file (server.properties)."),
    ] = None,
    override: Annotated[
        list[str] | None,
        typer.Option("--override", help="A broker property key=value that wins over the file (repeatable)."),
    ] = None,
) -> None:
    """Run a Strom broker in the foreground until SIGINT/SIGTERM."""
    if config_file is not None and config is not None and config_file != config:
        raise UsageError("give the properties file either as an argument or with --config, not both")
    path = config if config is not None else config_file
    if path is not None and not path.is_file():
        raise UsageError(f"broker config file not found: {path}")
    overrides = parse_kv_list(override, "override")
    from strom.broker.app import run_broker  # lazy: client commands need no broker code

    raise typer.Exit(run_broker(path, overrides))


if __name__ == "__main__":  # pragma: no cover
    app()
