"""Strom's own Server-Sent Events of a topic, read as a browser's EventSource would (a raw
streaming HTTP reader): from an offset, live, resumed with Last-Event-ID, from a time,
heartbeats while idle, and the consumer gone with the client."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import Rest


class Events:
    """A `text/event-stream` response read event by event (each read waits at most
    `timeout` seconds)."""

    def __init__(self, rest: Rest, path: str, headers: dict[str, str] | None = None,
                 timeout: float = 10.0) -> None:
        url = urlsplit(rest.url)
        self.conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout)
        self.conn.request("GET", path, headers={"Accept": "text/event-stream", **(headers or {})})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status

    def next(self) -> dict[str, Any]:
        """The next block: {"id", "event", "data" (decoded), "retry", "comments"}."""
        block: dict[str, Any] = {"comments": []}
        data: list[str] = []
        while True:
            line = self.resp.readline()
            assert line, "the stream ended"
            text = line.decode().rstrip("\n")
            if text == "":
                if data:
                    block["data"] = json.loads("\n".join(data))
                if data or block["comments"] or "retry" in block:
                    return block
                continue
            name, _, value = text.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                block["comments"].append(value)
            elif name == "data":
                data.append(value)
            else:
                block[name] = value

    def records(self, n: int) -> list[dict[str, Any]]:
        """The next `n` events that carry records (skipping comments)."""
        out: list[dict[str, Any]] = []
        while len(out) < n:
            block = self.next()
            if "data" in block:
                out.append(block)
        return out

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(scope="module")
def admin(rest: Rest) -> AdminClient:
    return AdminClient({"bootstrap.servers": rest.broker.bootstrap})


@pytest.fixture
def topic_of(admin: AdminClient, unique_topic: Callable[[str], str]) -> Callable[[int], str]:
    def make(partitions: int) -> str:
        topic = unique_topic("sse")
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
        return topic

    return make


def produce(rest: Rest, topic: str, values: list[str], partition: int = 0,
            timestamps: list[int] | None = None) -> None:
    producer = Producer({"bootstrap.servers": rest.broker.bootstrap, "linger.ms": 1})
    for i, value in enumerate(values):
        extra = {"timestamp": timestamps[i]} if timestamps else {}
        producer.produce(topic, key=b"k", value=value.encode(), partition=partition, **extra)
    assert producer.flush(10) == 0


def events_path(topic: str, query: str) -> str:
    return f"/strom/v1/topics/{topic}/events?{query}"


def test_stream_from_an_offset_then_live(rest: Rest, topic_of) -> None:
    topic = topic_of(1)
    produce(rest, topic, ["a", "b", "c"])
    stream = Events(rest, events_path(topic, "offset=0&format=string"))
    try:
        assert stream.status == 200
        assert stream.resp.getheader("Content-Type", "").startswith("text/event-stream")
        assert stream.next()["retry"] == "2000"
        got = stream.records(3)
        assert [e["id"] for e in got] == ["0:0", "0:1", "0:2"]
        assert [e["data"]["value"] for e in got] == ["a", "b", "c"]
        first = got[0]["data"]
        assert first["topic"] == topic and first["partition"] == 0 and first["offset"] == 0
        assert first["key"] == "k" and first["headers"] == [] and first["timestamp"] > 0
        produce(rest, topic, ["live"])
        live = stream.records(1)[0]
        assert live["id"] == "0:3" and live["data"]["value"] == "live"
    finally:
        stream.close()


def test_last_event_id_resumes_every_partition(rest: Rest, topic_of) -> None:
    topic = topic_of(2)
    produce(rest, topic, ["p0-a", "p0-b"], partition=0)
    produce(rest, topic, ["p1-a", "p1-b"], partition=1)
    stream = Events(rest, events_path(topic, "offset=earliest&format=string"))
    try:
        got = stream.records(4)
    finally:
        stream.close()
    everything = {(e["data"]["partition"], e["data"]["offset"]) for e in got}
    assert everything == {(0, 0), (0, 1), (1, 0), (1, 1)}
    # Each id is where the stream stands in every partition.
    assert got[-1]["id"] == "0:1,1:1"
    seen = got[1]["id"]
    already = {(e["data"]["partition"], e["data"]["offset"]) for e in got[:2]}
    resumed = Events(rest, events_path(topic, "offset=earliest&format=string"),
                     headers={"Last-Event-ID": seen})
    try:
        rest_of = resumed.records(2)
    finally:
        resumed.close()
    assert {(e["data"]["partition"], e["data"]["offset"]) for e in rest_of} == everything - already
    assert rest_of[-1]["id"] == "0:1,1:1"
    for last_id, first in (("1:0", ("1:1", "p1-b")), ("not-an-id", ("1:0", "p1-a"))):
        one = Events(rest, events_path(topic, "partition=1&offset=0&format=string"),
                     headers={"Last-Event-ID": last_id})
        try:  # an id of another form is ignored: the request's offset applies
            assert [(e["id"], e["data"]["value"]) for e in one.records(1)] == [first]
        finally:
            one.close()


def test_from_a_timestamp_and_heartbeats(rest: Rest, topic_of) -> None:
    topic = topic_of(1)
    base = (int(time.time()) - 3600) * 1000
    produce(rest, topic, ["old", "mid", "new"], timestamps=[base, base + 1000, base + 2000])
    stream = Events(rest, events_path(topic, f"timestamp={base + 500}&format=string"))
    try:
        assert [e["data"]["value"] for e in stream.records(2)] == ["mid", "new"]
    finally:
        stream.close()
    # With an offset too, the later of the two.
    for query, first in ((f"offset=0&timestamp={base + 500}", "mid"),
                         (f"offset=2&timestamp={base}", "new")):
        stream = Events(rest, events_path(topic, f"{query}&format=string"))
        try:
            assert stream.records(1)[0]["data"]["value"] == first
        finally:
            stream.close()
    iso = datetime.fromtimestamp((base + 1000) / 1000, UTC).isoformat()
    stream = Events(rest, events_path(topic, f"timestamp={quote(iso)}&format=string"))
    try:
        got = stream.records(1)[0]
        assert (got["id"], got["data"]["value"], got["data"]["timestamp"]) == (
            "0:1", "mid", base + 1000)
    finally:
        stream.close()
    # After the last record's time: nothing to send, so heartbeats (comment lines).
    stream = Events(rest, events_path(topic, f"timestamp={base + 5000}&heartbeat_ms=200"))
    try:
        assert stream.next()["retry"] == "2000"
        assert stream.next() == {"comments": [""]}
        produce(rest, topic, ["after"])
        got = stream.records(1)[0]
        assert got["id"] == "0:3" and got["data"]["value"] == "YWZ0ZXI="  # binary: base64
    finally:
        stream.close()


def _rest_pid(rest: Rest) -> int:
    broker = rest.broker.pid
    assert broker is not None
    children = [int(pid) for task in Path(f"/proc/{broker}/task").iterdir()
                for pid in (task / "children").read_text().split()]
    (found,) = [pid for pid in children
                if b"strom.rest" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return found


def test_a_gone_client_takes_its_consumer_along(rest: Rest, topic_of) -> None:
    topic = topic_of(1)
    pid = _rest_pid(rest)

    def threads() -> int:
        return len(list(Path(f"/proc/{pid}/task").iterdir()))

    warm = Events(rest, events_path(topic, "offset=0"))
    warm.next()
    warm.close()
    deadline = time.monotonic() + 10
    # the warm-up stream's consumer threads end in the background: settle on a count that
    # has held for a second before measuring from it
    baseline, since = threads(), time.monotonic()
    while time.monotonic() - since < 1.0:
        assert time.monotonic() < deadline, "the thread count settles"
        time.sleep(0.1)  # poll interval, not synchronisation
        now = threads()
        if now != baseline:
            baseline, since = now, time.monotonic()
    deadline = time.monotonic() + 10
    streams = [Events(rest, events_path(topic, "offset=0")) for _ in range(3)]
    for stream in streams:
        assert stream.next()["retry"] == "2000"
    assert threads() > baseline  # each stream's consumer has threads of its own
    for stream in streams:
        stream.close()
    while threads() > baseline:
        assert time.monotonic() < deadline, f"{threads()} threads, {baseline} before the streams"
        time.sleep(0.1)  # poll interval, not synchronisation


def test_errors(rest: Rest, topic_of) -> None:
    topic = topic_of(1)
    assert rest.get(events_path("no-such-topic", ""))[1]["error_code"] == 40401
    assert rest.get(events_path(topic, "partition=3"))[1]["error_code"] == 40402
    for query in ("offset=soon", "timestamp=yesterday",
                  "heartbeat_ms=1", "format=yaml"):
        status, body = rest.get(events_path(topic, query))
        assert (status, body["error_code"]) == (400, 400), query


def test_openapi_declares_an_event_stream(rest: Rest) -> None:
    operation = rest.get("/openapi.json")[1]["paths"]["/strom/v1/topics/{topic}/events"]["get"]
    assert "Strom's own" in operation["summary"]
    assert "text/event-stream" in operation["responses"]["200"]["content"]
