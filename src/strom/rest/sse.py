"""Strom's own API (no peer serves it): a topic as Server-Sent Events, for browsers
(`EventSource`) and `curl -N`.

`GET /strom/v1/topics/{topic}/events` streams the topic's records (one partition, or all) as
`text/event-stream`, one event per record, from an offset, a time, or the end (the default).
Each event's `id` is where the stream stands: `<partition>:<offset>` of the last record sent
from each partition streamed (for a partition with none sent yet, the offset before its start),
comma-separated, so a client that reconnects with `Last-Event-ID` (as `EventSource` does)
resumes every partition right after what it saw.

Each stream reads with its own librdkafka consumer, assigned its partitions directly: no group,
nothing committed (librdkafka requires a group.id: a random one). The consumer lives on a
single-thread executor of its own and is closed when the client goes away. At most
`MAX_STREAMS` run at once in the process (503 beyond); a comment line goes out when nothing
else has for `heartbeat_ms`, so proxies keep the connection open and a gone client is noticed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
)
from confluent_kafka import TopicPartition as TP
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from strom.rest.clients import rest_error_of
from strom.rest.context import RestContext
from strom.rest.errors import (
    PARTITION_NOT_FOUND,
    TOPIC_NOT_FOUND,
    RestError,
    bad_request,
    kafka_error,
    not_found,
)
from strom.rest.formats import formats_of
from strom.rest.openapi import error_responses, path_param
from strom.rest.share import FORMAT_PARAMS, ShownAs, format_params, record_json

log = logging.getLogger("strom.rest.sse")

PATH = "/strom/v1/topics/{topic}/events"
MAX_STREAMS = 64  # event streams open at once in the HTTP API's process (503 beyond)
HEARTBEAT_MS = 15000  # default; a request may ask for another
MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS = 100, 60000
RETRY_MS = 2000  # how long EventSource waits before it reconnects
POLL_S = 0.5  # one librdkafka consume (and the longest a heartbeat can be late)
BATCH = 500  # records one consume returns at most
SETUP_TIMEOUT_S = 10.0
TOPIC_CHECK_S = 5.0  # while quiet, whether the topic still exists is asked at most this often
_FATAL_CODES = frozenset({3, 29})  # unknown topic, topic authorization failed
LAST_EVENT_ID = re.compile(r"\d+:-?\d+(,\d+:-?\d+)*")

T = TypeVar("T")


class Streams:
    """How many streams are open (the cap is per process), and whether they must end (the
    process stops)."""

    def __init__(self) -> None:
        self.open = 0
        self.stopping = False


STREAMS = Streams()


def stop_all() -> None:
    """End every stream within a poll (`POLL_S`) and refuse new ones (503): for the process's
    shutdown, which otherwise waits for its open responses, and streams never end by
    themselves."""
    STREAMS.stopping = True


class Stream:
    """One stream's consumer on its own thread; `close()` may run any number of times, from the
    event loop, and never waits for the thread."""

    def __init__(self, streams: Streams, conf: dict[str, Any], topic: str) -> None:
        self.streams = streams
        self.conf = conf
        self.topic = topic
        self.executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="rest-sse")
        self.consumer: Consumer | None = None
        self.closed = False
        streams.open += 1

    async def run(self, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, fn)
        except KafkaException as exc:
            raise rest_error_of(exc) from None

    async def open(self) -> None:
        self.consumer = await self.run(functools.partial(Consumer, self.conf))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.streams.open -= 1
        consumer = self.consumer
        if consumer is not None:  # after the consume in progress, if any, on the same thread
            self.executor.submit(_close_quietly, consumer)
        self.executor.shutdown(wait=False)


def _close_quietly(consumer: Consumer) -> None:
    with contextlib.suppress(KafkaException, RuntimeError):
        consumer.close()


class EventStream(StreamingResponse):
    """`text/event-stream` whose stream is closed however the response ends (the client gone:
    Starlette cancels the body's iteration), without an error logged for a gone client."""

    media_type = "text/event-stream"

    def __init__(self, stream: Stream, body: AsyncIterator[str]) -> None:
        super().__init__(body, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except (ClientDisconnect, OSError):
            pass
        finally:
            self.stream.close()


def _int(text: str | None, name: str, low: int, high: int | None = None) -> int | None:
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f"{name} must be an integer") from None
    if value < low or (high is not None and value > high):
        raise bad_request(f"{name} must be at least {low}" + (
            f" and at most {high}" if high is not None else ""))
    return value


RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?"
                     r"([Zz]|[+-]\d\d:?\d\d)?")


