"""The per-epoch states of a replica (Kafka's EpochState family), minus the leader (leader.py).

Each state is a small mutable record: the epoch, what the replica knows of the leader and of
its own vote, the high watermark known so far, and its timers as absolute deadlines in
milliseconds (the core never reads a clock; `now_ms` comes in with every call). Vote granting
(§2.4 of the design brief) lives here because it depends only on the state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from .quorum_state import ElectionState
from .types import Endpoint, OffsetAndEpoch, ReplicaKey

NEVER = 1 << 62  # a deadline that never comes (observers' election timer)


class EpochElection:
    """The tally of one (pre-)vote round among the voters."""

    def __init__(self, voters: Iterable[int], local_id: int) -> None:
        self.voters = frozenset(voters)
        self.granted: set[int] = {local_id} if local_id in self.voters else set()
        self.rejected: set[int] = set()

    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def record(self, voter: int, granted: bool) -> None:
        if voter not in self.voters or voter in self.granted or voter in self.rejected:
            return  # a non-voter's answer counts for nothing; a voter answers once
        (self.granted if granted else self.rejected).add(voter)

    def unrecorded(self) -> list[int]:
        return sorted(self.voters - self.granted - self.rejected)

    def is_won(self) -> bool:
        return len(self.granted) >= self.majority()

    def is_lost(self) -> bool:
        """Too many refusals for the rest to make a majority."""
        return len(self.voters) - len(self.rejected) < self.majority()


@dataclass
class EpochState:
    """Fields every state has. `voted_key` survives every transition within one epoch: a
    replica votes at most once per epoch, whatever states it passes through."""

    name: ClassVar[str] = "?"
    epoch: int
    voted_key: ReplicaKey | None = None
    high_watermark: int | None = None

    @property
    def leader_id(self) -> int | None:
        return None

    @property
    def leader_endpoints(self) -> tuple[Endpoint, ...]:
        return ()

    def stored(self, voters: frozenset[int]) -> ElectionState:
        """What a durable transition into this state writes to the quorum-state file."""
        vote = self.voted_key
        return ElectionState(self.epoch, self.leader_id, vote.id if vote else None,
                             vote.directory_id if vote else None, voters)

    def can_grant_vote(self, candidate: ReplicaKey, up_to_date: bool, pre_vote: bool) -> bool:
        return False

    def update_high_watermark(self, hw: int | None) -> bool:
        """Move the known HW forward (never back); True if it moved."""
        if hw is None or (self.high_watermark is not None and hw <= self.high_watermark):
            return False
        self.high_watermark = hw
        return True

    def describe(self) -> str:
        return f"{self.name}(epoch={self.epoch}, leader={self.leader_id}, voted={self.voted_key})"


def _unattached_grant(state: EpochState, candidate: ReplicaKey, up_to_date: bool,
                      pre_vote: bool) -> bool:
    if pre_vote:
        return up_to_date
    if state.voted_key is not None:
        return state.voted_key.matches(candidate)
    if state.leader_id is not None:
        return False
    return up_to_date


@dataclass
class UnattachedState(EpochState):
    """No leader known for this epoch (or one known whose endpoints are not)."""

    name: ClassVar[str] = "Unattached"
    known_leader: int | None = None
    election_deadline: int = NEVER

    @property
    def leader_id(self) -> int | None:
        return self.known_leader

    def can_grant_vote(self, candidate: ReplicaKey, up_to_date: bool, pre_vote: bool) -> bool:
        return _unattached_grant(self, candidate, up_to_date, pre_vote)


@dataclass
class ProspectiveState(EpochState):
    """Pre-vote (KIP-996): asks the voters whether they would vote, without bumping the epoch,
    so a replica cut off from the quorum cannot disturb it. Never persisted: the stored
    election (leader, vote) stays what the previous state wrote."""

    name: ClassVar[str] = "Prospective"
    known_leader: int | None = None
    known_leader_endpoints: tuple[Endpoint, ...] = ()
    election: EpochElection = field(default_factory=lambda: EpochElection((), -1))
    election_deadline: int = NEVER

    @property
    def leader_id(self) -> int | None:
        return self.known_leader

    @property
    def leader_endpoints(self) -> tuple[Endpoint, ...]:
        return self.known_leader_endpoints

    def can_grant_vote(self, candidate: ReplicaKey, up_to_date: bool, pre_vote: bool) -> bool:
        return _unattached_grant(self, candidate, up_to_date, pre_vote)


@dataclass
class CandidateState(EpochState):
    """Asks for real votes in a new epoch, having voted for itself (persisted)."""

    name: ClassVar[str] = "Candidate"
    election: EpochElection = field(default_factory=lambda: EpochElection((), -1))
    election_deadline: int = NEVER

    def can_grant_vote(self, candidate: ReplicaKey, up_to_date: bool, pre_vote: bool) -> bool:
        if pre_vote:
            return up_to_date
        return self.voted_key is not None and self.voted_key.matches(candidate)


@dataclass
class FollowerState(EpochState):
    """Knows the leader of this epoch and fetches from it."""

    name: ClassVar[str] = "Follower"
    leader: int = -1
    endpoints: tuple[Endpoint, ...] = ()
    fetch_deadline: int = NEVER
    # Whether a Fetch to this leader succeeded in this state: from then on the leader is known
    # to be alive, so pre-votes are refused (a replica that lost its own link must not win).
    has_fetched_from_leader: bool = False
    fetching_snapshot: OffsetAndEpoch | None = None

    @property
    def leader_id(self) -> int | None:
        return self.leader

    @property
    def leader_endpoints(self) -> tuple[Endpoint, ...]:
        return self.endpoints

    def can_grant_vote(self, candidate: ReplicaKey, up_to_date: bool, pre_vote: bool) -> bool:
        return pre_vote and not self.has_fetched_from_leader and up_to_date


@dataclass
class ResignedState(EpochState):
    """A leader that stepped down: it tells the voters (EndQuorumEpoch) and waits for the next
    election without taking part in this epoch's. Not persisted: the stored election still
    names it leader, so a restart comes back Resigned in the same epoch."""

    name: ClassVar[str] = "Resigned"
    local_id: int = -1
    endpoints: tuple[Endpoint, ...] = ()
    preferred_successors: tuple[ReplicaKey, ...] = ()
    unacked: set[int] = field(default_factory=set)
    election_deadline: int = NEVER

    @property
    def leader_id(self) -> int | None:
        return self.local_id

    @property
    def leader_endpoints(self) -> tuple[Endpoint, ...]:
        return self.endpoints
