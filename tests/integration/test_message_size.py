"""Size limits: MESSAGE_TOO_LARGE at broker and topic level, and 1 MiB values when limits allow."""

from __future__ import annotations

import asyncio
import os

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import ConfigResource, ConfigSource

from . import clients as kc
from .clients import Msg
from .wire import MESSAGE_TOO_LARGE, NONE, Conn, batch_of_size, records_of

pytestmark = pytest.mark.timeout(120)

BIG_LIMIT = 3 * 1024 * 1024  # message.max.bytes of the large-message broker
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def big_broker(make_module_broker):
    return make_module_broker({"message.max.bytes": BIG_LIMIT})


def test_exact_boundary_of_topic_limit(strom_broker, unique_topic):
    """A batch of exactly max.message.bytes is taken; one byte more is refused and not written."""
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, config={"max.message.bytes": "10000"})
    with Conn(bs) as conn:
        assert conn.produce(topic, 0, batch_of_size(10_000)).error == NONE
        assert conn.produce(topic, 0, batch_of_size(10_001)).error == MESSAGE_TOO_LARGE
        assert conn.produce(topic, 0, batch_of_size(500)).error == NONE
    assert kc.latest(bs, topic) == 2


def test_default_broker_limit(strom_broker, unique_topic):
    """Default message.max.bytes (1048588): a 1.5 MB record is refused, small ones still flow."""
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    big = Msg(b"big", os.urandom(1_500_000))
    err = kc.produce_expect_error(bs, topic, big, **{"message.max.bytes": 10_000_000})
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    kc.produce(bs, topic, [Msg(b"small", b"ok")], partition=0)
    assert [(m.offset, m.value) for m in kc.consume(bs, topic, 1)] == [(0, b"ok")]
    assert kc.latest(bs, topic) == 1

    with Conn(bs) as conn:
        assert conn.produce(topic, 0, batch_of_size(1_048_589)).error == MESSAGE_TOO_LARGE
        assert conn.produce(topic, 0, batch_of_size(1_048_588)).error == NONE


def test_topic_limit_with_clients(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, config={"max.message.bytes": "2000"})
    err = kc.produce_expect_error(bs, topic, Msg(None, os.urandom(5000)))
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE

    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    p = KafkaProducer(bootstrap_servers=bs, max_request_size=10_000_000)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            p.send(topic, os.urandom(5000), partition=0).get(timeout=30)
    finally:
        p.close(timeout=10)

    kc.produce(bs, topic, [Msg(None, b"x" * 1000)], partition=0)
    assert kc.latest(bs, topic) == 1


def test_topic_limit_follows_broker_default(big_broker, unique_topic):
    """A topic without its own max.message.bytes inherits message.max.bytes from the broker."""
    bs = big_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    a = kc.admin(bs)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entry = a.describe_configs([res], request_timeout=30)[res].result(30)["max.message.bytes"]
    assert entry.value == str(BIG_LIMIT)
    assert entry.source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_one_mib_values_confluent(big_broker, unique_topic):
    bs = big_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    sent = [Msg(f"k{i}".encode(), os.urandom(MIB), [("n", str(i).encode())]) for i in range(3)]
    sent.append(Msg(b"compressible", b"z" * (2 * MIB)))
    kc.produce(
        bs, topic, sent, partition=0,
        **{"message.max.bytes": BIG_LIMIT, "compression.type": "lz4", "batch.size": BIG_LIMIT},
    )  # fmt: skip
    got = kc.consume(bs, topic, len(sent), **{"fetch.max.bytes": 4 * MIB})
    assert kc.contents(got) == kc.contents(sent)
    # Default per-partition fetch limits are smaller than one record: the broker must still
    # return the first batch whole (KIP-74), or the consumer would be stuck.
    got = kc.consume(bs, topic, len(sent), **{"max.partition.fetch.bytes": 1000})
    assert kc.contents(got) == kc.contents(sent)


def test_one_mib_values_kafka_python(big_broker, unique_topic):
    bs = big_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    sent = [Msg(f"k{i}".encode(), os.urandom(MIB)) for i in range(3)]
    kc.kp_produce(bs, topic, sent, max_request_size=BIG_LIMIT, compression_type="gzip")
    got = kc.kp_consume(bs, topic, len(sent), max_partition_fetch_bytes=1000)
    assert kc.contents(got) == kc.contents(sent)


def test_one_mib_values_aiokafka(big_broker, unique_topic):
    bs = big_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    sent = [Msg(f"k{i}".encode(), os.urandom(MIB)) for i in range(3)]

    async def run():
        await kc.aio_produce(bs, topic, sent, max_request_size=BIG_LIMIT)
        return await kc.aio_consume(bs, topic, len(sent), max_partition_fetch_bytes=1000)

    assert kc.contents(asyncio.run(run())) == kc.contents(sent)


def test_big_broker_exact_limit(big_broker, unique_topic):
    bs = big_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    exact = batch_of_size(BIG_LIMIT)
    with Conn(bs) as conn:
        assert conn.produce(topic, 0, exact).error == NONE
        assert conn.produce(topic, 0, batch_of_size(BIG_LIMIT + 1)).error == MESSAGE_TOO_LARGE
    assert [m.value for m in kc.consume(bs, topic, 1)] == [records_of(exact)[0].value]
    assert kc.latest(bs, topic) == 1
