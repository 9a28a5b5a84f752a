"""The sans-IO Raft client: Kafka's KRaft replica logic with no sockets, threads or clock.

A driver (asyncio in production, `tests/unit/raft/sim.py` in the simulation) feeds it:
- `handle_request(now, source, api_key, request)`: an inbound RPC; returns the response, or a
  `Pending` for a Fetch parked until new data, a new high watermark or `max_wait` (long poll);
- `handle_response(now, source, api_key, correlation_id, response)` / `handle_failure(...)`:
  the answer (or the loss) of a request this client sent;
- `poll(now)`: timers and state work; returns the requests to send, the parked fetches that
  completed, and the time by which `poll` must run again.
The leader takes records with `append`. Committed batches, snapshots to load and leader
changes reach listeners from `poll`. The owner snapshots its state machine with
`create_snapshot` and drops the log below the latest snapshot with `trim_log`.

Request handling follows Kafka's validation order and error codes (design brief §1); state
transitions follow §2 (pre-vote, check-quorum, durable elections, the HW rule, divergence).
The handlers live in elections.py and replication.py, the shared state in base.py; this module
has the public API, the per-state poll and the listeners.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from strom.protocol.api_keys import ApiKey

from . import messages as m
from .base import (
    ListenerContext,
    Outbound,
    Parked,
    Pending,
    PollResult,
    RaftListener,
    Shutdown,
    logger,
)
from .elections import ElectionHandlers
from .leader import LeaderState
from .log import end_offset
from .messages import Message
from .replication import ReplicationHandlers
from .states import (
    NEVER,
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from .types import DataRecord, LeaderAndEpoch, NotLeaderError
from .voter_changes import VoterChangeHandlers

__all__ = ["Outbound", "Pending", "PollResult", "RaftClient", "RaftListener"]


class RaftClient(ElectionHandlers, ReplicationHandlers, VoterChangeHandlers):
    def initialize(self, now_ms: int) -> None:
        """Load the stored election and pick the start-up state (design brief §2.1)."""
        self._now = now_ms
        self._load_voters()
        self.quorum.initialize(now_ms, end_offset(self.log))
        self._initialized = True
        logger.info("raft %d starts as %s", self.local.id, self.quorum.state.describe())

    def register(self, listener: RaftListener) -> None:
        self._listeners.append(ListenerContext(listener))

    def shutdown(self, now_ms: int, timeout_ms: int) -> None:
        """Graceful stop: a leader resigns and tells the voters; see `shutdown_complete`."""
        self._shutdown = Shutdown(now_ms + timeout_ms)

    def shutdown_complete(self, now_ms: int) -> bool:
        if self._shutdown is None:
            return False
        return now_ms >= self._shutdown.deadline_ms or self.handed_over()

    def handed_over(self) -> bool:
        """Whether a stopping node may go without leaving the quorum leaderless: it is no
        voter, or the only one, or it knows another node leads."""
        q = self.quorum
        return (not q.is_voter() or q.is_only_voter()
                or (q.leader_id is not None and q.leader_id != self.local.id))

    def resign(self, epoch: int) -> None:
        """Step down as leader of `epoch` at the next poll (no-op otherwise)."""
        st = self.quorum.state
        if isinstance(st, LeaderState) and st.epoch == epoch:
            st.resign_requested = True

    def append(self, records: Sequence[bytes], *, epoch: int | None = None,
               now_ms: int | None = None) -> int:
        """Queue records as one atomic group; returns the offset of the last one. They reach
        the log at the next poll after the linger time, and commit when the HW passes them."""
        st = self.quorum.state
        if not isinstance(st, LeaderState) or (epoch is not None and epoch != st.epoch) \
                or st.resign_requested or self._shutdown is not None:
            raise NotLeaderError(f"node {self.local.id} is not the leader of epoch "
                                 f"{self.quorum.epoch if epoch is None else epoch}")
        if not records:
            raise ValueError("nothing to append")
        now = self._now if now_ms is None else now_ms
        return st.accumulator.add([DataRecord(bytes(r)) for r in records], now)

    def handle_request(self, now_ms: int, source: int, api_key: int,
                       request: Mapping[str, Any]) -> Message | Parked:
        self._require_initialized()
        self._now = now_ms
        handler = _REQUEST_HANDLERS.get(ApiKey(api_key))
        if handler is None:
            raise ValueError(f"not a Raft request: api key {api_key}")
        response: Message | Parked = handler(self, now_ms, source, request)
        return response

    def handle_response(self, now_ms: int, source: int, api_key: int, correlation_id: int,
                        response: Mapping[str, Any]) -> None:
        self._require_initialized()
        self._now = now_ms
        if not self.requests.is_expected(source, correlation_id):
            return  # answers a request made before a state change: no longer relevant
        handler = _RESPONSE_HANDLERS.get(ApiKey(api_key))
        if handler is None:
            raise ValueError(f"not a Raft response: api key {api_key}")
        ok = handler(self, now_ms, source, response)
        self.requests.on_result(source, correlation_id, ok, now_ms)

    def handle_failure(self, now_ms: int, destination: int, correlation_id: int) -> None:
        """The request could not be sent or its connection broke: back off from that peer."""
        self._now = now_ms
        self.requests.on_result(destination, correlation_id, False, now_ms)
        self._adding_failed(destination, correlation_id)

    def poll(self, now_ms: int) -> PollResult:
        self._require_initialized()
        self._now = now_ms
        self.requests.expire(now_ms)
        deadline = now_ms
        for _ in range(8):  # a transition may call for work in the new state at once
            before = self.quorum.state
            deadline = self._poll_state(now_ms)
            if self.quorum.state is before:
                break
        deadline = min(deadline, self._poll_voter_change(now_ms))
        self._complete_parked(now_ms)
        self._update_listeners()
        candidates = [deadline, *(p.deadline_ms for p in self._parked)]
        peer_deadline = self.requests.next_deadline(now_ms)
        if peer_deadline is not None:
            candidates.append(peer_deadline)
        if self._shutdown is not None:
            candidates.append(self._shutdown.deadline_ms)
        out, self._out = self._out, []
        done, self._completed = self._completed, []
        return PollResult(out, done, max(now_ms, min(candidates)))

    def _poll_state(self, now: int) -> int:
        st = self.quorum.state
        if isinstance(st, LeaderState):
            return self._poll_leader(now, st)
        if isinstance(st, CandidateState):
            return self._poll_candidate(now, st)
        if isinstance(st, ProspectiveState):
            return self._poll_prospective(now, st)
        if isinstance(st, FollowerState):
            return self._poll_follower(now, st)
        if isinstance(st, ResignedState):
            return self._poll_resigned(now, st)
        assert isinstance(st, UnattachedState)
        return self._poll_unattached(now, st)

    def _poll_leader(self, now: int, st: LeaderState) -> int:
        removed = self._removed_leader_resigns(st)
        if self._shutdown is not None or st.resign_requested or removed \
                or st.check_quorum_expired(now):
            if removed:
                logger.info("raft %d: no longer a voter (the removal committed): resigning",
                            self.local.id)
                self._poll_voter_change(now)  # answered as committed, before leadership ends
            elif st.check_quorum_expired(now):
                logger.info("raft %d: no majority fetched within %d ms: resigning",
                            self.local.id, self.settings.check_quorum_timeout_ms)
            self._to_resigned(now, st.non_leader_voters_by_descending_fetch_offset())
            return now
        if st.accumulator.ready(now):
            self._append_batches(now, st)
        self._maybe_update_own_entry(now, st)
        if now >= st.begin_quorum_deadline:
            for node in self.quorum.voters:
                if node.key.id != self.local.id and self.requests.is_ready(node.key.id, now):
                    self._send(now, node.key.id, ApiKey.BEGIN_QUORUM_EPOCH,
                               m.begin_quorum_epoch_request(
                                   cluster_id=self.cluster_id, voter=node.key,
                                   leader_id=self.local.id, epoch=st.epoch,
                                   leader_endpoints=st.endpoints))
            st.begin_quorum_deadline = now + self.settings.begin_quorum_epoch_interval_ms
        return st.next_deadline()

    def _poll_candidate(self, now: int, st: CandidateState) -> int:
        if st.election.is_won():
            self._to_leader(now)
            return now
        if st.election.is_lost() or now >= st.election_deadline:
            self._to_prospective(now)
            return now
        self._send_votes(now, st, pre_vote=False)
        return st.election_deadline

    def _poll_prospective(self, now: int, st: ProspectiveState) -> int:
        if self._shutdown is not None:
            return NEVER  # a stopping replica does not start elections
        if st.election.is_won():
            self._to_candidate(now)
            return now
        if st.election.is_lost() or now >= st.election_deadline:
            self._prospective_lost(now, st)
            return now
        self._send_votes(now, st, pre_vote=True)
        return st.election_deadline

    def _poll_follower(self, now: int, st: FollowerState) -> int:
        if self._shutdown is not None:
            return NEVER  # a follower stops at once
        if self.quorum.is_voter():
            if now >= st.fetch_deadline:
                logger.info("raft %d: no fetch from leader %d within %d ms", self.local.id,
                            st.leader, self.settings.fetch_timeout_ms)
                self._to_prospective(now)
                return now
            if not self._maybe_send_voter_update(now, st):
                self._fetch_from_leader(now, st)  # Fetch, or FetchSnapshot while downloading
            return st.fetch_deadline
        if now >= st.fetch_deadline:
            self._fetch_any_bootstrap(now)  # an observer looks for whoever leads now
            return NEVER
        if not self._maybe_auto_join(now, st):
            self._fetch_from_leader(now, st)
        return st.fetch_deadline

    def _poll_unattached(self, now: int, st: UnattachedState) -> int:
        if self.quorum.is_voter():
            if self._shutdown is not None:
                return NEVER
            if now >= st.election_deadline or self.quorum.is_only_voter():
                self._to_prospective(now)
                return now
        self._fetch_any_bootstrap(now)
        return st.election_deadline

    def _poll_resigned(self, now: int, st: ResignedState) -> int:
        for node_id in sorted(st.unacked):
            if self.requests.is_ready(node_id, now):
                self._send(now, node_id, ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(
                    cluster_id=self.cluster_id, leader_id=self.local.id, epoch=st.epoch,
                    preferred=st.preferred_successors, leader_endpoints=st.endpoints))
        if self._shutdown is not None:
            return self._shutdown.deadline_ms
        # (the only voter has no one to wait for: a restarted one-voter quorum elects at once;
        # a replica removed from the voters never stands again, so it does not wait either)
        if now >= st.election_deadline or self.quorum.is_only_voter() \
                or not self.quorum.is_voter():
            # A new epoch, so no fetch answer can name this replica leader any more.
            self._to_unattached(now, st.epoch + 1)
            return now
        return st.election_deadline

    def _update_listeners(self) -> None:
        st = self.quorum.state
        hw = st.high_watermark
        for ctx in self._listeners:
            if hw is not None and hw > ctx.next_offset:
                self._maybe_load_snapshot(ctx)
            if hw is not None and hw > ctx.next_offset:
                batches = self.log.read_batches(ctx.next_offset, hw)
                ctx.next_offset = hw
                if batches:
                    ctx.listener.handle_commit(batches)
            if isinstance(st, ResignedState):
                continue  # its leadership is over, and it cannot take appends
            if isinstance(st, LeaderState) and ctx.next_offset <= st.epoch_start_offset:
                continue  # announce the leadership once the listener has caught up to it
            leader = LeaderAndEpoch(st.leader_id, st.epoch)
            if ctx.last_leader != leader:
                ctx.last_leader = leader
                ctx.listener.handle_leader_change(leader)


_Handler = Callable[[RaftClient, int, int, Mapping[str, Any]], Any]
_REQUEST_HANDLERS: dict[ApiKey, _Handler] = {
    ApiKey.FETCH: RaftClient._handle_fetch_request,
    ApiKey.VOTE: RaftClient._handle_vote_request,
    ApiKey.BEGIN_QUORUM_EPOCH: RaftClient._handle_begin_quorum_epoch_request,
    ApiKey.END_QUORUM_EPOCH: RaftClient._handle_end_quorum_epoch_request,
    ApiKey.DESCRIBE_QUORUM: RaftClient._handle_describe_quorum_request,
    ApiKey.FETCH_SNAPSHOT: RaftClient._handle_fetch_snapshot_request,
    ApiKey.ADD_RAFT_VOTER: RaftClient._handle_add_raft_voter_request,
    ApiKey.REMOVE_RAFT_VOTER: RaftClient._handle_remove_raft_voter_request,
    ApiKey.UPDATE_RAFT_VOTER: RaftClient._handle_update_raft_voter_request,
}
_RESPONSE_HANDLERS: dict[ApiKey, _Handler] = {
    ApiKey.FETCH: RaftClient._handle_fetch_response,
    ApiKey.VOTE: RaftClient._handle_vote_response,
    ApiKey.BEGIN_QUORUM_EPOCH: RaftClient._handle_begin_quorum_epoch_response,
    ApiKey.END_QUORUM_EPOCH: RaftClient._handle_end_quorum_epoch_response,
    ApiKey.FETCH_SNAPSHOT: RaftClient._handle_fetch_snapshot_response,
    ApiKey.ADD_RAFT_VOTER: RaftClient._handle_add_raft_voter_response,
    ApiKey.REMOVE_RAFT_VOTER: RaftClient._handle_remove_raft_voter_response,
    ApiKey.UPDATE_RAFT_VOTER: RaftClient._handle_update_raft_voter_response,
    ApiKey.API_VERSIONS: RaftClient._handle_api_versions_response,
}
