"""reconcile (Kafka's CurrentAssignmentBuilder) as a pure function: revoke first, hand a
partition over only once its previous owner let it go, never two owners."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.group.reconciliation import reconcile
from strom.coordinator.group.state import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError

T = uuid.UUID(int=1)


def group_at(epoch: int, targets: dict[str, set[int]], *members: ConsumerMember
             ) -> ConsumerGroup:
    group = ConsumerGroup("g", 0, group_epoch=epoch, assignment_epoch=epoch)
    group.target = {mid: {T: set(ps)} for mid, ps in targets.items()}
    for member in members:
        group.put_member(member)
    return group


def test_a_new_member_gets_its_free_target_at_the_assignment_epoch() -> None:
    a = ConsumerMember("a")
    group = group_at(1, {"a": {0, 1}}, a)
    new = reconcile(group, a, {})
    assert new is not a
    assert (new.state, new.member_epoch, new.previous_member_epoch) == (MemberState.STABLE, 1, 0)
    assert new.assigned == {T: {0, 1}} and new.pending_revocation == {}


def test_a_reconciled_member_is_returned_unchanged() -> None:
    a = ConsumerMember("a", member_epoch=1, assigned={T: {0}})
    group = group_at(1, {"a": {0}}, a)
    assert reconcile(group, a, {T: {0}}) is a


def test_partitions_are_revoked_before_the_epoch_moves() -> None:
    a = ConsumerMember("a", member_epoch=1, assigned={T: {0, 1}})
    group = group_at(2, {"a": {0}}, a)
    revoking = reconcile(group, a, {T: {0, 1}})
    assert revoking.state == MemberState.UNREVOKED_PARTITIONS
    assert revoking.member_epoch == 1  # keeps its epoch until it has revoked
    assert revoking.assigned == {T: {0}} and revoking.pending_revocation == {T: {1}}
    group.put_member(revoking)
    assert reconcile(group, revoking, {T: {0, 1}}) is revoking  # still owns partition 1
    done = reconcile(group, revoking, {T: {0}})
    assert (done.state, done.member_epoch) == (MemberState.STABLE, 2)
    assert done.assigned == {T: {0}} and done.pending_revocation == {}


def test_a_partition_still_owned_by_another_member_waits() -> None:
    a = ConsumerMember("a", member_epoch=1, state=MemberState.UNREVOKED_PARTITIONS,
                       assigned={}, pending_revocation={T: {0}})
    b = ConsumerMember("b", member_epoch=1)
    group = group_at(2, {"a": set(), "b": {0}}, a, b)
    waiting = reconcile(group, b, {})
    assert waiting.state == MemberState.UNRELEASED_PARTITIONS
    assert waiting.member_epoch == 2 and waiting.assigned == {}
    group.put_member(waiting)
    released = reconcile(group, a, {})  # a confirms the revocation...
    group.put_member(released)
    assert released.assigned == {} and released.state == MemberState.STABLE
    owner = reconcile(group, waiting, {})  # ...and only then b gets the partition
    assert owner.state == MemberState.STABLE and owner.assigned == {T: {0}}


def test_a_temporarily_departed_static_member_is_left_alone() -> None:
    a = ConsumerMember("a", member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, assigned={T: {0}})
    group = group_at(3, {"a": {1}}, a)
    assert reconcile(group, a, None) is a


def test_an_unknown_state_with_owned_partitions_is_fenced() -> None:
    a = ConsumerMember("a", member_epoch=1, state=MemberState.UNKNOWN, assigned={T: {0}})
    group = group_at(2, {"a": {0}}, a)
    with pytest.raises(KafkaError) as exc:
        reconcile(group, a, {T: {0}})
    assert exc.value.code == E.FENCED_MEMBER_EPOCH
