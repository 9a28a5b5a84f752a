"""Produce: validation of the request and its batches, offsets, idempotence, acks."""

from __future__ import annotations

import uuid

import pytest

from strom.broker.context import CloseConnection
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.record import COMPRESSION_GZIP, Record, build_batch

FUTURE = 4_000_000_000_000  # year 2096: beyond message.timestamp.after.max.ms (1 h)


def _pid(h) -> tuple[int, int]:
    r = h.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                "transaction_timeout": 60000})
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def _fetch_records(h, topic: str, partition: int = 0, offset: int = 0) -> bytes:
    r = h.request(ApiKey.FETCH, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0,
                                     "max_bytes": 1 << 20, "topics": [{"topic": topic, "partitions": [
                                         {"partition": partition, "fetch_offset": offset,
                                          "partition_max_bytes": 1 << 20}]}]})
    return bytes(r.responses[0].partitions[0].records)


def test_batches_get_consecutive_offsets(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    first = h.produce("t", 0, h.batch(b"a", b"b", b"c"))
    second = h.produce("t", 0, h.batch(b"d"))
    assert (first.error_code, first.base_offset, first.log_start_offset) == (0, 0, 0)
    assert (second.error_code, second.base_offset) == (0, 3)
    assert first.log_append_time == -1  # CreateTime topic
    assert len(_fetch_records(h, "t")) > 0


def test_log_append_time_topics_report_the_append_time(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", configs={"message.timestamp.type": "LogAppendTime"})
    r = h.produce("t", 0, h.batch(b"a"))
    assert r.error_code == 0
    assert r.log_append_time > 1_700_000_000_000


def test_compressed_batches_are_accepted(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    r = h.produce("t", 0, h.batch(b"a" * 1000, b"b", compression=COMPRESSION_GZIP))
    assert (r.error_code, r.base_offset) == (0, 0)
    assert h.produce("t", 0, h.batch(b"c")).base_offset == 2


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_every_version_round_trips(broker_harness, version: int) -> None:
    h = broker_harness
    h.create_topic("t")
    r = h.produce("t", 0, h.batch(b"a"), version=version)
    assert (r.error_code, r.base_offset) == (0, 0)


def test_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    r = broker_harness.produce("nope", 0, broker_harness.batch(b"a"))
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert r.base_offset == -1


def test_unknown_partition_is_unknown_topic_or_partition(broker_harness) -> None:
    broker_harness.create_topic("t")
    r = broker_harness.produce("t", 5, broker_harness.batch(b"a"))
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_does_not_auto_create_topics(broker_harness) -> None:
    broker_harness.produce("auto", 0, broker_harness.batch(b"a"))
    assert "auto" not in broker_harness.broker.image.topics


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_bad_acks_is_invalid_required_acks(broker_harness, acks: int) -> None:
    broker_harness.create_topic("t")
    r = broker_harness.produce("t", 0, broker_harness.batch(b"a"), acks=acks)
    assert r.error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert broker_harness.broker.partitions.get("t", 0).log_end_offset == 0


def test_writing_to_an_internal_topic_is_invalid_topic(broker_harness) -> None:
    h = broker_harness
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    assert "__consumer_offsets" in h.broker.image.topics
    r = h.produce("__consumer_offsets", 0, h.batch(b"junk"))
    # Kafka: InvalidTopicException "Cannot append to internal topic __consumer_offsets"
    assert r.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.broker_config(**{"message.max.bytes": "200"})
def test_a_batch_over_message_max_bytes_is_message_too_large(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    assert h.produce("t", 0, h.batch(b"small")).error_code == 0
    r = h.produce("t", 0, h.batch(b"x" * 500))
    assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert h.broker.partitions.get("t", 0).log_end_offset == 1


def test_a_batch_over_the_topics_max_message_bytes_is_message_too_large(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", configs={"max.message.bytes": "100"})
    r = h.produce("t", 0, h.batch(b"x" * 500))
    assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_a_batch_with_a_bad_crc_is_corrupt_message(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    data = bytearray(h.batch(b"value"))
    data[-1] ^= 0xFF  # a record byte: covered by the CRC
    r = h.produce("t", 0, bytes(data))
    assert r.error_code == ErrorCode.CORRUPT_MESSAGE
    assert h.broker.partitions.get("t", 0).log_end_offset == 0


def test_a_truncated_batch_is_rejected(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    r = h.produce("t", 0, h.batch(b"value")[:-3])
    # Kafka: the batch's length field overruns the records -> CORRUPT_MESSAGE (or INVALID_RECORD)
    assert r.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    assert h.broker.partitions.get("t", 0).log_end_offset == 0


def test_no_records_is_invalid_record(broker_harness) -> None:
    # Kafka (ProduceRequest.validateRecords): "must have at least one record batch" ->
    # InvalidRecordException -> INVALID_RECORD
    broker_harness.create_topic("t")
    assert broker_harness.produce("t", 0, b"").error_code == ErrorCode.INVALID_RECORD


def test_two_batches_in_one_partition_are_invalid_record(broker_harness) -> None:
    # Kafka (ProduceRequest.validateRecords, v3+): exactly one record batch per partition
    h = broker_harness
    h.create_topic("t")
    two = h.batch(b"a") + h.batch(b"b")
    r = h.produce("t", 0, two)
    assert r.error_code == ErrorCode.INVALID_RECORD
    assert h.broker.partitions.get("t", 0).log_end_offset == 0


@pytest.mark.parametrize("tail", [b"\0" * 11, b"\0" * 8 + b"\x7f\0\0\0"],
                         ids=["shorter-than-a-length", "length-beyond-the-end"])
def test_trailing_bytes_that_hold_no_batch_are_left_to_the_log(broker_harness, tail) -> None:
    # Kafka's batch iterator sees no second batch here, so it is not INVALID_RECORD; the log
    # refuses the bytes (Kafka trims them: Strom is stricter, see docs/architecture.md)
    h = broker_harness
    h.create_topic("t")
    r = h.produce("t", 0, h.batch(b"a") + tail)
    assert r.error_code == ErrorCode.CORRUPT_MESSAGE
    assert h.broker.partitions.get("t", 0).log_end_offset == 0


def test_an_old_magic_batch_is_invalid_record(broker_harness) -> None:
    # Kafka: v3+ requests must carry magic v2 batches -> INVALID_RECORD
    h = broker_harness
    h.create_topic("t")
    data = bytearray(h.batch(b"a"))
    data[16] = 1  # the magic byte
    assert h.produce("t", 0, bytes(data)).error_code == ErrorCode.INVALID_RECORD


def test_a_timestamp_far_in_the_future_is_invalid_timestamp(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    r = h.produce("t", 0, h.batch(b"a", timestamp=FUTURE))
    assert r.error_code == ErrorCode.INVALID_TIMESTAMP


def test_a_record_without_a_key_on_a_compacted_topic_is_invalid_record(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", configs={"cleanup.policy": "compact"})
    assert h.produce("t", 0, h.batch(b"v", key=b"k")).error_code == 0
    assert h.produce("t", 0, h.batch(b"v")).error_code == ErrorCode.INVALID_RECORD


def test_acks_all_below_min_insync_replicas_is_not_enough_replicas(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", configs={"min.insync.replicas": "2"})
    assert h.produce("t", 0, h.batch(b"a"), acks=-1).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert h.produce("t", 0, h.batch(b"a"), acks=1).error_code == 0  # acks=1 does not care


def test_acks_zero_gets_no_reply(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    body = _raw_produce(h, "t", h.batch(b"a"), acks=0)
    assert h.send_frame(ApiKey.PRODUCE, 9, body) is None
    assert h.broker.partitions.get("t", 0).log_end_offset == 1


def test_acks_zero_with_an_error_closes_the_connection(broker_harness) -> None:
    # Kafka closes the connection: the only way to tell an acks=0 producer something failed
    h = broker_harness
    body = _raw_produce(h, "nope", h.batch(b"a"), acks=0)
    with pytest.raises(CloseConnection):
        h.send_frame(ApiKey.PRODUCE, 9, body)


def _raw_produce(h, topic: str, batch: bytes, acks: int) -> bytes:
    from strom.protocol.codec import request_codec

    return request_codec(ApiKey.PRODUCE, 9).encode({
        "transactional_id": None, "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})


def test_a_partly_bad_request_writes_the_good_partitions(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t", partitions=2)
    r = h.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": h.batch(b"a")},
                                         {"index": 7, "records": h.batch(b"b")}]},
        {"name": "nope", "partition_data": [{"index": 0, "records": h.batch(b"c")}]}]})
    codes = [(t.name, p.index, p.error_code) for t in r.responses for p in t.partition_responses]
    assert codes == [("t", 0, 0), ("t", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                     ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


# -- idempotence -------------------------------------------------------------------------------


def test_an_idempotent_retry_gets_its_original_offset(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    pid, epoch = _pid(h)
    first = h.batch(b"a", b"b", producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert h.produce("t", 0, first).base_offset == 0
    retry = h.produce("t", 0, first)
    assert (retry.error_code, retry.base_offset) == (0, 0)
    assert h.broker.partitions.get("t", 0).log_end_offset == 2  # written once


def test_a_sequence_gap_is_out_of_order_sequence(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    pid, epoch = _pid(h)
    h.produce("t", 0, h.batch(b"a", producer_id=pid, producer_epoch=epoch, base_sequence=0))
    r = h.produce("t", 0, h.batch(b"c", producer_id=pid, producer_epoch=epoch, base_sequence=5))
    assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_an_older_producer_epoch_is_invalid_producer_epoch(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    pid, _ = _pid(h)
    h.produce("t", 0, h.batch(b"a", producer_id=pid, producer_epoch=3, base_sequence=0))
    r = h.produce("t", 0, h.batch(b"b", producer_id=pid, producer_epoch=2, base_sequence=1))
    assert r.error_code == ErrorCode.INVALID_PRODUCER_EPOCH


def _produce_by_id(h, topic_id, batch: bytes, partition: int = 0, version: int = 13):
    r = h.request(ApiKey.PRODUCE, version, {
        "transactional_id": None, "acks": -1, "timeout": 5000,
        "topic_data": [{"name": "", "topic_id": topic_id, "partition_data": [
            {"index": partition, "records": batch}]}]})
    return r.responses[0]


def test_v12_is_v11_and_v13_names_topics_by_id(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    assert h.produce("t", 0, h.batch(b"a"), version=12).base_offset == 0
    topic = _produce_by_id(h, h.topic_id("t"), h.batch(b"b"))
    assert topic.topic_id == h.topic_id("t")
    p = topic.partition_responses[0]
    assert (p.error_code, p.base_offset, p.log_start_offset) == (0, 1, 0)


def test_v13_unknown_topic_id_is_unknown_topic_id(broker_harness) -> None:
    # as Kafka 4.4 answers (probed): UNKNOWN_TOPIC_ID, the id echoed back
    h = broker_harness
    unknown = uuid.uuid4()
    topic = _produce_by_id(h, unknown, h.batch(b"a"))
    assert topic.topic_id == unknown
    assert topic.partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_v13_unknown_partition_is_unknown_topic_or_partition(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    p = _produce_by_id(h, h.topic_id("t"), h.batch(b"a"), partition=7).partition_responses[0]
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- KIP-467: a batch rejected for some of its records names them (texts as Kafka 4.4's) -----

_KEYLESS = "Compacted topic cannot accept message without key in topic partition c-0"


def _mixed_keys(h) -> bytes:
    keys = [b"a", None, b"b", None, None, None]
    return build_batch([Record(i, 1_700_000_000_000, k, b"v") for i, k in enumerate(keys)])


@pytest.mark.parametrize("version", [8, 9, 13])
def test_keyless_records_on_a_compacted_topic_are_named(broker_harness, version: int) -> None:
    h = broker_harness
    h.create_topic("c", configs={"cleanup.policy": "compact"})
    if version >= 13:
        r = _produce_by_id(h, h.topic_id("c"), _mixed_keys(h), version=version)
        p = r.partition_responses[0]
    else:
        p = h.produce("c", 0, _mixed_keys(h), version=version)
    assert (p.error_code, p.base_offset, p.log_start_offset) == (ErrorCode.INVALID_RECORD, -1, 0)
    assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
        (1, _KEYLESS), (3, _KEYLESS), (4, _KEYLESS), (5, _KEYLESS)]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{_KEYLESS}')" for i in (1, 3, 4))
    assert p.error_message == ("One or more records have been rejected due to 4 record errors "
                               "in total, and only showing the first three errors at most: "
                               f"[{shown}]")
    assert h.produce("c", 0, h.batch(b"x", key=b"k")).base_offset == 0  # nothing was written


def test_a_compressed_batch_names_its_keyless_record(broker_harness) -> None:
    h = broker_harness
    h.create_topic("c", configs={"cleanup.policy": "compact"})
    batch = build_batch([Record(0, 1_700_000_000_000, b"a", b"1"),
                         Record(1, 1_700_000_000_000, None, b"2")], compression=COMPRESSION_GZIP)
    p = h.produce("c", 0, batch)
    assert [e.batch_index for e in p.record_errors] == [1]


def test_records_with_a_future_timestamp_are_named(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    now = h.broker.now_ms()
    batch = build_batch([Record(0, now, b"a", b"1"), Record(1, FUTURE, b"b", b"2"),
                         Record(2, now, b"c", b"3")])
    p = h.produce("t", 0, batch)
    assert p.error_code == ErrorCode.INVALID_TIMESTAMP
    assert p.error_message == "One or more records have been rejected due to invalid timestamp"
    [(index, message)] = [(e.batch_index, e.batch_index_error_message) for e in p.record_errors]
    assert index == 1
    assert message.startswith(f"Timestamp {FUTURE} of message with offset 1 is out of range. "
                              "The timestamp should be within [")


def test_v7_has_no_record_errors_and_other_errors_no_message(broker_harness) -> None:
    # v7 predates the fields; Kafka sends error_message only with record errors
    h = broker_harness
    h.create_topic("c", configs={"cleanup.policy": "compact"})
    assert h.produce("c", 0, _mixed_keys(h), version=7).error_code == ErrorCode.INVALID_RECORD
    p = h.produce("c", 0, h.batch(b"x", key=b"k") + h.batch(b"y", key=b"k"))  # two batches
    assert (p.error_code, p.error_message, p.record_errors) == (ErrorCode.INVALID_RECORD, None, [])


def test_the_log_start_offset_comes_with_record_errors_not_with_corruption(broker_harness) -> None:
    # Kafka's appendToLocalLog: a corrupt or too large batch gets UNKNOWN_LOG_APPEND_INFO (-1),
    # other append failures the log start offset (probed on 4.4: 0 for INVALID_RECORD)
    h = broker_harness
    h.create_topic("t", configs={"max.message.bytes": "200"})
    h.produce("t", 0, h.batch(b"a"))
    h.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "offset": 1}]}], "timeout_ms": 5000})
    future = h.produce("t", 0, h.batch(b"b", timestamp=FUTURE))
    assert (future.error_code, future.log_start_offset) == (ErrorCode.INVALID_TIMESTAMP, 1)
    large = h.produce("t", 0, h.batch(b"x" * 500))
    assert (large.error_code, large.log_start_offset) == (ErrorCode.MESSAGE_TOO_LARGE, -1)
