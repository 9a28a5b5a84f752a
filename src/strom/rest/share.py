"""Strom's own API (no peer serves it): share groups (KIP-932) over HTTP, a queue for thin
clients.

A share consumer instance is a member of share group `group`, subscribed to some topics
(`POST /strom/v1/share-groups/{group}/consumers`). `GET .../records` acquires records: each one
is locked for this instance until it is acknowledged or its lock (the group's
`share.record.lock.duration.ms`) runs out, and carries its delivery count. `POST
.../acknowledgements` accepts (done), releases (delivered again, to any member) or rejects
(never delivered again) each record by topic, partition and offset; `DELETE` the instance
releases what it still holds and leaves the group.

Each instance drives a librdkafka ShareConsumer in explicit acknowledgement mode on a
single-thread executor of its own (the client is not thread-safe; the event loop never blocks).
librdkafka may acquire more records in one poll than a request asked for: the rest wait in the
instance, still locked to it, for the next `GET`. It polls the broker again only once every
record it handed out is acknowledged (librdkafka's rule in explicit mode); a `GET` before that
is answered 409, unless those records' locks have run out, in which case they are released.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import functools
import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Message, ShareConsumer
from confluent_kafka.admin import ConfigResource, ResourceType
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from strom.protocol.errors import ErrorCode
from strom.rest.clients import rest_error_of
from strom.rest.context import RestContext
from strom.rest.errors import (
    CONSUMER_ALREADY_EXISTS,
    CONSUMER_INSTANCE_NOT_FOUND,
    ILLEGAL_STATE,
    INVALID_CONSUMER_CONFIG,
    TOPIC_NOT_FOUND,
    RestError,
    bad_request,
    kafka_error,
    not_found,
    unprocessable,
)
from strom.rest.formats import PLAIN, SCHEMA_FORMATS, formats_of
from strom.rest.openapi import error_responses, ok, path_param, ref

log = logging.getLogger("strom.rest.share")

BASE = "/strom/v1/share-groups"
MAX_INSTANCES = 256  # share consumer instances per HTTP API process (503 beyond)
DEFAULT_MAX_RECORDS = 100  # records a poll of the broker acquires, unless the instance says
DEFAULT_TIMEOUT_MS = 1000  # how long a GET waits for records, unless it says
MAX_TIMEOUT_MS = 30000
POLL_SLICE_S = 0.25  # one librdkafka poll: a DELETE waits at most this for a GET to yield
ACK_TIMEOUT_S = 30.0  # commit_sync of acknowledgements
# A DELETE (or the process's shutdown) waits this long for librdkafka's close; the instance is
# gone for clients at once, and a slower close (seen once in CI: over 30 s after the member had
# left the group) goes on in the background instead of holding the HTTP answer.
CLOSE_WAIT_S = 5.0
LOCK_TTL_S = 30.0  # how long the group's lock duration, once read, is trusted
NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
ACK_TYPES = {"ACCEPT": AcknowledgeType.ACCEPT, "RELEASE": AcknowledgeType.RELEASE,
             "REJECT": AcknowledgeType.REJECT}
FORMATS = tuple(f.lower() for f in PLAIN + SCHEMA_FORMATS)
# Poll errors that waiting cannot cure: the request fails with them.
_FATAL_CODES = frozenset({3, 29, 30})  # unknown topic, topic / group authorization failed

T = TypeVar("T")
Key = tuple[str, int, int]  # topic, partition, offset


@dataclass
class Acquired:
    """A record librdkafka handed this instance, and a safe estimate of when its lock ends."""

    msg: Message
    until_ms: int

    @property
    def key(self) -> Key:
        return (str(self.msg.topic()), int(self.msg.partition() or 0), int(self.msg.offset() or 0))


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ShareInstance:
    instance_id: str
    group: str
    topics: list[str]
    user: str | None
    conf: dict[str, Any]
    max_records: int
    lock_ms: int
    lock_read_at: float = field(default_factory=time.monotonic)
    used: float = field(default_factory=time.monotonic)
    buffered: deque[Acquired] = field(default_factory=deque)  # acquired, not yet handed out
    delivered: dict[Key, Acquired] = field(default_factory=dict)  # handed out, not acknowledged
    closed: bool = False
    # Records a poll returns were acquired no earlier than this (epoch ms): when the previous
    # poll returned (librdkafka may fetch ahead after it), or when the instance subscribed.
    floor_ms: int = field(default_factory=_now_ms)
    consumer: ShareConsumer | None = None
    fetching: asyncio.Lock = field(default_factory=asyncio.Lock)
    executor: concurrent.futures.ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"rest-share-{self.instance_id[:12]}")

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn` on the instance's own thread (librdkafka's consumer is not thread-safe)."""
        try:
            future = asyncio.get_running_loop().run_in_executor(self.executor, fn)
        except RuntimeError:  # the executor is shut down: the instance was closed meanwhile
            raise self.gone() from None
        try:
            return await future
        except KafkaException as exc:
            raise rest_error_of(exc) from None

    def gone(self) -> RestError:
        return not_found(f"Share consumer instance {self.instance_id} of group {self.group} "
                         "was closed.", CONSUMER_INSTANCE_NOT_FOUND)

    def live_consumer(self) -> ShareConsumer:
        if self.consumer is None or self.closed:
            raise self.gone()
        return self.consumer

    async def start(self) -> None:
        def start() -> ShareConsumer:
            consumer = ShareConsumer(self.conf)
            consumer.subscribe(self.topics)
            return consumer

        try:
            self.consumer = await asyncio.get_running_loop().run_in_executor(self.executor, start)
        except (KafkaException, ValueError, TypeError) as exc:
            self.executor.shutdown(wait=False)
            raise RestError(INVALID_CONSUMER_CONFIG, f"Cannot create the share consumer: {exc}",
                            422) from None
        self.floor_ms = _now_ms()

    def touch(self) -> None:
        self.used = time.monotonic()

    async def fetch(self, max_records: int, timeout_s: float) -> list[Acquired]:
        """Up to `max_records` acquired records (those an earlier poll acquired first), waiting
        up to `timeout_s` for some."""
        consumer = self.live_consumer()
        if self.buffered:
            return self._take(max_records)
        if self.delivered:
            now = _now_ms()
            if any(a.until_ms > now for a in self.delivered.values()):
                raise RestError(ILLEGAL_STATE, f"{len(self.delivered)} records handed out "
                                "earlier are not acknowledged yet: acknowledge each (ACCEPT, "
                                "RELEASE or REJECT) before asking for more, or wait until their "
                                "locks run out", 409)
            await self._release_expired()
        deadline = time.monotonic() + timeout_s
        while not self.closed:
            slice_s = max(0.0, min(POLL_SLICE_S, deadline - time.monotonic()))
            msgs = await self.run(functools.partial(consumer.poll, slice_s))
            floor, self.floor_ms = self.floor_ms, _now_ms()
            self.touch()
            records: list[Message] = []
            errors: list[Message] = []
            for msg in msgs:
                (errors if msg.error() is not None else records).append(msg)
            for msg in errors:
                error = msg.error()
                assert error is not None
                if not records and (error.code() in _FATAL_CODES or error.fatal()):
                    raise kafka_error(error.code(), error.str(), error.retriable())
                log.info("share consumer %s: %s", self.instance_id, error.str())
            if records:
                until = floor + self.lock_ms
                self.buffered.extend(Acquired(m, until) for m in records)
                return self._take(max_records)
            if time.monotonic() >= deadline:
                break
        return []

    def _take(self, max_records: int) -> list[Acquired]:
        out: list[Acquired] = []
        while self.buffered and len(out) < max_records:
            out.append(self.buffered.popleft())
        return out

    def hand_out(self, records: list[Acquired]) -> None:
        """`records` went to the client: from now on only it acknowledges them."""
        for a in records:
            self.delivered[a.key] = a

    def put_back(self, records: list[Acquired]) -> None:
        """`records` could not be shown (say, not valid in the format asked for): still held."""
        self.buffered.extendleft(reversed(records))

    async def _release_expired(self) -> None:
        """Records handed out whose locks ran out: the broker has taken them back already;
        librdkafka wants them acknowledged before it polls again."""
        consumer = self.live_consumer()
        keys = list(self.delivered)
        self.delivered.clear()

        def release() -> None:
            for topic, partition, offset in keys:
                with contextlib.suppress(KafkaException, RuntimeError):
                    consumer.acknowledge_offset(topic, partition, offset, AcknowledgeType.RELEASE)
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.commit_sync(ACK_TIMEOUT_S)

        await self.run(release)

    async def acknowledge(self, wanted: list[tuple[Key, str]]) -> list[dict[str, Any]]:
        """Each (record, type): the outcome (error_code null when the broker took it)."""
        consumer = self.live_consumer()
        results: list[dict[str, Any]] = []
        todo: list[tuple[Key, str, dict[str, Any]]] = []
        for key, kind in wanted:
            result = {"topic": key[0], "partition": key[1], "offset": key[2], "type": kind,
                      "error_code": None, "message": None}
            results.append(result)
            if self.delivered.pop(key, None) is None:  # from now on acknowledged, if held
                result["error_code"] = ILLEGAL_STATE
                result["message"] = ("The record is not held by this instance: it was not "
                                     "handed out by it, or is acknowledged already")
                continue
            todo.append((key, kind, result))
        if not todo:
            return results

        def send() -> _Outcome:
            outcome = _Outcome()
            for (topic, partition, offset), kind, _ in todo:
                try:
                    consumer.acknowledge_offset(topic, partition, offset, ACK_TYPES[kind])
                except (KafkaException, RuntimeError) as exc:
                    outcome.records[(topic, partition, offset)] = exc
            try:
                for tp, failure in (consumer.commit_sync(ACK_TIMEOUT_S) or {}).items():
                    if failure is not None:
                        outcome.partitions[(tp.topic, tp.partition)] = failure
            except (KafkaException, RuntimeError) as exc:
                outcome.everything = exc
            return outcome

        outcome = await self.run(send)
        for key, _, result in todo:
            failure = (outcome.records.get(key) or outcome.partitions.get((key[0], key[1]))
                       or outcome.everything)
            if failure is not None:
                error = _error_of(failure)
                result["error_code"], result["message"] = error.error_code, error.message
        return results

    async def close(self) -> None:
        """Release what the instance still holds, then leave the group."""
        self.closed = True
        async with self.fetching:  # a GET in progress ends within a poll slice
            consumer = self.consumer
            keys = [*self.delivered, *(a.key for a in self.buffered)]
            self.delivered.clear()
            self.buffered.clear()

            def close() -> None:
                if consumer is None:
                    return
                try:
                    for topic, partition, offset in keys:
                        with contextlib.suppress(KafkaException, RuntimeError):
                            consumer.acknowledge_offset(topic, partition, offset,
                                                        AcknowledgeType.RELEASE)
                    with contextlib.suppress(KafkaException, RuntimeError):
                        consumer.commit_sync(ACK_TIMEOUT_S)
                finally:
                    with contextlib.suppress(KafkaException, RuntimeError):
                        consumer.close()

            try:
                await asyncio.get_running_loop().run_in_executor(self.executor, close)
            finally:
                self.consumer = None
                self.executor.shutdown(wait=False)


