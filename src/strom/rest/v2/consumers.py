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
import logging
import re
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import quote

from confluent_kafka import (
    OFFSET_BEGINNING,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from strom.rest.clients import rest_error_of
from strom.rest.context import RestContext
from strom.rest.errors import (
    CONSUMER_FORMAT_MISMATCH,
    PARTITION_NOT_FOUND,
    V2_JSON,
    RestError,
)
from strom.rest.formats import formats_of
from strom.rest.openapi import error_responses, path_param, ref
from strom.rest.v2.instances import (
    Batch,
    Instances,
)
from strom.rest.v2.requests import (
    FORMATS,
    KAFKA_TIMEOUT_S,
    MAX_RESPONSE_BYTES,
    RECORD_TYPES,
    STEP_S,
    _items,
    _metadata,
    _object,
    _offset,
    _timestamp_ms,
    _topic_partition,
    instance_config,
    invalid,
    mistyped,
    partitions_of,
    python_regex,
    text,
    topic_name,
)

log = logging.getLogger("strom.rest.v2.consumers")

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

    base = "/consumers/{group_name:segment}/instances/{instance:segment}"
    return [
        Route("/consumers/{group_name:segment}", create, methods=["POST"]),
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
V2_ERRORS = (V2_JSON, "application/json")  # the negotiated type (strom.rest.errors)
INSTANCE_ERRORS = error_responses(400, 401, 403, 404, 409, 413, 422, 500, media=V2_ERRORS)

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
                      **error_responses(400, 401, 409, 413, 422, 429, 500,
                                        media=V2_ERRORS)}}},
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
            **error_responses(400, 401, 403, 404, 406, 422, 500, media=V2_ERRORS)}}},
}
