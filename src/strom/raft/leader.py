"""The leader's state: replica progress, the quorum's high watermark, check-quorum, and the
append accumulator.

The HW is the largest offset a majority of voters has (the leader counting with its flushed
end offset, followers with their last fetch offset, which they only send after fsync). A new
leader exposes nothing until that offset passes its epoch start, i.e. until the LeaderChange
record of its own epoch is committed: that is what makes entries of older epochs safe to
expose. The HW never moves back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import ClassVar

from .states import EpochState
from .types import Endpoint, Entry, RaftSettings, ReplicaKey, VoterSet


@dataclass
class ReplicaState:
    """A replica's progress as the leader sees it (DescribeQuorum reports these)."""

    key: ReplicaKey
    end_offset: int | None = None
    last_fetch_ms: int = -1
    last_fetch_leader_end: int = -1
    last_caught_up_ms: int = -1
    acknowledged: bool = False
    # the directory id it fetches with (a static voter's key has none: the kraft.version
    # upgrade needs every voter's)
    fetched_directory_id: uuid.UUID | None = None

    def update_follower(self, now_ms: int, fetch_offset: int, leader_end: int | None) -> None:
        # "Caught up" = reached the leader's end; reaching the end the leader had at the
        # previous fetch means it was caught up as of that previous fetch.
        if leader_end is not None:
            if fetch_offset >= leader_end:
                self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
            elif self.last_fetch_leader_end > 0 and fetch_offset >= self.last_fetch_leader_end:
                self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
            self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = max(self.last_fetch_ms, now_ms)
        self.end_offset = fetch_offset
        self.acknowledged = True


_BATCH_OVERHEAD = 61  # a v2 batch header


class Accumulator:
    """Records waiting to be appended: each `append` call stays whole in one batch; a batch
    is cut at `max_batch_bytes` or when the linger time is up."""

    def __init__(self, next_offset: int, settings: RaftSettings) -> None:
        self.next_offset = next_offset
        self.settings = settings
        self.groups: list[list[Entry]] = []
        self.size = 0
        self.deadline: int | None = None

    def add(self, records: list[Entry], now_ms: int) -> int:
        size = sum(r.size() for r in records)
        if size + _BATCH_OVERHEAD > self.settings.max_batch_bytes:
            raise ValueError(f"{size} bytes of records do not fit in one batch "
                             f"({self.settings.max_batch_bytes} at most)")
        if self.deadline is None:
            self.deadline = now_ms + self.settings.append_linger_ms
        self.groups.append(records)
        self.size += size
        self.next_offset += len(records)
        return self.next_offset - 1

    def ready(self, now_ms: int) -> bool:
        return bool(self.groups) and (
            self.size + _BATCH_OVERHEAD >= self.settings.max_batch_bytes
            or (self.deadline is not None and now_ms >= self.deadline))

    def drain(self) -> list[list[Entry]]:
        """The batches to append, in order."""
        batches: list[list[Entry]] = []
        current: list[Entry] = []
        size = _BATCH_OVERHEAD
        for group in self.groups:
            group_size = sum(r.size() for r in group)
            if current and size + group_size > self.settings.max_batch_bytes:
                batches.append(current)
                current, size = [], _BATCH_OVERHEAD
            current.extend(group)
            size += group_size
        if current:
            batches.append(current)
        self.groups, self.size, self.deadline = [], 0, None
        return batches