@dataclass
class _Outcome:
    """What became of acknowledgements: refused locally (by record), by the broker (by
    partition), or not sent at all."""

    records: dict[Key, BaseException] = field(default_factory=dict)
    partitions: dict[tuple[str, int], BaseException] = field(default_factory=dict)
    everything: BaseException | None = None


def _error_of(failure: BaseException) -> RestError:
    """An acknowledgement's failure as its result's error_code and message."""
    error = failure.args[0] if isinstance(failure, KafkaException) and failure.args else failure
    if isinstance(error, KafkaError):
        if error.code() == ErrorCode.INVALID_RECORD_STATE:
            return RestError(ILLEGAL_STATE, f"{error.str()}: the record's lock ran out (it may "
                             "be delivered again), or it was acknowledged already", 409)
        return kafka_error(error.code(), error.str(), error.retriable())
    return RestError(ILLEGAL_STATE, str(failure) or type(failure).__name__, 409)


class ShareInstances:
    """The process's share consumer instances, closed after `consumer_timeout_ms` idle."""

    def __init__(self, idle_ms: int) -> None:
        self.idle_s = idle_ms / 1000
        self.by_id: dict[tuple[str, str], ShareInstance] = {}
        self._sweeper: asyncio.Task[None] | None = None
        REGISTRIES.append(self)

    def get(self, ctx: RestContext, request: Request) -> ShareInstance:
        group, instance_id = request.path_params["group"], request.path_params["instance"]
        found = self.by_id.get((group, instance_id))
        if found is None or found.closed or found.user != ctx.user(request):
            raise not_found(f"Share consumer instance {instance_id} of group {group} not found.",
                            CONSUMER_INSTANCE_NOT_FOUND)
        found.touch()
        return found

    def add(self, instance: ShareInstance) -> None:
        self.by_id[(instance.group, instance.instance_id)] = instance
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def remove(self, instance: ShareInstance) -> None:
        if self.by_id.get((instance.group, instance.instance_id)) is instance:
            del self.by_id[(instance.group, instance.instance_id)]
        closing = asyncio.ensure_future(instance.close())
        closing.add_done_callback(functools.partial(_closed, instance))
        try:
            await asyncio.wait_for(asyncio.shield(closing), CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("share consumer instance %s of group %s: its consumer is still closing "
                        "after %.0f s; it goes on in the background", instance.instance_id,
                        instance.group, CLOSE_WAIT_S)
        except Exception:  # logged by _closed
            pass

    async def _sweep(self) -> None:
        interval = max(0.2, min(30.0, self.idle_s / 5))
        while self.by_id:
            await asyncio.sleep(interval)  # a period, not synchronisation
            now = time.monotonic()
            for instance in list(self.by_id.values()):
                if now - instance.used > self.idle_s and not instance.fetching.locked():
                    log.info("share consumer instance %s of group %s idle: closed",
                             instance.instance_id, instance.group)
                    await self.remove(instance)


def _closed(instance: ShareInstance, closing: asyncio.Future[None]) -> None:
    """Log how an instance's close ended (awaited or not, its failure is never lost)."""
    if closing.cancelled():
        return
    failure = closing.exception()
    if failure is not None:
        log.error("closing share consumer instance %s of group %s failed: %r",
                  instance.instance_id, instance.group, failure)


REGISTRIES: list[ShareInstances] = []


async def close_all() -> None:
    """Close every instance (their records released, the groups left): for the process's
    shutdown, so that no member waits for its session to time out."""
    for registry in REGISTRIES:
        instances = list(registry.by_id.values())
        await asyncio.gather(*(registry.remove(i) for i in instances), return_exceptions=True)


def _int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f"{name} must be an integer") from None
    if value < low or (high is not None and value > high):
        raise bad_request(f"{name} must be at least {low}"
                          + ("" if high is None else f" and at most {high}"))
    return value


