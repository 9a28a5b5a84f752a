"""Version-exact error codes through the router: a fenced transactional producer hears
PRODUCER_FENCED only from versions that define it (KIP-588), INVALID_PRODUCER_EPOCH before."""

from __future__ import annotations

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

FENCED, OLD_EPOCH = ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH


def _fenced_producer(h, tid: str = "tx") -> tuple[int, int]:
    """(producer id, epoch) of a producer that a second instance of ``tid`` fenced."""
    assert h.request(ApiKey.FIND_COORDINATOR, 4, {
        "key_type": 1, "coordinator_keys": [tid]}).coordinators[0].error_code == 0
    first = h.request(ApiKey.INIT_PRODUCER_ID, 2, {"transactional_id": tid,
                                                    "transaction_timeout": 60000})
    second = h.request(ApiKey.INIT_PRODUCER_ID, 2, {"transactional_id": tid,
                                                     "transaction_timeout": 60000})
    assert first.error_code == second.error_code == 0
    assert second.producer_epoch == first.producer_epoch + 1
    return first.producer_id, first.producer_epoch


@pytest.fixture
def h(broker_harness):
    broker_harness.create_topic("t")
    return broker_harness


@pytest.mark.parametrize(("version", "expected"), [(3, OLD_EPOCH), (4, FENCED), (5, FENCED)])
def test_init_producer_id_with_a_fenced_epoch(h, version: int, expected: int) -> None:
    pid, epoch = _fenced_producer(h)
    r = h.request(ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": "tx", "transaction_timeout": 60000, "producer_id": pid,
        "producer_epoch": epoch})
    assert r.error_code == expected


@pytest.mark.parametrize(("version", "expected"), [(0, OLD_EPOCH), (1, OLD_EPOCH), (2, FENCED),
                                                   (3, FENCED)])
def test_add_partitions_to_txn_with_a_fenced_epoch(h, version: int, expected: int) -> None:
    pid, epoch = _fenced_producer(h)
    r = h.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
    codes = [p.partition_error_code for t in r.results_by_topic_v3_and_below
             for p in t.results_by_partition]
    assert codes == [expected]


@pytest.mark.parametrize(("version", "expected"), [(0, OLD_EPOCH), (1, OLD_EPOCH), (2, FENCED)])
def test_add_offsets_to_txn_with_a_fenced_epoch(h, version: int, expected: int) -> None:
    pid, epoch = _fenced_producer(h)
    r = h.request(ApiKey.ADD_OFFSETS_TO_TXN, version, {
        "transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
        "group_id": "g"})
    assert r.error_code == expected


@pytest.mark.parametrize(("version", "expected"), [(0, OLD_EPOCH), (1, OLD_EPOCH), (2, FENCED)])
def test_end_txn_with_a_fenced_epoch(h, version: int, expected: int) -> None:
    pid, epoch = _fenced_producer(h)
    r = h.request(ApiKey.END_TXN, version, {
        "transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
        "committed": True})
    assert r.error_code == expected


@pytest.mark.parametrize(("version", "expected"), [
    (2, ErrorCode.INVALID_REQUEST), (3, ErrorCode.TOPIC_DELETION_DISABLED)])
@pytest.mark.broker_config(**{"delete.topic.enable": "false"})
def test_delete_topics_when_deletion_is_disabled(h, version: int, expected: int) -> None:
    r = h.request(ApiKey.DELETE_TOPICS, version, {"topic_names": ["t"], "timeout_ms": 5000})
    assert [x.error_code for x in r.responses] == [expected]