class LeaderState(EpochState):
    name: ClassVar[str] = "Leader"

    def __init__(self, *, local: ReplicaKey, epoch: int, epoch_start_offset: int,
                 voters: VoterSet, granting: set[int], endpoints: tuple[Endpoint, ...],
                 now_ms: int, settings: RaftSettings) -> None:
        super().__init__(epoch=epoch, voted_key=local, high_watermark=None)
        self.local = local
        self.epoch_start_offset = epoch_start_offset
        self.voters = voters
        self.granting = frozenset(granting)
        self.endpoints = endpoints
        self.settings = settings
        self.voter_states = {n.key.id: ReplicaState(n.key, acknowledged=n.key.id == local.id)
                             for n in voters}
        self.observer_states: dict[ReplicaKey, ReplicaState] = {}
        self.fetched_voters: set[int] = set()
        self.check_quorum_deadline = now_ms + settings.check_quorum_timeout_ms
        self.begin_quorum_deadline = now_ms  # announce the epoch at once
        self.accumulator = Accumulator(epoch_start_offset, settings)
        self.resign_requested = False

    @property
    def leader_id(self) -> int | None:
        return self.local.id

    @property
    def leader_endpoints(self) -> tuple[Endpoint, ...]:
        return self.endpoints

    # -- progress and the high watermark
    def update_local_end_offset(self, end_offset: int) -> bool:
        """The leader's own flushed end offset; True if the HW moved."""
        state = self._state_of(self.local)
        if state.end_offset is not None and end_offset < state.end_offset:
            raise ValueError(f"leader end offset went back: {state.end_offset} -> {end_offset}")
        state.end_offset = end_offset
        return self._maybe_update_high_watermark()

    def update_replica_state(self, key: ReplicaKey, now_ms: int, fetch_offset: int) -> bool:
        """A Fetch at `fetch_offset` from `key`; True if the HW moved."""
        if key.id < 0 or key.id == self.local.id:
            return False  # a consumer, or a bogus request naming this node
        state = self._state_of(key)
        state.update_follower(now_ms, fetch_offset, self._state_of(self.local).end_offset)
        if key.directory_id is not None:
            state.fetched_directory_id = key.directory_id
        self.update_check_quorum(key, now_ms)
        return self._is_voter_state(state) and self._maybe_update_high_watermark()

    def _is_voter_state(self, state: ReplicaState) -> bool:
        return self.voter_states.get(state.key.id) is state

    def _state_of(self, key: ReplicaKey) -> ReplicaState:
        state = self.voter_states.get(key.id)
        if state is not None and state.key.matches(key):
            return state
        observer = self.observer_states.get(key)
        if observer is None:
            observer = self.observer_states[key] = ReplicaState(key)
        return observer

    def _maybe_update_high_watermark(self) -> bool:
        ends = sorted((s.end_offset for s in self.voter_states.values()
                       if s.end_offset is not None), reverse=True)
        index = len(self.voter_states) // 2
        if index >= len(ends):
            return False  # fewer than a majority have reported an offset
        candidate = ends[index]
        if candidate <= self.epoch_start_offset:
            return False  # nothing of this epoch committed yet
        return self.update_high_watermark(candidate)

    def update_voters(self, voters: VoterSet, now_ms: int) -> None:
        """A voter change was appended (or truncated away): count the new set's majority from
        now on. A voter keeps the progress it made as an observer, and a removed one goes on
        as an observer until it stops fetching. Check-quorum starts over: a leader that was
        alone never had a deadline that mattered, and the new voter needs a moment to fetch."""
        old = self.voter_states
        self.check_quorum_deadline = now_ms + self.settings.check_quorum_timeout_ms
        self.voters = voters
        self.voter_states = {}
        for node in voters:
            state = old.get(node.key.id)
            if state is None or not state.key.matches(node.key):
                state = self.observer_states.pop(node.key, None) or ReplicaState(
                    node.key, acknowledged=node.key.id == self.local.id)
            state.key = node.key  # a static voter's key gains its directory id (kraft.version 1)
            self.voter_states[node.key.id] = state
        for node_id, state in old.items():
            if node_id not in self.voter_states and node_id != self.local.id:
                self.observer_states[state.key] = state
        self.fetched_voters &= set(self.voter_states)

    # -- check quorum
    def update_check_quorum(self, key: ReplicaKey, now_ms: int) -> None:
        state = self.voter_states.get(key.id)
        if state is None or not state.key.matches(key):
            return
        self.fetched_voters.add(key.id)
        needed = self.voters.majority() - (1 if self.local.id in self.voter_states else 0)
        if len(self.fetched_voters) >= needed:
            self.fetched_voters.clear()
            self.check_quorum_deadline = now_ms + self.settings.check_quorum_timeout_ms

    def check_quorum_expired(self, now_ms: int) -> bool:
        if len(self.voter_states) == 1:
            return False
        return now_ms >= self.check_quorum_deadline

    def next_deadline(self) -> int:
        deadlines = [self.begin_quorum_deadline]
        if len(self.voter_states) > 1:
            deadlines.append(self.check_quorum_deadline)
        if self.accumulator.deadline is not None:
            deadlines.append(self.accumulator.deadline)
        return min(deadlines)

    # -- reporting
    def add_acknowledgement(self, node_id: int) -> None:
        state = self.voter_states.get(node_id)
        if state is not None:
            state.acknowledged = True

    def non_leader_voters_by_descending_fetch_offset(self) -> list[ReplicaKey]:
        others = [s for i, s in self.voter_states.items() if i != self.local.id]
        others.sort(key=lambda s: (-(s.end_offset if s.end_offset is not None else -1), s.key.id))
        return [s.key for s in others]

    def observers(self, now_ms: int) -> list[ReplicaState]:
        """Observers that fetched within the session timeout (older ones are forgotten)."""
        timeout = self.settings.observer_session_timeout_ms
        for key in [k for k, s in self.observer_states.items()
                    if now_ms - s.last_fetch_ms >= timeout]:
            del self.observer_states[key]
        return list(self.observer_states.values())