@dataclass(frozen=True)
class ShownAs:
    """The embedded formats records are shown in: `format`, and `key_format` for keys."""

    value: str
    key: str


def format_params(request: Request) -> ShownAs:
    found: list[str] = []
    for name, default in (("format", "binary"), ("key_format", None)):
        fmt = (request.query_params.get(name) or default or found[0]).lower()
        if fmt not in FORMATS:
            raise bad_request(f"{name} must be one of {', '.join(FORMATS)}")
        found.append(fmt)
    return ShownAs(found[0], found[1])


def _headers(msg: Message) -> list[dict[str, str | None]]:
    found = msg.headers() or []
    pairs = found.items() if isinstance(found, dict) else found
    return [{"name": k, "value": None if v is None else base64.b64encode(
        v.encode() if isinstance(v, str) else v).decode()} for k, v in pairs]


async def record_json(formats: Any, msg: Message, fmt: ShownAs) -> dict[str, Any]:
    """A record as this API shows it (the share records and the event stream share it)."""
    ts_type, ts = msg.timestamp()
    return {
        "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        "timestamp": ts if ts_type else None,
        "timestamp_type": {1: "CREATE_TIME", 2: "LOG_APPEND_TIME"}.get(ts_type),
        "key": await formats.decode(msg.key(), fmt.key),
        "value": await formats.decode(msg.value(), fmt.value),
        "headers": _headers(msg),
    }


