"""Share groups (KIP-932) given bad input over the raw protocol: acknowledgements of offsets never
acquired or whose lock expired, wrong epochs, unknown group types, share-session misuse, a
partition this broker does not lead. Each answer is the one Apache Kafka 4.4 gives (checked
against a 4.4 node over the wire), and afterwards every record is still delivered, at least
once, and none that was acknowledged comes back.

(Acknowledging records another member holds, unknown acknowledge types and share-session epochs
are in test_share_fetch.py; the member-epoch errors of ShareGroupHeartbeat in
test_share_groups.py.)
"""

from __future__ import annotations

import time
import uuid

import pytest
from tests.unit.broker.handlers.test_share_fetch import (
    ACCEPT,
    GROUP,
    RELEASE,
    Member,
    _acquired,
    _group_configs,
    _setup,
)

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


def _ack_error(r) -> int:
    return r.responses[0].partitions[0].error_code


def _offsets(ranges) -> list[int]:
    return [o for first, last, _ in ranges for o in range(first, last + 1)]


def test_acknowledging_offsets_never_acquired(broker_harness) -> None:
    """Kafka 4.4: past the acquired records INVALID_REQUEST ("Batch record not found"), a batch
    whose types do not match its length or an unknown type INVALID_REQUEST, an offset already
    acknowledged INVALID_RECORD_STATE. A refused acknowledgement changes nothing."""
    h = broker_harness
    a = Member(h, _setup(h))
    a.fetch()
    h.produce("jobs", 0, h.batch(b"a", b"b", b"c"))
    assert _acquired(a.fetch()) == [(0, 2, 1)]
    assert _ack_error(a.acknowledge([(100, 101, [ACCEPT])])) == ErrorCode.INVALID_REQUEST
    assert _ack_error(a.acknowledge([(0, 0, [ACCEPT, ACCEPT])])) == ErrorCode.INVALID_REQUEST
    assert _ack_error(a.acknowledge([(0, 0, [7])])) == ErrorCode.INVALID_REQUEST
    assert _ack_error(a.acknowledge([(2, 1, [ACCEPT])])) == ErrorCode.INVALID_REQUEST
    assert _ack_error(a.acknowledge([(1, 1, [ACCEPT])])) == 0
    assert _ack_error(a.acknowledge([(1, 1, [ACCEPT])])) == ErrorCode.INVALID_RECORD_STATE
    # all or nothing: one bad batch refuses the good one beside it
    assert _ack_error(a.acknowledge([(0, 0, [ACCEPT]), (1, 1, [ACCEPT])])) == (
        ErrorCode.INVALID_RECORD_STATE)
    assert _ack_error(a.acknowledge([(0, 0, [ACCEPT]), (2, 2, [RELEASE])])) == 0
    assert _acquired(a.fetch()) == [(2, 2, 2)]  # released: back once; 0 and 1 never


@pytest.mark.broker_config(**{"group.share.min.record.lock.duration.ms": "1000"})
def test_acknowledging_after_the_lock_expired(broker_harness) -> None:
    """The acquisition lock ran out (share.record.lock.duration.ms): the acknowledgement is
    refused with INVALID_RECORD_STATE and the record is delivered again, delivery count 2."""
    h = broker_harness
    topic_id = _setup(h)
    _group_configs(h, {"share.record.lock.duration.ms": "1000"})
    a = Member(h, topic_id)
    assert a.fetch().acquisition_lock_timeout == 1000
    h.produce("jobs", 0, h.batch(b"slow"))
    assert _acquired(a.fetch()) == [(0, 0, 1)]
    held = next(iter(h.broker.share_partitions.in_flight(GROUP)))
    deadline = time.monotonic() + 10
    while held.partition.acquired_count:  # until the broker's lock timer released it
        assert time.monotonic() < deadline, "the acquisition lock never expired"
        h.run(0.05)
    assert _ack_error(a.acknowledge([(0, 0, [ACCEPT])])) == ErrorCode.INVALID_RECORD_STATE
    assert _acquired(a.fetch()) == [(0, 0, 2)]
    assert _ack_error(a.acknowledge([(0, 0, [ACCEPT])])) == 0
    assert _acquired(a.fetch()) == []


def test_list_groups_with_unknown_types(broker_harness) -> None:
    """Kafka 4.4 answers a ListGroups whose types filter names no known type with no groups and
    no error (not INVALID_REQUEST); type names match whatever their case."""
    h = broker_harness
    topic_id = _setup(h)
    Member(h, topic_id)

    def listed(types: list[str]):
        r = h.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": types})
        return r.error_code, [(g.group_id, g.group_type) for g in r.groups]

    assert listed(["foo"]) == (0, [])
    assert listed(["Share"]) == (0, [(GROUP, "share")])
    assert listed(["share", "foo"]) == (0, [(GROUP, "share")])
    assert listed(["consumer"]) == (0, [])


