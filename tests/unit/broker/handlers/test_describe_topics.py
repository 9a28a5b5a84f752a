"""DescribeTopicPartitions: pages of partitions in name order, as Kafka 4.4 answers them.

The expected answers were taken from a Kafka 4.4 broker sent the same requests (topics
a-topic/3, b-topic/2, c-topic/1 partitions).
"""

from __future__ import annotations

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

API = ApiKey.DESCRIBE_TOPIC_PARTITIONS
ALL_TOPIC_OPERATIONS = 3576  # READ..ALTER_CONFIGS: what Kafka answers without an authorizer
UNKNOWN_OPERATIONS = -2147483648


@pytest.fixture
def h(broker_harness):
    for name, count in (("b-topic", 2), ("a-topic", 3), ("c-topic", 1)):
        broker_harness.create_topic(name, count)
    return broker_harness


def _dtp(h, names, limit=2000, cursor=None):
    return h.request(API, 0, {"topics": [{"name": n} for n in names],
                              "response_partition_limit": limit, "cursor": cursor})


def _pages(r):
    """[(topic, error, [partition indexes])], next cursor."""
    cursor = r.next_cursor
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in r.topics],
            None if cursor is None else (cursor.topic_name, cursor.partition_index))


def test_every_topic_in_name_order_with_partition_details(h) -> None:
    r = _dtp(h, [])
    assert _pages(r) == ([("a-topic", 0, [0, 1, 2]), ("b-topic", 0, [0, 1]),
                          ("c-topic", 0, [0])], None)
    a = r.topics[0]
    assert (a.topic_id, a.is_internal, a.topic_authorized_operations) == (
        h.topic_id("a-topic"), False, ALL_TOPIC_OPERATIONS)
    p = a.partitions[1]
    assert (p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes,
            p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas) == (
        0, 1, 0, [1], [1], [], [], [])


def test_the_limit_cuts_inside_a_topic_and_the_cursor_names_the_next_partition(h) -> None:
    r = _dtp(h, ["c-topic", "a-topic", "missing", "bad/name", "a-topic"], limit=2)
    assert _pages(r) == ([("a-topic", 0, [0, 1])], ("a-topic", 2))
    r = _dtp(h, ["c-topic", "a-topic", "missing", "b-topic"], limit=4)
    assert _pages(r) == ([("a-topic", 0, [0, 1, 2]), ("b-topic", 0, [0])], ("b-topic", 1))


def test_a_limit_ending_with_a_topic_points_at_the_next_topic(h) -> None:
    r = _dtp(h, ["c-topic", "a-topic", "b-topic"], limit=3)
    assert _pages(r) == ([("a-topic", 0, [0, 1, 2])], ("b-topic", 0))


def test_the_cursor_starts_its_topic_at_its_partition_and_later_ones_at_zero(h) -> None:
    r = _dtp(h, ["a-topic", "b-topic", "c-topic"], limit=3,
             cursor={"topic_name": "a-topic", "partition_index": 1})
    assert _pages(r) == ([("a-topic", 0, [1, 2]), ("b-topic", 0, [0])], ("b-topic", 1))
    r = _dtp(h, [], limit=3, cursor={"topic_name": "b-topic", "partition_index": 1})
    assert _pages(r) == ([("b-topic", 0, [1]), ("c-topic", 0, [0])], None)


def test_paging_through_everything_sees_each_partition_once(h) -> None:
    seen, cursor = [], None
    for _ in range(10):
        r = _dtp(h, [], limit=2, cursor=cursor)
        seen += [(t.name, p.partition_index) for t in r.topics for p in t.partitions]
        if r.next_cursor is None:
            break
        cursor = {"topic_name": r.next_cursor.topic_name,
                  "partition_index": r.next_cursor.partition_index}
    assert seen == [("a-topic", 0), ("a-topic", 1), ("a-topic", 2), ("b-topic", 0),
                    ("b-topic", 1), ("c-topic", 0)]


