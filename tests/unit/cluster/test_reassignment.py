"""Partition reassignment: what a request makes of an assignment (KIP-455's rules), and the
controller's steps that complete one."""

import pytest

from strom.cluster.decisions import (
    NO_STATE,
    StateWrite,
    next_state,
    reassignment_done,
    reassignment_state,
)
from strom.cluster.image import PartitionState
from strom.cluster.reassignment import Assignment, reassign
from strom.cluster.zk.controller import _put
from strom.cluster.zk.znodes import TopicAssignment
from strom.protocol.errors import ErrorCode, KafkaError

LIVE = {1, 2, 3, 4}


def error_of(fn) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        fn()
    return info.value.code


# -- requests -----------------------------------------------------------------------------------


def test_move_to_new_brokers_lists_target_first_then_the_leaving_ones() -> None:
    new = reassign(Assignment((1, 2)), [3, 4], LIVE)
    assert new == Assignment((3, 4, 1, 2), adding=(3, 4), removing=(1, 2))
    assert new.target == (3, 4) and new.original == (1, 2) and new.reassigning


def test_raising_the_replication_factor_only_adds() -> None:
    new = reassign(Assignment((1,)), [1, 2, 3], LIVE)
    assert new == Assignment((1, 2, 3), adding=(2, 3), removing=())


def test_a_reordering_completes_at_once() -> None:
    new = reassign(Assignment((1, 2, 3)), [3, 1, 2], LIVE)
    assert new == Assignment((3, 1, 2)) and not new.reassigning


def test_a_new_request_starts_again_from_the_original_replicas() -> None:
    moving = Assignment((3, 4, 1, 2), adding=(3, 4), removing=(1, 2))
    # broker 3 (added by the first request) is not in the new target: it is dropped
    assert reassign(moving, [4, 2], LIVE) == Assignment((4, 2, 1), adding=(4,), removing=(1,))


def test_cancel_goes_back_to_the_original_replicas() -> None:
    moving = Assignment((3, 4, 1, 2), adding=(3, 4), removing=(1, 2))
    assert reassign(moving, None, LIVE) == Assignment((1, 2))
    assert error_of(lambda: reassign(Assignment((1, 2)), None, LIVE)) == \
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


@pytest.mark.parametrize("target", [[], [1, 1], [-1, 2], [1, 9]])
def test_bad_targets_are_invalid_replica_assignments(target) -> None:
    assert error_of(lambda: reassign(Assignment((1, 2)), target, LIVE)) == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_only_added_brokers_need_to_be_live() -> None:
    # broker 2 is down, but it is leaving anyway
    assert reassign(Assignment((1, 2)), [1, 3], {1, 3}).target == (1, 3)


def test_replication_factor_change_can_be_refused() -> None:
    assert error_of(lambda: reassign(Assignment((1, 2)), [1, 2, 3], LIVE,
                                     allow_rf_change=False)) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert reassign(Assignment((1, 2)), [3, 4], LIVE, allow_rf_change=False).target == (3, 4)


def test_topic_znode_keeps_kafkas_lists() -> None:
    znode = TopicAssignment(None, {0: [1, 2], 1: [2, 3]})
    _put(znode, 0, Assignment((3, 4, 1, 2), (3, 4), (1, 2)))
    assert znode.partitions[0] == [3, 4, 1, 2]
    assert znode.adding_replicas == {0: [3, 4]} and znode.removing_replicas == {0: [1, 2]}
    _put(znode, 0, Assignment((3, 4)))
    assert znode.adding_replicas == {} and znode.removing_replicas == {}


# -- the controller completes them --------------------------------------------------------------


def moving(isr, leader, epoch=5) -> PartitionState:
    return PartitionState(0, [3, 4, 1, 2], list(isr), leader, epoch, 9,
                          adding_replicas=[3, 4], removing_replicas=[1, 2])


def test_nothing_happens_while_target_replicas_catch_up() -> None:
    assert reassignment_state(moving([1, 2, 3], 1), LIVE) is None
    assert not reassignment_done(moving([1, 2, 3], 1))


def test_caught_up_moves_leadership_into_the_target_and_drops_leaving_replicas() -> None:
    assert reassignment_state(moving([1, 2, 3, 4], 1), LIVE) == StateWrite(3, 6, (3, 4))
    # a dead target replica cannot lead; the other one does (the dead one leaves the ISR
    # through the controller's usual clean-up)
    assert reassignment_state(moving([1, 2, 3, 4], 1), {1, 2, 4}) == StateWrite(4, 6, (3, 4))


def test_done_once_the_state_is_the_target() -> None:
    state = moving([3, 4], 3)
    assert reassignment_state(state, LIVE) is None and reassignment_done(state)


def test_a_leader_that_stays_keeps_leading() -> None:
    state = PartitionState(0, [1, 3, 2], [1, 2, 3], 1, 2, 4, adding_replicas=[3],
                           removing_replicas=[2])
    assert reassignment_state(state, LIVE) == StateWrite(1, 3, (1, 3))


def test_new_partition_state_is_not_touched() -> None:
    state = PartitionState(0, [3, 1], [], -1, NO_STATE, NO_STATE, adding_replicas=[3],
                           removing_replicas=[])
    assert reassignment_state(state, LIVE) is None and not reassignment_done(state)


def test_replicas_dropped_by_a_cancel_leave_leadership_and_isr() -> None:
    # cancelled: broker 3 (was being added, had become leader) is no longer a replica
    state = PartitionState(0, [1, 2], [3, 1, 2], 3, 5, 9)
    assert next_state(state, LIVE, False) == StateWrite(1, 6, (1, 2))
    state = PartitionState(0, [1, 2], [1, 2, 3], 1, 5, 9)
    assert next_state(state, LIVE, False) == StateWrite(1, 6, (1, 2))
