"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords."""

from __future__ import annotations

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
T0 = 1_700_000_000_000


def _list(h, topic: str, timestamp: int, partition: int = 0, version: int = 8, **part):
    r = h.request(ApiKey.LIST_OFFSETS, version, {
        "replica_id": -1, "isolation_level": part.pop("isolation_level", 0),
        "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "timestamp": timestamp, **part}]}]})
    return r.topics[0].partitions[0]


def _epoch_end(h, topic: str, epoch: int, partition: int = 0, current: int = -1):
    r = h.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": current,
                                         "leader_epoch": epoch}]}]})
    return r.topics[0].partitions[0]


def _delete(h, topic: str, offset: int, partition: int = 0):
    r = h.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "offset": offset}]}], "timeout_ms": 5000})
    return r.topics[0].partitions[0]


@pytest.fixture
def three(broker_harness):
    """Topic t with three records, timestamps T0, T0+1, T0+2."""
    broker_harness.create_topic("t")
    broker_harness.produce("t", 0, broker_harness.batch(b"a", b"b", b"c", timestamp=T0))
    return broker_harness


# -- ListOffsets -------------------------------------------------------------------------------


def test_earliest_and_latest(three) -> None:
    e = _list(three, "t", EARLIEST)
    assert (e.error_code, e.offset, e.leader_epoch) == (0, 0, 0)
    assert _list(three, "t", LATEST).offset == 3


def test_a_timestamp_finds_the_first_record_at_or_after_it(three) -> None:
    p = _list(three, "t", T0 + 1)
    assert (p.error_code, p.offset, p.timestamp) == (0, 1, T0 + 1)


def test_a_timestamp_after_every_record_finds_nothing(three) -> None:
    p = _list(three, "t", T0 + 100)
    assert (p.error_code, p.offset, p.timestamp) == (0, -1, -1)


def test_max_timestamp(three) -> None:
    p = _list(three, "t", MAX_TIMESTAMP)
    assert (p.error_code, p.offset, p.timestamp) == (0, 2, T0 + 2)


@pytest.mark.parametrize("version", [1, 4, 7, 10, 11])
def test_every_version_round_trips(three, version: int) -> None:
    assert _list(three, "t", LATEST, version=version).offset == 3


# What Kafka 4.4 answers for each special timestamp and version (probed against a real broker
# without tiered storage): a timestamp newer than the version is UNSUPPORTED_VERSION, the tiered
# ones (-5 latest tiered, -6 earliest pending upload) find no offset.
_EARLIEST_LOCAL, _LATEST_TIERED, _EARLIEST_PENDING_UPLOAD, _UNKNOWN = -4, -5, -6, -7
_UNSUPPORTED = (ErrorCode.UNSUPPORTED_VERSION, -1, -1)


@pytest.mark.parametrize(("version", "timestamp", "expected"), [
    (6, MAX_TIMESTAMP, _UNSUPPORTED), (7, MAX_TIMESTAMP, (0, 2, T0 + 2)),
    (7, _EARLIEST_LOCAL, _UNSUPPORTED), (8, _EARLIEST_LOCAL, (0, 0, -1)),
    (8, _LATEST_TIERED, _UNSUPPORTED), (9, _LATEST_TIERED, (0, -1, -1)),
    (10, _EARLIEST_PENDING_UPLOAD, _UNSUPPORTED), (11, _EARLIEST_PENDING_UPLOAD, (0, -1, -1)),
    (1, _UNKNOWN, _UNSUPPORTED), (11, _UNKNOWN, _UNSUPPORTED),
])
def test_special_timestamps_need_their_version(three, version: int, timestamp: int,
                                               expected: tuple[int, int, int]) -> None:
    p = _list(three, "t", timestamp, version=version)
    assert (p.error_code, p.offset, p.timestamp) == expected


