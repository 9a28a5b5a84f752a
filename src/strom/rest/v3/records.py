"""REST Proxy v3 produce: `POST /v3/clusters/{cluster_id}/topics/{topic_name}/records`.

One JSON record per request answers with its delivery report (the HTTP status is the report's);
with ``Transfer-Encoding: chunked`` the request is a stream of concatenated JSON records (with or
without newlines between them) and the response a stream of delivery reports, one per record, in
order, each with its own ``error_code`` — the status stays 200 once the stream is open. Records
of a stream are produced as they arrive (up to `IN_FLIGHT` awaiting their reports), so a stream
runs at the producer's batching speed, not one round trip per record.
"""

from __future__ import annotations

import asyncio
import binascii
import dataclasses
import functools
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Message
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from strom.rest.clients import UserClients
from strom.rest.context import RestContext
from strom.rest.errors import RestError, bad_request, not_found
from strom.rest.formats import Encoded, Formats, formats_of
from strom.rest.openapi import CLUSTER_ID, error_responses, path_param, ref

IN_FLIGHT = 10_000
TOPIC_CACHE_S = 5.0
NO_SUCH_PARTITION = "This server does not host this topic-partition."
_DECODER = json.JSONDecoder()


@functools.lru_cache(maxsize=64)
def _iso_second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.")