async def _lock_duration_ms(ctx: RestContext, request: Request, group: str) -> int:
    """The group's `share.record.lock.duration.ms` (its own config, or the broker's default
    `group.share.record.lock.duration.ms` when the user may not describe the group)."""
    fallback = int(ctx.settings.config.get("group.share.record.lock.duration.ms"))
    clients = ctx.clients(request)
    resource = ConfigResource(ResourceType.GROUP, group)
    try:
        entries = await clients.call(lambda admin: admin.describe_configs([resource])[resource])
        entry = entries.get("share.record.lock.duration.ms")
        return int(entry.value) if entry is not None and entry.value else fallback
    except (RestError, KafkaException, ValueError) as exc:
        log.debug("group %s: lock duration not described (%s): the broker's default", group, exc)
        return fallback


def routes(ctx: RestContext) -> list[BaseRoute]:
    instances = ShareInstances(ctx.settings.consumer_timeout_ms)

    def base_uri(request: Request, instance: ShareInstance) -> str:
        return ctx.url(request, f"{BASE}/{instance.group}/consumers/{instance.instance_id}")

    def instance_body(request: Request, instance: ShareInstance) -> dict[str, Any]:
        return {"instance_id": instance.instance_id, "group": instance.group,
                "base_uri": base_uri(request, instance), "topics": instance.topics,
                "max_records": instance.max_records, "lock_duration_ms": instance.lock_ms,
                "unacknowledged": len(instance.delivered)}

    async def create(request: Request) -> Response:
        group = request.path_params["group"]
        body = await ctx.read_json(request)
        if not isinstance(body, dict):
            raise bad_request("The request body must be a JSON object")
        topics = body.get("topics")
        if (not isinstance(topics, list) or not topics
                or not all(isinstance(t, str) and t for t in topics)):
            raise unprocessable("topics must be a non-empty list of topic names",
                                INVALID_CONSUMER_CONFIG)
        topics = list(dict.fromkeys(topics))
        name = body.get("name")
        if name is not None and (not isinstance(name, str) or not NAME.fullmatch(name)):
            raise unprocessable("name must be 1 to 100 letters, digits, '.', '_' or '-'",
                                INVALID_CONSUMER_CONFIG)
        max_records = body.get("max_records", DEFAULT_MAX_RECORDS)
        if isinstance(max_records, float) and max_records.is_integer():
            max_records = int(max_records)  # JSON has one kind of number: 5.0 is 5
        if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
            raise unprocessable("max_records must be a positive integer", INVALID_CONSUMER_CONFIG)
        max_records = min(max_records, ctx.settings.max_records)
        instance_id = name or f"share-{uuid.uuid4().hex}"
        if (group, instance_id) in instances.by_id:
            raise RestError(CONSUMER_ALREADY_EXISTS, f"Share consumer instance {instance_id} "
                            f"of group {group} already exists.", 409)
        if len(instances.by_id) >= MAX_INSTANCES:
            raise RestError(503, f"This server holds {MAX_INSTANCES} share consumer instances "
                            "already: delete one, or wait until idle ones expire")
        clients = ctx.clients(request)
        meta = await clients.blocking(lambda: clients.admin.list_topics(timeout=10))
        missing = [t for t in topics if t not in meta.topics or meta.topics[t].error is not None]
        if missing:
            raise not_found(f"Topic {missing[0]} not found.", TOPIC_NOT_FOUND)
        lock_ms = await _lock_duration_ms(ctx, request, group)
        poll_interval_ms = max(300000, ctx.settings.consumer_timeout_ms + 60000)
        conf = ctx.pool.config_for(ctx.user(request), **{
            "group.id": group, "share.acknowledgement.mode": "explicit",
            "max.poll.records": max_records, "max.poll.interval.ms": poll_interval_ms,
            "client.id": f"strom-rest-share-{instance_id}"[:200]})
        instance = ShareInstance(instance_id, group, topics, ctx.user(request), conf,
                                 max_records, lock_ms)
        if (group, instance_id) in instances.by_id:  # created meanwhile, by a twin request
            raise RestError(CONSUMER_ALREADY_EXISTS, f"Share consumer instance {instance_id} "
                            f"of group {group} already exists.", 409)
        instances.add(instance)
        try:
            await instance.start()
        except BaseException:
            instances.by_id.pop((group, instance_id), None)
            raise
        uri = base_uri(request, instance)
        return JSONResponse(instance_body(request, instance), status_code=201,
                            headers={"Location": uri})

    async def one_instance(request: Request) -> Response:
        instance = instances.get(ctx, request)
        if request.method == "DELETE":
            await instances.remove(instance)
            return Response(status_code=204)
        return JSONResponse(instance_body(request, instance))

    async def records(request: Request) -> Response:
        instance = instances.get(ctx, request)
        max_records = min(_int_param(request, "max_records", instance.max_records, 1, None),
                          ctx.settings.max_records)
        timeout_ms = _int_param(request, "timeout_ms", DEFAULT_TIMEOUT_MS, 0, MAX_TIMEOUT_MS)
        fmt = format_params(request)
        formats = formats_of(ctx, request)
        if time.monotonic() - instance.lock_read_at > LOCK_TTL_S:
            instance.lock_ms = await _lock_duration_ms(ctx, request, instance.group)
            instance.lock_read_at = time.monotonic()
        async with instance.fetching:
            if instance.closed:
                raise instance.gone()
            got = await instance.fetch(max_records, timeout_ms / 1000)
            try:
                shown = []
                for a in got:
                    body = await record_json(formats, a.msg, fmt)
                    body["delivery_count"] = a.msg.delivery_count()
                    shown.append(body)
            except BaseException:
                instance.put_back(got)
                raise
            instance.hand_out(got)
        instance.touch()
        until = min((a.until_ms for a in got), default=None)
        return JSONResponse({"records": shown, "lock_duration_ms": instance.lock_ms,
                             "acquired_until": until})

    async def acknowledge(request: Request) -> Response:
        instance = instances.get(ctx, request)
        body = await ctx.read_json(request)
        entries = body.get("acknowledgements") if isinstance(body, dict) else None
        if not isinstance(entries, list):
            raise bad_request("The request body must be an object with a list "
                              "'acknowledgements'")
        wanted: list[tuple[Key, str]] = []
        for i, entry in enumerate(entries):
            wanted.append(_ack_entry(i, entry))
        results = await instance.acknowledge(wanted)
        instance.touch()
        return JSONResponse({"acknowledgements": results})

    one = BASE + "/{group:segment}/consumers/{instance:segment}"
    return [
        Route(BASE + "/{group:segment}/consumers", create, methods=["POST"]),
        Route(one, one_instance, methods=["GET", "DELETE"]),  # one route: one Allow header
        Route(one + "/records", records, methods=["GET"]),
        Route(one + "/acknowledgements", acknowledge, methods=["POST"]),
    ]


