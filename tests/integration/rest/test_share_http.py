"""Strom's own share groups over HTTP (KIP-932): instances of a group split the records,
RELEASE redelivers (delivery count 2), REJECT never does, ACCEPT is done, the group's lock
duration is reported, DELETE releases what an instance holds, idle instances expire."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from ..broker import BrokerProcess
from .conftest import REST_OVERRIDES, Rest

BASE = "/strom/v1/share-groups"
IDLE_MS = 2000


@pytest.fixture(scope="module")
def rest_broker(make_module_broker) -> BrokerProcess:
    """The shared overrides, a lock duration a test may set low, and a short instance
    expiry (every other test here uses its instances without pauses)."""
    return make_module_broker({**REST_OVERRIDES,
                               "group.share.min.record.lock.duration.ms": "1000",
                               "rest.consumer.instance.timeout.ms": str(IDLE_MS)})


@pytest.fixture(scope="module")
def admin(rest: Rest) -> AdminClient:
    return AdminClient({"bootstrap.servers": rest.broker.bootstrap})


@pytest.fixture
def share_topic(admin: AdminClient, unique_topic: Callable[[str], str], rest: Rest
                ) -> Callable[..., tuple[str, str]]:
    """A topic of `n` records (one log batch each, so an instance's max_records holds) and a
    share group reading it from the start: (topic, group)."""

    def make(n: int, **group_configs: str) -> tuple[str, str]:
        topic = unique_topic("share")
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in {"share.auto.offset.reset": "earliest", **group_configs}.items()]
        group = f"g-{topic}"
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=30)
        producer = Producer({"bootstrap.servers": rest.broker.bootstrap, "linger.ms": 0})
        for i in range(n):
            producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                             headers=[("h", b"x")])
            producer.flush(10)
        return topic, group

    return make


def create(rest: Rest, group: str, topic: str, **extra: Any) -> str:
    status, body = rest.post(f"{BASE}/{group}/consumers", {"topics": [topic], **extra})
    assert status == 201, body
    assert body["base_uri"] == f"{rest.url}{BASE}/{group}/consumers/{body['instance_id']}"
    return f"{BASE}/{group}/consumers/{body['instance_id']}"


def fetch(rest: Rest, instance: str, want: int = 1, timeout: float = 15.0,
          query: str = "format=string") -> dict[str, Any]:
    """GET records until some arrive (a new member needs a moment to join the group)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = rest.get(f"{instance}/records?timeout_ms=500&{query}")
        assert status == 200, body
        if len(body["records"]) >= want or time.monotonic() > deadline:
            return body


def ack(rest: Rest, instance: str, records: list[dict[str, Any]], kind: str
        ) -> list[dict[str, Any]]:
    status, body = rest.post(f"{instance}/acknowledgements", {"acknowledgements": [
        {"topic": r["topic"], "partition": r["partition"], "offset": r["offset"], "type": kind}
        for r in records]})
    assert status == 200, body
    return body["acknowledgements"]


@pytest.fixture(scope="module")
def idle_instance(rest: Rest, admin: AdminClient) -> tuple[str, float]:
    """An instance made first and never used again (any request would keep it alive): the last
    test sees it expired. (its path, when it was made)"""
    topic = f"share-idle-{time.monotonic_ns()}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    return create(rest, f"g-{topic}", topic), time.monotonic()


def test_two_instances_split_the_records(rest: Rest, share_topic, idle_instance) -> None:
    topic, group = share_topic(6)
    a = create(rest, group, topic, max_records=3)
    b = create(rest, group, topic, max_records=3)
    got_a = fetch(rest, a)["records"]
    got_b = fetch(rest, b)["records"]
    offsets_a = {r["offset"] for r in got_a}
    offsets_b = {r["offset"] for r in got_b}
    assert got_a and got_b and len(got_a) <= 3 and len(got_b) <= 3
    assert not offsets_a & offsets_b
    first = got_a[0]
    assert first["topic"] == topic and first["partition"] == 0
    assert first["value"] == f"v{first['offset']}" and first["key"] == f"k{first['offset']}"
    assert first["headers"] == [{"name": "h", "value": "eA=="}]  # base64 of b"x"
    assert first["timestamp_type"] == "CREATE_TIME" and first["delivery_count"] == 1
    # Records handed out must be acknowledged before more are asked for.
    status, body = rest.get(f"{a}/records?timeout_ms=0")
    assert (status, body["error_code"]) == (409, 40903)
    assert all(r["error_code"] is None for r in ack(rest, a, got_a, "ACCEPT"))
    assert all(r["error_code"] is None for r in ack(rest, b, got_b, "ACCEPT"))
    seen = offsets_a | offsets_b
    deadline = time.monotonic() + 15
    while seen != set(range(6)) and time.monotonic() < deadline:
        for instance in (a, b):
            more = fetch(rest, instance, timeout=0)["records"]
            assert not {r["offset"] for r in more} & seen, "a record delivered twice"
            seen |= {r["offset"] for r in more}
            ack(rest, instance, more, "ACCEPT")
    assert seen == set(range(6))
    # An acknowledgement of a record the instance does not hold fails, alone.
    result = ack(rest, a, [first], "ACCEPT")[0]
    assert result["error_code"] == 40903 and "not held" in result["message"]
    for instance in (a, b):
        assert rest.delete(instance) == (204, None)
    assert rest.get(f"{a}/records")[1]["error_code"] == 40403


def test_release_redelivers_and_reject_does_not(rest: Rest, share_topic) -> None:
    topic, group = share_topic(2)
    one = create(rest, group, topic)
    got = fetch(rest, one, want=2)["records"]
    assert [(r["offset"], r["delivery_count"]) for r in got] == [(0, 1), (1, 1)]
    results = ack(rest, one, got[:1], "RELEASE") + ack(rest, one, got[1:], "REJECT")
    assert [(r["offset"], r["type"], r["error_code"]) for r in results] == [
        (0, "RELEASE", None), (1, "REJECT", None)]
    again = fetch(rest, one)["records"]
    assert [(r["offset"], r["delivery_count"]) for r in again] == [(0, 2)]
    assert ack(rest, one, again, "ACCEPT")[0]["error_code"] is None
    status, body = rest.get(f"{one}/records?timeout_ms=300")
    assert status == 200 and body["records"] == [] and body["acquired_until"] is None
    assert rest.delete(one) == (204, None)


def test_lock_duration_reported_and_delete_releases(rest: Rest, share_topic) -> None:
    topic, group = share_topic(2, **{"share.record.lock.duration.ms": "4000"})
    before = int(time.time() * 1000)
    status, created = rest.post(f"{BASE}/{group}/consumers",
                                {"topics": [topic], "name": "first"})
    assert status == 201 and created["lock_duration_ms"] == 4000
    first = f"{BASE}/{group}/consumers/first"
    assert rest.post(f"{BASE}/{group}/consumers", {"topics": [topic], "name": "first"}
                     )[1]["error_code"] == 40902
    body = fetch(rest, first, want=2, query="format=binary")
    after = int(time.time() * 1000)
    assert body["lock_duration_ms"] == 4000
    assert before + 4000 <= body["acquired_until"] <= after + 4000
    assert body["records"][0]["value"] == "djA="  # base64 of b"v0"
    # Closing the instance releases what it held: another member gets it, delivered twice.
    assert rest.delete(first) == (204, None)
    second = create(rest, group, topic)
    again = fetch(rest, second, want=2)["records"]
    assert [(r["offset"], r["delivery_count"]) for r in again] == [(0, 2), (1, 2)]
    assert rest.delete(second) == (204, None)


def test_errors(rest: Rest, share_topic) -> None:
    status, body = rest.post(f"{BASE}/g/consumers", {"topics": ["no-such-topic"]})
    assert (status, body["error_code"]) == (404, 40401)
    status, body = rest.post(f"{BASE}/g/consumers", {"topics": []})
    assert (status, body["error_code"]) == (422, 42204)
    assert rest.get(f"{BASE}/g/consumers/nobody/records")[1]["error_code"] == 40403
    topic, group = share_topic(0)
    one = create(rest, group, topic)
    assert rest.get(f"{one}/records?format=yaml")[0] == 400
    assert rest.get(f"{one}/records?timeout_ms=-1")[0] == 400
    status, body = rest.post(f"{one}/acknowledgements", {"acknowledgements": [
        {"topic": topic, "partition": 0, "offset": 0, "type": "MAYBE"}]})
    assert status == 422
    assert rest.delete(one) == (204, None)


def test_openapi_documents_it_as_strom_own(rest: Rest) -> None:
    doc = rest.get("/openapi.json")[1]
    for path in (f"{BASE}/{{group}}/consumers", f"{BASE}/{{group}}/consumers/{{instance}}",
                 f"{BASE}/{{group}}/consumers/{{instance}}/records",
                 f"{BASE}/{{group}}/consumers/{{instance}}/acknowledgements"):
        for operation in doc["paths"][path].values():
            assert "Strom's own" in operation["summary"]
    assert "ShareRecords" in doc["components"]["schemas"]


def test_idle_instance_expires(rest: Rest, idle_instance: tuple[str, float]) -> None:
    path, made = idle_instance
    # Idle for rest.consumer.instance.timeout.ms, plus the sweep's period (a fifth of it) and
    # a margin; by this last test that time has mostly passed already.
    time.sleep(max(0.0, made + IDLE_MS / 1000 * 1.2 + 1 - time.monotonic()))  # the idle time tested
    assert rest.get(path)[1]["error_code"] == 40403