def test_missing_and_invalid_topics_are_answered_in_order_with_their_errors(h) -> None:
    r = _dtp(h, ["a-topic", "bad/name", "x" * 300, "..", "missing"])
    assert _pages(r) == ([("..", ErrorCode.INVALID_TOPIC_EXCEPTION, []),
                          ("a-topic", 0, [0, 1, 2]),
                          ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, []),
                          ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
                          ("x" * 300, ErrorCode.INVALID_TOPIC_EXCEPTION, [])], None)
    missing = r.topics[3]
    assert (missing.topic_id.int, missing.topic_authorized_operations) == (
        0, ALL_TOPIC_OPERATIONS)


def test_a_cursor_on_a_missing_topic_in_the_list_is_answered_as_missing(h) -> None:
    r = _dtp(h, ["a-topic", "bb", "c-topic"], limit=3,
             cursor={"topic_name": "bb", "partition_index": 4})
    assert _pages(r) == ([("bb", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
                          ("c-topic", 0, [0])], None)


def test_a_cursor_beyond_the_partitions_gives_the_topic_without_partitions(h) -> None:
    r = _dtp(h, ["a-topic", "c-topic"], limit=3,
             cursor={"topic_name": "a-topic", "partition_index": 7})
    assert _pages(r) == ([("a-topic", 0, []), ("c-topic", 0, [0])], None)


@pytest.mark.parametrize("cursor", [
    {"topic_name": "b-topic", "partition_index": 0},  # not among the named topics
    {"topic_name": "", "partition_index": 0},
    {"topic_name": "a-topic", "partition_index": -1},
])
def test_a_bad_cursor_fails_every_named_topic_with_invalid_request(h, cursor) -> None:
    r = _dtp(h, ["a-topic", "c-topic"], limit=3, cursor=cursor)
    assert _pages(r) == ([("a-topic", ErrorCode.INVALID_REQUEST, []),
                          ("c-topic", ErrorCode.INVALID_REQUEST, [])], None)
    assert {(t.topic_id.int, t.topic_authorized_operations) for t in r.topics} == {
        (0, UNKNOWN_OPERATIONS)}


def test_an_empty_topic_name_fails_the_request_as_in_kafka(h) -> None:
    r = _dtp(h, ["a-topic", ""])
    assert _pages(r) == ([("a-topic", ErrorCode.UNKNOWN_SERVER_ERROR, []),
                          ("", ErrorCode.UNKNOWN_SERVER_ERROR, [])], None)


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_gives_one_partition(h, limit) -> None:
    assert _pages(_dtp(h, ["a-topic"], limit=limit)) == ([("a-topic", 0, [0])], ("a-topic", 1))


@pytest.mark.broker_config(**{"max.request.partition.size.limit": "5"})
def test_the_broker_caps_the_limit_at_max_request_partition_size_limit(h) -> None:
    r = _dtp(h, [], limit=100000)
    assert _pages(r) == ([("a-topic", 0, [0, 1, 2]), ("b-topic", 0, [0, 1])], ("c-topic", 0))


def test_internal_topics_are_marked_internal(h) -> None:
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    r = _dtp(h, ["__consumer_offsets"], limit=1)
    assert (r.topics[0].error_code, r.topics[0].is_internal) == (0, True)


def test_a_partition_of_a_broker_that_is_not_live_has_no_leader(h) -> None:
    state = h.broker.image.topics["c-topic"].partitions[0]
    state.replicas, state.isr, state.leader = [1, 7], [1, 7], 7  # broker 7 is not registered
    p = _dtp(h, ["c-topic"]).topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.replica_nodes, p.offline_replicas) == (0, -1, [1, 7], [7])


def test_every_topic_follows_creations_and_deletions(h) -> None:
    assert [t.name for t in _dtp(h, []).topics] == ["a-topic", "b-topic", "c-topic"]
    h.create_topic("aa-topic", 1)
    r = h.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "b-topic", "topic_id": None}],
                                            "timeout_ms": 5000})
    assert r.responses[0].error_code == 0
    assert [t.name for t in _dtp(h, []).topics] == ["a-topic", "aa-topic", "c-topic"]
