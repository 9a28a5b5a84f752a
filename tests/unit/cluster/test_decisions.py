"""The active controller's decisions (pure functions): first states, elections, ISR cleanup,
ElectLeaders, leader rebalance and controlled shutdown."""

import uuid

from strom.cluster.decisions import (
    NO_LEADER,
    NO_STATE,
    PREFERRED,
    UNCLEAN,
    Decision,
    StateWrite,
    decide,
    elected_state,
    imbalanced,
    initial_state,
    next_state,
    shutdown_move,
)
from strom.cluster.image import PartitionState, TopicState


def st(replicas, isr, leader, epoch=3, version=7) -> PartitionState:
    return PartitionState(0, list(replicas), list(isr), leader, epoch, version)


# -- new partitions ---------------------------------------------------------------------------


def test_first_state_is_first_live_replica_and_live_isr() -> None:
    assert initial_state([2, 3, 1], {1, 2, 3}) == StateWrite(2, 0, (2, 3, 1))
    assert initial_state([2, 3, 1], {1, 3}) == StateWrite(3, 0, (3, 1))
    assert initial_state([2, 3], {1}) is None


# -- a broker dies ------------------------------------------------------------------------------


def test_healthy_partition_needs_nothing() -> None:
    assert next_state(st([1, 2, 3], [1, 2, 3], 1), {1, 2, 3}, False) is None


def test_dead_follower_leaves_the_isr_and_bumps_the_epoch() -> None:
    assert next_state(st([1, 2, 3], [1, 2, 3], 1), {1, 2}, False) == StateWrite(1, 4, (1, 2))


def test_dead_leader_is_replaced_by_first_live_in_sync_replica_in_assignment_order() -> None:
    # ISR order is not assignment order: the assignment decides (Kafka's rule)
    assert next_state(st([1, 2, 3], [1, 3, 2], 1), {2, 3}, False) == StateWrite(2, 4, (3, 2))
    # an out-of-sync live replica is not eligible for a clean election
    assert next_state(st([1, 2, 3], [1, 3], 1), {2, 3}, False) == StateWrite(3, 4, (3,))


def test_no_eligible_replica_goes_offline_keeping_the_last_isr_member() -> None:
    assert next_state(st([1, 2], [1], 1), {2}, False) == StateWrite(NO_LEADER, 4, (1,))
    # already offline with that ISR: nothing to write (no epoch churn)
    assert next_state(st([1, 2], [1], NO_LEADER), {2}, False) is None


def test_all_in_sync_replicas_dying_at_once_keep_the_old_leader_in_the_isr() -> None:
    assert next_state(st([1, 2, 3], [1, 2, 3], 2), set(), False) == StateWrite(NO_LEADER, 4, (2,))


def test_unclean_election_takes_any_live_replica_with_a_fresh_isr() -> None:
    assert next_state(st([1, 2, 3], [1], 1), {3}, True) == StateWrite(3, 4, (3,))
    assert next_state(st([1, 2, 3], [1], 1), set(), True) == StateWrite(NO_LEADER, 4, (1,))
    # an eligible in-sync replica still wins over unclean election
    assert next_state(st([1, 2, 3], [1, 2], 1), {2, 3}, True) == StateWrite(2, 4, (2,))


def test_returning_isr_member_leads_an_offline_partition_again() -> None:
    assert next_state(st([1, 2], [1], NO_LEADER), {1, 2}, False) == StateWrite(1, 4, (1,))


def test_decide_walks_the_whole_image() -> None:
    t = TopicState("t", uuid.uuid4())
    t.partitions = {
        0: PartitionState(0, [1, 2], [], NO_LEADER, NO_STATE, NO_STATE),  # new
        1: PartitionState(1, [2, 1], [2, 1], 2, 5, 9),  # leader 2 dies
        2: PartitionState(2, [1, 2], [1], 1, 0, 0),  # fine
    }
    u = TopicState("u", uuid.uuid4())
    u.partitions = {0: PartitionState(0, [2], [2], 2, 1, 1)}  # offline: unclean is asked
    asked: list[str] = []

    def unclean(topic: TopicState) -> bool:
        asked.append(topic.name)
        return False

    got = decide([t, u], {1}, unclean)
    assert got == [
        Decision("t", 0, StateWrite(1, 0, (1,)), NO_STATE),
        Decision("t", 1, StateWrite(1, 6, (1,)), 9),
        Decision("u", 0, StateWrite(NO_LEADER, 2, (2,)), 1),
    ]
    assert asked == ["t", "u"]  # once per topic


# -- ElectLeaders ---------------------------------------------------------------------------------


def test_preferred_election() -> None:
    s = st([1, 2, 3], [1, 2, 3], 2)
    assert elected_state(s, {1, 2, 3}, PREFERRED) == (StateWrite(1, 4, (1, 2, 3)), None)
    assert elected_state(st([1, 2], [1, 2], 1), {1, 2}, PREFERRED) == (None, "not needed")
    assert elected_state(st([1, 2], [2], 2), {1, 2}, PREFERRED) == (None, "not available")
    assert elected_state(s, {2, 3}, PREFERRED) == (None, "not available")


def test_unclean_election_on_request() -> None:
    assert elected_state(st([1, 2], [1], 1), {1, 2}, UNCLEAN) == (None, "not needed")
    assert elected_state(st([1, 2], [1], NO_LEADER), {2}, UNCLEAN) == (StateWrite(2, 4, (2,)),
                                                                      None)
    assert elected_state(st([1, 2], [1], NO_LEADER), set(), UNCLEAN) == (None, "not available")


# -- leader rebalance -----------------------------------------------------------------------------


def _topic(states: list[PartitionState]) -> TopicState:
    t = TopicState("t", uuid.uuid4())
    for i, s in enumerate(states):
        s.partition = i
        t.partitions[i] = s
    return t


def test_imbalance_moves_leaders_back_past_the_threshold() -> None:
    # broker 1 is preferred for 4 partitions and leads 1 of them: 75% not led > 10%
    t = _topic([st([1, 2], [1, 2], 1), st([1, 2], [1, 2], 2), st([1, 2], [2], 2),
                st([1, 2], [1, 2], 2), st([2, 1], [1, 2], 2)])
    assert imbalanced([t], {1, 2}, 10) == [("t", 1), ("t", 3)]  # not p2: 1 is out of sync
    assert imbalanced([t], {1, 2}, 80) == []  # within the allowed imbalance
    assert imbalanced([t], {2}, 10) == []  # the preferred leader is down


# -- controlled shutdown --------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_to_an_in_sync_replica() -> None:
    assert shutdown_move(st([1, 2, 3], [1, 2, 3], 1), {1}, {1, 2, 3}) == StateWrite(2, 4, (2, 3))
    assert shutdown_move(st([1, 2, 3], [1, 2, 3], 2), {1}, {1, 2, 3}) == StateWrite(2, 4, (2, 3))
    assert shutdown_move(st([1, 2], [1, 2], 2), {3}, {1, 2, 3}) is None
    # the only in-sync replica stays: nobody could take over
    assert shutdown_move(st([1, 2], [1], 1), {1}, {1, 2}) is None
    assert shutdown_move(st([1, 2], [], NO_LEADER, NO_STATE, NO_STATE), {1}, {1, 2}) is None
