"""Schema validation on produce (issue 31 point 4), with Confluent Server's topic configs and
real serializers: a record must carry the id of a schema registered under the subject the
topic's strategy names; a failing batch is refused whole with INVALID_RECORD."""

from __future__ import annotations

import json

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from .. import clients as kc
from .test_registry_api import V1, registry  # noqa: F401  (the fixture)

OTHER = json.dumps({"type": "record", "name": "Other", "namespace": "shop",
                    "fields": [{"name": "n", "type": "int"}]})


def produce_all(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes | None]],
                **conf: object) -> list[KafkaError | None]:
    """Each record's outcome (None: written), in one batch: a long linger, which flush() cuts
    short (a 50 ms linger split the batch once under CI load), and no retries."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10000, "retries": 0,
                  "enable.idempotence": False, **conf})
    out: list[KafkaError | None] = [None] * len(items)
    done = [False] * len(items)

    def report(i: int):
        def cb(err, _msg) -> None:
            out[i] = err
            done[i] = True
        return cb

    for i, (key, value) in enumerate(items):
        p.produce(topic, value=value, key=key, partition=0, on_delivery=report(i))
    p.flush(30)
    assert all(done)
    return out


def test_a_validated_topic_takes_only_registered_ids(registry) -> None:  # noqa: F811
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    bs = broker.bootstrap
    kc.create_topic(bs, "orders", 1, {"confluent.value.schema.validation": "true"})
    ctx = SerializationContext("orders", MessageField.VALUE)
    good = AvroSerializer(client, V1)({"user": "ada"}, ctx)  # registers orders-value
    other_id = client.register_schema("elsewhere-value", Schema(OTHER, "AVRO"))
    foreign = b"\x00" + other_id.to_bytes(4, "big") + b"\x02"

    assert produce_all(bs, "orders", [(None, good), (b"k", None)]) == [None, None]  # + tombstone
    assert kc.latest(bs, "orders") == 2
    outcome = produce_all(bs, "orders", [(None, good), (None, b"plain text"), (None, foreign)])
    # KIP-467: the failing records get INVALID_RECORD, the good one of their batch librdkafka's
    # _INVALID_DIFFERENT_RECORD (it was not written either)
    assert [e.code() if e is not None else None for e in outcome] == [
        KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
        KafkaError.INVALID_RECORD]
    assert kc.latest(bs, "orders") == 2  # nothing of the refused batch was written

    # an unvalidated topic takes anything; turning validation off takes effect at once
    kc.create_topic(bs, "free", 1)
    assert produce_all(bs, "free", [(None, b"plain text")]) == [None]
    admin = kc.admin(bs)
    res = ConfigResource("topic", "orders", incremental_configs=[ConfigEntry(
        "confluent.value.schema.validation", "false",
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(20)
    assert produce_all(bs, "orders", [(None, b"plain text")]) == [None]


def test_keys_with_the_record_name_strategy(registry) -> None:  # noqa: F811
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    bs = broker.bootstrap
    kc.create_topic(bs, "keyed", 1, {
        "confluent.key.schema.validation": "true",
        "confluent.key.subject.name.strategy":
            "io.confluent.kafka.serializers.subject.RecordNameStrategy"})
    sid = client.register_schema("shop.Other", Schema(OTHER, "AVRO"))
    key = b"\x00" + sid.to_bytes(4, "big") + b"\x02"
    assert produce_all(bs, "keyed", [(key, b"any value")]) == [None]
    wrong = client.register_schema("keyed-key", Schema(V1, "AVRO"))  # the topic strategy's
    refused = produce_all(bs, "keyed", [(b"\x00" + wrong.to_bytes(4, "big") + b"\x02", b"v")])
    assert refused[0] is not None and refused[0].code() == KafkaError.INVALID_RECORD


def test_compressed_and_idempotent_batches_are_validated(registry) -> None:  # noqa: F811
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    bs = broker.bootstrap
    kc.create_topic(bs, "packed", 1, {"confluent.value.schema.validation": "true"})
    good = AvroSerializer(client, V1)({"user": "ada"},
                                      SerializationContext("packed", MessageField.VALUE))
    written = 0
    for conf in ({"compression.type": codec} for codec in ("gzip", "snappy", "lz4", "zstd")):
        assert produce_all(bs, "packed", [(None, good)] * 3, **conf) == [None] * 3
        written += 3
        refused = produce_all(bs, "packed", [(None, good), (None, b"\x00\x00\x00\x03\xe7x")],
                              **conf)
        assert refused[1] is not None and refused[1].code() == KafkaError.INVALID_RECORD, conf
        # the good one goes with the bad one's batch, unless the client sent it alone
        # (once under CI load, a long linger notwithstanding)
        written += refused[0] is None
    idempotent = {"enable.idempotence": True, "retries": 3, "acks": "all"}
    assert produce_all(bs, "packed", [(None, good)] * 2, **idempotent) == [None] * 2
    written += 2
    assert kc.latest(bs, "packed") == written  # no refused record was written


def test_decode_mode_refuses_data_its_schema_cannot_read(registry) -> None:  # noqa: F811
    """Strom's extension: strom.value.schema.validation.mode=decode also decodes the data."""
    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    bs = broker.bootstrap
    kc.create_topic(bs, "strict", 1, {"confluent.value.schema.validation": "true",
                                      "strom.value.schema.validation.mode": "decode"})
    good = AvroSerializer(client, V1)({"user": "ada"},
                                      SerializationContext("strict", MessageField.VALUE))
    sid = int.from_bytes(good[1:5], "big")
    garbage = b"\x00" + sid.to_bytes(4, "big") + b"\x7f"  # a string length past the end
    trailing = good + b"extra"
    assert produce_all(bs, "strict", [(None, good)]) == [None]
    for bad in (garbage, trailing):
        refused = produce_all(bs, "strict", [(None, bad)])
        assert refused[0] is not None and refused[0].code() == KafkaError.INVALID_RECORD
    # in the default id mode the same bytes pass: only the id is checked
    kc.create_topic(bs, "lenient", 1, {"confluent.value.schema.validation": "true"})
    client.register_schema("lenient-value", Schema(V1, "AVRO"))
    assert produce_all(bs, "lenient", [(None, garbage)]) == [None]


