"""Epoch states: who may grant a (pre-)vote (design brief §2.4), how elections are tallied, which
transitions are persisted, and which state a replica starts in (§2.1)."""

from __future__ import annotations

import random

import pytest

from strom.raft.leader import LeaderState
from strom.raft.quorum import QuorumState
from strom.raft.quorum_state import ElectionState, MemoryQuorumStateStore, encode_quorum_state
from strom.raft.states import (
    CandidateState,
    EpochElection,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from strom.raft.types import OffsetAndEpoch, RaftSettings, ReplicaKey, VoterSet

A, B, C = ReplicaKey(1), ReplicaKey(2), ReplicaKey(3)
VOTERS = VoterSet.static([1, 2, 3])
SETTINGS = RaftSettings()


def _leader() -> LeaderState:
    return LeaderState(local=A, epoch=5, epoch_start_offset=0, voters=VOTERS, granting={1, 2},
                       endpoints=(), now_ms=0, settings=SETTINGS)


# (state, pre_vote, up_to_date) -> granted, for a candidate B. "voted-B"/"voted-C": already
# voted for B / for C in this epoch.
STATES = {
    "unattached": lambda: UnattachedState(epoch=5),
    "unattached-voted-B": lambda: UnattachedState(epoch=5, voted_key=B),
    "unattached-voted-C": lambda: UnattachedState(epoch=5, voted_key=C),
    "unattached-leader-known": lambda: UnattachedState(epoch=5, known_leader=3),
    "prospective": lambda: ProspectiveState(epoch=5),
    "prospective-voted-C": lambda: ProspectiveState(epoch=5, voted_key=C),
    "prospective-leader-known": lambda: ProspectiveState(epoch=5, known_leader=3),
    "candidate": lambda: CandidateState(epoch=5, voted_key=A),
    "follower-not-fetched": lambda: FollowerState(epoch=5, leader=3),
    "follower-fetched": lambda: FollowerState(epoch=5, leader=3, has_fetched_from_leader=True),
    "leader": _leader,
    "resigned": lambda: ResignedState(epoch=5, local_id=1),
}

#                         pre-vote: (up to date, behind)   vote: (up to date, behind)
TABLE = {
    "unattached":               ((True, False), (True, False)),
    "unattached-voted-B":       ((True, False), (True, True)),   # same candidate again: yes
    "unattached-voted-C":       ((True, False), (False, False)),
    "unattached-leader-known":  ((True, False), (False, False)),
    "prospective":              ((True, False), (True, False)),
    "prospective-voted-C":      ((True, False), (False, False)),
    "prospective-leader-known": ((True, False), (False, False)),
    "candidate":                ((True, False), (False, False)),  # voted for itself
    "follower-not-fetched":     ((True, False), (False, False)),
    "follower-fetched":         ((False, False), (False, False)),  # its leader is alive
    "leader":                   ((False, False), (False, False)),
    "resigned":                 ((False, False), (False, False)),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_vote_granting_table(name: str) -> None:
    state = STATES[name]()
    (pre_up, pre_behind), (vote_up, vote_behind) = TABLE[name]
    assert state.can_grant_vote(B, True, True) is pre_up
    assert state.can_grant_vote(B, False, True) is pre_behind
    assert state.can_grant_vote(B, True, False) is vote_up
    assert state.can_grant_vote(B, False, False) is vote_behind


def test_a_vote_for_a_key_matches_an_unset_directory_only() -> None:
    import uuid
    d1, d2 = uuid.uuid4(), uuid.uuid4()
    voted = UnattachedState(epoch=1, voted_key=ReplicaKey(2, d1))
    assert voted.can_grant_vote(ReplicaKey(2), True, False)
    assert voted.can_grant_vote(ReplicaKey(2, d1), True, False)
    assert not voted.can_grant_vote(ReplicaKey(2, d2), True, False)


def test_up_to_date_compares_epoch_first_then_offset() -> None:
    assert OffsetAndEpoch(5, 3) > OffsetAndEpoch(100, 2)
    assert OffsetAndEpoch(100, 3) > OffsetAndEpoch(99, 3)
    assert OffsetAndEpoch(100, 3) >= OffsetAndEpoch(100, 3)


def test_election_tally() -> None:
    e = EpochElection([1, 2, 3, 4, 5], local_id=1)
    assert e.granted == {1} and not e.is_won() and not e.is_lost()
    e.record(2, True)
    e.record(9, True)  # not a voter: ignored
    assert not e.is_won()
    e.record(3, False)
    e.record(3, True)  # a voter's first answer stands
    assert e.unrecorded() == [4, 5]
    e.record(4, False)
    assert not e.is_lost()  # 1, 2 and 5 could still make 3
    e.record(5, False)
    assert e.is_lost()
    single = EpochElection([1], local_id=1)
    assert single.is_won()
    observer = EpochElection([1, 2, 3], local_id=7)
    assert observer.granted == set()


# ----------------------------------------------------------------------------- start-up


def _quorum(stored: ElectionState | None, local: int = 1,
            voters: VoterSet = VOTERS) -> tuple[QuorumState, MemoryQuorumStateStore]:
    store = MemoryQuorumStateStore()
    if stored is not None:
        store.text = encode_quorum_state(stored, 0)
    q = QuorumState(local=ReplicaKey(local), voters=voters, store=store,
                    rng=random.Random(1), settings=SETTINGS)
    return q, store


def test_start_empty_is_unattached_in_epoch_0() -> None:
    q, store = _quorum(None)
    q.initialize(0, OffsetAndEpoch(0, 0))
    assert isinstance(q.state, UnattachedState) and q.epoch == 0
    assert 1000 <= q.state.election_deadline < 2000
    assert store.writes == 0


def test_start_behind_the_log_epoch_is_unattached_at_the_log_epoch() -> None:
    q, store = _quorum(ElectionState(3, leader_id=2, voters=frozenset({1, 2, 3})))
    q.initialize(0, OffsetAndEpoch(50, 7))
    assert isinstance(q.state, UnattachedState)
    assert (q.epoch, q.leader_id, q.state.voted_key) == (7, None, None)
    assert store.read() == ElectionState(7, None, None, voters=frozenset({1, 2, 3}))


def test_start_as_the_stored_leader_is_resigned() -> None:
    q, store = _quorum(ElectionState(4, leader_id=1, voted_id=1))
    q.initialize(0, OffsetAndEpoch(50, 4))
    assert isinstance(q.state, ResignedState) and q.epoch == 4
    assert q.state.can_grant_vote(B, True, False) is False
    assert store.writes == 0  # Resigned is never persisted


def test_start_having_voted_for_itself_is_candidate_in_the_same_epoch() -> None:
    q, _ = _quorum(ElectionState(4, voted_id=1))
    q.initialize(0, OffsetAndEpoch(50, 3))
    assert isinstance(q.state, CandidateState) and q.epoch == 4
    assert q.state.election.granted == {1}


def test_start_with_a_known_leader_follows_it() -> None:
    q, _ = _quorum(ElectionState(4, leader_id=2, voted_id=1))
    q.initialize(0, OffsetAndEpoch(50, 4))
    assert isinstance(q.state, FollowerState)
    assert (q.epoch, q.state.leader, q.state.voted_key) == (4, 2, A)
    assert q.state.fetch_deadline == SETTINGS.fetch_timeout_ms


def test_start_with_a_leader_of_unknown_endpoints_is_unattached_knowing_it() -> None:
    q, _ = _quorum(ElectionState(4, leader_id=9))  # 9 is no voter: no endpoints known
    q.initialize(0, OffsetAndEpoch(0, 0))
    assert isinstance(q.state, UnattachedState) and q.leader_id == 9


def test_start_keeps_a_vote_for_another_replica() -> None:
    q, _ = _quorum(ElectionState(4, voted_id=2))
    q.initialize(0, OffsetAndEpoch(0, 0))
    assert isinstance(q.state, UnattachedState) and q.state.voted_key == B
    assert not q.state.can_grant_vote(C, True, False)


def test_an_observer_never_times_out_into_an_election() -> None:
    q, _ = _quorum(None, local=7)
    q.initialize(0, OffsetAndEpoch(0, 0))
    assert not q.is_voter()
    assert isinstance(q.state, UnattachedState) and q.state.election_deadline >= 1 << 60
    with pytest.raises(ValueError):
        q.to_prospective(0)


# ----------------------------------------------------------------------------- durability


def test_durable_and_memory_only_transitions() -> None:
    q, store = _quorum(None)
    q.initialize(0, OffsetAndEpoch(0, 0))
    q.to_prospective(10)
    assert store.writes == 0  # never persisted
    q.state.election.record(2, True)  # type: ignore[attr-defined]
    q.to_candidate(11)
    assert store.read() == ElectionState(1, None, 1, voters=frozenset({1, 2, 3}))
    q.state.election.record(2, True)  # type: ignore[attr-defined]
    q.to_leader(12, epoch_start_offset=0)
    assert store.read() == ElectionState(1, 1, 1, voters=frozenset({1, 2, 3}))
    writes = store.writes
    q.to_resigned(13, [B, C])
    assert store.writes == writes  # never persisted
    q.to_unattached(14, 2)
    assert store.read() == ElectionState(2, None, None, voters=frozenset({1, 2, 3}))
    q.to_unattached_voted(15, 2, B)
    assert store.read() == ElectionState(2, None, 2, voters=frozenset({1, 2, 3}))
    q.to_follower(16, 2, 2, ())
    assert store.read() == ElectionState(2, 2, 2, voters=frozenset({1, 2, 3}))


def test_a_vote_survives_every_transition_within_its_epoch() -> None:
    q, store = _quorum(None)
    q.initialize(0, OffsetAndEpoch(0, 0))
    q.to_unattached(1, 3)
    q.to_unattached_voted(2, 3, B)
    q.to_prospective(3)
    assert q.state.voted_key == B
    q.to_unattached(4, 3)  # the pre-vote round was lost
    stored = store.read()
    assert q.state.voted_key == B and stored is not None and stored.voted_id == 2
    q.to_follower(5, 3, 2, ())
    assert q.state.voted_key == B
    q.to_follower(6, 4, 3, ())  # a new epoch: a new vote
    assert q.state.voted_key is None
    with pytest.raises(ValueError):
        q.to_unattached(7, 3)  # epochs never go back


def test_a_second_vote_in_one_epoch_is_refused() -> None:
    q, _ = _quorum(None)
    q.initialize(0, OffsetAndEpoch(0, 0))
    q.to_unattached_voted(1, 0, B)
    with pytest.raises(ValueError):
        q.to_unattached_voted(2, 0, C)


def test_the_election_timeout_is_random_in_t_to_2t() -> None:
    q, _ = _quorum(None)
    draws = {q.random_election_deadline(0) for _ in range(200)}
    assert min(draws) >= 1000 and max(draws) < 2000 and len(draws) > 50