def _ack_entry(i: int, entry: Any) -> tuple[Key, str]:
    if not isinstance(entry, dict):
        raise unprocessable(f"acknowledgements[{i}] must be an object")
    topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
    kind = entry.get("type", "ACCEPT")
    if not isinstance(topic, str) or not topic:
        raise unprocessable(f"acknowledgements[{i}].topic must be a topic name")
    numbers = []
    for what, value in (("partition", partition), ("offset", offset)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON has one kind of number: 5.0 is 5
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise unprocessable(f"acknowledgements[{i}].{what} must be an integer >= 0")
        numbers.append(value)
    if not isinstance(kind, str) or kind not in ACK_TYPES:
        raise unprocessable(f"acknowledgements[{i}].type must be ACCEPT, RELEASE or REJECT")
    return (topic, numbers[0], numbers[1]), kind


# ----------------------------------------------------------------------------- OpenAPI

_OWN = ("Strom's own API (no Kafka REST peer serves it): share groups (KIP-932) over HTTP. ")
GROUP = path_param("group")
FORMAT_NAMES = [*FORMATS, *(f.upper() for f in FORMATS)]
FORMAT_PARAMS = [
    {"name": "format", "in": "query", "schema": {"enum": FORMAT_NAMES},
     "description": "The embedded format of the records' values (and keys): binary "
                    "(base64, the default), json, string, or avro / jsonschema / protobuf "
                    "(Confluent's wire format, through the schema registry)"},
    {"name": "key_format", "in": "query", "schema": {"enum": FORMAT_NAMES},
     "description": "The keys' embedded format, when not `format`'s"}]
INSTANCE = path_param("instance")

SCHEMAS: dict[str, Any] = {
    "ShareConsumerCreate": {
        "type": "object", "required": ["topics"], "properties": {
            "topics": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
                       "description": "The topics the instance subscribes to (they must exist)"},
            "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,100}$",
                     "description": "The instance's id (default: a generated one)"},
            "max_records": {"type": "integer", "minimum": 1,
                            "description": "Records one poll of the broker acquires, at most "
                                           "(and at most rest.max.records.per.request) "
                                           "(the broker may exceed it to keep a log batch "
                                           "whole: the rest wait in the instance); also the "
                                           "default of GET records' max_records. Default 100"}}},
    "ShareConsumer": {
        "type": "object",
        "required": ["instance_id", "group", "base_uri", "topics", "max_records",
                     "lock_duration_ms", "unacknowledged"],
        "properties": {
            "instance_id": {"type": "string"}, "group": {"type": "string"},
            "base_uri": {"type": "string", "description": "The instance's absolute URL"},
            "topics": {"type": "array", "items": {"type": "string"}},
            "max_records": {"type": "integer"},
            "lock_duration_ms": {"type": "integer", "description": "How long an acquired record "
                                 "stays locked to the instance: the group's "
                                 "share.record.lock.duration.ms"},
            "unacknowledged": {"type": "integer",
                               "description": "Records handed out and not acknowledged yet"}}},
    "ShareRecord": {
        "type": "object",
        "required": ["topic", "partition", "offset", "delivery_count", "timestamp", "key",
                     "value", "headers"],
        "properties": {
            "topic": {"type": "string"}, "partition": {"type": "integer"},
            "offset": {"type": "integer"},
            "delivery_count": {"type": ["integer", "null"], "description": "How many times the "
                               "record has been acquired, this time included"},
            "timestamp": {"type": ["integer", "null"]},
            "timestamp_type": {"enum": ["CREATE_TIME", "LOG_APPEND_TIME", None]},
            "key": {"description": "In the embedded format asked for (BINARY: base64)"},
            "value": {"description": "In the embedded format asked for (BINARY: base64)"},
            "headers": {"type": "array", "items": ref("RecordHeader")}}},
    "RecordHeader": {"type": "object", "required": ["name", "value"], "properties": {
        "name": {"type": "string"},
        "value": {"type": ["string", "null"], "description": "base64"}}},
    "ShareRecords": {
        "type": "object", "required": ["records", "lock_duration_ms", "acquired_until"],
        "properties": {
            "records": {"type": "array", "items": ref("ShareRecord")},
            "lock_duration_ms": {"type": "integer"},
            "acquired_until": {"type": ["integer", "null"], "description": "Until when (epoch "
                               "ms) the records are locked to this instance at least: counted "
                               "from the instance's previous request to the broker, so the "
                               "broker's lock may last a little longer; null without records"}}},
    "ShareAcknowledgements": {
        "type": "object", "required": ["acknowledgements"], "properties": {
            "acknowledgements": {"type": "array", "items": {
                "type": "object", "required": ["topic", "partition", "offset"], "properties": {
                    "topic": {"type": "string", "minLength": 1},
                    "partition": {"type": "integer", "minimum": 0},
                    "offset": {"type": "integer", "minimum": 0},
                    "type": {"enum": ["ACCEPT", "RELEASE", "REJECT"], "default": "ACCEPT",
                             "description": "ACCEPT: done; RELEASE: delivered again (to any "
                                            "member); REJECT: never delivered again"}}}}}},
    "ShareAcknowledgementResults": {
        "type": "object", "required": ["acknowledgements"], "properties": {
            "acknowledgements": {"type": "array", "items": {
                "type": "object",
                "required": ["topic", "partition", "offset", "type", "error_code", "message"],
                "properties": {
                    "topic": {"type": "string"}, "partition": {"type": "integer"},
                    "offset": {"type": "integer"},
                    "type": {"enum": ["ACCEPT", "RELEASE", "REJECT"]},
                    "error_code": {"type": ["integer", "null"], "description": "null: done; "
                                   "40903: the record is not held by this instance, or its lock "
                                   "ran out; else the broker's refusal"},
                    "message": {"type": ["string", "null"]}}}}}},
}

