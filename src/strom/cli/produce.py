"""`strom produce TOPIC`: send lines from stdin or a file as records (kafka-console-producer.sh).

Line format follows Kafka's console producer (`LineMessageReader`): with parse.headers the line
starts with `h1:v1,h2:v2<TAB>`, with parse.key a key and the key separator come next, and the
rest of the line is the value. Bytes are passed through untouched (no decoding).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer

from strom.cli.common import (
    EXIT_INTERRUPTED,
    BootstrapOpt,
    ClientOptions,
    CliError,
    CommandConfigOpt,
    ErrorTracker,
    TimeoutOpt,
    UsageError,
    _unescape,
    err,
    handle_errors,
    kafka_error_text,
    parse_bool,
    parse_kv,
    parse_kv_list,
    wait_for_cluster,
)

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5

# `--property` keys that shape how lines are read; any other key is a producer setting.
READER_PROPERTIES = frozenset({
    "parse.key", "key.separator", "parse.headers", "headers.delimiter", "headers.separator",
    "headers.key.separator", "null.marker", "ignore.error",
})
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = {"0": "0", "1": "1", "all": "all", "-1": "all"}
MAX_ERRORS_SHOWN = 5


class LineError(ValueError):
    """A line that does not match the expected format."""


@dataclass
class LineFormat:
    """How to cut a line into headers, key and value (Kafka's reader properties)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, props: dict[str, str], **base: Any) -> LineFormat:
        fmt = cls(**base)

        def sep(name: str) -> bytes:
            value = _unescape(props[name]).encode("utf-8")
            if not value:
                raise UsageError(f"{name} must not be empty")
            return value

        if "parse.key" in props:
            fmt.parse_key = parse_bool(props["parse.key"], "parse.key")
        if "key.separator" in props:
            fmt.key_separator = sep("key.separator")
        if "parse.headers" in props:
            fmt.parse_headers = parse_bool(props["parse.headers"], "parse.headers")
        if "headers.delimiter" in props:
            fmt.headers_delimiter = sep("headers.delimiter")
        if "headers.separator" in props:
            fmt.headers_separator = sep("headers.separator")
        if "headers.key.separator" in props:
            fmt.headers_key_separator = sep("headers.key.separator")
        if "null.marker" in props:
            fmt.null_marker = _unescape(props["null.marker"]).encode("utf-8")
        if "ignore.error" in props:
            fmt.ignore_error = parse_bool(props["ignore.error"], "ignore.error")
        return fmt


Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def parse_line(line: bytes, fmt: LineFormat) -> Record:
    """Cut one line (without its newline) into (key, value, headers)."""
    headers: list[tuple[str, bytes | None]] = []
    rest = line
    if fmt.parse_headers:
        head, sep, tail = rest.partition(fmt.headers_delimiter)
        if not sep:
            if not fmt.ignore_error:
                raise LineError("no headers delimiter found")
        else:
            rest = tail
            if head != fmt.null_marker and head:
                for pair in head.split(fmt.headers_separator):
                    hk, ksep, hv = pair.partition(fmt.headers_key_separator)
                    if not ksep:
                        raise LineError(f"no header key separator in {pair.decode(errors='replace')!r}")
                    if hk == fmt.null_marker:
                        raise LineError("a header key must not be the null marker")
                    headers.append((hk.decode("utf-8", errors="replace"), _nullable(hv, fmt)))
    key: bytes | None = None
    if fmt.parse_key:
        k, sep, tail = rest.partition(fmt.key_separator)
        if sep:
            key, rest = _nullable(k, fmt), tail
        elif not fmt.ignore_error:
            raise LineError("no key separator found")
    return key, _nullable(rest, fmt), headers


def _nullable(b: bytes, fmt: LineFormat) -> bytes | None:
    return None if fmt.null_marker is not None and b == fmt.null_marker else b


def iter_lines(stream: BinaryIO):
    """Lines without their terminator (`\\n` or `\\r\\n`), like Java's readLine."""
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


@dataclass
class DeliveryReport:
    """Counts from the delivery callbacks; the first few distinct errors are kept."""

    delivered: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def __call__(self, error: Any, msg: Any) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.fail(kafka_error_text(error))

    def fail(self, text: str, n: int = 1) -> None:
        self.failed += n
        self.errors[text] = self.errors.get(text, 0) + n


def _check_topic(producer: Any, tracker: ErrorTracker, opts: ClientOptions, topic: str,
                 partition: int | None) -> None:
    """Fail fast on an unknown topic or partition instead of timing out per record."""
    deadline = time.monotonic() + opts.timeout
    while True:
        md = wait_for_cluster(producer, tracker, opts, topic=topic)
        tmd = md.topics.get(topic)
        code = tmd.error.code() if tmd is not None and tmd.error is not None else None
        if tmd is None or code == UNKNOWN_TOPIC_OR_PARTITION:
            raise CliError(f"Topic '{topic}' does not exist.")
        if code is None and tmd.partitions:
            break
        if code not in (None, LEADER_NOT_AVAILABLE) or time.monotonic() >= deadline:
            raise CliError(f"Topic '{topic}' is not available: {kafka_error_text(tmd.error)}")
        time.sleep(0.1)  # topic being created: metadata is polled again with a deadline
    if partition is not None and partition not in tmd.partitions:
        raise CliError(f"Topic '{topic}' has no partition {partition} "
                       f"(it has {len(tmd.partitions)}).")


@handle_errors
def produce(
    topic: Annotated[str, typer.Argument(help="Topic to write to.")],
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Read lines from this file instead of stdin.", dir_okay=False)
    ] = None,
    parse_key: Annotated[
        bool, typer.Option("--parse-key", "-K", help="Each line is KEY<separator>VALUE.")
    ] = False,
    key_separator: Annotated[
        str | None, typer.Option("--key-separator", help="Key separator (default TAB; implies --parse-key).")
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="A header k=v added to every record (repeatable).")
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", min=0, help="Write every record to this partition.")
    ] = None,
    compression: Annotated[
        str, typer.Option("--compression", help="none, gzip, snappy, lz4 or zstd.")
    ] = "none",
    acks: Annotated[str, typer.Option("--acks", help="0, 1 or all.")] = "all",
    prop: Annotated[
        list[str] | None,
        typer.Option("--property", help="Reader property (parse.key, key.separator, parse.headers, "
                     "null.marker, ...) or producer setting k=v (repeatable)."),
    ] = None,
    producer_property: Annotated[
        list[str] | None, typer.Option("--producer-property", help="A producer setting k=v (repeatable).")
    ] = None,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Produce lines from stdin or a file, one record per line."""
    from confluent_kafka import KafkaException, Producer

    if compression not in COMPRESSIONS:
        raise UsageError(f"invalid --compression {compression!r}: choose one of {', '.join(COMPRESSIONS)}")
    if acks not in ACKS:
        raise UsageError(f"invalid --acks {acks!r}: choose 0, 1 or all")
    props = parse_kv_list(prop, "property")
    reader_props = {k: v for k, v in props.items() if k in READER_PROPERTIES}
    client_props = {k: v for k, v in props.items() if k not in READER_PROPERTIES}
    client_props.update(parse_kv_list(producer_property, "producer property"))
    fmt = LineFormat.from_properties(reader_props, parse_key=parse_key or key_separator is not None)
    if key_separator is not None:
        if not key_separator:
            raise UsageError("--key-separator must not be empty")
        fmt.key_separator = _unescape(key_separator).encode("utf-8")
    static_headers = [(k, v.encode("utf-8")) for k, v in (parse_kv(h, "header") for h in header or ())]

    opts = ClientOptions(bootstrap_server, command_config, timeout, extra=client_props)
    tracker = ErrorTracker()
    conf = tracker.install(opts.config(**{
        "acks": ACKS[acks],
        "compression.type": compression,
        "message.timeout.ms": int(timeout * 1000),
    }))
    try:
        producer = Producer(conf)
    except KafkaException as e:
        raise UsageError(f"invalid producer configuration: {kafka_error_text(e)}") from None
    _check_topic(producer, tracker, opts, topic, partition)

    report = DeliveryReport()
    bad_lines: list[str] = []

    def send_all(stream: BinaryIO, advance: Any = None) -> None:
        unreported = 0  # bytes read but not yet shown: the bar is updated every 512 lines
        for lineno, line in enumerate(iter_lines(stream), 1):
            if advance is not None:
                unreported += len(line) + 1
                if lineno % 512 == 0:
                    advance(unreported)
                    unreported = 0
            try:
                key, value, headers = parse_line(line, fmt)
            except LineError as e:
                report.fail("malformed line")
                if len(bad_lines) < MAX_ERRORS_SHOWN:
                    bad_lines.append(f"line {lineno}: {e}")
                continue
            kwargs: dict[str, Any] = {"value": value, "key": key, "on_delivery": report}
            if headers or static_headers:
                kwargs["headers"] = headers + static_headers
            if partition is not None:
                kwargs["partition"] = partition
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: let deliveries drain it
                except KafkaException as e:
                    report.fail(kafka_error_text(e))
                    break
            producer.poll(0)
        if advance is not None:
            advance(unreported)

    interrupted = False
    try:
        if file is not None:
            total = file.stat().st_size
            with file.open("rb") as stream:
                if err.is_terminal and total > 0:
                    from rich.progress import (
                        BarColumn,
                        DownloadColumn,
                        Progress,
                        TextColumn,
                        TimeRemainingColumn,
                        TransferSpeedColumn,
                    )

                    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                                  TransferSpeedColumn(), TimeRemainingColumn(), console=err,
                                  transient=True) as progress:
                        task = progress.add_task(f"producing to {topic}", total=total)
                        send_all(stream, lambda n: progress.advance(task, n))
                else:
                    send_all(stream)
        else:
            send_all(sys.stdin.buffer)
    except KeyboardInterrupt:
        interrupted = True  # like Kafka's console producer: still deliver what was read

    undelivered = producer.flush(timeout)
    if undelivered:
        report.fail(f"not delivered within {timeout:g}s", undelivered)
    for line in bad_lines:
        err.print(f"Error: {line}", markup=False)
    if report.failed:
        errors = "; ".join(f"{text} ({n}x)" if n > 1 else text
                           for text, n in list(report.errors.items())[:MAX_ERRORS_SHOWN])
        err.print(f"Error: delivered {report.delivered} of {report.delivered + report.failed} "
                  f"records to {topic}, {report.failed} failed: {errors}", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED if interrupted else 1)
    err.print(f"Delivered {report.delivered} records to {topic}.", markup=False)
    if interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
