"""The `strom` command line: one typer app with a sub-app per Kafka tool it stands in for."""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from strom.cli.common import UsageError, error_line, handle_errors, parse_kv_list

if TYPE_CHECKING:  # the click that typer vendors: its error hook is called with its errors
    from typer._click import ClickException


_rich_format_error: Any = None  # typer's own, once typer.rich_utils is imported


def _one_line_usage_error(self: ClickException) -> None:
    """Usage errors as one `Error: ...` line with a help hint, instead of typer's boxed panel.
    (It replaces typer's `rich_format_error(self)`, hence the parameter's name.)"""
    if type(self).__name__ == "NoArgsIsHelpError":
        if _rich_format_error is not None:
            _rich_format_error(self)
        return
    message = " ".join(self.format_message().split())
    ctx = getattr(self, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    error_line(f"{message}{hint}")
    return None


def _patch_rich_utils(module: ModuleType) -> None:
    """typer formats click usage errors through `rich_utils.rich_format_error` when rich is
    installed: ours instead."""
    global _rich_format_error
    original = getattr(module, "rich_format_error", None)
    if original is not None and original is not _one_line_usage_error:
        _rich_format_error = original
        setattr(module, "rich_format_error", _one_line_usage_error)  # noqa: B010


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches `typer.rich_utils` when typer imports it (only to show an error, help or
    the version): importing it at every start costs 65 ms (rich's markdown and more), a tenth of what a
    `strom` command or a broker start spends before it does anything."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if name != "typer.rich_utils":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:  # pragma: no cover - other typer versions
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def patched(module: ModuleType) -> None:
            exec_module(module)
            _patch_rich_utils(module)

        loader.exec_module = patched  # type: ignore[method-assign]
        return spec


if "typer.rich_utils" in sys.modules:  # pragma: no cover - imported before us
    _patch_rich_utils(sys.modules["typer.rich_utils"])
else:
    sys.meta_path.insert(0, _PatchOnImport())

# Every command, by name: a sub-app (a group of commands) or a single command, and where it is.
# A run imports only the one it names (the others cost tenths of a second at every start).
_PARTS: tuple[tuple[str, str, str, bool], ...] = (
    ("topics", "strom.cli.topics", "app", True),
    ("configs", "strom.cli.configs", "app", True),
    ("groups", "strom.cli.groups", "app", True),
    ("pipeline", "strom.cli.pipeline", "app", True),
    ("users", "strom.cli.users", "app", True),
    ("acls", "strom.cli.acls", "app", True),
    ("transactions", "strom.cli.transactions", "app", True),
    ("quorum", "strom.cli.quorum", "app", True),
    ("storage", "strom.cli.storage", "app", True),
    ("cluster", "strom.cli.cluster", "app", True),
    ("schemas", "strom.cli.schemas", "app", True),
    ("lake", "strom.cli.lake", "app", True),
    ("produce", "strom.cli.produce", "produce", False),
    ("consume", "strom.cli.consume", "consume", False),
    ("dump-log", "strom.cli.dump_log", "dump_log", False),
    ("reassign-partitions", "strom.cli.reassign", "reassign_partitions", False),
    ("leader-election", "strom.cli.leader_election", "leader_election", False),
    ("console", "strom.cli.console", "console", False),
)
_NAMES = frozenset(name for name, *_ in _PARTS) | {"broker"}


def build(only: str | None = None) -> typer.Typer:
    """The `strom` app with every command, or only the one named `only` (and `broker`)."""
    app = typer.Typer(
        name="strom",
        help="Strom: a Kafka-compatible broker and its tools.",
        epilog="Over HTTP: a broker with rest.listeners serves Confluent's REST API, share "
               "groups and event streams (make run: http://127.0.0.1:8082, its OpenAPI "
               "document at /openapi.json; docs/http.md).",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)  # a group even with one command: `strom broker ...` names it
    for name, module, attribute, group in _PARTS:
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(module), attribute)
        if group:
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    app.command("broker")(broker)
    return app


def _root() -> None:
    """Strom: a Kafka-compatible broker and its tools."""


def main() -> None:
    """The console script: builds only the command the arguments name (all for --help)."""
    first = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    with _no_gc_while_importing():
        app = build(first if first in _NAMES else None)
    app()


@contextlib.contextmanager
def _no_gc_while_importing() -> Iterator[None]:
    """Imports make tens of thousands of objects that live as long as the process; the cyclic
    collector's passes over them while they are made are wasted (40 ms of a broker's start)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def __getattr__(name: str) -> typer.Typer:
    """`app`: the whole app (tests drive it with typer's runner)."""
    if name == "app":
        return build()
    raise AttributeError(name)


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
    with _no_gc_while_importing():
        from strom.broker.app import run_broker  # lazy: client commands need no broker code

    raise typer.Exit(run_broker(path, overrides))


if __name__ == "__main__":  # pragma: no cover
    main()
