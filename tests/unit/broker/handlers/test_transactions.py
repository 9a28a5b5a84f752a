"""Transactions: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers,
DescribeTransactions, ListTransactions, and the transactional side of Produce and Fetch."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


@dataclass
class Producer:
    tid: str
    pid: int
    epoch: int
    sequence: int = 0


def _producer(h, tid: str = "tx") -> Producer:
    assert h.request(ApiKey.FIND_COORDINATOR, 4, {
        "key_type": 1, "coordinator_keys": [tid]}).coordinators[0].error_code == 0
    r = h.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": tid,
                                                "transaction_timeout": 60000})
    assert r.error_code == 0
    return Producer(tid, r.producer_id, r.producer_epoch)


def _add(h, p: Producer, partitions: dict[str, list[int]], *, pid: int | None = None,
         epoch: int | None = None) -> dict[tuple[str, int], int]:
    r = h.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": p.tid,
        "v3_and_below_producer_id": p.pid if pid is None else pid,
        "v3_and_below_producer_epoch": p.epoch if epoch is None else epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in partitions.items()]})
    return {(t.name, x.partition_index): x.partition_error_code
            for t in r.results_by_topic_v3_and_below for x in t.results_by_partition}


def _send(h, p: Producer, topic: str, *values: bytes, version: int = 9):
    r = h.produce(topic, 0, h.batch(*values, producer_id=p.pid, producer_epoch=p.epoch,
                                    base_sequence=p.sequence, transactional=True),
                  transactional_id=p.tid, version=version)
    if r.error_code == 0:
        p.sequence += len(values)
    return r


def _end(h, p: Producer, commit: bool, *, pid: int | None = None) -> int:
    return h.request(ApiKey.END_TXN, 4, {
        "transactional_id": p.tid, "producer_id": p.pid if pid is None else pid,
        "producer_epoch": p.epoch, "committed": commit}).error_code


def _fetch_committed(h, topic: str):
    r = h.request(ApiKey.FETCH, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0,
                                     "isolation_level": 1, "topics": [{"topic": topic, "partitions": [
                                         {"partition": 0, "fetch_offset": 0,
                                          "partition_max_bytes": 1 << 20}]}]})
    return r.responses[0].partitions[0]


def _wait_stable(h, topic: str, lso: int) -> None:
    """Markers are written when EndTxn is handled; poll briefly in case they are queued."""
    for _ in range(100):
        if h.broker.partitions.get(topic, 0).last_stable_offset == lso:
            return
        h.run(0.01)
    raise AssertionError(f"{topic}-0 never became stable at {lso}")


@pytest.fixture
def h(broker_harness):
    broker_harness.create_topic("t")
    return broker_harness


# -- AddPartitionsToTxn, Produce, EndTxn -------------------------------------------------------


def test_a_committed_transaction_becomes_readable(h) -> None:
    p = _producer(h)
    assert _add(h, p, {"t": [0]}) == {("t", 0): 0}
    assert _send(h, p, "t", b"a", b"b").error_code == 0
    assert _fetch_committed(h, "t").last_stable_offset == 0
    assert _end(h, p, commit=True) == 0
    _wait_stable(h, "t", 3)  # two records and the COMMIT marker
    r = _fetch_committed(h, "t")
    assert (r.high_watermark, r.aborted_transactions) == (3, [])


def test_an_aborted_transaction_is_listed_for_read_committed_consumers(h) -> None:
    p = _producer(h)
    _add(h, p, {"t": [0]})
    _send(h, p, "t", b"a")
    assert _end(h, p, commit=False) == 0
    _wait_stable(h, "t", 2)
    r = _fetch_committed(h, "t")
    assert [(a.producer_id, a.first_offset) for a in r.aborted_transactions] == [(p.pid, 0)]


def test_adding_an_unknown_partition_attempts_nothing(h) -> None:
    # Kafka: the unknown partition gets UNKNOWN_TOPIC_OR_PARTITION, the others
    # OPERATION_NOT_ATTEMPTED
    p = _producer(h)
    assert _add(h, p, {"t": [0, 7]}) == {("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                                         ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_adding_with_another_producer_id_is_invalid_producer_id_mapping(h) -> None:
    p = _producer(h)
    assert _add(h, p, {"t": [0]}, pid=p.pid + 1000) == {
        ("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}


def test_adding_with_an_old_epoch_is_producer_fenced(h) -> None:
    p = _producer(h)
    _producer(h)  # a new instance bumps the epoch
    assert _add(h, p, {"t": [0]}) == {("t", 0): ErrorCode.PRODUCER_FENCED}


def test_adding_for_an_unknown_transactional_id_is_invalid_producer_id_mapping(h) -> None:
    _producer(h)
    assert _add(h, Producer("other", 5, 0), {"t": [0]}) == {
        ("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}


def test_v4_verify_only_checks_without_adding(h) -> None:
    p = _producer(h)
    _add(h, p, {"t": [0]})
    h.create_topic("u")
    r = h.request(ApiKey.ADD_PARTITIONS_TO_TXN, 5, {"transactions": [{
        "transactional_id": p.tid, "producer_id": p.pid, "producer_epoch": p.epoch,
        "verify_only": True, "topics": [{"name": "t", "partitions": [0]},
                                        {"name": "u", "partitions": [0]}]}]})
    (txn,) = r.results_by_transaction
    codes = {(t.name, x.partition_index): x.partition_error_code
             for t in txn.topic_results for x in t.results_by_partition}
    assert codes == {("t", 0): 0, ("u", 0): ErrorCode.TRANSACTION_ABORTABLE}


@pytest.mark.parametrize(("version", "code"), [
    (9, ErrorCode.INVALID_TXN_STATE),  # TRANSACTION_ABORTABLE is new in Produce v11
    (11, ErrorCode.TRANSACTION_ABORTABLE),
])
def test_producing_to_a_partition_not_in_the_transaction_is_refused(h, version: int,
                                                                    code: int) -> None:
    # KIP-890: the first write of a transaction to a partition is verified with the coordinator
    p = _producer(h)
    h.create_topic("u")
    _add(h, p, {"u": [0]})
    assert _send(h, p, "t", b"a", version=version).error_code == code
    assert h.broker.partitions.get("t", 0).log_end_offset == 0


def test_ending_without_a_transaction_is_invalid_txn_state(h) -> None:
    p = _producer(h)
    assert _end(h, p, commit=True) == ErrorCode.INVALID_TXN_STATE


def test_ending_with_another_producer_id_is_invalid_producer_id_mapping(h) -> None:
    p = _producer(h)
    _add(h, p, {"t": [0]})
    assert _end(h, p, commit=True, pid=p.pid + 1000) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_a_retried_commit_succeeds_and_an_abort_after_it_is_invalid_txn_state(h) -> None:
    p = _producer(h)
    _add(h, p, {"t": [0]})
    _send(h, p, "t", b"a")
    assert _end(h, p, commit=True) == 0
    _wait_stable(h, "t", 2)
    assert _end(h, p, commit=True) == 0  # a retry of the same outcome
    assert _end(h, p, commit=False) == ErrorCode.INVALID_TXN_STATE


# -- AddOffsetsToTxn, TxnOffsetCommit ----------------------------------------------------------


def _txn_commit(h, p: Producer, group: str, offset: int) -> int:
    r = h.request(ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": p.tid, "group_id": group, "producer_id": p.pid,
        "producer_epoch": p.epoch, "generation_id": -1, "member_id": "",
        "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                 "committed_offset": offset}]}]})
    return r.topics[0].partitions[0].error_code


def _add_offsets(h, p: Producer, group: str) -> int:
    return h.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": p.tid, "producer_id": p.pid, "producer_epoch": p.epoch,
        "group_id": group}).error_code


def test_transactional_offsets_show_once_committed(h) -> None:
    p = _producer(h)
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    assert _add_offsets(h, p, "g") == 0
    assert _txn_commit(h, p, "g", 42) == 0
    fetch = {"groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}],
             "require_stable": True}
    pending = h.request(ApiKey.OFFSET_FETCH, 9, fetch).groups[0].topics[0].partitions[0]
    assert pending.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert _end(h, p, commit=True) == 0
    for _ in range(100):
        done = h.request(ApiKey.OFFSET_FETCH, 9, fetch).groups[0].topics[0].partitions[0]
        if done.error_code == 0:
            break
        h.run(0.01)
    assert (done.error_code, done.committed_offset) == (0, 42)


def test_add_offsets_with_an_empty_group_is_invalid_group_id(h) -> None:
    p = _producer(h)
    assert _add_offsets(h, p, "") == ErrorCode.INVALID_GROUP_ID


def test_txn_offset_commit_without_add_offsets_is_invalid_txn_state(h) -> None:
    # KIP-890: the group's __consumer_offsets partition must be in the transaction
    p = _producer(h)
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    assert _txn_commit(h, p, "g", 1) == ErrorCode.INVALID_TXN_STATE


def test_txn_offset_commit_for_an_unknown_partition_is_unknown_topic_or_partition(h) -> None:
    p = _producer(h)
    r = h.request(ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": p.tid, "group_id": "g", "producer_id": p.pid,
        "producer_epoch": p.epoch, "topics": [{"name": "nope", "partitions": [
            {"partition_index": 0, "committed_offset": 1}]}]})
    assert r.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- WriteTxnMarkers ---------------------------------------------------------------------------


def _markers(h, pid: int, topics: dict[str, list[int]], commit: bool = True):
    r = h.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": 0, "transaction_result": commit,
        "coordinator_epoch": 0,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]})
    return {(t.name, x.partition_index): x.error_code
            for m in r.markers for t in m.topics for x in t.partitions}


def test_a_marker_closes_a_producers_transaction(h) -> None:
    p = _producer(h)
    _add(h, p, {"t": [0]})
    _send(h, p, "t", b"a")
    assert _markers(h, p.pid, {"t": [0]}) == {("t", 0): 0}
    assert h.broker.partitions.get("t", 0).last_stable_offset == 2


def test_a_marker_for_an_unknown_partition_is_unknown_topic_or_partition(h) -> None:
    assert _markers(h, 1, {"t": [3], "nope": [0]}) == {
        ("t", 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


# -- DescribeTransactions, ListTransactions ----------------------------------------------------


def test_describe_a_transaction(h) -> None:
    p = _producer(h)
    _add(h, p, {"t": [0]})
    r = h.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx", "nope"]})
    states = {s.transactional_id: s for s in r.transaction_states}
    tx = states["tx"]
    assert (tx.error_code, tx.transaction_state, tx.producer_id, tx.transaction_timeout) == (
        0, "Ongoing", p.pid, 60000)
    assert [(t.topic, t.partitions) for t in tx.topics] == [("t", [0])]
    # Kafka: an id the coordinator does not know
    assert states["nope"].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_list_transactions_with_filters(h) -> None:
    p = _producer(h)
    _add(h, p, {"t": [0]})
    _producer(h, "idle")
    r = h.request(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": []})
    assert r.error_code == 0
    assert sorted((s.transactional_id, s.transaction_state) for s in r.transaction_states) == [
        ("idle", "Empty"), ("tx", "Ongoing")]
    r = h.request(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing", "Bogus"],
                                                "producer_id_filters": []})
    assert [s.transactional_id for s in r.transaction_states] == ["tx"]
    assert r.unknown_state_filters == ["Bogus"]