def test_invalid_records_go_to_the_topics_dead_letter_topic(registry) -> None:  # noqa: F811
    """Strom's extension: errors.deadletterqueue.topic.name on a validated topic diverts the
    invalid records (headers naming topic, partition, reason and schema id) and writes the
    rest; a dead-letter topic outside the broker's prefix refuses the batch instead."""
    from confluent_kafka import Consumer

    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    bs = broker.bootstrap
    kc.create_topic(bs, "dlq.events", 1)
    kc.create_topic(bs, "events", 1, {"confluent.value.schema.validation": "true",
                                      "errors.deadletterqueue.topic.name": "dlq.events"})
    good = AvroSerializer(client, V1)({"user": "ada"},
                                      SerializationContext("events", MessageField.VALUE))
    foreign = b"\x00\x00\x00\x03\xe7x"  # id 999: not registered
    outcome = produce_all(bs, "events", [(b"a", good), (b"b", b"plain"), (b"c", good),
                                         (b"d", foreign)])
    assert outcome == [None] * 4  # the producer is not blocked by the bad records
    assert [m.value for m in kc.consume(bs, "events", 2)] == [good, good]
    assert kc.latest(bs, "events") == 2
    c = Consumer({"bootstrap.servers": bs, "group.id": "dlq-reader",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["dlq.events"])
    letters = []
    while len(letters) < 2:
        m = c.poll(10)
        assert m is not None, "the dead letters did not arrive"
        if m.error() is None:
            letters.append(m)
    c.close()
    assert [(m.key(), m.value()) for m in letters] == [(b"b", b"plain"), (b"d", foreign)]
    headers = dict(letters[1].headers())
    assert headers["__dlq.errors.topic"] == b"events"
    assert headers["__dlq.errors.partition"] == b"0"
    assert headers["__dlq.errors.schema.id"] == b"999"
    assert b"not registered" in headers["__dlq.errors.message"]

    # a dead-letter topic outside the prefix: the batch is refused, nothing is lost
    kc.create_topic(bs, "parking", 1)
    kc.create_topic(bs, "events2", 1, {"confluent.value.schema.validation": "true",
                                       "errors.deadletterqueue.topic.name": "parking"})
    refused = produce_all(bs, "events2", [(None, b"plain")])
    assert refused[0] is not None and refused[0].code() == KafkaError.INVALID_RECORD
    assert kc.latest(bs, "parking") == 0 and kc.latest(bs, "events2") == 0
