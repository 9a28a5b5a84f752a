"""DescribeCluster, InitProducerId and ElectLeaders."""

from __future__ import annotations

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2


def _init(h, transactional_id: str | None = None, *, producer_id: int = -1,
          producer_epoch: int = -1, timeout: int = 60000, version: int = 5):
    return h.request(ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": transactional_id, "transaction_timeout": timeout,
        "producer_id": producer_id, "producer_epoch": producer_epoch})


def _find_txn_coordinator(h, tid: str) -> None:
    r = h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]})
    assert r.coordinators[0].error_code == 0


# -- DescribeCluster ---------------------------------------------------------------------------


def test_describe_cluster(broker_harness) -> None:
    h = broker_harness
    r = h.request(ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": BROKER_ENDPOINT})
    assert (r.error_code, r.cluster_id, r.controller_id, r.endpoint_type) == (
        0, h.broker.cluster_id, 1, BROKER_ENDPOINT)
    assert [(b.broker_id, b.host) for b in r.brokers] == [(1, "127.0.0.1")]


def test_describe_cluster_v0(broker_harness) -> None:
    r = broker_harness.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
    assert (r.error_code, r.controller_id) == (0, 1)


def test_describe_cluster_for_controllers_is_mismatched_endpoint_type(broker_harness) -> None:
    # Kafka (AuthHelper.computeDescribeClusterResponse): a known endpoint type that is not the
    # listener's own is MISMATCHED_ENDPOINT_TYPE (v1+); only unknown types are UNSUPPORTED
    r = broker_harness.request(ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": CONTROLLER_ENDPOINT})
    assert r.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE


def test_describe_cluster_for_an_unknown_endpoint_type_is_unsupported(broker_harness) -> None:
    r = broker_harness.request(ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": 9})
    assert r.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


# -- InitProducerId ----------------------------------------------------------------------------


def test_idempotent_producers_get_fresh_ids_with_epoch_zero(broker_harness) -> None:
    first, second = _init(broker_harness), _init(broker_harness)
    assert (first.error_code, first.producer_epoch) == (0, 0)
    assert first.producer_id >= 0
    assert second.producer_id != first.producer_id


def test_an_id_without_an_epoch_is_invalid_request(broker_harness) -> None:
    r = _init(broker_harness, producer_id=5, producer_epoch=-1)
    assert (r.error_code, r.producer_id) == (ErrorCode.INVALID_REQUEST, -1)


def test_an_empty_transactional_id_is_invalid_request(broker_harness) -> None:
    # Kafka (TransactionCoordinator.handleInitProducerId): an empty id is INVALID_REQUEST
    assert _init(broker_harness, "").error_code == ErrorCode.INVALID_REQUEST


def test_a_transactional_id_keeps_its_producer_id_and_bumps_the_epoch(broker_harness) -> None:
    h = broker_harness
    _find_txn_coordinator(h, "tx")
    first = _init(h, "tx")
    second = _init(h, "tx")
    assert (first.error_code, first.producer_epoch) == (0, 0)
    assert (second.error_code, second.producer_id, second.producer_epoch) == (
        0, first.producer_id, 1)


def test_a_transactional_id_before_its_coordinator_exists_is_not_coordinator(
        broker_harness) -> None:
    # the client looks the coordinator up first (FindCoordinator creates __transaction_state)
    assert _init(broker_harness, "tx").error_code == ErrorCode.NOT_COORDINATOR


def test_a_transaction_timeout_over_the_maximum_is_invalid_transaction_timeout(
        broker_harness) -> None:
    # transaction.max.timeout.ms defaults to 15 minutes
    h = broker_harness
    _find_txn_coordinator(h, "tx")
    assert _init(h, "tx", timeout=15 * 60_000 + 1).error_code == \
        ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_a_stale_epoch_of_a_transactional_id_is_producer_fenced(broker_harness) -> None:
    # KIP-360: re-initialising with an epoch that is not the current one is fenced
    h = broker_harness
    _find_txn_coordinator(h, "tx")
    first = _init(h, "tx")
    _init(h, "tx")  # epoch 1
    r = _init(h, "tx", producer_id=first.producer_id, producer_epoch=0)
    assert r.error_code == ErrorCode.PRODUCER_FENCED


# -- ElectLeaders ------------------------------------------------------------------------------


def _elect(h, partitions: dict[str, list[int]] | None, election_type: int = 0):
    return h.request(ApiKey.ELECT_LEADERS, 2, {
        "election_type": election_type, "timeout": 5000,
        "topic_partitions": None if partitions is None else [
            {"topic": t, "partitions": ps} for t, ps in partitions.items()]})


def test_electing_the_leader_one_broker_already_has_is_election_not_needed(
        broker_harness) -> None:
    broker_harness.create_topic("t")
    r = _elect(broker_harness, {"t": [0]})
    assert r.error_code == 0
    (topic,) = r.replica_election_results
    assert [(p.partition_id, p.error_code) for p in topic.partition_result] == [
        (0, ErrorCode.ELECTION_NOT_NEEDED)]


def test_electing_for_an_unknown_partition_is_unknown_topic_or_partition(broker_harness) -> None:
    r = _elect(broker_harness, {"nope": [0]})
    assert r.replica_election_results[0].partition_result[0].error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_electing_for_all_partitions_lists_only_those_elected(broker_harness) -> None:
    broker_harness.create_topic("t")
    r = _elect(broker_harness, None)
    assert (r.error_code, r.replica_election_results) == (0, [])


def test_an_unknown_election_type_is_invalid_request(broker_harness) -> None:
    broker_harness.create_topic("t")
    assert _elect(broker_harness, {"t": [0]}, election_type=5).error_code == \
        ErrorCode.INVALID_REQUEST


def test_electing_more_than_10000_partitions_fails_the_request_as_a_whole(broker_harness) -> None:
    # Kafka's controller writes at most 10,000 records per operation: POLICY_VIOLATION
    r = _elect(broker_harness, {"t": list(range(10_001))})
    assert r.error_code == ErrorCode.POLICY_VIOLATION
    (topic,) = r.replica_election_results
    assert {p.error_code for p in topic.partition_result} == {ErrorCode.POLICY_VIOLATION}
