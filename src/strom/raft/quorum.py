"""QuorumState: the current epoch state, the transitions between states, and their durability.

A durable transition writes the new election (epoch, leader, vote) to the quorum-state store
*before* the replica acts in the new state, so a crash can never make it vote twice in one
epoch or forget that it led one. Prospective and Resigned are memory-only: they keep what the
previous state stored.

The store is quorum_state.py's `QuorumStateStore` (the `quorum-state` file, or its memory
twin in the simulation).
"""

from __future__ import annotations

import random

from .leader import LeaderState
from .quorum_state import ElectionState, QuorumStateStore
from .states import (
    NEVER,
    CandidateState,
    EpochElection,
    EpochState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from .types import Endpoint, KRaftVersion, OffsetAndEpoch, RaftSettings, ReplicaKey, VoterSet


class QuorumState:
    def __init__(self, *, local: ReplicaKey, voters: VoterSet, store: QuorumStateStore,
                 rng: random.Random, settings: RaftSettings,
                 local_endpoints: tuple[Endpoint, ...] = (),
                 kraft_version: KRaftVersion = KRaftVersion.STATIC) -> None:
        self.local = local
        self.voters = voters
        self.store = store
        self.kraft_version = kraft_version
        self.rng = rng
        self.settings = settings
        self.local_endpoints = local_endpoints or voters.endpoints(local.id)
        self.state: EpochState = UnattachedState(epoch=0)

    # -- queries
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        return self.state.leader_id

    def is_voter(self) -> bool:
        return self.voters.is_voter(self.local)

    def is_only_voter(self) -> bool:
        return self.is_voter() and len(self.voters) == 1

    def random_election_deadline(self, now_ms: int) -> int:
        """Now plus a random time in [T, 2T); never for an observer."""
        if not self.is_voter():
            return NEVER
        t = self.settings.election_timeout_ms
        return now_ms + self.rng.randrange(t, 2 * t)

    def _voter_ids(self) -> frozenset[int]:
        return frozenset(self.voters.ids())

    # -- start-up (§2.1)
    def initialize(self, now_ms: int, log_end: OffsetAndEpoch) -> None:
        stored = self.store.read() or ElectionState(0)
        voted = (None if stored.voted_id is None
                 else ReplicaKey(stored.voted_id, stored.voted_directory_id))
        if stored.epoch < log_end.epoch:
            # The log saw an epoch the store never recorded (the store was lost or is older):
            # start over in that epoch, knowing nothing of its leader or votes.
            self._durable(UnattachedState(
                epoch=log_end.epoch, election_deadline=self.random_election_deadline(now_ms)))
        elif stored.leader_id is not None and stored.leader_id == self.local.id:
            # It led this epoch: never lead or vote in it again (unflushed data may be lost, and
            # (offset, epoch) must stay unique), so wait for the next election as Resigned.
            self.state = ResignedState(
                epoch=stored.epoch, voted_key=voted, local_id=self.local.id,
                endpoints=self.local_endpoints, unacked=set(),
                election_deadline=self.random_election_deadline(now_ms))
        elif stored.leader_id is None and voted is not None and voted.matches(self.local) \
                and self.is_voter():
            self.state = CandidateState(
                epoch=stored.epoch, voted_key=voted,
                election=EpochElection(self.voters.ids(), self.local.id),
                election_deadline=self.random_election_deadline(now_ms))
        elif stored.leader_id is not None:
            endpoints = self.voters.endpoints(stored.leader_id)
            if endpoints:
                self.state = FollowerState(
                    epoch=stored.epoch, voted_key=voted, leader=stored.leader_id,
                    endpoints=endpoints, fetch_deadline=now_ms + self.settings.fetch_timeout_ms)
            else:
                self.state = UnattachedState(
                    epoch=stored.epoch, voted_key=voted, known_leader=stored.leader_id,
                    election_deadline=self.random_election_deadline(now_ms))
        else:
            self.state = UnattachedState(
                epoch=stored.epoch, voted_key=voted,
                election_deadline=self.random_election_deadline(now_ms))

    # -- transitions
    def _durable(self, state: EpochState) -> None:
        self.store.write(state.stored(self._voter_ids()), int(self.kraft_version))
        self.state = state

    def _same_epoch_vote(self, epoch: int) -> ReplicaKey | None:
        return self.state.voted_key if epoch == self.state.epoch else None

    def _carried_hw(self) -> int | None:
        return self.state.high_watermark

    def to_unattached(self, now_ms: int, epoch: int) -> None:
        if epoch < self.epoch:
            raise ValueError(f"epoch {epoch} is older than {self.epoch}")
        self._durable(UnattachedState(
            epoch=epoch, voted_key=self._same_epoch_vote(epoch), high_watermark=self._carried_hw(),
            election_deadline=self.random_election_deadline(now_ms)))

    def to_unattached_voted(self, now_ms: int, epoch: int, candidate: ReplicaKey) -> None:
        if epoch != self.epoch or self.state.voted_key is not None:
            raise ValueError(f"cannot vote for {candidate} in epoch {epoch} from {self.state}")
        self._durable(UnattachedState(
            epoch=epoch, voted_key=candidate, high_watermark=self._carried_hw(),
            election_deadline=self.random_election_deadline(now_ms)))

    def to_follower(self, now_ms: int, epoch: int, leader: int,
                    endpoints: tuple[Endpoint, ...]) -> None:
        if epoch < self.epoch:
            raise ValueError(f"epoch {epoch} is older than {self.epoch}")
        if leader == self.local.id:
            raise ValueError("cannot follow itself")
        endpoints = endpoints or self.voters.endpoints(leader)
        if not endpoints:
            self._durable(UnattachedState(
                epoch=epoch, voted_key=self._same_epoch_vote(epoch), known_leader=leader,
                high_watermark=self._carried_hw(),
                election_deadline=self.random_election_deadline(now_ms)))
            return
        self._durable(FollowerState(
            epoch=epoch, voted_key=self._same_epoch_vote(epoch), high_watermark=self._carried_hw(),
            leader=leader, endpoints=endpoints,
            fetch_deadline=now_ms + self.settings.fetch_timeout_ms))

    def to_prospective(self, now_ms: int) -> None:
        if not self.is_voter():
            raise ValueError("an observer never stands for election")
        self.state = ProspectiveState(
            epoch=self.epoch, voted_key=self.state.voted_key, high_watermark=self._carried_hw(),
            known_leader=self.state.leader_id if not isinstance(self.state, ResignedState)
            else None,
            known_leader_endpoints=self.state.leader_endpoints,
            election=EpochElection(self.voters.ids(), self.local.id),
            election_deadline=self.random_election_deadline(now_ms))

    def to_candidate(self, now_ms: int) -> None:
        if not self.is_voter():
            raise ValueError("an observer never stands for election")
        self._durable(CandidateState(
            epoch=self.epoch + 1, voted_key=self.local, high_watermark=self._carried_hw(),
            election=EpochElection(self.voters.ids(), self.local.id),
            election_deadline=self.random_election_deadline(now_ms)))

    def to_leader(self, now_ms: int, epoch_start_offset: int) -> LeaderState:
        state = self.state
        if not isinstance(state, CandidateState) or not state.election.is_won():
            raise ValueError(f"cannot lead from {state.describe()}")
        leader = LeaderState(
            local=self.local, epoch=state.epoch, epoch_start_offset=epoch_start_offset,
            voters=self.voters, granting=set(state.election.granted),
            endpoints=self.local_endpoints, now_ms=now_ms, settings=self.settings)
        self._durable(leader)
        return leader

    def to_resigned(self, now_ms: int, successors: list[ReplicaKey]) -> None:
        state = self.state
        if not isinstance(state, LeaderState):
            raise ValueError(f"cannot resign from {state.describe()}")
        self.state = ResignedState(
            epoch=state.epoch, voted_key=state.voted_key, high_watermark=state.high_watermark,
            local_id=self.local.id, endpoints=self.local_endpoints,
            preferred_successors=tuple(successors),
            unacked={i for i in self.voters.ids() if i != self.local.id},
            election_deadline=self.random_election_deadline(now_ms))