def _timestamp(text: str | None) -> int | None:
    """Epoch milliseconds, or an RFC 3339 / ISO 8601 time (UTC unless it says)."""
    if text is None or text == "":
        return None
    if text.isdigit():
        return int(text)
    # a "+" of an unencoded query string arrives as a space
    found = RFC3339.fullmatch(re.sub(r" (\d\d:?\d\d)$", r"+\1", text.strip()))
    if found is None:
        raise bad_request("timestamp must be epoch milliseconds or an ISO 8601 time")
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    try:
        when = datetime(int(year), int(month), int(day), int(hour), int(minute),
                        min(int(second), 59), int((fraction or "0")[:6].ljust(6, "0")), UTC)
    except ValueError:
        if int(year) == 0:  # before datetime's first year, long before any record
            return 0
        raise bad_request(f"timestamp {text!r} is not a valid time") from None
    if zone and zone not in "Zz":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        when -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return max(0, int(when.timestamp() * 1000))


def _start(text: str | None) -> int | None:
    """`offset`: earliest, latest, or an offset."""
    if text is None or text == "":
        return None
    lowered = text.lower()
    if lowered == "earliest":
        return OFFSET_BEGINNING
    if lowered == "latest":
        return OFFSET_END
    found = _int(text, "offset (earliest, latest or an offset)", 0)
    assert found is not None
    return found


def _last_event_id(text: str | None) -> dict[int, int]:
    """Last-Event-ID: partition -> the offset of the last record seen from it. An id this
    stream did not write is ignored (the request's own start applies), as EventSource would
    otherwise stop at an error and never reconnect."""
    text = (text or "").strip()
    if not LAST_EVENT_ID.fullmatch(text):
        if text:
            log.debug("Last-Event-ID %r is not one of this stream's ids: ignored", text)
        return {}
    seen: dict[int, int] = {}
    for part in text.split(","):
        partition, offset = part.split(":")
        seen[int(partition)] = max(int(offset), -1)
    return seen


def _positions_id(positions: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(positions.items()))


def _resolve(consumer: Consumer, topic: str, parts: list[int], start: int | None,
             timestamp: int | None, seen: dict[int, int]) -> dict[int, int]:
    """Each partition's first offset: after the one `seen` names; else at `start` (an offset,
    OFFSET_BEGINNING or OFFSET_END) or at the first record at or after `timestamp` (the end if
    none is that recent), the later of the two when both are given; else at the end."""

    def ask(asked: list[int], at: int) -> dict[int, int]:
        if not asked:
            return {}
        got = consumer.offsets_for_times([TP(topic, p, at) for p in asked], SETUP_TIMEOUT_S)
        for tp in got:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {tp.partition: tp.offset for tp in got}

    fresh = [p for p in parts if p not in seen]
    by_offset: dict[int, int] = {}
    if start is not None or timestamp is None:
        spec = OFFSET_END if start is None else start
        by_offset = ({p: spec for p in fresh} if spec >= 0 else
                     ask(fresh, -2 if spec == OFFSET_BEGINNING else -1))  # earliest / latest
    by_time: dict[int, int] = {}
    if timestamp is not None:
        by_time = ask(fresh, timestamp)
        ends = ask([p for p, o in by_time.items() if o < 0], -1)
        by_time.update(ends)
    found = {p: seen[p] + 1 for p in parts if p in seen}
    for p in fresh:
        found[p] = max(by_offset.get(p, -1), by_time.get(p, -1), 0)
    return found


