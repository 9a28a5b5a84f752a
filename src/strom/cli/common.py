"""Shared pieces of the `strom` command line: client options, property parsing, error handling.

Every client command runs through `handle_errors`, so a user error (unreachable broker, unknown
topic, bad argument, missing file) ends as one line on stderr and a documented exit code, never
as a traceback.
"""

from __future__ import annotations

import base64
import concurrent.futures
import functools
import logging
import re
import struct
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console

EXIT_OK = 0
EXIT_ERROR = 1  # the operation failed (broker error, failed deliveries, bad file)
EXIT_USAGE = 2  # bad arguments (the same code click uses for usage errors)
EXIT_UNREACHABLE = 3  # no broker could be reached, or it did not answer in time
EXIT_INTERRUPTED = 130  # Ctrl-C

DEFAULT_BOOTSTRAP = "localhost:9092"
DEFAULT_TIMEOUT_S = 30.0

# Topics Kafka itself treats as internal (`Topic.isInternal`).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def print_table(table: Any) -> None:
    """Tables at their natural width: a terminal's width, but never wrapped into a pipe's 80."""
    if out.is_terminal:
        out.print(table)
        return
    Console(file=out.file, width=10_000, highlight=False, soft_wrap=True,
            color_system=None).print(table)


class CliError(Exception):
    """A user-facing failure: printed as one line, mapped to an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class UsageError(CliError):
    """Bad or contradictory arguments."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


def error_line(message: str) -> None:
    """Print one plain `Error: ...` line on stderr (no markup, no wrapping)."""
    err.print(f"Error: {message}", markup=False, highlight=False, soft_wrap=True)


def warn_line(message: str) -> None:
    err.print(f"Warning: {message}", markup=False, highlight=False, soft_wrap=True)


def kafka_error_text(exc: BaseException | Any) -> str:
    """`NAME: description` for a KafkaException or KafkaError; str() for anything else."""
    kerr = exc.args[0] if isinstance(exc, Exception) and exc.args else exc
    name = getattr(kerr, "name", None)
    text = getattr(kerr, "str", None)
    if callable(name) and callable(text):
        n, t = name(), text()
        return f"{n}: {t}" if t and t != n else n
    return str(exc)


def kafka_error_code(exc: BaseException | Any) -> int | None:
    kerr = exc.args[0] if isinstance(exc, Exception) and exc.args else exc
    code = getattr(kerr, "code", None)
    return code() if callable(code) else None


P = ParamSpec("P")
R = TypeVar("R")


class _NeverRaised(Exception):
    pass


def _kafka_exception() -> type[Exception]:
    """confluent_kafka's KafkaException once a command has imported the client (nothing else
    raises it). Not imported for it: every command, `strom broker` included, would load
    librdkafka (75 ms of CPU at each broker start)."""
    client = sys.modules.get("confluent_kafka")
    found = getattr(client, "KafkaException", None) if client is not None else None
    return found if isinstance(found, type) and issubclass(found, Exception) else _NeverRaised


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn expected failures into one stderr line and an exit code (wraps a typer command)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except CliError as e:
            error_line(e.message)
            raise typer.Exit(e.exit_code) from None
        except _kafka_exception() as e:
            error_line(kafka_error_text(e))
            raise typer.Exit(EXIT_ERROR) from None
        except BrokenPipeError:
            # Output piped into `head` and friends: stop quietly, like other Unix tools.
            _silence_stdout()
            raise typer.Exit(EXIT_OK) from None
        except (FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError) as e:
            where = f": {e.filename}" if e.filename else ""
            error_line(f"{e.strerror or e}{where}")
            raise typer.Exit(EXIT_ERROR) from None
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


def _silence_stdout() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------------------------------------
# Parsing helpers
# ---------------------------------------------------------------------------------------------


def parse_kv(item: str, what: str = "property") -> tuple[str, str]:
    """`key=value` -> (key, value); the value may itself contain `=`."""
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"invalid {what} {item!r}: expected key=value")
    return key, value


def parse_kv_list(items: Iterable[str] | None, what: str = "property") -> dict[str, str]:
    """Repeated `key=value` options -> dict (a later repetition wins, as in Kafka's tools)."""
    result: dict[str, str] = {}
    for item in items or ():
        k, v = parse_kv(item, what)
        result[k] = v
    return result


def parse_config_list(text: str) -> dict[str, str]:
    """Kafka's `kafka-configs --add-config` syntax: `k1=v1,k2=[a,b,c],k3=v3`.

    Square brackets group a list value that itself contains commas; the brackets are dropped.
    """
    result: dict[str, str] = {}
    pos = 0
    n = len(text)
    while pos < n:
        eq = text.find("=", pos)
        if eq < 0:
            raise UsageError(f"invalid config {text[pos:]!r}: expected key=value")
        key = text[pos:eq].strip()
        if not key or "," in key:
            raise UsageError(f"invalid config {text[pos:eq]!r}: expected key=value")
        pos = eq + 1
        if pos < n and text[pos] == "[":
            close = text.find("]", pos)
            if close < 0:
                raise UsageError(f"unclosed '[' in the value of config {key!r}")
            value = text[pos + 1 : close]
            pos = close + 1
            if pos < n and text[pos] != ",":
                raise UsageError(f"unexpected text after ']' in config {key!r}")
        else:
            comma = text.find(",", pos)
            comma = n if comma < 0 else comma
            value = text[pos:comma]
            pos = comma
        result[key] = value
        pos += 1  # skip the comma
    return result


