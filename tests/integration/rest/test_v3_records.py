"""REST Proxy v3 produce: single records and streaming mode (chunked concatenated JSON, one
delivery report per record, in order), read back by a native Kafka consumer."""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

from confluent_kafka import Consumer, TopicPartition

from .. import clients as kc


def consume_all(bootstrap: str, topic: str, partitions: int, count: int,
                timeout: float = 20.0) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


def test_single_records_in_every_plain_format(rest, unique_topic) -> None:
    topic = unique_topic("rest-produce")
    kc.create_topic(rest.broker.bootstrap, topic, 2)
    path = f"{rest.v3}/topics/{topic}/records"
    status, report = rest.post(path, {
        "partition_id": 1,
        "headers": [{"name": "trace", "value": base64.b64encode(b"t-1").decode()}],
        "key": {"type": "STRING", "data": "user-7"},
        "value": {"type": "JSON", "data": {"page": "/cart", "n": 3}},
        "timestamp": "2026-01-02T10:00:00.123Z"})
    assert status == 200, report
    assert report["error_code"] == 200 and report["cluster_id"] == rest.cluster_id
    assert (report["topic_name"], report["partition_id"], report["offset"]) == (topic, 1, 0)
    assert report["timestamp"] == "2026-01-02T10:00:00.123Z"
    assert report["key"] == {"type": "STRING", "size": 6}
    assert report["value"]["type"] == "JSON"
    status, report = rest.post(path, {"value": {"type": "BINARY",
                                                "data": base64.b64encode(b"\x00\xffraw").decode()}})
    assert status == 200 and report["key"] is None and report["value"]["size"] == 5
    got = {(m.partition(), m.offset()): m for m in consume_all(rest.broker.bootstrap, topic, 2, 2)}
    first = got[(1, 0)]
    assert first.key() == b"user-7" and json.loads(first.value()) == {"page": "/cart", "n": 3}
    assert first.headers() == [("trace", b"t-1")]
    assert first.timestamp()[1] == 1767348000123
    assert [m.value() for k, m in got.items() if k != (1, 0)] == [b"\x00\xffraw"]


def test_errors_of_single_requests(rest, unique_topic) -> None:
    topic = unique_topic("rest-produce-err")
    kc.create_topic(rest.broker.bootstrap, topic, 1)
    status, body = rest.post(f"{rest.v3}/topics/no-such-topic-{topic}/records",
                             {"value": {"type": "JSON", "data": 1}})
    assert status == 404 and body["error_code"] in (404, 40403), body
    status, body = rest.post(f"{rest.v3}/topics/{topic}/records",
                             {"partition_id": 5, "value": {"type": "JSON", "data": 1}})
    assert (status, body["error_code"]) == (404, 404)
    assert body["message"] == "This server does not host this topic-partition."
    status, body = rest.post(f"{rest.v3}/topics/{topic}/records", raw=b"{not json")
    assert (status, body["error_code"]) == (400, 400)
    status, body = rest.post(f"{rest.v3}/topics/{topic}/records",
                             {"value": {"type": "BINARY", "data": "%%%"}})
    assert (status, body["error_code"]) == (400, 400)


def stream_records(url: str, path: str, chunks: Iterator[bytes]) -> list[dict]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("POST", path, body=chunks, encode_chunked=True,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        text = resp.read().decode()
    finally:
        conn.close()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_streaming_mode_reports_each_record_in_order(rest, unique_topic) -> None:
    topic = unique_topic("rest-stream")
    kc.create_topic(rest.broker.bootstrap, topic, 1)
    records = [json.dumps({"value": {"type": "JSON", "data": {"i": i}}}).encode()
               for i in range(2000)]
    records[1000] = json.dumps({"partition_id": 9, "value": {"type": "JSON", "data": 0}}).encode()

    def chunks() -> Iterator[bytes]:  # odd chunk sizes, newlines between only some records
        body = b"".join(r + (b"\n" if i % 2 else b"") for i, r in enumerate(records))
        for start in range(0, len(body), 777):
            yield body[start:start + 777]

    reports = stream_records(rest.url, f"{rest.v3}/topics/{topic}/records", chunks())
    assert len(reports) == 2000
    assert reports[1000]["error_code"] == 404
    good = [r for i, r in enumerate(reports) if i != 1000]
    assert all(r["error_code"] == 200 for r in good)
    assert [r["offset"] for r in good] == list(range(1999))
    values = [json.loads(m.value())["i"] for m in consume_all(rest.broker.bootstrap, topic, 1, 1999)]
    assert values == [i for i in range(2000) if i != 1000]


def test_a_malformed_record_ends_the_stream_after_the_good_ones(rest, unique_topic) -> None:
    topic = unique_topic("rest-stream-bad")
    kc.create_topic(rest.broker.bootstrap, topic, 1)
    good = json.dumps({"value": {"type": "STRING", "data": "ok"}}).encode()
    reports = stream_records(rest.url, f"{rest.v3}/topics/{topic}/records",
                             iter([good, good + b"{oops", b"}" + good]))
    assert [r["error_code"] for r in reports] == [200, 200, 400]