def test_an_unsupported_timestamp_is_refused_before_the_partition_is_looked_up(three) -> None:
    # Kafka's ReplicaManager.fetchOffset checks the timestamp first
    p = _list(three, "t", _EARLIEST_PENDING_UPLOAD, partition=9, version=10)
    assert p.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_a_partition_whose_log_dir_failed_is_kafka_storage_error(three) -> None:
    # Kafka: partitions of an offline log dir answer KAFKA_STORAGE_ERROR to every request
    three.broker.partitions.get("t", 0).take_offline("log dir /x is offline: test")
    assert _list(three, "t", LATEST).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert _epoch_end(three, "t", 0).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert _delete(three, "t", 1).error_code == ErrorCode.KAFKA_STORAGE_ERROR


def test_an_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    assert _list(broker_harness, "nope", LATEST).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_unknown_partition_is_unknown_topic_or_partition(three) -> None:
    p = _list(three, "t", LATEST, partition=9)
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_partition_asked_twice_is_invalid_request(three) -> None:
    # Kafka (KafkaApis.handleListOffsetRequest): duplicates get INVALID_REQUEST
    r = three.request(ApiKey.LIST_OFFSETS, 8, {"replica_id": -1, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": LATEST},
                                     {"partition_index": 0, "timestamp": EARLIEST}]}]})
    assert [p.error_code for p in r.topics[0].partitions] == [ErrorCode.INVALID_REQUEST] * 2


def test_a_newer_leader_epoch_is_unknown_leader_epoch(three) -> None:
    p = _list(three, "t", LATEST, current_leader_epoch=4)
    assert p.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_read_committed_latest_is_the_last_stable_offset(broker_harness) -> None:
    h = broker_harness
    h.create_topic("t")
    h.produce("t", 0, h.batch(b"a"))
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx"]})
    init = h.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "tx",
                                                   "transaction_timeout": 60000})
    pid, epoch = init.producer_id, init.producer_epoch
    h.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
    assert h.produce("t", 0, h.batch(b"x", producer_id=pid, producer_epoch=epoch,
                                     base_sequence=0, transactional=True),
                     transactional_id="tx").error_code == 0
    assert _list(h, "t", LATEST, isolation_level=1).offset == 1
    assert _list(h, "t", LATEST, isolation_level=0).offset == 2


# -- OffsetForLeaderEpoch ----------------------------------------------------------------------


def test_the_current_epoch_ends_at_the_log_end(three) -> None:
    p = _epoch_end(three, "t", 0)
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 3)


def test_an_epoch_newer_than_the_log_is_undefined(three) -> None:
    # Kafka (LeaderEpochFileCache.endOffsetFor): no higher entry -> (-1, -1)
    p = _epoch_end(three, "t", 7)
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, -1, -1)


def test_epoch_of_an_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    assert _epoch_end(broker_harness, "nope", 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_epoch_with_a_newer_current_epoch_is_unknown_leader_epoch(three) -> None:
    assert _epoch_end(three, "t", 0, current=3).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


# -- DeleteRecords -----------------------------------------------------------------------------


def test_delete_moves_the_log_start(three) -> None:
    p = _delete(three, "t", 2)
    assert (p.error_code, p.low_watermark) == (0, 2)
    assert _list(three, "t", EARLIEST).offset == 2


def test_delete_to_minus_one_means_the_high_watermark(three) -> None:
    p = _delete(three, "t", -1)
    assert (p.error_code, p.low_watermark) == (0, 3)


def test_delete_beyond_the_high_watermark_is_offset_out_of_range(three) -> None:
    p = _delete(three, "t", 4)
    assert (p.error_code, p.low_watermark) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert _list(three, "t", EARLIEST).offset == 0


def test_delete_of_an_unknown_topic_is_unknown_topic_or_partition(broker_harness) -> None:
    assert _delete(broker_harness, "nope", 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_of_an_internal_topic_is_invalid_topic(broker_harness) -> None:
    # Kafka (ReplicaManager.deleteRecordsOnLocalLog): "Cannot delete records of internal topic"
    # -> INVALID_TOPIC_EXCEPTION; committed offsets must not be deletable this way
    h = broker_harness
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    h.request(ApiKey.OFFSET_COMMIT, 9, {"group_id": "g", "generation_id_or_member_epoch": -1,
                                        "member_id": "", "topics": []})
    p = _delete(h, "__consumer_offsets", -1)
    assert p.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