def parse_config_options(items: Iterable[str] | None) -> dict[str, str]:
    """Repeated `--add-config` options, each in `parse_config_list` syntax."""
    result: dict[str, str] = {}
    for item in items or ():
        result.update(parse_config_list(item))
    return result


_PROP_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java `.properties` file (the format of Kafka's `--command-config` and
    `server.properties`): `#`/`!` comments, `=`/`:`/whitespace separators, backslash
    line continuations and escapes (`\\t`, `\\n`, `\\uXXXX`)."""
    props: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not logical and (not line or line[0] in "#!"):
            continue
        # A line ending in an odd number of backslashes continues on the next line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            if i < len(lines):
                continue
            line = ""
        else:
            logical.append(line)
        key, value = _split_property("".join(logical))
        logical = []
        props[key] = value
    return {k: v for k, v in props.items() if k}


def _split_property(line: str) -> tuple[str, str]:
    key_chars: list[str] = []
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\" and i + 1 < n:
            key_chars.append(line[i : i + 2])
            i += 2
            continue
        if c in "=: \t\f":
            break
        key_chars.append(c)
        i += 1
    # Skip whitespace, then at most one '=' or ':', then whitespace again.
    while i < n and line[i] in " \t\f":
        i += 1
    if i < n and line[i] in "=:":
        i += 1
        while i < n and line[i] in " \t\f":
            i += 1
    return _unescape("".join(key_chars)), _unescape(line[i:])


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out_chars: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out_chars.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6]):
            out_chars.append(chr(int(s[i + 2 : i + 6], 16)))
            i += 6
            continue
        out_chars.append(_PROP_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out_chars)


def load_properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CliError(f"{path} is not a UTF-8 text file") from e
    return parse_properties(text)


_JAAS_PLAIN = re.compile(r"""(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"|(\w+)\s*=\s*([^\s;"]+)""")


def translate_client_properties(props: dict[str, str]) -> dict[str, str]:
    """Map the Java client property names a Kafka user puts in a `--command-config` file onto
    librdkafka's: `sasl.jaas.config` with a PLAIN/SCRAM login module becomes
    `sasl.username`/`sasl.password`, a PEM `ssl.truststore.location` becomes `ssl.ca.location`;
    `sasl.mechanism` and `security.protocol` are accepted by both."""
    result = dict(props)
    # a PEM trust store is librdkafka's CA file (JKS/PKCS12 stores it cannot read)
    store_type = result.pop("ssl.truststore.type", "PEM").upper()
    if "ssl.truststore.location" in result and store_type == "PEM":
        result.setdefault("ssl.ca.location", result.pop("ssl.truststore.location"))
    jaas = result.pop("sasl.jaas.config", None)
    if jaas is not None:
        opts = {}
        for m in _JAAS_PLAIN.finditer(jaas):
            if m.group(1):
                opts[m.group(1)] = m.group(2).replace('\\"', '"')
            else:
                opts[m.group(3)] = m.group(4)
        if "username" in opts:
            result.setdefault("sasl.username", opts["username"])
        if "password" in opts:
            result.setdefault("sasl.password", opts["password"])
    return result


def parse_bool(value: str, what: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "yes", "1", "on"):
        return True
    if v in ("false", "no", "0", "off"):
        return False
    raise UsageError(f"invalid boolean for {what}: {value!r}")


def uuid_text(uuid: Any) -> str:
    """Kafka's textual topic id: URL-safe base64 of the 16 bytes, without padding."""
    if uuid is None:
        return ""
    try:
        msb = uuid.get_most_significant_bits() & 0xFFFFFFFFFFFFFFFF
        lsb = uuid.get_least_significant_bits() & 0xFFFFFFFFFFFFFFFF
    except AttributeError:
        return str(uuid)
    raw = struct.pack(">QQ", msb, lsb)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


# ---------------------------------------------------------------------------------------------
# Client options and connection
# ---------------------------------------------------------------------------------------------

BootstrapOpt = Annotated[
    str,
    typer.Option(
        "--bootstrap-server",
        "-b",
        envvar="STROM_BOOTSTRAP_SERVER",
        help="Broker(s) to connect to, host:port[,host:port...].",
        rich_help_panel="Connection",
    ),
]
CommandConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--command-config",
        help="Properties file with extra client settings (security, SASL, ...).",
        rich_help_panel="Connection",
        dir_okay=False,
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        help="Seconds to wait for the broker before giving up.",
        min=0.1,
        rich_help_panel="Connection",
    ),
]


