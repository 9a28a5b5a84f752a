"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848)."""

from __future__ import annotations

import uuid

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


def _heartbeat(h, *, group: str = "g", member: str | None = None, epoch: int = 0,
               topics: list[str] | None = None, regex: str | None = None,
               assignor: str | None = None, owned: list | None = None,
               rebalance_timeout: int = 10000, version: int = 1):
    return h.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, {
        "group_id": group, "member_id": member if member is not None else str(uuid.uuid4()),
        "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout": rebalance_timeout, "subscribed_topic_names": topics,
        "subscribed_topic_regex": regex, "server_assignor": assignor,
        "topic_partitions": owned if owned is not None else ([] if epoch == 0 else None)})


@pytest.fixture
def h(broker_harness):
    broker_harness.create_topic("t", partitions=2)
    r = broker_harness.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                            "coordinator_keys": ["g"]})
    assert r.coordinators[0].error_code == 0
    return broker_harness


def test_a_member_joins_and_gets_every_partition(h) -> None:
    member = str(uuid.uuid4())
    r = _heartbeat(h, member=member, topics=["t"])
    assert (r.error_code, r.member_id, r.member_epoch) == (0, member, 1)
    assert r.heartbeat_interval > 0
    assert [(tp.topic_id, sorted(tp.partitions)) for tp in r.assignment.topic_partitions] == [
        (h.topic_id("t"), [0, 1])]


def test_a_member_subscribing_by_regex(h) -> None:
    r = _heartbeat(h, regex="t.*")
    assert r.error_code == 0
    # the regex is resolved in the background (as in Kafka): the assignment follows
    for _ in range(50):
        if r.assignment is not None and r.assignment.topic_partitions:
            break
        h.run(0.01)
        r = _heartbeat(h, member=r.member_id, epoch=r.member_epoch, owned=[])
    assert [sorted(tp.partitions) for tp in r.assignment.topic_partitions] == [[0, 1]]


def test_v0_generates_the_member_id(h) -> None:
    r = _heartbeat(h, member="", topics=["t"], version=0)
    assert r.error_code == 0
    assert r.member_id


@pytest.mark.parametrize("changes", [
    {"group": ""},  # GroupId can't be empty.
    {"member": ""},  # v1: MemberId can't be empty.
    {"topics": None},  # a join needs SubscribedTopicNames or SubscribedTopicRegex
    {"rebalance_timeout": -1},  # RebalanceTimeoutMs must be provided in first request.
    {"epoch": -5},  # MemberEpoch is invalid.
])
def test_invalid_heartbeats_are_invalid_request(h, changes: dict) -> None:
    # Kafka: GroupMetadataManager.throwIfConsumerGroupHeartbeatRequestIsInvalid
    args = {"topics": ["t"], **changes}
    assert _heartbeat(h, **args).error_code == ErrorCode.INVALID_REQUEST


def test_an_unknown_assignor_is_unsupported_assignor(h) -> None:
    assert _heartbeat(h, topics=["t"], assignor="fancy").error_code == \
        ErrorCode.UNSUPPORTED_ASSIGNOR


def test_a_bad_regex_is_invalid_regular_expression(h) -> None:
    assert _heartbeat(h, regex="t(").error_code == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_an_unknown_member_is_unknown_member_id(h) -> None:
    _heartbeat(h, topics=["t"])
    r = _heartbeat(h, member=str(uuid.uuid4()), epoch=1, topics=["t"])
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_wrong_epoch_is_fenced_member_epoch(h) -> None:
    first = _heartbeat(h, topics=["t"])
    r = _heartbeat(h, member=first.member_id, epoch=first.member_epoch + 3)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_leaving_answers_epoch_minus_one(h) -> None:
    first = _heartbeat(h, topics=["t"])
    r = _heartbeat(h, member=first.member_id, epoch=-1)
    assert (r.error_code, r.member_id, r.member_epoch) == (0, first.member_id, -1)
    (g,) = h.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["g"]}).groups
    assert (g.group_state, g.members) == ("Empty", [])


def test_a_heartbeat_before_the_offsets_topic_exists_is_not_coordinator(broker_harness) -> None:
    assert _heartbeat(broker_harness, topics=["t"]).error_code == ErrorCode.NOT_COORDINATOR


def test_describe_a_group(h) -> None:
    first = _heartbeat(h, topics=["t"])
    (g,) = h.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["g"]}).groups
    assert (g.error_code, g.group_id, g.group_state, g.group_epoch, g.assignor_name) == (
        0, "g", "Stable", 1, "uniform")
    (m,) = g.members
    assert (m.member_id, m.member_epoch, m.subscribed_topic_names) == (first.member_id, 1, ["t"])


def test_describe_an_unknown_group_is_group_id_not_found(h) -> None:
    (g,) = h.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["nope"]}).groups
    assert g.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_describe_a_classic_group_is_group_id_not_found(h) -> None:
    # Kafka: "Group g is not a consumer group."
    h.request(ApiKey.OFFSET_COMMIT, 9, {"group_id": "classic", "generation_id_or_member_epoch": -1,
                                        "member_id": "", "topics": [{"name": "t", "partitions": [
                                            {"partition_index": 0, "committed_offset": 1}]}]})
    (g,) = h.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["classic"]}).groups
    assert g.error_code == ErrorCode.GROUP_ID_NOT_FOUND
