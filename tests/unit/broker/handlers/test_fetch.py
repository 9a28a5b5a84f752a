"""Fetch: reading, offsets out of range, unknown topics and ids, epochs, sessions, long polls."""

from __future__ import annotations

import time
import uuid

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.record import decode_records, iter_batches


def _fetch(h, topic: str | None = None, *, offset: int = 0, partition: int = 0,
           version: int = 12, topic_id: uuid.UUID | None = None, max_wait: int = 0,
           min_bytes: int = 0, partition_max_bytes: int = 1 << 20, **extra):
    """The partition's response and the whole response."""
    part = {"partition": partition, "fetch_offset": offset,
            "partition_max_bytes": partition_max_bytes,
            **{k: extra.pop(k) for k in ("current_leader_epoch", "last_fetched_epoch")
               if k in extra}}
    r = h.request(ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20,
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [part]}], **extra})
    return (r.responses[0].partitions[0] if r.responses else None), r


def _values(records) -> list[bytes]:
    data = bytes(records)
    return [rec.value for pos, hdr in iter_batches(data)
            for rec in decode_records(data[pos:pos + hdr.length + 12])]


def test_fetch_returns_what_was_produced(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a", b"b"))
    h.produce("t", 0, h.batch(b"c"))
    p, r = _fetch(h, "t")
    assert (r.error_code, p.error_code, p.high_watermark, p.last_stable_offset,
            p.log_start_offset) == (0, 0, 3, 3, 0)
    assert _values(p.records) == [b"a", b"b", b"c"]


def test_fetch_from_the_middle_of_the_log(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a"))
    h.produce("t", 0, h.batch(b"b"))
    p, _ = _fetch(h, "t", offset=1)
    assert _values(p.records) == [b"b"]


def test_fetch_by_topic_id(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a"))
    p, r = _fetch(h, topic_id=h.topic_id("t"), version=13)
    assert r.responses[0].topic_id == h.topic_id("t")
    assert (p.error_code, _values(p.records)) == (0, [b"a"])


def test_fetch_at_the_end_is_empty_not_an_error(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a"))
    p, _ = _fetch(h, "t", offset=1)
    assert (p.error_code, bytes(p.records)) == (0, b"")


def test_the_first_batch_is_returned_even_when_larger_than_the_limit(broker_harness) -> None:
    # Kafka (KIP-74): progress is guaranteed, the first batch comes whole
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"x" * 1000))
    p, _ = _fetch(h, "t", partition_max_bytes=10)
    assert _values(p.records) == [b"x" * 1000]


def test_an_offset_beyond_the_end_is_offset_out_of_range(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a"))
    p, _ = _fetch(h, "t", offset=5)
    assert p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert bytes(p.records) == b""


def test_an_offset_before_the_start_is_offset_out_of_range(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a", b"b"))
    h.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "offset": 1}]}], "timeout_ms": 5000})
    p, _ = _fetch(h, "t", offset=0)
    assert p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_an_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    p, _ = _fetch(broker_harness, "nope")
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_unknown_partition_is_unknown_topic_or_partition(broker_harness) -> None:
    broker_harness.create_topic("t")
    p, _ = _fetch(broker_harness, "t", partition=3)
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_unknown_topic_id_is_unknown_topic_id(broker_harness) -> None:
    p, _ = _fetch(broker_harness, topic_id=uuid.uuid4(), version=13)
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    # as a Kafka 4.4 broker answers (probed): an empty, not a null, aborted transactions list
    assert (p.high_watermark, p.aborted_transactions, bytes(p.records)) == (-1, [], b"")


def test_a_newer_leader_epoch_is_unknown_leader_epoch(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    p, _ = _fetch(h, "t", current_leader_epoch=5)
    assert p.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    p, _ = _fetch(h, "t", current_leader_epoch=0)
    assert p.error_code == ErrorCode.NONE


def test_a_last_fetched_epoch_the_log_does_not_have_reports_the_divergence(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a", b"b"))
    p, _ = _fetch(h, "t", offset=1, last_fetched_epoch=0)
    assert _values(p.records) == [b"a", b"b"]  # whole batches, as Kafka sends them
    p, _ = _fetch(h, "t", offset=1, last_fetched_epoch=3)
    # Kafka: an epoch newer than any in the log has no end offset: diverging at (-1, -1), and
    # no records
    assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (-1, -1)
    assert bytes(p.records) == b""


def test_an_incremental_session_is_fetch_session_id_not_found(broker_harness) -> None:
    # Strom never grants a session (answers session id 0), so any session id is unknown
    h = broker_harness
    h.create_topic("t")
    _, r = _fetch(h, "t", session_id=42, session_epoch=1)
    assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert r.responses == []


def test_a_long_poll_returns_empty_at_its_deadline(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    started = time.monotonic()
    p, r = _fetch(h, "t", max_wait=150, min_bytes=1)
    assert time.monotonic() - started >= 0.14
    assert (r.error_code, p.error_code, bytes(p.records)) == (0, 0, b"")


def test_a_long_poll_with_an_error_answers_at_once(broker_harness) -> None:
    started = time.monotonic()
    p, _ = _fetch(broker_harness, "nope", max_wait=5000, min_bytes=1)
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert time.monotonic() - started < 2


def test_read_committed_stops_at_an_open_transaction(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"plain"))
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx"]})
    r = h.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "tx",
                                                "transaction_timeout": 60000})
    pid, epoch = r.producer_id, r.producer_epoch
    added = h.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    produced = h.produce("t", 0, h.batch(b"txn", producer_id=pid, producer_epoch=epoch,
                                         base_sequence=0, transactional=True),
                         transactional_id="tx")
    assert produced.error_code == 0
    p, _ = _fetch(h, "t", isolation_level=1)
    assert (p.high_watermark, p.last_stable_offset) == (2, 1)
    assert _values(p.records) == [b"plain"]
    assert p.aborted_transactions == []
    p, _ = _fetch(h, "t", isolation_level=0)
    assert _values(p.records) == [b"plain", b"txn"]


def test_fetch_v18_by_topic_id_with_the_replica_high_watermark_tag(broker_harness) -> None:
    # v18 (KIP-1166) adds the fetching replica's high watermark as a partition tag; a consumer
    # leaves it at its default and gets the same answer as from v17
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a", b"b"))
    for version in (17, 18):
        p, r = _fetch(h, topic_id=h.topic_id("t"), version=version)
        assert r.responses[0].topic_id == h.topic_id("t")
        assert (p.error_code, p.high_watermark, _values(p.records)) == (0, 2, [b"a", b"b"])
        assert r.node_endpoints == []


def test_a_failed_log_dir_is_not_leader_for_fetch_v5_and_older(broker_harness) -> None:
    # Kafka's maybeDownConvertStorageError: v0-5 clients do not know KAFKA_STORAGE_ERROR and
    # would fail; NOT_LEADER_OR_FOLLOWER makes them refresh their metadata and retry
    h = broker_harness
    h.create_topic("t")
    h.broker.partitions.get("t", 0).take_offline("log dir /x is offline: test")
    assert _fetch(h, "t", version=5)[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _fetch(h, "t", version=6)[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