@dataclass
class ClientOptions:
    """The connection options every client command shares."""

    bootstrap: str = DEFAULT_BOOTSTRAP
    command_config: Path | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    extra: dict[str, str] = field(default_factory=dict)

    def config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka config: command-config file, then `extra`, then `overrides`."""
        conf: dict[str, Any] = {}
        if self.command_config is not None:
            conf.update(translate_client_properties(load_properties(self.command_config)))
        conf.update(self.extra)
        conf.update(overrides)
        conf["bootstrap.servers"] = self.bootstrap
        return conf


class ErrorTracker:
    """Collects librdkafka's asynchronous errors (served by poll()) and keeps its log quiet."""

    def __init__(self) -> None:
        self.errors: list[Any] = []
        self.logger = logging.getLogger("strom.cli.librdkafka")
        self.logger.propagate = False
        if not self.logger.handlers:
            self.logger.addHandler(logging.NullHandler())

    def __call__(self, error: Any) -> None:
        self.errors.append(error)

    def install(self, conf: dict[str, Any]) -> dict[str, Any]:
        conf.setdefault("error_cb", self)
        conf.setdefault("logger", self.logger)
        return conf

    def all_brokers_down(self) -> bool:
        from confluent_kafka import KafkaError

        return any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in self.errors)

    def fatal(self) -> Any | None:
        for e in self.errors:
            if e.fatal() or e.code() in _fatal_client_errors():
                return e
        return None

    def transport_reason(self) -> str:
        """The most telling connection error seen, for the "cannot reach" message."""
        from confluent_kafka import KafkaError

        for e in reversed(self.errors):
            if e.code() in (KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._SSL,
                            KafkaError._AUTHENTICATION):
                text = e.str()
                # librdkafka prefixes "host:port/bootstrap: "; the broker is named already.
                return text.split(": ", 1)[1] if ": " in text else text
        return "all brokers are down"


@functools.cache
def _fatal_client_errors() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED})


def wait_for_cluster(client: Any, tracker: ErrorTracker, opts: ClientOptions,
                     topic: str | None = None) -> Any:
    """Fetch cluster metadata, failing fast (exit 3) when no broker can be reached at all.

    librdkafka would otherwise keep retrying until each request's own timeout, so a typo in
    `--bootstrap-server` would look like a hang.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + opts.timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            kwargs: dict[str, Any] = {"timeout": max(0.05, min(0.5, remaining))}
            if topic is not None:
                kwargs["topic"] = topic
            return client.list_topics(**kwargs)
        except KafkaException as e:
            last = e
        client.poll(0)
        fatal = tracker.fatal()
        if fatal is not None:
            raise CliError(f"cannot connect to {opts.bootstrap}: {kafka_error_text(fatal)}",
                           EXIT_UNREACHABLE)
        if tracker.all_brokers_down():
            raise CliError(f"cannot reach broker at {opts.bootstrap}: {tracker.transport_reason()}",
                           EXIT_UNREACHABLE)
        if time.monotonic() >= deadline:
            raise CliError(f"timed out after {opts.timeout:g}s waiting for broker at "
                           f"{opts.bootstrap} ({kafka_error_text(last)})", EXIT_UNREACHABLE)


def make_admin(opts: ClientOptions) -> tuple[Any, ErrorTracker]:
    """An AdminClient that has already proved it can reach the cluster."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    tracker = ErrorTracker()
    conf = tracker.install(opts.config())
    try:
        admin = AdminClient(conf)
    except KafkaException as e:
        raise UsageError(f"invalid client configuration: {kafka_error_text(e)}") from None
    wait_for_cluster(admin, tracker, opts)
    return admin, tracker


def result_of(future: concurrent.futures.Future, opts: ClientOptions) -> Any:
    """Wait for an admin future with the command's timeout; a timeout is exit code 3."""
    try:
        return future.result(timeout=opts.timeout + 1)
    except concurrent.futures.TimeoutError:
        raise CliError(f"timed out after {opts.timeout:g}s waiting for the broker",
                       EXIT_UNREACHABLE) from None


def wait_all(futures: dict[Any, concurrent.futures.Future], opts: ClientOptions,
             name: Callable[[Any], str] = str) -> None:
    """Wait for every admin future of a request; the failures become one CliError naming each
    (by ``name`` of its key)."""
    failed = []
    for key, future in futures.items():
        try:
            result_of(future, opts)
        except CliError:
            raise
        except Exception as e:
            failed.append(f"{name(key)}: {kafka_error_text(e)}")
    if failed:
        raise CliError("; ".join(failed))


def admin_kwargs(opts: ClientOptions) -> dict[str, float]:
    return {"request_timeout": opts.timeout}


def fail(message: str, exit_code: int = EXIT_ERROR) -> NoReturn:
    raise CliError(message, exit_code)
