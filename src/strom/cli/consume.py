"""`strom consume TOPIC`: print records (kafka-console-consumer.sh, and with `--share-group`
kafka-console-share-consumer.sh).

Without `--group` the partitions are assigned directly and nothing is ever committed; with a
group the consumer subscribes and commits like Kafka's console consumer does: the offsets of
the records it has printed (stored once written, committed in the background and, on exit,
Ctrl-C or SIGTERM, synchronously before it leaves the group). With a share group (KIP-932) it
is a member of that group (confluent-kafka's ShareConsumer): each record is acknowledged
(ACCEPT, or RELEASE / REJECT) once it is printed, and the acknowledgements are committed before
it leaves on exit, Ctrl-C or SIGTERM. Ctrl-C exits 130, SIGTERM 0.
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

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
    kafka_error_code,
    kafka_error_text,
    parse_bool,
    parse_kv_list,
    wait_for_cluster,
)

UNKNOWN_TOPIC_OR_PARTITION = 3
# Errors after which waiting longer cannot help.
_FATAL_CONSUME_CODES = frozenset({3, 29, 30})  # unknown topic, topic/group authorization failed
FORMATS = ("text", "json")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
BATCH = 500

# `--property` keys of Kafka's DefaultMessageFormatter; any other key is a consumer setting.
FORMATTER_PROPERTIES = frozenset({
    "print.key", "print.value", "print.timestamp", "print.offset", "print.partition",
    "print.headers", "key.separator", "line.separator", "headers.separator", "null.literal",
})

_TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


@dataclass
class TextFormat:
    """Kafka's DefaultMessageFormatter options."""

    print_key: bool = False
    print_value: bool = True
    print_timestamp: bool = False
    print_offset: bool = False
    print_partition: bool = False
    print_headers: bool = False
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    def apply(self, props: dict[str, str]) -> None:
        for name in ("print.key", "print.value", "print.timestamp", "print.offset",
                     "print.partition", "print.headers"):
            if name in props:
                setattr(self, name.replace(".", "_"), parse_bool(props[name], name))
        for name in ("key.separator", "line.separator", "headers.separator", "null.literal"):
            if name in props:
                setattr(self, name.replace(".", "_"), _unescape(props[name]).encode("utf-8"))


def format_text(msg: Any, fmt: TextFormat) -> bytes:
    """One record the way kafka-console-consumer prints it (raw bytes, no decoding)."""
    parts: list[bytes] = []
    if fmt.print_timestamp:
        ts_type, ts = msg.timestamp()
        name = _TIMESTAMP_TYPES.get(ts_type)
        parts.append(f"{name}:{ts}".encode() if name else b"NO_TIMESTAMP")
    if fmt.print_partition:
        parts.append(f"Partition:{msg.partition()}".encode())
    if fmt.print_offset:
        parts.append(f"Offset:{msg.offset()}".encode())
    if fmt.print_headers:
        headers = msg.headers() or []
        if headers:
            parts.append(fmt.headers_separator.join(
                k.encode("utf-8") + b":" + (fmt.null_literal if v is None else v) for k, v in headers
            ))
        else:
            parts.append(b"NO_HEADERS")
    if fmt.print_key:
        key = msg.key()
        parts.append(fmt.null_literal if key is None else key)
    if fmt.print_value:
        value = msg.value()
        parts.append(fmt.null_literal if value is None else value)
    return fmt.key_separator.join(parts) + fmt.line_separator


def _bytes_field(obj: dict[str, Any], name: str, data: bytes | None) -> None:
    """utf-8 text when the bytes decode, base64 otherwise; `<name>_base64` says which."""
    if data is None:
        obj[name], obj[f"{name}_base64"] = None, False
        return
    try:
        obj[name], obj[f"{name}_base64"] = data.decode("utf-8"), False
    except UnicodeDecodeError:
        obj[name], obj[f"{name}_base64"] = base64.b64encode(data).decode("ascii"), True


def record_json(msg: Any) -> dict[str, Any]:
    """The JSON object `--format json` prints for one record."""
    ts_type, ts = msg.timestamp()
    obj: dict[str, Any] = {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": ts if ts_type in _TIMESTAMP_TYPES else None,
        "timestamp_type": _TIMESTAMP_TYPES.get(ts_type),
    }
    _bytes_field(obj, "key", msg.key())
    _bytes_field(obj, "value", msg.value())
    headers = []
    for k, v in msg.headers() or []:
        h: dict[str, Any] = {"key": k}
        _bytes_field(h, "value", v)
        headers.append(h)
    obj["headers"] = headers
    return obj


