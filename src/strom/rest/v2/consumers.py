"""REST Proxy v2 consumer instances (`/consumers/...`): a Kafka consumer living in this process
on behalf of an HTTP client, which subscribes or assigns, reads records, commits and seeks through
later requests.

Each instance is one librdkafka consumer with its own single-thread executor: librdkafka
consumers are not thread-safe, and a read that waits for records must block neither the event
loop nor any other instance. Reads wait in short steps so a commit, a seek or a delete of the same
instance runs between them.

As in Confluent's proxy: an instance expires after ``rest.consumer.instance.timeout.ms`` without
requests (closed cleanly: it leaves its group); a read returns after
``consumer.request.timeout.ms`` (1 s by default, shortened by ``?timeout=``) unless
``fetch.min.bytes`` of keys and values arrived first; ``offset`` in a commit request is the last
record processed (the group's committed offset is the next one); the response's embedded format
is chosen by ``Accept`` and must be the instance's. Only the HTTP user who created an instance may
use it (to anyone else it does not exist: 404).

Records fetched beyond a response's limits stay with the instance for the next read, and only
the offsets of records handed out are stored, so a commit without a body commits exactly what the
client received. A record larger than ``max_bytes`` is still returned alone, so a reader always
makes progress (Kafka's fetch does the same).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import re
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from strom.rest.clients import rest_error_of
from strom.rest.context import RestContext
from strom.rest.errors import (
    CONSUMER_ALREADY_EXISTS,
    CONSUMER_FORMAT_MISMATCH,
    CONSUMER_INSTANCE_NOT_FOUND,
    ILLEGAL_STATE,
    INVALID_CONSUMER_CONFIG,
    PARTITION_NOT_FOUND,
    RestError,
)
from strom.rest.formats import formats_of
from strom.rest.openapi import error_responses, path_param, ref

log = logging.getLogger("strom.rest.v2.consumers")
T = TypeVar("T")

V2_JSON = "application/vnd.kafka.v2+json"
FORMATS = ("BINARY", "JSON", "AVRO", "JSONSCHEMA", "PROTOBUF")
# What GET .../records can answer: media type -> (embedded format, the server's preference).
# The generic v2 type means BINARY, and with no Accept (or */*) BINARY wins, as in Confluent's.
RECORD_TYPES: dict[str, tuple[str, float]] = {
    "application/vnd.kafka.binary.v2+json": ("BINARY", 1.0),
    V2_JSON: ("BINARY", 0.9),
    "application/vnd.kafka.json.v2+json": ("JSON", 0.1),
    "application/vnd.kafka.avro.v2+json": ("AVRO", 0.1),
    "application/vnd.kafka.jsonschema.v2+json": ("JSONSCHEMA", 0.1),
    "application/vnd.kafka.protobuf.v2+json": ("PROTOBUF", 0.1),
}
REQUEST_TIMEOUT_MS = 1000  # Confluent's consumer.request.timeout.ms default
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # Confluent's consumer.request.max.bytes default
FETCH_MIN_BYTES_MAX = 10_000_000  # the range Confluent accepts for fetch.min.bytes
MAX_INSTANCES = 1000  # each holds a librdkafka consumer and threads: bound what clients can pin
STEP_S = 0.1  # a waiting read gives its executor back this often
SEEK_WAIT_S = 2.0  # a just-assigned partition accepts seeks once its fetcher started
KAFKA_TIMEOUT_S = 10.0
CLOSE_AT_EXIT_S = 2.0
# consume() errors a Java consumer does not raise either: topics that do not exist (yet)
QUIET_ERRORS = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                KafkaError._UNKNOWN_PARTITION, KafkaError._PARTITION_EOF,
                KafkaError._MAX_POLL_EXCEEDED}
EXCLUSIVE = "Subscription to topics, partitions and pattern are mutually exclusive"
INVALID_CONFIG = "Invalid consumer configuration: "
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def not_found() -> RestError:
    return RestError(CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.", 404)


def illegal_state(message: str) -> RestError:
    return RestError(ILLEGAL_STATE, f"Illegal state: {message}", 409)


def invalid(message: str, error_code: int = 422) -> RestError:
    """A request that parsed but breaks a constraint (Confluent: 422)."""
    return RestError(error_code, message, 422)


def mistyped(message: str) -> RestError:
    """A request body of the wrong shape (Confluent's JSON mapping errors: 400)."""
    return RestError(400, message, 400)


# --------------------------------------------------------------------------- request bodies


@dataclass(frozen=True)
class InstanceConfig:
    name: str
    fmt: str
    auto_offset_reset: str | None
    auto_commit: bool | None
    min_bytes: int  # -1: wait for the whole request timeout
    request_timeout_ms: int


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise mistyped(f"'{key}' must be an integer")
    return value


def instance_config(body: Any) -> InstanceConfig:
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise mistyped("The request body must be a JSON object")
    name = body.get("id") or body.get("name")  # 'id' wins, as in Confluent's
    if name is None:
        name = f"rest-consumer-{uuid.uuid4()}"
    name = text(name, "'name'")
    if not name or "/" in name:
        raise invalid(f"{INVALID_CONFIG}consumer instance names are non-empty and without '/'",
                      INVALID_CONSUMER_CONFIG)
    fmt = body.get("format")
    if fmt is None:
        fmt = "binary"
    if not isinstance(fmt, str) or fmt.upper() not in FORMATS:
        raise invalid("Invalid format type.")
    reset = body.get("auto.offset.reset")
    if reset is not None and (not isinstance(reset, str)
                              or reset.lower() not in ("earliest", "latest", "none")):
        raise invalid(f"{INVALID_CONFIG}Invalid value {reset} for configuration "
                      "auto.offset.reset: String must be one of: latest, earliest, none",
                      INVALID_CONSUMER_CONFIG)
    commit = body.get("auto.commit.enable")
    auto_commit: bool | None = None
    if isinstance(commit, bool):
        auto_commit = commit
    elif isinstance(commit, str) and commit.strip().lower() in ("true", "false"):
        auto_commit = commit.strip().lower() == "true"
    elif commit is not None:
        raise invalid(f"{INVALID_CONFIG}Invalid value {commit} for configuration "
                      "enable.auto.commit: Expected value to be either true or false",
                      INVALID_CONSUMER_CONFIG)
    min_bytes = _optional_int(body, "fetch.min.bytes")
    if min_bytes is not None and not -1 <= min_bytes <= FETCH_MIN_BYTES_MAX:
        raise invalid("Invalid consumer configuration. It does not abide by the constraints: "
                      f"Invalid value {min_bytes} for configuration fetch.min.bytes: Value must "
                      f"be between -1 and {FETCH_MIN_BYTES_MAX}", 40001)
    wait_ms = _optional_int(body, "consumer.request.timeout.ms")
    if wait_ms is not None and not 0 <= wait_ms <= 2**31 - 1:
        raise invalid(f"{INVALID_CONFIG}consumer.request.timeout.ms must be at least 0",
                      INVALID_CONSUMER_CONFIG)
    return InstanceConfig(name, fmt.upper(), reset.lower() if reset else None, auto_commit,
                          -1 if min_bytes is None else min_bytes,
                          REQUEST_TIMEOUT_MS if wait_ms is None else wait_ms)


def _object(body: Any, required: bool = True) -> dict[str, Any]:
    if body is None:
        if required:
            raise invalid("The request body is required")
        return {}
    if not isinstance(body, dict):
        raise mistyped("The request body must be a JSON object")
    return body


def _items(body: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise mistyped(f"'{key}' must be a list of objects")
    return value


def text(value: Any, what: str) -> str:
    """A string librdkafka can take (UTF-8: JSON may carry lone surrogates)."""
    if not isinstance(value, str):
        raise mistyped(f"{what} must be a string")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise mistyped(f"{what} is not valid Unicode") from None
    if "\0" in value:  # librdkafka's C strings would end there
        raise mistyped(f"{what} contains a NUL character")
    return value


def python_regex(pattern: str) -> re.Pattern[str]:
    """The pattern as Python reads it, to list the topics it matches (librdkafka's own
    engine, POSIX-like, does the subscribing: the common syntax means the same in both)."""
    with warnings.catch_warnings():  # e.g. POSIX classes: a FutureWarning in Python
        warnings.simplefilter("ignore")
        return re.compile(pattern)


def topic_name(value: Any) -> str:
    name = text(value, "a topic name")
    if not LEGAL_TOPIC.fullmatch(name):
        raise invalid(f"{name!r} is not a legal topic name")
    return name


def _int(value: Any, what: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise mistyped(f"'{what}' must be an integer")
    if value > high:
        raise mistyped(f"'{what}' {value} is out of range")
    if value < 0:
        raise invalid(f"'{what}' must not be negative")
    return value


def _topic_partition(item: dict[str, Any]) -> tuple[str, int]:
    topic, partition = item.get("topic"), item.get("partition")
    if topic is None or partition is None:
        raise invalid("Each partition needs 'topic' and 'partition'")
    return topic_name(topic), _int(partition, "partition", INT32_MAX)


def _offset(item: dict[str, Any], key: str = "offset") -> int:
    value = item.get(key)
    if value is None:
        raise invalid(f"Each entry needs '{key}'")
    return _int(value, key, INT64_MAX - 1)  # a commit stores the next offset


def _metadata(item: dict[str, Any]) -> str | None:
    value = item.get("metadata")
    return None if value is None else text(value, "'metadata'")


def partitions_of(body: dict[str, Any]) -> list[TopicPartition]:
    return [TopicPartition(*_topic_partition(item)) for item in _items(body, "partitions")]


def _timestamp_ms(item: dict[str, Any]) -> int:
    value = item.get("timestamp")
    if value is None:
        raise invalid("Each entry needs 'timestamp'")
    if isinstance(value, int) and not isinstance(value, bool):
        return _int(value, "timestamp", INT64_MAX)  # Strom also takes epoch milliseconds
    if not isinstance(value, str):
        raise mistyped("'timestamp' must be an ISO-8601 instant")
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise mistyped(f"'timestamp' {value!r} is not an ISO-8601 instant") from None
    if when.tzinfo is None:
        raise mistyped(f"'timestamp' {value!r} has no time zone (e.g. Z)")
    if when.timestamp() < 0:  # Kafka reads -1 and -2 as latest and earliest
        raise invalid(f"'timestamp' {value!r} is before 1970")
    return int(when.timestamp() * 1000)


# --------------------------------------------------------------------------- one instance


@dataclass
class Batch:
    """One read's records and its limits."""

    max_records: int
    max_bytes: int
    min_bytes: int  # -1: none (the read waits for its timeout)
    messages: list[Message] = field(default_factory=list)
    size: int = 0


def _size(msg: Message) -> int:
    key, value = msg.key(), msg.value()
    return (len(key) if key else 0) + (len(value) if value else 0)


class Instance:
    """A consumer instance; every method that touches `consumer` or `pending` runs on its
    executor (see `run`)."""

    def __init__(self, group: str, config: InstanceConfig, user: str | None,
                 consumer: Consumer, executor: concurrent.futures.ThreadPoolExecutor) -> None:
        self.group = group
        self.name = config.name
        self.config = config
        self.user = user
        self.consumer = consumer
        self.executor = executor
        self.used = time.monotonic()
        self.busy = 0  # requests in progress: an instance never expires under one
        self.closed = False
        self.pending: deque[Message] = deque()  # fetched, not yet handed out
        self.mode = "none"  # none | topics | pattern | assigned
        self.topics: list[str] = []
        self.pattern: re.Pattern[str] | None = None

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn` on this instance's thread; Kafka errors become Confluent's."""
        if self.closed:
            raise not_found()
        self.busy += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, fn)
        except KafkaException as exc:
            raise rest_error_of(exc) from None
        finally:
            self.busy -= 1
            self.used = time.monotonic()

    # ---- reads

    def fill(self, batch: Batch, wait_s: float) -> bool:
        """Add fetched records to `batch`, waiting up to `wait_s` for the first; True once the
        batch is complete."""
        if self.pending:
            self._drop_unassigned()
        if self._move(batch):
            return True
        room = batch.max_records - len(batch.messages)
        got: list[Message] = self.consumer.consume(room, 0)
        if not got and wait_s > 0:
            first = self.consumer.poll(wait_s)
            if first is not None:
                got = [first]
                if room > 1:
                    got += self.consumer.consume(room - 1, 0)
        for msg in got:
            err = msg.error()
            if err is None:
                self.pending.append(msg)
            elif err.code() in QUIET_ERRORS or err.retriable():
                log.debug("instance %s/%s: %s", self.group, self.name, err.str())
            elif not batch.messages and not self.pending:
                raise KafkaException(err)
            else:
                log.info("instance %s/%s: %s", self.group, self.name, err.str())
        return self._move(batch)

    def _move(self, batch: Batch) -> bool:
        while self.pending and len(batch.messages) < batch.max_records:
            size = _size(self.pending[0])
            if batch.messages and batch.size + size > batch.max_bytes:
                return True
            batch.messages.append(self.pending.popleft())
            batch.size += size
        return (len(batch.messages) >= batch.max_records or batch.size >= batch.max_bytes
                or (batch.min_bytes >= 0 and bool(batch.messages)
                    and batch.size >= batch.min_bytes))

    def _drop_unassigned(self) -> None:
        """Records of partitions a rebalance took away belong to their new owner now."""
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        kept = [m for m in self.pending if (m.topic(), m.partition()) in assigned]
        if len(kept) != len(self.pending):
            self.pending = deque(kept)

    def put_back(self, messages: list[Message]) -> None:
        self.pending.extendleft(reversed(messages))

    def store(self, messages: list[Message]) -> None:
        """Mark `messages` as handed out: what a commit without a body (or auto-commit)
        commits."""
        last: dict[tuple[str, int], int] = {}
        for msg in messages:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if topic is not None and partition is not None and offset is not None:
                last[(topic, partition)] = offset
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
        if offsets:
            try:
                self.consumer.store_offsets(offsets=offsets)
            except KafkaException as exc:  # revoked meanwhile: its new owner reads them again
                log.debug("instance %s/%s: offsets not stored: %s", self.group, self.name, exc)

    # ---- offsets

    def commit(self, offsets: list[TopicPartition] | None, asynchronous: bool
               ) -> list[TopicPartition]:
        done: list[TopicPartition] | None = None
        try:
            if asynchronous and offsets is None:
                self.consumer.commit(asynchronous=True)
            elif asynchronous and offsets is not None:
                self.consumer.commit(offsets=offsets, asynchronous=True)
            elif offsets is None:
                done = self.consumer.commit(asynchronous=False)
            else:
                done = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError._NO_OFFSET:
                return []  # nothing read since the last commit
            raise
        for tp in done or []:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return list(done or [])

    def committed(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        found = self.consumer.committed(partitions, timeout=KAFKA_TIMEOUT_S)
        return [tp for tp in found if tp.error is None and tp.offset >= 0]

    # ---- subscription and assignment

    def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        kind = "pattern" if pattern is not None else "topics"
        if self.mode not in ("none", kind):
            raise illegal_state(EXCLUSIVE)
        self.pending.clear()
        if pattern is None and not topics:
            self.unsubscribe()
            return
        if pattern is not None:
            try:  # librdkafka: a leading ^ makes a regex, of its own (POSIX-like) dialect
                self.consumer.subscribe([f"^({pattern})$"])
            except KafkaException as exc:
                raise invalid(f"'topic_pattern' is not a valid pattern: {exc}") from None
            self.pattern, self.topics = python_regex(pattern), []
        else:
            assert topics is not None
            self.consumer.subscribe(topics)
            self.pattern, self.topics = None, list(topics)
        self.mode = kind

    def unsubscribe(self) -> None:
        self.pending.clear()
        if self.mode == "assigned":
            self.consumer.unassign()
        elif self.mode != "none":
            self.consumer.unsubscribe()
        self.mode, self.topics, self.pattern = "none", [], None

    def subscription(self) -> list[str]:
        if self.mode == "topics":
            return list(self.topics)
        if self.mode == "pattern" and self.pattern is not None:
            meta = self.consumer.list_topics(timeout=KAFKA_TIMEOUT_S)
            return sorted(t for t in meta.topics if self.pattern.fullmatch(t))
        return []

    def assign(self, partitions: list[TopicPartition]) -> None:
        if self.mode in ("topics", "pattern"):
            raise illegal_state(EXCLUSIVE)
        self.pending.clear()
        if partitions:
            self.consumer.assign(partitions)
            self.mode = "assigned"
        else:
            self.unsubscribe()

    def assignment(self) -> list[TopicPartition]:
        return sorted(self.consumer.assignment(), key=lambda tp: (tp.topic, tp.partition))

    # ---- positions

    def check_assigned(self, targets: list[TopicPartition]) -> None:
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        for tp in targets:
            if (tp.topic, tp.partition) not in assigned:
                raise illegal_state(f"No current assignment for partition "
                                    f"{tp.topic}-{tp.partition}")

    def seek(self, targets: list[TopicPartition]) -> None:
        """Move each partition's position (an offset, or OFFSET_BEGINNING)."""
        self.check_assigned(targets)
        moved = {(tp.topic, tp.partition) for tp in targets}
        self.pending = deque(m for m in self.pending if (m.topic(), m.partition()) not in moved)
        for tp in targets:
            self._seek_one(tp)

    def _seek_one(self, tp: TopicPartition) -> None:
        deadline = time.monotonic() + SEEK_WAIT_S
        while True:
            try:
                self.consumer.seek(tp)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not isinstance(err, KafkaError) or err.code() != KafkaError._STATE:
                    raise
                if self.mode == "assigned":  # not fetching yet: assign it again, positioned
                    self.consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
                    self.consumer.incremental_assign([tp])
                    return
                if time.monotonic() > deadline:
                    raise illegal_state(f"partition {tp.topic}-{tp.partition} cannot seek "
                                        "yet: read records first") from None
                time.sleep(0.01)  # the partition's fetcher is starting (a poll interval)

    def close(self) -> None:
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.info("instance %s/%s: close: %s", self.group, self.name, exc)


# --------------------------------------------------------------------------- all instances


class Instances:
    """This process's consumer instances by (group, name), and their expiry."""

    def __init__(self, ctx: RestContext) -> None:
        self.ctx = ctx
        self.by_key: dict[tuple[str, str], Instance] = {}
        self.creating: set[tuple[str, str]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._exit_hook = False

    @property
    def timeout_s(self) -> float:
        return max(self.ctx.settings.consumer_timeout_ms, 1) / 1000

    def get(self, request: Request) -> Instance:
        key = (request.path_params["group_name"], request.path_params["instance"])
        found = self.by_key.get(key)
        if found is None or found.closed or found.user != self.ctx.user(request):
            raise not_found()
        found.used = time.monotonic()
        return found

    async def create(self, request: Request, group: str, config: InstanceConfig) -> Instance:
        key = (group, config.name)
        if key in self.by_key or key in self.creating:
            raise RestError(CONSUMER_ALREADY_EXISTS, "Consumer with specified consumer ID "
                            "already exists in the specified consumer group.", 409)
        if len(self.by_key) + len(self.creating) >= MAX_INSTANCES:
            raise RestError(429, f"This server holds {MAX_INSTANCES} consumer instances "
                            "already: delete some first", 429)
        user = self.ctx.user(request)
        extra: dict[str, Any] = {
            "group.id": group,
            "enable.auto.offset.store": False,
            "isolation.level": "read_uncommitted",  # the Java consumer's default, as Confluent's
            # librdkafka leaves the group when not polled for this long: not before we expire
            "max.poll.interval.ms": min(max(300_000, int(self.timeout_s * 1000) + 30_000),
                                        86_400_000),
        }
        if config.auto_offset_reset is not None:
            extra["auto.offset.reset"] = ("error" if config.auto_offset_reset == "none"
                                          else config.auto_offset_reset)
        if config.auto_commit is not None:
            extra["enable.auto.commit"] = config.auto_commit
        conf = self.ctx.pool.config_for(user, **extra)
        self.creating.add(key)
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rest-consumer")
        try:
            consumer = await asyncio.get_running_loop().run_in_executor(
                executor, lambda: Consumer(conf))
        except KafkaException as exc:
            executor.shutdown(wait=False)
            raise invalid(f"{INVALID_CONFIG}{exc}", INVALID_CONSUMER_CONFIG) from None
        finally:
            self.creating.discard(key)
        found = self.by_key[key] = Instance(group, config, user, consumer, executor)
        self._start_sweeper()
        return found

    async def remove(self, instance: Instance) -> None:
        """Close it after the requests already queued on it (its last commit among them)."""
        key = (instance.group, instance.name)
        if self.by_key.get(key) is instance:
            del self.by_key[key]
        if instance.closed:
            return
        instance.closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(instance.executor, instance.close)
        finally:
            instance.executor.shutdown(wait=False)

    def _start_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        if not self._exit_hook:
            atexit.register(self.close_all)
            self._exit_hook = True

    async def _sweep(self) -> None:
        interval = min(1.0, max(0.05, self.timeout_s / 4))
        while self.by_key:
            await asyncio.sleep(interval)  # the expiry check's period, not synchronisation
            now = time.monotonic()
            expired = [i for i in self.by_key.values()
                       if i.busy == 0 and now - i.used > self.timeout_s]
            await asyncio.gather(*(self._expire(i) for i in expired))

    async def _expire(self, instance: Instance) -> None:
        log.info("consumer instance %s/%s expired", instance.group, instance.name)
        try:
            await self.remove(instance)
        except Exception:  # one failed close must not stop the sweep
            log.exception("closing consumer instance %s/%s failed", instance.group,
                          instance.name)

    def close_all(self) -> None:
        """At exit: let each instance leave its group, within a bound (the broker may be
        gone)."""
        instances = list(self.by_key.values())
        self.by_key.clear()
        threads = [threading.Thread(target=i.close, daemon=True) for i in instances
                   if not i.closed]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + CLOSE_AT_EXIT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


# --------------------------------------------------------------------------- HTTP


def negotiate(accept: str | None) -> tuple[str, str]:
    """(the response's media type, the embedded format it stands for) from an Accept header;
    406 when it accepts none of them."""
    best: tuple[float, float, str] | None = None
    for part in (accept or "*/*").split(","):
        pieces = [p.strip() for p in part.split(";")]
        wanted = pieces[0].lower()
        if not wanted:
            continue
        q = 1.0
        for param in pieces[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        for media, (_, qs) in RECORD_TYPES.items():
            if wanted in ("*/*", "application/*", media) and (
                    best is None or (q, qs) > (best[0], best[1])):
                best = (q, qs, media)
    if best is None:
        raise RestError(406, "HTTP 406 Not Acceptable", 406)
    return best[2], RECORD_TYPES[best[2]][0]


def _query_int(request: Request, name: str) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return -1
    try:
        return int(raw)
    except ValueError:
        raise RestError(400, f"Query parameter '{name}' must be an integer", 400) from None


def v2_json(body: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=V2_JSON)


def no_content() -> Response:
    return Response(status_code=204)


def routes(ctx: RestContext) -> list[BaseRoute]:
    instances = Instances(ctx)

    async def create(request: Request) -> Response:
        group = text(request.path_params["group_name"], "The group name")
        config = instance_config(await ctx.read_json(request, required=False))
        await instances.create(request, group, config)
        base = ctx.url(request, f"/consumers/{quote(group, safe='')}/instances/"
                                f"{quote(config.name, safe='')}")
        return v2_json({"instance_id": config.name, "base_uri": base})

    async def delete(request: Request) -> Response:
        await instances.remove(instances.get(request))
        return no_content()

    async def commit(request: Request) -> Response:
        instance = instances.get(request)
        body = await ctx.read_json(request, required=False)
        asynchronous = request.query_params.get("async", "false").lower() == "true"
        offsets: list[TopicPartition] | None = None
        if body is not None:
            offsets = []
            for item in _items(_object(body), "offsets"):
                topic, partition = _topic_partition(item)
                metadata = _metadata(item)
                offsets.append(TopicPartition(topic, partition, _offset(item) + 1)
                               if metadata is None else
                               TopicPartition(topic, partition, _offset(item) + 1,
                                              metadata=metadata))
            if not offsets:
                return v2_json({"offsets": []})
        done = await instance.run(lambda: instance.commit(offsets, asynchronous))
        return v2_json({"offsets": [
            {"topic": tp.topic, "partition": tp.partition, "consumed": tp.offset - 1,
             "committed": tp.offset} for tp in done if tp.offset >= 0]})

    async def committed(request: Request) -> Response:
        instance = instances.get(request)
        body = await ctx.read_json(request, required=False)
        if body is None:
            raise RestError(PARTITION_NOT_FOUND, "Partition not found.", 404)
        wanted = partitions_of(_object(body))
        found = await instance.run(lambda: instance.committed(wanted)) if wanted else []
        return v2_json({"offsets": [
            {"topic": tp.topic, "partition": tp.partition, "offset": tp.offset,
             "metadata": tp.metadata or ""} for tp in found]})

    async def subscribe(request: Request) -> Response:
        instance = instances.get(request)
        body = _object(await ctx.read_json(request, required=False))
        topics, pattern = body.get("topics"), body.get("topic_pattern")
        if topics is not None:
            if not isinstance(topics, list):
                raise mistyped("'topics' must be a list of topic names")
            topics = [topic_name(t) for t in topics]
        if pattern is not None:
            pattern = text(pattern, "'topic_pattern'")
            try:
                python_regex(pattern)
            except (re.error, RecursionError, OverflowError) as exc:
                raise invalid(f"'topic_pattern' is not a valid pattern: {exc}") from None
        if topics is None and pattern is None:
            return no_content()  # nothing asked: nothing changes (as Confluent's)
        await instance.run(lambda: instance.subscribe(
            topics if topics is not None else None, pattern if topics is None else None))
        return no_content()

    async def subscription(request: Request) -> Response:
        instance = instances.get(request)
        return v2_json({"topics": await instance.run(instance.subscription)})

    async def unsubscribe(request: Request) -> Response:
        instance = instances.get(request)
        await instance.run(instance.unsubscribe)
        return no_content()

    async def assign(request: Request) -> Response:
        instance = instances.get(request)
        wanted = partitions_of(_object(await ctx.read_json(request, required=False)))
        await instance.run(lambda: instance.assign(wanted))
        return no_content()

    async def assignment(request: Request) -> Response:
        instance = instances.get(request)
        found = await instance.run(instance.assignment)
        return v2_json({"partitions": [{"topic": tp.topic, "partition": tp.partition}
                                       for tp in found]})

    async def seek(request: Request) -> Response:
        instance = instances.get(request)
        body = _object(await ctx.read_json(request, required=False))
        offsets = [TopicPartition(*_topic_partition(i), _offset(i))
                   for i in _items(body, "offsets")]
        times = {TopicPartition(*_topic_partition(i)): _timestamp_ms(i)
                 for i in _items(body, "timestamps")}
        if offsets:
            await instance.run(lambda: instance.seek(offsets))
        if times:
            await instance.run(lambda: instance.check_assigned(list(times)))
            found = await list_offsets(request, {tp: OffsetSpec.for_timestamp(ts)
                                                 for tp, ts in times.items()})
            later = [tp for tp, offset in found.items() if offset < 0]  # no record that late
            found.update(await list_offsets(request, {tp: OffsetSpec.latest() for tp in later}))
            targets = [TopicPartition(tp.topic, tp.partition, o) for tp, o in found.items()]
            await instance.run(lambda: instance.seek(targets))
        return no_content()

    async def list_offsets(request: Request, specs: dict[TopicPartition, OffsetSpec]
                           ) -> dict[TopicPartition, int]:
        """Offsets by spec, asked through the user's admin client: the instance's own
        connection may be held up to fetch.wait.max.ms by its pending fetch."""
        if not specs:
            return {}
        clients = ctx.clients(request)
        try:
            futures = clients.admin.list_offsets(
                specs, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=KAFKA_TIMEOUT_S)
            found = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures.values()))
        except KafkaException as exc:
            raise rest_error_of(exc) from None
        return {TopicPartition(tp.topic, tp.partition): info.offset
                for tp, info in zip(futures, found, strict=True)}

    def seek_to(end: bool) -> Callable[[Request], Any]:
        async def handler(request: Request) -> Response:
            instance = instances.get(request)
            wanted = partitions_of(_object(await ctx.read_json(request, required=False)))
            if not wanted:
                return no_content()
            if not end:  # librdkafka finds the beginning when it fetches
                targets = [TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING)
                           for tp in wanted]
            else:  # the end now: one found later would skip records produced meanwhile
                await instance.run(lambda: instance.check_assigned(wanted))
                found = await list_offsets(request, {tp: OffsetSpec.latest() for tp in wanted})
                targets = [TopicPartition(tp.topic, tp.partition, o) for tp, o in found.items()]
            await instance.run(lambda: instance.seek(targets))
            return no_content()
        return handler

    async def records(request: Request) -> Response:
        media, fmt = negotiate(request.headers.get("accept"))
        instance = instances.get(request)
        if fmt != instance.config.fmt:
            raise RestError(CONSUMER_FORMAT_MISMATCH, "The requested embedded data format does "
                            "not match the deserializer for this consumer instance", 406)
        timeout_ms, max_bytes = _query_int(request, "timeout"), _query_int(request, "max_bytes")
        wait_ms = instance.config.request_timeout_ms
        if timeout_ms > 0:
            wait_ms = min(wait_ms, timeout_ms)
        batch = Batch(max(1, ctx.settings.max_records),
                      MAX_RESPONSE_BYTES if max_bytes <= 0 else min(max_bytes, MAX_RESPONSE_BYTES),
                      instance.config.min_bytes)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            step = min(STEP_S, max(0.0, deadline - time.monotonic()))
            if await instance.run(partial(instance.fill, batch, step)):
                break
            if time.monotonic() >= deadline or instance.closed:
                break
        formats = formats_of(ctx, request)  # the user's: registry calls carry their credentials
        out: list[dict[str, Any]] = []
        for i, msg in enumerate(batch.messages):
            try:
                key = await formats.decode(msg.key(), fmt)
                value = await formats.decode(msg.value(), fmt)
            except RestError:
                rest = batch.messages[i:]
                if not instance.closed:  # the client sees them again once it can
                    await instance.run(partial(instance.put_back, rest))
                if not out:
                    raise
                break
            out.append({"topic": msg.topic(), "key": key, "value": value,
                        "partition": msg.partition(), "offset": msg.offset()})
        handed = batch.messages[:len(out)]
        if handed and not instance.closed:
            await instance.run(lambda: instance.store(handed))
        return JSONResponse(out, media_type=media)

    base = "/consumers/{group_name}/instances/{instance}"
    return [
        Route("/consumers/{group_name}", create, methods=["POST"]),
        Route(base, delete, methods=["DELETE"]),
        Route(f"{base}/offsets", commit, methods=["POST"]),
        Route(f"{base}/offsets", committed, methods=["GET"]),
        Route(f"{base}/subscription", subscribe, methods=["POST"]),
        Route(f"{base}/subscription", subscription, methods=["GET"]),
        Route(f"{base}/subscription", unsubscribe, methods=["DELETE"]),
        Route(f"{base}/assignments", assign, methods=["POST"]),
        Route(f"{base}/assignments", assignment, methods=["GET"]),
        Route(f"{base}/positions", seek, methods=["POST"]),
        Route(f"{base}/positions/beginning", seek_to(end=False), methods=["POST"]),
        Route(f"{base}/positions/end", seek_to(end=True), methods=["POST"]),
        Route(f"{base}/records", records, methods=["GET"]),
    ]


# --------------------------------------------------------------------------- OpenAPI


def _v2(schema: str, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {V2_JSON: {"schema": ref(schema)}}}


def _body(schema: str, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {
        media: {"schema": ref(schema)} for media in (V2_JSON, "application/json")}}


NO_CONTENT = {"204": {"description": "No Content"}}
GROUP = path_param("group_name")
INSTANCE = [GROUP, path_param("instance")]
# every instance route: bad body (400), authentication (401), ACLs (403), no such instance (404),
# a state conflict (409), too large a body (413), a constraint (422), Kafka (500)
INSTANCE_ERRORS = error_responses(400, 401, 403, 404, 409, 413, 422, 500)

TP_PROPERTIES: dict[str, Any] = {
    "topic": {"type": "string"}, "partition": {"type": "integer", "minimum": 0}}
TOPIC_PARTITION = {"type": "object", "required": ["topic", "partition"],
                   "properties": TP_PROPERTIES}
ANY = {"description": "a JSON value (null when the record has none)"}

SCHEMAS: dict[str, Any] = {
    "V2CreateConsumerRequest": {"type": "object", "properties": {
        "name": {"type": "string"},
        "id": {"type": "string", "description": "overrides name (older clients)"},
        "format": {"type": "string", "enum": [f.lower() for f in FORMATS],
                   "description": "case-insensitive; binary by default"},
        "auto.offset.reset": {"type": "string", "enum": ["earliest", "latest", "none"]},
        "auto.commit.enable": {"type": ["string", "boolean"]},
        "fetch.min.bytes": {"type": ["integer", "string"]},
        "consumer.request.timeout.ms": {"type": ["integer", "string"]}}},
    "V2CreateConsumerResponse": {
        "type": "object", "required": ["instance_id", "base_uri"], "properties": {
            "instance_id": {"type": "string"}, "base_uri": {"type": "string"}}},
    "V2TopicPartition": TOPIC_PARTITION,
    "V2Partitions": {"type": "object", "properties": {
        "partitions": {"type": "array", "items": ref("V2TopicPartition")}}},
    "V2PartitionsResponse": {"type": "object", "required": ["partitions"], "properties": {
        "partitions": {"type": "array", "items": ref("V2TopicPartition")}}},
    "V2CommitRequest": {"type": "object", "properties": {"offsets": {"type": "array", "items": {
        "type": "object", "required": ["topic", "partition", "offset"], "properties": {
            **TP_PROPERTIES,
            "offset": {"type": "integer", "minimum": 0,
                       "description": "the last record processed; the next is committed"},
            "metadata": {"type": ["string", "null"]}}}}}},
    "V2CommitResponse": {"type": "object", "required": ["offsets"], "properties": {
        "offsets": {"type": "array", "items": {
            "type": "object", "required": ["topic", "partition", "consumed", "committed"],
            "properties": {**TP_PROPERTIES, "consumed": {"type": "integer"},
                           "committed": {"type": "integer"}}}}}},
    "V2CommittedResponse": {"type": "object", "required": ["offsets"], "properties": {
        "offsets": {"type": "array", "items": {
            "type": "object", "required": ["topic", "partition", "offset", "metadata"],
            "properties": {**TP_PROPERTIES, "offset": {"type": "integer"},
                           "metadata": {"type": "string"}}}}}},
    "V2Subscription": {"type": "object", "properties": {
        "topics": {"type": "array", "items": {"type": "string"}},
        "topic_pattern": {"type": "string",
                          "description": "a regular expression matching whole topic names"}}},
    "V2SubscriptionResponse": {"type": "object", "required": ["topics"], "properties": {
        "topics": {"type": "array", "items": {"type": "string"}}}},
    "V2Positions": {"type": "object", "properties": {
        "offsets": {"type": "array", "items": {
            "type": "object", "required": ["topic", "partition", "offset"], "properties": {
                **TP_PROPERTIES, "offset": {"type": "integer", "minimum": 0},
                "metadata": {"type": ["string", "null"]}}}},
        "timestamps": {"type": "array", "items": {
            "type": "object", "required": ["topic", "partition", "timestamp"], "properties": {
                **TP_PROPERTIES,
                "timestamp": {"type": ["string", "integer"],
                              "description": "ISO-8601 instant, or epoch milliseconds"},
                "metadata": {"type": ["string", "null"]}}}}}},
    "V2BinaryRecords": {"type": "array", "items": {
        "type": "object", "required": ["topic", "key", "value", "partition", "offset"],
        "properties": {"topic": {"type": "string"}, "key": {"type": ["string", "null"]},
                       "value": {"type": ["string", "null"]},
                       "partition": {"type": "integer"}, "offset": {"type": "integer"}}}},
    "V2Records": {"type": "array", "items": {
        "type": "object", "required": ["topic", "key", "value", "partition", "offset"],
        "properties": {"topic": {"type": "string"}, "key": ANY, "value": ANY,
                       "partition": {"type": "integer"}, "offset": {"type": "integer"}}}},
}

PATHS: dict[str, Any] = {
    "/consumers/{group_name}": {"post": {
        "summary": "Create a consumer instance in a group", "operationId": "v2CreateConsumer",
        "parameters": [GROUP], "requestBody": _body("V2CreateConsumerRequest", required=False),
        "responses": {"200": _v2("V2CreateConsumerResponse"),
                      **error_responses(400, 401, 409, 413, 422, 429, 500)}}},
    "/consumers/{group_name}/instances/{instance}": {"delete": {
        "summary": "Close the instance (it leaves its group)", "operationId": "v2DeleteConsumer",
        "parameters": INSTANCE, "responses": {**NO_CONTENT, **INSTANCE_ERRORS}}},
    "/consumers/{group_name}/instances/{instance}/offsets": {
        "post": {"summary": "Commit the given offsets, or with no body all records returned",
                 "operationId": "v2CommitOffsets", "parameters": [
                     *INSTANCE, {"name": "async", "in": "query", "required": False,
                                 "schema": {"type": "string"}}],
                 "requestBody": _body("V2CommitRequest", required=False),
                 "responses": {"200": _v2("V2CommitResponse"), **INSTANCE_ERRORS}},
        "get": {"summary": "The group's committed offsets of the given partitions",
                "operationId": "v2CommittedOffsets", "parameters": INSTANCE,
                "requestBody": _body("V2Partitions"),
                "responses": {"200": _v2("V2CommittedResponse"), **INSTANCE_ERRORS}}},
    "/consumers/{group_name}/instances/{instance}/subscription": {
        "post": {"summary": "Subscribe to topics or a topic pattern",
                 "operationId": "v2Subscribe", "parameters": INSTANCE,
                 "requestBody": _body("V2Subscription"),
                 "responses": {**NO_CONTENT, **INSTANCE_ERRORS}},
        "get": {"summary": "The subscribed topics", "operationId": "v2Subscription",
                "parameters": INSTANCE,
                "responses": {"200": _v2("V2SubscriptionResponse"), **INSTANCE_ERRORS}},
        "delete": {"summary": "Unsubscribe", "operationId": "v2Unsubscribe",
                   "parameters": INSTANCE, "responses": {**NO_CONTENT, **INSTANCE_ERRORS}}},
    "/consumers/{group_name}/instances/{instance}/assignments": {
        "post": {"summary": "Assign partitions by hand", "operationId": "v2Assign",
                 "parameters": INSTANCE, "requestBody": _body("V2Partitions"),
                 "responses": {**NO_CONTENT, **INSTANCE_ERRORS}},
        "get": {"summary": "The assigned partitions", "operationId": "v2Assignment",
                "parameters": INSTANCE,
                "responses": {"200": _v2("V2PartitionsResponse"), **INSTANCE_ERRORS}}},
    "/consumers/{group_name}/instances/{instance}/positions": {"post": {
        "summary": "Seek partitions to offsets or timestamps", "operationId": "v2Seek",
        "parameters": INSTANCE, "requestBody": _body("V2Positions"),
        "responses": {**NO_CONTENT, **INSTANCE_ERRORS}}},
    "/consumers/{group_name}/instances/{instance}/positions/beginning": {"post": {
        "summary": "Seek partitions to their first offsets", "operationId": "v2SeekToBeginning",
        "parameters": INSTANCE, "requestBody": _body("V2Partitions"),
        "responses": {**NO_CONTENT, **INSTANCE_ERRORS}}},
    "/consumers/{group_name}/instances/{instance}/positions/end": {"post": {
        "summary": "Seek partitions to their ends", "operationId": "v2SeekToEnd",
        "parameters": INSTANCE, "requestBody": _body("V2Partitions"),
        "responses": {**NO_CONTENT, **INSTANCE_ERRORS}}},
    "/consumers/{group_name}/instances/{instance}/records": {"get": {
        "summary": "Read records in the instance's embedded format (chosen by Accept)",
        "operationId": "v2Records", "parameters": [
            *INSTANCE,
            {"name": "timeout", "in": "query", "required": False, "schema": {"type": "integer"},
             "description": "ms to wait at most (capped by consumer.request.timeout.ms)"},
            {"name": "max_bytes", "in": "query", "required": False,
             "schema": {"type": "integer"},
             "description": "bytes of keys and values to return at most"}],
        "responses": {
            "200": {"description": "the records (possibly none)", "content": {
                media: {"schema": ref("V2BinaryRecords" if fmt == "BINARY" else "V2Records")}
                for media, (fmt, _) in RECORD_TYPES.items()}},
            **error_responses(400, 401, 403, 404, 406, 422, 500)}}},
}