def routes(ctx: RestContext) -> list[BaseRoute]:
    streams = STREAMS

    async def events(request: Request) -> Response:
        topic = request.path_params["topic"]
        partition = _int(request.query_params.get("partition"), "partition", 0)
        start = _start(request.query_params.get("offset"))
        timestamp = _timestamp(request.query_params.get("timestamp"))
        heartbeat_ms = _int(request.query_params.get("heartbeat_ms"), "heartbeat_ms",
                            MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS) or HEARTBEAT_MS
        seen = _last_event_id(request.headers.get("last-event-id"))
        fmt = format_params(request)
        if streams.open >= MAX_STREAMS or streams.stopping:
            message = ("The server is stopping" if streams.stopping else
                       f"{MAX_STREAMS} event streams are open on this server already")
            return JSONResponse({"error_code": 503, "message": f"{message}: try again later"},
                                status_code=503,
                                headers={"Retry-After": str(max(1, RETRY_MS // 1000))})
        conf = ctx.pool.config_for(ctx.user(request), **{
            "group.id": f"strom-rest-sse-{uuid.uuid4().hex}",  # never joined nor committed
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "enable.partition.eof": False})
        stream = Stream(streams, conf, topic)
        try:
            await stream.open()
            positions = await _setup(stream, topic, partition, start, timestamp, seen)
        except BaseException:
            stream.close()
            raise
        body = _events(stream, positions, fmt, formats_of(ctx, request), heartbeat_ms)
        return EventStream(stream, body)

    return [Route(PATH, events, methods=["GET"])]


async def _setup(stream: Stream, topic: str, partition: int | None, start: int | None,
                 timestamp: int | None, seen: dict[int, int]) -> dict[int, int]:
    """Assign the stream's partitions at their starts; returns, for each, the offset before
    its first record (what the events' ids count from)."""
    consumer = stream.consumer
    assert consumer is not None
    meta = await stream.run(lambda: consumer.list_topics(topic, timeout=SETUP_TIMEOUT_S))
    found = meta.topics.get(topic)
    if found is None or (found.error is not None and found.error.code() == 3):
        raise not_found(f"Topic {topic} not found.", TOPIC_NOT_FOUND)
    if found.error is not None:
        raise kafka_error(found.error.code(), found.error.str(), found.error.retriable())
    parts = sorted(found.partitions)
    if partition is not None:
        if partition not in found.partitions:
            raise not_found(f"Partition {partition} of topic {topic} not found.",
                            PARTITION_NOT_FOUND)
        parts = [partition]
    starts = await stream.run(
        lambda: _resolve(consumer, topic, parts, start, timestamp, seen))
    await stream.run(lambda: consumer.assign([TP(topic, p, o) for p, o in starts.items()]))
    return {p: o - 1 for p, o in starts.items()}


def _take(consumer: Consumer, wait: float) -> list[Message]:
    """What has arrived (up to `BATCH`), or the first record within `wait` seconds (consume()
    alone would wait for a full batch)."""
    found = consumer.consume(BATCH, 0)
    if found:
        return found
    first = consumer.poll(wait)
    return [] if first is None else [first, *consumer.consume(BATCH - 1, 0)]


def _topic_gone(consumer: Consumer, topic: str) -> RestError | None:
    """The error to end the stream with if the topic is gone (or no longer readable)."""
    try:
        found = consumer.list_topics(topic, timeout=SETUP_TIMEOUT_S).topics.get(topic)
    except KafkaException:  # the broker out of reach for now: the stream waits for it
        return None
    if found is None:
        return not_found(f"Topic {topic} not found.", TOPIC_NOT_FOUND)
    error = found.error
    if error is not None and error.code() in _FATAL_CODES:
        if error.code() == 3:
            return not_found(f"Topic {topic} not found.", TOPIC_NOT_FOUND)
        return kafka_error(error.code(), error.str(), error.retriable())
    return None


def _event(data: Any, *, ident: str | None = None, kind: str | None = None) -> str:
    lines = []
    if kind is not None:
        lines.append(f"event: {kind}")
    if ident is not None:
        lines.append(f"id: {ident}")
    lines.append("data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


async def _events(stream: Stream, positions: dict[int, int], fmt: ShownAs, formats: Any,
                  heartbeat_ms: int) -> AsyncIterator[str]:
    """The stream's body: a `record` per record (the default event type, for `onmessage`);
    `record-error` for one that cannot be shown in the format asked for; `kafka-error`, and
    the end, when reading cannot go on (the topic deleted, access revoked)."""
    consumer = stream.consumer
    assert consumer is not None
    try:
        yield f"retry: {RETRY_MS}\n: {stream.topic} from {_positions_id(positions)}\n\n"
        quiet_since = checked = time.monotonic()
        while not stream.closed and not stream.streams.stopping:
            wait = min(POLL_S, heartbeat_ms / 1000)
            msgs = await stream.run(functools.partial(_take, consumer, wait))
            out: list[str] = []
            for msg in msgs:
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    if error.code() in _FATAL_CODES or error.fatal():
                        failure = kafka_error(error.code(), error.str(), error.retriable())
                        out.append(_event(failure.body(), kind="kafka-error"))
                        yield "".join(out)
                        return
                    log.debug("event stream of %s: %s", stream.topic, error.str())
                    continue
                partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
                positions[partition] = offset
                ident = _positions_id(positions)
                try:
                    record = await record_json(formats, msg, fmt)
                except RestError as exc:
                    out.append(_event({"partition": partition, "offset": offset, **exc.body()},
                                      ident=ident, kind="record-error"))
                    continue
                out.append(_event(record, ident=ident))
            now = time.monotonic()
            if out:
                yield "".join(out)
                quiet_since = now
            elif now - quiet_since >= heartbeat_ms / 1000:
                if now - checked >= TOPIC_CHECK_S:  # a consumer assigned partitions does
                    checked = now  # not hear of its topic's deletion: ask
                    gone = await stream.run(functools.partial(_topic_gone, consumer, stream.topic))
                    if gone is not None:
                        yield _event(gone.body(), kind="kafka-error")
                        return
                yield ":\n\n"
                quiet_since = now
    finally:
        stream.close()


# ----------------------------------------------------------------------------- OpenAPI

SCHEMAS: dict[str, Any] = {
    "TopicEvent": {
        "type": "object", "description": "The `data` of one event: a record",
        "required": ["topic", "partition", "offset", "timestamp", "key", "value", "headers"],
        "properties": {
            "topic": {"type": "string"}, "partition": {"type": "integer"},
            "offset": {"type": "integer"}, "timestamp": {"type": ["integer", "null"]},
            "timestamp_type": {"enum": ["CREATE_TIME", "LOG_APPEND_TIME", None]},
            "key": {"description": "In the embedded format asked for (binary: base64)"},
            "value": {"description": "In the embedded format asked for (binary: base64)"},
            "headers": {"type": "array", "items": {"$ref": "#/components/schemas/RecordHeader"}}}},
}

PATHS: dict[str, Any] = {
    PATH: {"get": {
        "summary": "Stream a topic's records as Server-Sent Events (Strom's own)",
        "operationId": "streamTopicEvents", "tags": ["Strom: event streams"],
        "description": (
            "Strom's own API (no Kafka REST peer serves it). A `text/event-stream` with one "
            "event per record: `data` is the record as JSON (schema TopicEvent); `id` is "
            "`<partition>:<offset>` of the last record sent from each partition streamed "
            "(comma-separated; for a partition with none sent yet, the offset before its "
            "start), so reconnecting with `Last-Event-ID` resumes after what was seen. "
            "Event `record-error` carries a record that cannot be shown in the format asked "
            "for (its partition, offset, error_code and message); `kafka-error` an error that "
            "ends the stream. A comment line goes out every `heartbeat_ms` of quiet. Nothing is "
            "committed: no consumer group is joined. Without `offset` or `timestamp` the "
            "stream starts at the end (new records only); with both, at the later of the two. "
            "An offset past a partition's end or before its start starts at its earliest "
            "record."),
        "parameters": [
            path_param("topic"),
            {"name": "partition", "in": "query", "schema": {"type": "integer", "minimum": 0},
             "description": "Only this partition (default: all)"},
            {"name": "offset", "in": "query", "schema": {
                "type": "string", "pattern": "^(earliest|latest|[0-9]+)$"},
             "description": "Start at this offset of each partition streamed, or earliest, or "
                            "latest (the default)"},
            {"name": "timestamp", "in": "query", "schema": {"anyOf": [
                {"type": "integer", "minimum": 0}, {"type": "string", "format": "date-time"}]},
             "description": "Start at the first record at or after this time: epoch "
                            "milliseconds, or an RFC 3339 time"},
            {"name": "heartbeat_ms", "in": "query", "schema": {
                "type": "integer", "minimum": MIN_HEARTBEAT_MS, "maximum": MAX_HEARTBEAT_MS},
             "description": f"A comment after this long without events (default "
                            f"{HEARTBEAT_MS})"},
            *FORMAT_PARAMS,
            {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"},
             "description": "An event's id: resume each partition it names after that offset "
                            "(an id of another form is ignored)"}],
        "responses": {
            "200": {"description": "The event stream, until the client disconnects",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}}},
            **error_responses(400, 401, 403, 404, 500, 503)}}},
}