def iso_timestamp(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 (reports of one second share its formatting)."""
    return f"{_iso_second(ms // 1000)}{ms % 1000:03d}Z"


def parse_timestamp(value: Any) -> int | None:
    """A request's ``timestamp`` (ISO 8601, as Confluent's) as epoch milliseconds."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request("timestamp must be an ISO 8601 date-time string")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"timestamp {value!r} is not an ISO 8601 date-time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_headers(value: Any) -> list[tuple[str, bytes]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request("headers must be a list of {name, value} objects")
    headers = []
    for header in value:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise bad_request("each header needs a string name")
        raw = header.get("value")
        if raw is None:
            headers.append((header["name"], b""))
            continue
        try:
            headers.append((header["name"], binascii.a2b_base64(str(raw), strict_mode=True)))
        except (binascii.Error, ValueError):
            raise bad_request(f"header {header['name']!r}: value is not base64") from None
    return headers


def summary(encoded: Encoded) -> dict[str, Any] | None:
    """The delivery report's ``key``/``value``: type and size, and schema fields when used."""
    if encoded.type is None:
        return None
    out: dict[str, Any] = {"type": encoded.type}
    if encoded.subject is not None:
        out["subject"] = encoded.subject
    if encoded.schema_id is not None:
        out["schema_id"] = encoded.schema_id
    if encoded.schema_version is not None:
        out["schema_version"] = encoded.schema_version
    out["size"] = encoded.size
    return out


class _Topics:
    """Partition counts of topics, asked of the broker at most every TOPIC_CACHE_S per user
    (an unknown topic answers 404 at once instead of after librdkafka's metadata timeout)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str | None, str], tuple[float, int]] = {}

    async def partitions(self, clients: UserClients, user: str | None, topic: str) -> int:
        now = time.monotonic()
        found = self._seen.get((user, topic))
        if found is not None and now - found[0] < TOPIC_CACHE_S:
            return found[1]
        from confluent_kafka import TopicCollection

        described = await clients.call(
            lambda admin: admin.describe_topics(TopicCollection([topic]),
                                                request_timeout=10)[topic])
        count = len(described.partitions)
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen[(user, topic)] = (now, count)
        return count


@dataclasses.dataclass(frozen=True, slots=True)
class Pending:
    """A record handed to the producer, awaiting its delivery report."""

    delivery: asyncio.Future[Message]
    cluster_id: str
    topic: str
    key: Encoded
    value: Encoded

    def report(self, message: Message) -> dict[str, Any]:
        _, ms = message.timestamp()
        return {"error_code": 200, "cluster_id": self.cluster_id, "topic_name": self.topic,
                "partition_id": message.partition(), "offset": message.offset(),
                "timestamp": iso_timestamp(ms) if ms is not None and ms >= 0 else None,
                "key": summary(self.key), "value": summary(self.value)}


def routes(ctx: RestContext) -> list[BaseRoute]:
    topics = _Topics()

    async def submit(clients: UserClients, user: str | None, cluster_id: str, topic: str,
                     record: Any, formats: Formats) -> Pending:
        """Check and encode one record and hand it to the producer. Called in request order:
        records reach the log in that order."""
        if not isinstance(record, dict):
            raise bad_request("A record must be a JSON object")
        count = await topics.partitions(clients, user, topic)
        partition = record.get("partition_id")
        if partition is not None and (not isinstance(partition, int) or isinstance(
                partition, bool) or not 0 <= partition < count):
            raise not_found(NO_SUCH_PARTITION, 404)
        key = await formats.encode(topic, record.get("key"), is_key=True)
        value = await formats.encode(topic, record.get("value"), is_key=False)
        delivery = await clients.producer.submit(
            topic, value=value.data, key=key.data, partition=partition,
            headers=parse_headers(record.get("headers")),
            timestamp=parse_timestamp(record.get("timestamp")))
        return Pending(delivery, cluster_id, topic, key, value)

    async def produce(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        media = request.headers.get("content-type", "application/json").split(";")[0].strip()
        if media.lower() not in ("application/json", ""):
            return JSONResponse({"error_code": 415, "message": "HTTP 415 Unsupported Media Type"},
                                status_code=415)
        topic = request.path_params["topic_name"]
        formats = formats_of(ctx, request)
        user = ctx.user(request)
        clients = ctx.clients(request)
        try:  # a topic that is not there (or not to be seen) fails the request, not each record
            await topics.partitions(clients, user, topic)
        except RestError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        if request.headers.get("transfer-encoding", "").lower() == "chunked":
            return _StreamingProduce(
                request, lambda record: submit(clients, user, cluster_id, topic, record, formats),
                ctx.settings.max_request_bytes)
        body = await ctx.read_json(request)
        try:
            pending = await submit(clients, user, cluster_id, topic, body, formats)
            answer = pending.report(await pending.delivery)
        except RestError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        return JSONResponse(answer)

    return [Route("/v3/clusters/{cluster_id}/topics/{topic_name}/records", produce,
                  methods=["POST"])]


async def concatenated_json(chunks: AsyncIterator[bytes], limit: int
                            ) -> AsyncIterator[Any]:
    """JSON values one after another (whitespace or nothing between them), each at most `limit`
    bytes; a malformed value or one over the limit ends the stream with that error."""
    buffer = ""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        try:
            text, pending = pending.decode(), b""
        except UnicodeDecodeError as exc:  # a character split across chunks: wait for the rest
            if exc.start < len(pending) - 3:
                raise bad_request("The request body is not UTF-8") from None
            text, pending = pending[:exc.start].decode(), pending[exc.start:]
        buffer += text
        if "}" not in text and len(buffer) <= limit:
            continue  # a record (an object) cannot have ended in this chunk
        pos = 0
        while True:
            pos = _SPACE.match(buffer, pos).end()  # type: ignore[union-attr]  # \s* always matches
            if pos == len(buffer):
                break
            try:
                value, pos_after = _DECODER.raw_decode(buffer, pos)
            except json.JSONDecodeError as exc:
                if len(buffer) - pos > limit:
                    raise RestError(413, f"A record is larger than {limit} bytes "
                                    "(rest.max.request.bytes)") from None
                if not _incomplete(buffer, exc):
                    raise bad_request(f"Malformed JSON in the stream: {exc.msg}") from None
                break  # wait for more
            yield value
            pos = pos_after
        buffer = buffer[pos:]
    if buffer.strip() or pending:
        raise bad_request("The stream ended inside a record")


_SPACE = re.compile(r"\s*")
_LITERALS = ("true", "false", "null")
_NUMBER_TAIL = re.compile(r"-|\d*[.eE][-+]?\d*")


def _incomplete(buffer: str, exc: json.JSONDecodeError) -> bool:
    """Whether more input could still complete `buffer` (it was cut inside a value)."""
    if exc.msg.startswith("Unterminated string"):
        return True
    rest = buffer[exc.pos:]
    return (not rest or any(word.startswith(rest) for word in _LITERALS)
            or _NUMBER_TAIL.fullmatch(rest) is not None)


class _StreamingProduce(Response):
    """Reads records and writes their reports at the same time, reports in request order."""

    def __init__(self, request: Request,
                 submit: Callable[[Any], Awaitable[Pending]],
                 limit: int) -> None:
        super().__init__(media_type="application/json")
        self.request = request
        self.submit = submit
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reports: asyncio.Queue[Pending | RestError | None] = asyncio.Queue(IN_FLIGHT)
        started = False  # the response starts with the first report: reading the body first
        # lets uvicorn answer "Expect: 100-continue" (curl -T waits a second for it otherwise)

        async def read() -> None:
            try:
                async for record in concatenated_json(self.request.stream(), self.limit):
                    try:
                        await reports.put(await self.submit(record))
                    except RestError as exc:  # this record's report; the stream goes on
                        await reports.put(exc)
            except RestError as exc:  # the stream itself is broken: its last report
                await reports.put(exc)
                await reports.put(None)
                return
            except Exception as exc:  # the client went away mid-body
                await reports.put(RestError(400, f"The request stream failed: {exc}"))
                await reports.put(None)
                return
            await reports.put(None)

        async def answer(item: Pending | RestError) -> bytes:
            if isinstance(item, RestError):
                return json.dumps(item.body()).encode() + b"\n"
            try:
                return json.dumps(item.report(await item.delivery)).encode() + b"\n"
            except RestError as exc:
                return json.dumps(exc.body()).encode() + b"\n"

        reader = asyncio.create_task(read())
        try:
            done = False
            while not done:
                item = await reports.get()
                if item is None:
                    break
                out = [await answer(item)]
                # the reports already delivered go out in the same chunk
                while not reports.empty() and len(out) < 1000:
                    head = reports._queue[0]  # type: ignore[attr-defined]  # peek: FIFO deque
                    if isinstance(head, Pending) and not head.delivery.done():
                        break
                    nxt = reports.get_nowait()
                    if nxt is None:
                        done = True
                        break
                    out.append(await answer(nxt))
                if not started:
                    await send({"type": "http.response.start", "status": 200,
                                "headers": [(b"content-type", b"application/json")]})
                    started = True
                await send({"type": "http.response.body", "more_body": True,
                            "body": b"".join(out)})
        finally:
            reader.cancel()
            while not reports.empty():
                left = reports.get_nowait()
                if isinstance(left, Pending):
                    left.delivery.cancel()
        if not started:  # an empty stream: no record, no report
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


_DATA = {"type": "object", "properties": {
    "type": {"type": "string"}, "data": {}, "schema_id": {"type": "integer"},
    "schema_version": {"type": "integer"}, "subject": {"type": "string"},
    "subject_name_strategy": {"type": "string"}, "schema": {"type": "string"}}}
_REPORT_DATA = {"type": ["object", "null"], "required": ["type", "size"], "properties": {
    "type": {"type": "string"}, "size": {"type": "integer"}, "subject": {"type": "string"},
    "schema_id": {"type": "integer"}, "schema_version": {"type": "integer"}}}

SCHEMAS: dict[str, Any] = {
    "ProduceRequest": {"type": "object", "properties": {
        "partition_id": {"type": ["integer", "null"]},
        "headers": {"type": "array", "items": {"type": "object", "required": ["name"],
                                               "properties": {"name": {"type": "string"},
                                                              "value": {"type": ["string", "null"]}}}},
        "key": {"oneOf": [_DATA, {"type": "null"}]},
        "value": {"oneOf": [_DATA, {"type": "null"}]},
        "timestamp": {"type": ["string", "null"], "format": "date-time"}}},
    "ProduceResponse": {"type": "object", "required": ["error_code"], "properties": {
        "error_code": {"type": "integer"}, "message": {"type": ["string", "null"]},
        "cluster_id": {"type": "string"}, "topic_name": {"type": "string"},
        "partition_id": {"type": "integer"}, "offset": {"type": "integer"},
        "timestamp": {"type": ["string", "null"], "format": "date-time"},
        "key": _REPORT_DATA, "value": _REPORT_DATA}},
}

PATHS: dict[str, Any] = {
    "/v3/clusters/{cluster_id}/topics/{topic_name}/records": {"post": {
        "summary": "Produce records: one per request, or a stream of them with "
                   "Transfer-Encoding: chunked (one delivery report per record, in order)",
        "operationId": "produceRecords",
        "parameters": [CLUSTER_ID, path_param("topic_name")],
        "requestBody": {"content": {"application/json": {"schema": ref("ProduceRequest")}}},
        "responses": {"200": {"description": "the delivery report", "content": {
            "application/json": {"schema": ref("ProduceResponse")}}},
            **error_responses(400, 401, 403, 404, 413, 415, 422, 429, 500)}}},
}