def format_json(msg: Any) -> bytes:
    return json.dumps(record_json(msg), ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def parse_offset(text: str) -> int:
    """`earliest`, `latest` or a non-negative offset -> a librdkafka start offset."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    t = text.strip().lower()
    if t in ("earliest", "beginning"):
        return OFFSET_BEGINNING
    if t in ("latest", "end"):
        return OFFSET_END
    try:
        value = int(t)
    except ValueError:
        raise UsageError(f"invalid --offset {text!r}: expected earliest, latest or a number") from None
    if value < 0:
        raise UsageError(f"invalid --offset {text!r}: must not be negative")
    return value


@handle_errors
def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the earliest offset (when nothing is committed).")
    ] = False,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", min=0, help="Read only this partition.")
    ] = None,
    offset: Annotated[
        str | None, typer.Option("--offset", "-o", help="earliest, latest or an offset (needs --partition).")
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max-messages", "-n", min=1, help="Exit after this many records.")
    ] = None,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="Consumer group: subscribe and commit offsets.")
    ] = None,
    share_group: Annotated[
        str | None, typer.Option("--share-group", help="Share group (KIP-932): consume as one of its "
                                 "members, acknowledging each record printed.")
    ] = None,
    release: Annotated[
        bool, typer.Option("--release", help="With --share-group: release each record (it is "
                           "delivered again) instead of accepting it.")
    ] = False,
    reject: Annotated[
        bool, typer.Option("--reject", help="With --share-group: reject each record (never "
                           "delivered again; dead-lettered if the group has a DLQ topic).")
    ] = False,
    print_key: Annotated[bool, typer.Option("--print-key", help="Print the key before the value.")] = False,
    print_headers: Annotated[bool, typer.Option("--print-headers", help="Print the headers.")] = False,
    print_timestamp: Annotated[bool, typer.Option("--print-timestamp", help="Print the timestamp.")] = False,
    print_offset: Annotated[bool, typer.Option("--print-offset", help="Print the offset.")] = False,
    print_partition: Annotated[bool, typer.Option("--print-partition", help="Print the partition.")] = False,
    output_format: Annotated[
        str, typer.Option("--format", help="text (Kafka's console format) or json (one object per line).")
    ] = "text",
    timeout_ms: Annotated[
        int | None, typer.Option("--timeout-ms", min=1, help="Exit when no record arrives for this long.")
    ] = None,
    exit_at_end: Annotated[
        bool, typer.Option("--exit-at-end", "-e", help="Exit once every partition has been read to its end.")
    ] = False,
    isolation_level: Annotated[
        str, typer.Option("--isolation-level", help="read_uncommitted or read_committed.")
    ] = "read_uncommitted",
    prop: Annotated[
        list[str] | None,
        typer.Option("--property", help="Formatter property (print.key, key.separator, ...) or "
                     "consumer setting k=v (repeatable)."),
    ] = None,
    consumer_property: Annotated[
        list[str] | None, typer.Option("--consumer-property", help="A consumer setting k=v (repeatable).")
    ] = None,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Print records from a topic, one per line."""
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    if output_format not in FORMATS:
        raise UsageError(f"invalid --format {output_format!r}: choose text or json")
    if isolation_level not in ISOLATION_LEVELS:
        raise UsageError(f"invalid --isolation-level {isolation_level!r}: "
                         "choose read_uncommitted or read_committed")
    if group is not None and partition is not None:
        raise UsageError("--group and --partition cannot be used together")
    if share_group is not None:
        for flag, given in (("--group", group is not None), ("--partition", partition is not None),
                            ("--offset", offset is not None), ("--from-beginning", from_beginning),
                            ("--exit-at-end", exit_at_end),
                            ("--isolation-level", isolation_level != "read_uncommitted")):
            if given:
                hint = (" (a share group starts where its share.auto.offset.reset config says: "
                        "strom configs alter --group G --add-config share.auto.offset.reset=earliest)"
                        if flag in ("--from-beginning", "--offset") else "")
                raise UsageError(f"--share-group and {flag} cannot be used together{hint}")
    if (release or reject) and share_group is None:
        raise UsageError("--release and --reject need --share-group")
    if release and reject:
        raise UsageError("--release and --reject cannot be used together")
    if offset is not None and partition is None:
        raise UsageError("--offset needs --partition")
    if offset is not None and from_beginning:
        raise UsageError("--offset and --from-beginning cannot be used together")
    start = parse_offset(offset) if offset is not None else (OFFSET_BEGINNING if from_beginning else OFFSET_END)

    props = parse_kv_list(prop, "property")
    text_fmt = TextFormat(print_key=print_key, print_timestamp=print_timestamp, print_offset=print_offset,
                          print_partition=print_partition, print_headers=print_headers)
    text_fmt.apply({k: v for k, v in props.items() if k in FORMATTER_PROPERTIES})
    client_props = {k: v for k, v in props.items() if k not in FORMATTER_PROPERTIES}
    client_props.update(parse_kv_list(consumer_property, "consumer property"))

    opts = ClientOptions(bootstrap_server, command_config, timeout, extra=client_props)
    settings: dict[str, Any] = {
        "isolation.level": isolation_level,
        "enable.partition.eof": exit_at_end,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
    }
    if group is None:  # (with --share-group this consumer only reads metadata)
        # librdkafka insists on a group.id even for assign(); this one is never used to commit.
        settings.update({"group.id": f"strom-cli-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "enable.auto.offset.store": False})
    else:
        # offsets are stored by hand once a record is written: never one not printed
        settings.update({"group.id": group, "enable.auto.offset.store": False})
    tracker = ErrorTracker()
    conf = tracker.install(opts.config(**settings))
    commits = group is not None and str(conf.get("enable.auto.commit", True)).lower() != "false"
    try:
        consumer = Consumer(conf)
    except KafkaException as e:
        raise UsageError(f"invalid consumer configuration: {kafka_error_text(e)}") from None

    formatter = format_json if output_format == "json" else (lambda m: format_text(m, text_fmt))
    stdout = sys.stdout.buffer
    flush_each = stdout.isatty()
    count = 0
    interrupted = False
    stop: list[int] = []
    try:
        md = wait_for_cluster(consumer, tracker, opts, topic=topic)
        tmd = md.topics.get(topic)
        if tmd is None or (tmd.error is not None and tmd.error.code() == UNKNOWN_TOPIC_OR_PARTITION):
            raise CliError(f"Topic '{topic}' does not exist.")
        if share_group is not None:
            consumer.close()
            ack = "release" if release else "reject" if reject else "accept"
            count, stop = _consume_share(opts, tracker, topic, share_group, ack, max_messages,
                                         timeout_ms, output_format, text_fmt)
            err.print(f"Processed a total of {count} messages", markup=False)
            if signal.SIGINT in stop:
                raise typer.Exit(EXIT_INTERRUPTED)
            return
        if group is None:
            parts = sorted(tmd.partitions) if partition is None else [partition]
            if partition is not None and partition not in tmd.partitions:
                raise CliError(f"Topic '{topic}' has no partition {partition} (it has {len(tmd.partitions)}).")
            consumer.assign([TopicPartition(topic, p, start) for p in parts])
            pending_eof = set(parts)
        else:
            consumer.subscribe([topic])
            pending_eof = None  # known once partitions are assigned; see below
        idle_s = timeout_ms / 1000 if timeout_ms else None
        last_record = time.monotonic()
        with _stop_on_signals(stop):
            while (max_messages is None or count < max_messages) and not stop:
                want = BATCH if max_messages is None else min(BATCH, max_messages - count)
                msgs = consumer.consume(num_messages=want, timeout=_poll_wait(idle_s, last_record))
                if not msgs:
                    stdout.flush()
                    if _idle_over(idle_s, last_record, tracker):
                        break
                    continue
                printed: list[Any] = []
                for msg in msgs:
                    if stop:
                        break  # not printed, so not committed: the group delivers it again
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            if pending_eof is None:
                                pending_eof = {p.partition for p in consumer.assignment()}
                            pending_eof.discard(msg.partition())
                            continue
                        if error.code() in _FATAL_CONSUME_CODES or error.fatal():
                            raise CliError(kafka_error_text(error))
                        err.print(f"Warning: {kafka_error_text(error)}", markup=False)
                        continue
                    stdout.write(formatter(msg))
                    printed.append(msg)
                    if flush_each:
                        stdout.flush()
                    count += 1
                    last_record = time.monotonic()
                    if pending_eof is not None:
                        pending_eof.add(msg.partition())  # more may follow: not at end any more
                if commits and printed:
                    stdout.flush()  # what is committed has been written
                    consumer.store_offsets(offsets=_next_offsets(printed))
                if exit_at_end and pending_eof is not None and not pending_eof and _all_at_end(consumer, group):
                    break
            stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        with _stop_on_signals(stop):  # a second signal must not cut the commit or the leave
            _leave(consumer, commits and not interrupted)
    err.print(f"Processed a total of {count} messages", markup=False)
    if interrupted or signal.SIGINT in stop:
        raise typer.Exit(EXIT_INTERRUPTED)


@contextlib.contextmanager
def _stop_on_signals(stop: list[int]) -> Iterator[None]:
    """Meanwhile Ctrl-C and SIGTERM only append the signal to `stop`: an exception raised
    inside the client's poll() can surface later, in a commit or close(), and skip the clean
    leave."""

    def on_signal(signum: int, frame: Any) -> None:
        stop.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _next_offsets(printed: list[Any]) -> list[Any]:
    """What to commit for records printed: per partition, the offset after the last one."""
    from confluent_kafka import TopicPartition

    last: dict[tuple[str, int], int] = {}
    for msg in printed:
        last[(msg.topic(), msg.partition())] = msg.offset()
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


def _leave(consumer: Any, commit: bool) -> None:
    """Commit the stored offsets synchronously (a group consumer), then close, which leaves
    the group at once instead of after its session timeout."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        if commit:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                if kafka_error_code(exc) != KafkaError._NO_OFFSET:  # nothing printed: nothing to commit
                    err.print(f"Warning: cannot commit the offsets: {kafka_error_text(exc)}",
                              markup=False)
    finally:
        with contextlib.suppress(KafkaException, RuntimeError):
            consumer.close()


def _consume_share(opts: ClientOptions, tracker: ErrorTracker, topic: str, group: str, ack: str,
                   max_messages: int | None, timeout_ms: int | None, output_format: str,
                   text_fmt: TextFormat) -> tuple[int, list[int]]:
    """Consume as a member of share group `group`; returns (records printed, the signals that
    stopped it).

    Explicit acknowledgement: a record is acknowledged (`ack`) only once it is written, and
    stdout is flushed before the acknowledgements go out (with the next poll, or commit_sync
    at the end), so a crash redelivers rather than loses. Records a poll returned past
    --max-messages (or after a signal) are released for other members. Ctrl-C and SIGTERM commit and leave."""
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    ack_type = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE,
                "reject": AcknowledgeType.REJECT}[ack]
    conf = tracker.install(opts.config(**{"group.id": group,
                                          "share.acknowledgement.mode": "explicit"}))
    try:
        consumer = ShareConsumer(conf)
    except KafkaException as e:
        raise UsageError(f"invalid consumer configuration: {kafka_error_text(e)}") from None

    # Ctrl-C and SIGTERM only set a flag: an exception raised inside the client's poll() can
    # surface later, in commit_sync() or close(), and skip the clean leave.
    stop: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stop.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    stdout = sys.stdout.buffer
    if output_format == "json":
        def formatter(m: Any) -> bytes:
            obj = record_json(m)
            obj["delivery_count"] = m.delivery_count()
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    else:
        def formatter(m: Any) -> bytes:
            return format_text(m, text_fmt)
    count = 0
    idle_s = timeout_ms / 1000 if timeout_ms else None
    last_record = time.monotonic()
    try:
        consumer.subscribe([topic])
        while (max_messages is None or count < max_messages) and not stop:
            stdout.flush()  # before the acknowledgements of what was written go out
            msgs = consumer.poll(_poll_wait(idle_s, last_record))
            if not msgs:
                if _idle_over(idle_s, last_record, tracker):
                    break
                continue
            for msg in msgs:
                error = msg.error()
                if error is not None:
                    if error.code() in _FATAL_CONSUME_CODES or error.fatal():
                        raise CliError(kafka_error_text(error))
                    err.print(f"Warning: {kafka_error_text(error)}", markup=False)
                    continue
                if stop or (max_messages is not None and count >= max_messages):
                    consumer.acknowledge(msg, AcknowledgeType.RELEASE)  # for another member
                    continue
                stdout.write(formatter(msg))
                count += 1
                last_record = time.monotonic()
                consumer.acknowledge(msg, ack_type)
        stdout.flush()
    finally:
        try:
            results = consumer.commit_sync(opts.timeout)
            for tp, failure in (results or {}).items():
                if failure is not None:
                    err.print(f"Warning: acknowledgements of {tp.topic}-{tp.partition} failed: "
                              f"{kafka_error_text(failure)}", markup=False)
        except (KafkaException, RuntimeError) as exc:
            err.print(f"Warning: cannot commit the acknowledgements: {kafka_error_text(exc)}",
                      markup=False)
        finally:
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return count, stop


def _poll_wait(idle_s: float | None, last_record: float) -> float:
    """How long one poll may wait: half a second, less when --idle-timeout ends sooner."""
    if idle_s is None:
        return 0.5
    return max(0.0, min(0.5, last_record + idle_s - time.monotonic()))


def _idle_over(idle_s: float | None, last_record: float, tracker: ErrorTracker) -> bool:
    """After a poll that brought nothing: True once --idle-timeout has passed since the last
    record; the client's fatal error, if it had one, ends the command with its text."""
    if idle_s is not None and time.monotonic() - last_record >= idle_s:
        return True
    fatal = tracker.fatal()
    if fatal is not None:
        raise CliError(kafka_error_text(fatal))
    return False


def _all_at_end(consumer: Any, group: str | None) -> bool:
    """With a group, EOF only counts once partitions are really assigned."""
    return group is None or bool(consumer.assignment())
