"""Kafka 4.4's protocol level for Produce, Fetch and ListOffsets, spoken raw on the wire.

The expectations are what a real Kafka 4.4 broker answered to the same requests: Produce 0-13
advertised but v0-2 closing the connection (KIP-896), topic ids in Produce v13 and Fetch v13+,
ListOffsets v11's earliest-pending-upload timestamp, and KIP-467's record errors.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError

from . import clients as kc
from . import wire_flex as wf
from .wire import (
    FETCH,
    LIST_OFFSETS,
    PRODUCE,
    UNSUPPORTED_VERSION,
    Conn,
    Record,
    build_batch,
    produce_v3_body,
    records_of,
)

pytestmark = pytest.mark.timeout(90)

INVALID_RECORD, UNKNOWN_TOPIC_ID, INVALID_TIMESTAMP = 87, 100, 32
EARLIEST_PENDING_UPLOAD = -6


def test_api_versions_lists_kafka_4_4_ranges(strom_broker):
    with Conn(strom_broker.bootstrap) as conn:
        error, keys = conn.api_versions_v0()
    assert error == 0
    assert (keys[PRODUCE], keys[FETCH], keys[LIST_OFFSETS]) == ((0, 13), (4, 18), (1, 11))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_close_the_connection(strom_broker, unique_topic, version):
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic)
    body = produce_v3_body(topic, 0, build_batch([Record(b"k", b"v")]))[2:]  # no txn id
    with Conn(strom_broker.bootstrap) as conn:
        conn.send(PRODUCE, version, body)
        assert conn.wait_closed()
    with Conn(strom_broker.bootstrap) as conn:  # the broker still serves others
        assert conn.list_offset(topic, 0, -1) == (0, -1, 0)


def test_produce_v13_and_fetch_v18_by_topic_id(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    with Conn(bs) as conn:
        topic_id = wf.metadata_v12(conn, [topic])[topic]["id"]
        r = wf.produce(conn, 13, topic_id, 0, build_batch([Record(b"k", b"a")]))
        assert [(key, p["error"], p["base_offset"]) for key, ps in r["topics"] for p in ps] == [
            (topic_id, 0, 0)]
        r = wf.produce(conn, 12, topic, 0, build_batch([Record(b"k", b"b")]))
        assert r["topics"][0][1][0]["base_offset"] == 1
        f = wf.fetch(conn, 18, topic_id, 0, 0, replica_high_watermark=NO_HW)
        [(key, [p])] = f["topics"]
        assert (key, p["error"], p["high_watermark"]) == (topic_id, 0, 2)
        assert [rec.value for rec in records_of(p["records"])] == [b"a", b"b"]
        unknown = uuid.uuid4()
        r = wf.produce(conn, 13, unknown, 0, build_batch([Record(b"k", b"c")]))
        assert [(key, p["error"]) for key, ps in r["topics"] for p in ps] == [
            (unknown, UNKNOWN_TOPIC_ID)]


NO_HW = wf.NO_HIGH_WATERMARK


def test_list_offsets_v11_earliest_pending_upload(strom_broker, unique_topic):
    # no tiered storage: Kafka 4.4 finds no offset (-1) at v11 and refuses the timestamp before
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    with Conn(bs) as conn:
        assert wf.list_offsets(conn, 11, topic, 0, EARLIEST_PENDING_UPLOAD) == (0, -1, -1, -1)
        assert wf.list_offsets(conn, 10, topic, 0, EARLIEST_PENDING_UPLOAD)[0] == (
            UNSUPPORTED_VERSION)
        assert wf.list_offsets(conn, 11, topic, 0, -1) == (0, -1, 0, 0)


def test_keyless_records_on_a_compacted_topic_are_named(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, config={"cleanup.policy": "compact"})
    batch = build_batch([Record(b"a", b"1"), Record(None, b"2"), Record(b"b", b"3")])
    with Conn(bs) as conn:
        [(_, [p])] = wf.produce(conn, 9, topic, 0, batch)["topics"]
    text = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert (p["error"], p["base_offset"], p["record_errors"]) == (INVALID_RECORD, -1, [(1, text)])
    assert p["error_message"] == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{text}')]")


def test_a_future_timestamp_is_named(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    batch = build_batch([Record(b"a", b"1"), Record(b"b", b"2", timestamp=4_000_000_000_000)])
    with Conn(bs) as conn:
        [(_, [p])] = wf.produce(conn, 9, topic, 0, batch)["topics"]
    assert (p["error"], p["error_message"]) == (
        INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp")
    assert [i for i, _ in p["record_errors"]] == [1]
    assert p["record_errors"][0][1].startswith(
        "Timestamp 4000000000000 of message with offset 1 is out of range.")


def test_librdkafka_reports_the_record_error(strom_broker, unique_topic):
    # librdkafka fails the message with INVALID_RECORD (it does not show the record texts)
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, config={"cleanup.policy": "compact"})
    error = kc.produce_expect_error(bs, topic, kc.Msg(None, b"no key"))
    assert error.code() == KafkaError.INVALID_RECORD
