"""Elections: Vote (with KIP-996 pre-vote), BeginQuorumEpoch and EndQuorumEpoch, both sides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

from . import messages as m
from .base import ClientBase, E
from .leader import LeaderState
from .log import end_offset
from .messages import Message
from .states import CandidateState, FollowerState, ProspectiveState, ResignedState, UnattachedState
from .types import OffsetAndEpoch, ReplicaKey


class ElectionHandlers(ClientBase):
    def _vote_response(self, error: ErrorCode, granted: bool) -> Message:
        return m.vote_response(error=error, epoch=self.quorum.epoch,
                               leader_id=self.quorum.leader_id, granted=granted,
                               nodes=self._nodes())

    def _handle_vote_request(self, now: int, source: int, req: Mapping[str, Any]) -> Message:
        if not self._cluster_ok(req.get("cluster_id")):
            return m.top_level_error(E.INCONSISTENT_CLUSTER_ID)
        part = m.vote_like_partition(req)
        if part is None:
            return m.top_level_error(E.INVALID_REQUEST)
        candidate_id = int(part.get("replica_id", -1))
        candidate_epoch = int(part.get("replica_epoch", 0))
        pre_vote = bool(part.get("pre_vote", False))
        last_epoch = int(part.get("last_offset_epoch", -1))
        last_offset = int(part.get("last_offset", -1))
        # A real vote comes from a candidate that bumped its epoch past everything in its log;
        # a pre-vote carries the current epoch, which its log may already hold.
        illegal = last_epoch > candidate_epoch if pre_vote else last_epoch >= candidate_epoch
        if last_offset < 0 or last_epoch < 0 or illegal:
            return self._vote_response(E.INVALID_REQUEST, False)
        error = self._validate_voter_only(candidate_id, candidate_epoch)
        if error is not None:
            return self._vote_response(error, False)
        if candidate_epoch > self.quorum.epoch:
            self._to_unattached(now, candidate_epoch)
        if not self._valid_voter_key(int(req.get("voter_id", -1)), part.get("voter_directory_id")):
            return self._vote_response(E.INVALID_VOTER_KEY, False)
        candidate = ReplicaKey.of(candidate_id, part.get("replica_directory_id"))
        up_to_date = OffsetAndEpoch(last_offset, last_epoch) >= end_offset(self.log)
        st = self.quorum.state
        granted = st.can_grant_vote(candidate, up_to_date, pre_vote)
        if granted and not pre_vote and st.voted_key is None \
                and isinstance(st, UnattachedState | ProspectiveState):
            self._to_unattached_voted(now, candidate_epoch, candidate)  # persisted before replying
        return self._vote_response(E.NONE, granted)

    def _handle_vote_response(self, now: int, source: int, resp: Mapping[str, Any]) -> bool:
        if int(resp.get("error_code", 0)) == E.UNSUPPORTED_VERSION \
                and isinstance(self.quorum.state, ProspectiveState):
            # The voter predates pre-vote (Vote v2): stand for election directly.
            self._to_candidate(now)
            return True
        outcome = self._handle_epoch_response(now, resp)
        if outcome is not None:
            return outcome
        part = m.vote_like_partition(resp) or {}
        st = self.quorum.state
        if isinstance(st, CandidateState | ProspectiveState):
            st.election.record(source, bool(part.get("vote_granted", False)))
            self._maybe_end_election(now)
        return True

    def _maybe_end_election(self, now: int) -> None:
        st = self.quorum.state
        if isinstance(st, CandidateState):
            if st.election.is_won():
                self._to_leader(now)
            elif st.election.is_lost():
                self._to_prospective(now)
        elif isinstance(st, ProspectiveState) and self._shutdown is None:
            if st.election.is_won():
                self._to_candidate(now)
                self._maybe_end_election(now)  # a lone voter wins at once
            elif st.election.is_lost():
                self._prospective_lost(now, st)

    def _prospective_lost(self, now: int, st: ProspectiveState) -> None:
        if st.known_leader is not None:
            self._to_follower(now, st.epoch, st.known_leader, st.known_leader_endpoints)
        else:
            self._to_unattached(now, st.epoch)

    def _send_votes(self, now: int, election_state: CandidateState | ProspectiveState,
                    pre_vote: bool) -> None:
        if election_state.election.is_lost():
            return
        last = end_offset(self.log)
        for voter_id in election_state.election.unrecorded():
            if voter_id == self.local.id or not self.requests.is_ready(voter_id, now):
                continue
            self._send(now, voter_id, ApiKey.VOTE, m.vote_request(
                cluster_id=self.cluster_id, voter=self.quorum.voters.nodes[voter_id].key,
                candidate=self.local, epoch=election_state.epoch, last=last, pre_vote=pre_vote))

    def _epoch_response(self, error: ErrorCode) -> Message:
        return m.epoch_response(error=error, epoch=self.quorum.epoch,
                                leader_id=self.quorum.leader_id, nodes=self._nodes())

    def _accept_leader_notice(self, now: int, req: Mapping[str, Any]
                              ) -> tuple[Message | None, int, Mapping[str, Any]]:
        """What Begin- and EndQuorumEpoch share: validate, then learn the leader and epoch they
        name. Returns (an error answer or None, the leader id, the partition's fields)."""
        if not self._cluster_ok(req.get("cluster_id")):
            return m.top_level_error(E.INCONSISTENT_CLUSTER_ID), -1, {}
        part = m.vote_like_partition(req)
        if part is None:
            return m.top_level_error(E.INVALID_REQUEST), -1, {}
        leader = int(part.get("leader_id", -1))
        epoch = int(part.get("leader_epoch", -1))
        error = self._validate_voter_only(leader, epoch)
        if error is not None:
            return self._epoch_response(error), leader, part
        endpoints = (m.endpoints_from_listeners(req.get("leader_endpoints") or [])
                     or self.quorum.voters.endpoints(leader))
        self._maybe_transition(now, leader, epoch, endpoints)
        return None, leader, part

    def _handle_begin_quorum_epoch_request(self, now: int, source: int,
                                           req: Mapping[str, Any]) -> Message:
        answer, _, part = self._accept_leader_notice(now, req)
        if answer is not None:
            return answer
        if not self._valid_voter_key(int(req.get("voter_id", -1)), part.get("voter_directory_id")):
            return self._epoch_response(E.INVALID_VOTER_KEY)
        return self._epoch_response(E.NONE)

    def _handle_end_quorum_epoch_request(self, now: int, source: int,
                                         req: Mapping[str, Any]) -> Message:
        answer, leader, part = self._accept_leader_notice(now, req)
        if answer is not None:
            return answer
        st = self.quorum.state
        if isinstance(st, FollowerState) and st.leader == leader:
            # The leader is going: the best-placed successor stands at once, the others later.
            st.fetch_deadline = now + self._end_epoch_backoff(m.preferred_candidates(part))
            # Its leader said it is gone, so this follower no longer vouches for it: it may
            # grant pre-votes (else the successor could not win before every fetch timed out).
            st.has_fetched_from_leader = False
        return self._epoch_response(E.NONE)

    def _end_epoch_backoff(self, preferred: list[ReplicaKey]) -> int:
        limit = self.settings.election_backoff_max_ms
        position = next((i for i, k in enumerate(preferred) if k.matches(self.local)),
                        len(preferred))
        if position == 0:
            return 0
        if position >= len(preferred):
            return limit
        return min(limit, (limit >> (len(preferred) - 1)) << (position - 1))

    def _handle_begin_quorum_epoch_response(self, now: int, source: int,
                                            resp: Mapping[str, Any]) -> bool:
        outcome = self._handle_epoch_response(now, resp)
        if outcome is not None:
            return outcome
        st = self.quorum.state
        if isinstance(st, LeaderState):
            st.add_acknowledgement(source)
        return True

    def _handle_end_quorum_epoch_response(self, now: int, source: int,
                                          resp: Mapping[str, Any]) -> bool:
        outcome = self._handle_epoch_response(now, resp)
        if outcome is not None:
            return outcome
        st = self.quorum.state
        if isinstance(st, ResignedState):
            st.unacked.discard(source)
        return True

    def _handle_epoch_response(self, now: int, resp: Mapping[str, Any]) -> bool | None:
        """The shared part of Vote and Begin/EndQuorumEpoch responses: errors and the leader and
        epoch they name; None = a plain success, for the caller to go on with."""
        top = int(resp.get("error_code", 0))
        if top != 0:
            return self._top_level_error(top)
        part = m.vote_like_partition(resp)
        if part is None:
            return False
        error = int(part.get("error_code", 0))
        leader = m.opt_id(int(part.get("leader_id", -1)))
        epoch = int(part.get("leader_epoch", -1))
        handled = self._common_response(
            now, error, leader, epoch, self._leader_endpoints(resp.get("node_endpoints"), leader))
        if handled is not None:
            return handled
        if error != E.NONE:
            return self._unexpected_error(error)
        return None