@pytest.mark.broker_config(**{"group.share.max.share.sessions": "1"})
def test_share_session_misuse(broker_harness) -> None:
    """Kafka's share-session errors: SHARE_SESSION_NOT_FOUND for an epoch > 0 without a session
    (and after it closed), INVALID_SHARE_SESSION_EPOCH for a wrong epoch or a ShareAcknowledge
    at epoch 0, SHARE_SESSION_LIMIT_REACHED past group.share.max.share.sessions. The session
    survives a wrong epoch and its records are still delivered."""
    h = broker_harness
    topic_id = _setup(h)
    a, b = Member(h, topic_id), Member(h, topic_id)
    assert a.fetch(epoch=1).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert a.fetch().error_code == 0  # epoch 0: opens the session
    assert b.fetch().error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    h.produce("jobs", 0, h.batch(b"x", b"y"))
    assert a.fetch(epoch=7).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert a.acknowledge([], epoch=0).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    got = a.fetch()
    assert got.error_code == 0 and _acquired(got) == [(0, 1, 1)]
    assert a.fetch([(0, 1, [ACCEPT])], epoch=-1).error_code == 0  # acknowledges and closes
    assert a.fetch(epoch=3).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    b.epoch = 0
    assert b.fetch().error_code == 0  # a's session is gone: room for b's
    assert _acquired(b.fetch()) == []  # 0 and 1 were accepted


def test_unknown_topics_and_partitions(broker_harness) -> None:
    """Per partition, as Kafka 4.4: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION; the session's
    other partitions are served all the same."""
    h = broker_harness
    topic_id = _setup(h)
    a = Member(h, topic_id)
    a.fetch()
    h.produce("jobs", 0, h.batch(b"v"))
    r = h.request(ApiKey.SHARE_FETCH, 2, {
        "group_id": GROUP, "member_id": a.member_id, "share_session_epoch": a._next_epoch(),
        "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500,
        "batch_size": 500, "share_acquire_mode": 0, "is_renew_ack": False,
        "topics": [{"topic_id": uuid.uuid4(), "partitions": [{"partition_index": 0}]},
                   {"topic_id": topic_id, "partitions": [{"partition_index": 5}]}],
        "forgotten_topics_data": []})
    codes = {(t.topic_id == topic_id, p.partition_index): p.error_code
             for t in r.responses for p in t.partitions}
    assert codes == {(False, 0): ErrorCode.UNKNOWN_TOPIC_ID,
                     (True, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (True, 0): 0}
    assert _acquired(r) == [(0, 0, 1)]


def test_a_partition_this_broker_does_not_lead(broker_harness) -> None:
    """A ShareFetch or ShareAcknowledge for a partition led elsewhere: NOT_LEADER_OR_FOLLOWER
    (the client refreshes its metadata and goes to the leader); nothing is acquired or lost."""
    h = broker_harness
    topic_id = _setup(h)
    a = Member(h, topic_id)
    a.fetch()
    h.produce("jobs", 0, h.batch(b"v"))
    state = h.broker.image.topics["jobs"].partitions[0]
    leader, state.leader = state.leader, state.leader + 1  # as if leadership had moved away
    try:
        r = a.fetch()
        assert r.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert _acquired(r) == []
        ack = a.acknowledge([(0, 0, [ACCEPT])])
        assert _ack_error(ack) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        state.leader = leader
    assert _acquired(a.fetch()) == [(0, 0, 1)]


def test_classic_describe_of_a_share_group(broker_harness) -> None:
    """DescribeGroups (the classic API) on a share group answers as Kafka 4.4 does: Dead up to
    v5, GROUP_ID_NOT_FOUND "is not a classic group" from v6 (it failed inside the handler)."""
    h = broker_harness
    Member(h, _setup(h))
    for version, code, message in ((5, 0, None),
                                   (6, ErrorCode.GROUP_ID_NOT_FOUND,
                                    f"Group {GROUP} is not a classic group.")):
        r = h.request(ApiKey.DESCRIBE_GROUPS, version, {"groups": [GROUP],
                                                        "include_authorized_operations": False})
        (g,) = r.groups
        assert (g.error_code, g.group_state) == (code, "Dead")
        assert getattr(g, "error_message", None) == message
    r = h.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP],
                                                      "include_authorized_operations": False})
    assert r.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