PATHS: dict[str, Any] = {
    BASE + "/{group}/consumers": {"post": {
        "summary": "Create a share consumer instance (Strom's own)", "operationId":
        "createShareConsumer", "tags": ["Strom: share groups"],
        "description": _OWN + "A member of share group `group` subscribed to `topics`, in "
        "explicit acknowledgement mode. It is closed (its records released) after "
        "rest.consumer.instance.timeout.ms without a request.",
        "parameters": [GROUP],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": ref("ShareConsumerCreate")}}},
        "responses": {"201": ok("ShareConsumer", "Created: its id, URL and lock duration"),
                      **error_responses(400, 401, 403, 404, 409, 413, 422, 500, 503)}}},
    BASE + "/{group}/consumers/{instance}": {
        "get": {"summary": "A share consumer instance (Strom's own)", "operationId":
                "getShareConsumer", "tags": ["Strom: share groups"], "description": _OWN,
                "parameters": [GROUP, INSTANCE],
                "responses": {"200": ok("ShareConsumer"), **error_responses(401, 404)}},
        "delete": {"summary": "Close a share consumer instance (Strom's own)", "operationId":
                   "deleteShareConsumer", "tags": ["Strom: share groups"],
                   "description": _OWN + "Records it holds unacknowledged are released (to be "
                   "delivered again); it leaves the group.",
                   "parameters": [GROUP, INSTANCE],
                   "responses": {"204": {"description": "Closed"},
                                 **error_responses(401, 404, 500)}}},
    BASE + "/{group}/consumers/{instance}/records": {"get": {
        "summary": "Acquire records (Strom's own)", "operationId": "getShareRecords",
        "tags": ["Strom: share groups"],
        "description": _OWN + "Each record is locked to this instance until acknowledged or "
        "until its lock runs out (then it goes to any member again, its delivery count one "
        "higher). Records handed out earlier must all be acknowledged first (409 otherwise, "
        "unless their locks ran out: they are then released).",
        "parameters": [
            GROUP, INSTANCE,
            {"name": "max_records", "in": "query", "schema": {"type": "integer", "minimum": 1},
             "description": "At most this many (default: the instance's max_records; at most "
                            "rest.max.records.per.request)"},
            {"name": "timeout_ms", "in": "query", "schema": {
                "type": "integer", "minimum": 0, "maximum": MAX_TIMEOUT_MS},
             "description": f"How long to wait for records (default {DEFAULT_TIMEOUT_MS})"},
            *FORMAT_PARAMS],
        "responses": {"200": ok("ShareRecords"),
                      **error_responses(400, 401, 403, 404, 409, 422, 500)}}},
    BASE + "/{group}/consumers/{instance}/acknowledgements": {"post": {
        "summary": "Acknowledge records (Strom's own)", "operationId": "acknowledgeShareRecords",
        "tags": ["Strom: share groups"],
        "description": _OWN + "Accept, release or reject records this instance handed out; "
        "the broker has them when the response comes. One result per record, in order.",
        "parameters": [GROUP, INSTANCE],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": ref("ShareAcknowledgements")}}},
        "responses": {"200": ok("ShareAcknowledgementResults"),
                      **error_responses(400, 401, 404, 413, 422, 500)}}},
}
