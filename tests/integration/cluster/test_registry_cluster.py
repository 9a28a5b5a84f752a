"""The schema registry on 3 brokers (issue 31 point 2): every broker serves the same registry
(the writer is the leader of `_schemas`; the others keep a copy for reads and validation and
forward changes to it), ids stay unique, and a kill -9 of the writer loses nothing
acknowledged."""

from __future__ import annotations

import json
import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from .. import clients as kc
from ..registry.test_registry_api import V1, V2, http, registry_url

V3 = json.dumps({"type": "record", "name": "Click", "namespace": "shop", "fields": [
    {"name": "user", "type": "string"}, {"name": "page", "type": "string", "default": "/"},
    {"name": "ref", "type": ["null", "string"], "default": None}]})


def poll(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = fn()
        except (SchemaRegistryError, OSError) as exc:
            value, last = None, exc
        else:
            last = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} ({last})")
        time.sleep(0.1)  # poll interval, not synchronisation


VIEW = json.dumps({"type": "record", "name": "View", "namespace": "shop",
                   "fields": [{"name": "page", "type": "string"}]})


def produce_each(bootstrap: str, topic: str, value: bytes, partitions: int) -> list:
    """One record to each partition; each one's error (None: written)."""
    p = Producer({"bootstrap.servers": bootstrap, "retries": 0, "enable.idempotence": False})
    out: dict[int, KafkaError | None] = {}
    for i in range(partitions):
        p.produce(topic, value=value, partition=i,
                  on_delivery=lambda err, _m, i=i: out.__setitem__(i, err))
    p.flush(30)
    return [out.get(i, "no report") for i in range(partitions)]


def schemas_leader(bootstrap: str) -> int:
    md = kc.admin(bootstrap).list_topics("_schemas", timeout=10)
    return md.topics["_schemas"].partitions[0].leader


def test_every_broker_serves_one_registry_and_the_writer_may_die(make_cluster) -> None:
    cluster = make_cluster(3, overrides={"schema.registry.listeners": "http://127.0.0.1:0"})
    urls = {i: registry_url(cluster.broker(i)) for i in (1, 2, 3)}
    for url in urls.values():  # _schemas is created and led; every registry answers
        poll(lambda url=url: http(f"{url}/subjects")[0] == 200, 60, f"the registry at {url}")
    clients = {i: SchemaRegistryClient({"url": url}) for i, url in urls.items()}
    first = clients[1].register_schema("clicks-value", Schema(V1, "AVRO"))
    second = clients[2].register_schema("clicks-value", Schema(V2, "AVRO"))
    assert second > first
    assert poll(lambda: clients[3].get_versions("clicks-value") == [1, 2], 10, "the copy")
    assert clients[3].get_latest_version("clicks-value").schema_id == second

    # A broker that does not write keeps a copy: it reads its own forwarded writes at once,
    # and the leaders of a validated topic's partitions check records against their copies,
    # a schema registered a moment ago included.
    writer = schemas_leader(cluster.bootstrap)
    other = next(i for i in (1, 2, 3) if i != writer)
    kc.create_topic(cluster.bootstrap, "views", 3, {"confluent.value.schema.validation": "true"})
    view = clients[other].register_schema("views-value", Schema(VIEW, "AVRO"))
    assert http(f"{urls[other]}/schemas/ids/{view}")[0] == 200
    framed = b"\x00" + view.to_bytes(4, "big") + b"\x02/"
    assert produce_each(cluster.bootstrap, "views", framed, 3) == [None, None, None]
    unknown = b"\x00" + (view + 1000).to_bytes(4, "big") + b"\x02/"
    assert [e.code() for e in produce_each(cluster.bootstrap, "views", unknown, 3)] == \
        [KafkaError.INVALID_RECORD] * 3

    leader = schemas_leader(cluster.bootstrap)
    cluster.broker(leader).kill()
    survivors = [i for i in (1, 2, 3) if i != leader]
    fresh = SchemaRegistryClient({"url": urls[survivors[0]]})
    third = poll(lambda: fresh.register_schema("clicks-value", Schema(V3, "AVRO")), 60,
                 "a registration after the writer died")
    assert third > second  # ids stay unique: the new writer replayed the old one's
    reader = SchemaRegistryClient({"url": urls[survivors[1]]})  # its copy may trail a fetch
    assert poll(lambda: reader.get_versions("clicks-value") == [1, 2, 3], 30, "the copy")
    assert json.loads(reader.get_schema(first).schema_str) == json.loads(V1)

    cluster.broker(leader).restart()
    back = SchemaRegistryClient({"url": registry_url(cluster.broker(leader))})
    assert poll(lambda: back.get_versions("clicks-value"), 60, "the restarted broker") == \
        [1, 2, 3]
