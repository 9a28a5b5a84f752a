"""Voter changes of a dynamic quorum (KIP-853, kraft.version 1).

The leader takes AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter: each appends a
VotersRecord with the whole new set, in force from that moment (voter_history.py), and is
answered once it commits (AddRaftVoter with ``ack_when_committed=false``: once appended).
Before it appends, AddRaftVoter asks the new voter for its ApiVersions, as Kafka's leader does:
a voter whose kraft.version range misses the finalized level is refused (INVALID_REQUEST), one
that does not answer times out (REQUEST_TIMED_OUT). One change at a time: while a
VotersRecord is above the high watermark, or a new voter is being asked, another waits
(REQUEST_TIMED_OUT, as Kafka answers). A leader that removed itself resigns once the removal
commits.

Replicas send them too: a voter whose entry in the set is stale (its endpoints changed) sends
UpdateRaftVoter, and an observer controller with ``controller.quorum.auto.join.enable`` that
has caught up sends AddRaftVoter for itself -- after a RemoveRaftVoter of the replica that had
its id before (a voter restarted on a wiped disk comes back with a new directory id, so it
never votes with the empty log it now has). Either goes out instead of a Fetch, never beside
one: a replica keeps one request in flight to the leader.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

from . import messages as m
from .base import AddingVoter, ClientBase, PendingVoterChange, logger
from .leader import LeaderState
from .log import LogAppendInfo
from .messages import Message
from .states import NEVER, FollowerState
from .types import (
    Endpoint,
    Entry,
    KRaftVersion,
    NotLeaderError,
    RaftError,
    ReplicaKey,
    VoterNode,
    VoterSet,
)
from .voter_history import (
    SUPPORTED_KRAFT_VERSIONS,
    describe_voters,
    kraft_version_entry,
    voters_entry,
)

E = ErrorCode
ASKING_VERSIONS = -1  # a PendingVoterChange's offset while the new voter's ApiVersions is asked


class VoterChangeHandlers(ClientBase):
    # -- the leader ------------------------------------------------------------------------

    def _voter_change_refused(self, req: Mapping[str, Any]) -> tuple[ErrorCode, str] | None:
        """What every voter change checks first (Kafka's order)."""
        if not self._cluster_ok(req.get("cluster_id")):
            return E.INCONSISTENT_CLUSTER_ID, "the request names another cluster"
        st = self.quorum.state
        if not isinstance(st, LeaderState) or self._shutdown is not None:
            return E.NOT_LEADER_OR_FOLLOWER, f"node {self.local.id} is not the leader"
        return None

    def _voter_change_blocked(self, st: LeaderState) -> tuple[ErrorCode, str] | None:
        if st.high_watermark is None:
            return E.REQUEST_TIMED_OUT, "the leader has not committed its epoch yet"
        if self.voter_history.kraft_version() < KRaftVersion.DYNAMIC:
            return (E.UNSUPPORTED_VERSION, "the quorum's voters are static "
                    "(kraft.version 0, controller.quorum.voters): they cannot change")
        if self.voter_history.uncommitted_change(st.high_watermark) is not None:
            return E.REQUEST_TIMED_OUT, "another voter change is not committed yet"
        if self._adding is not None:
            return E.REQUEST_TIMED_OUT, f"node {self._adding.key.id} is being added"
        return None

    def _request_key(self, req: Mapping[str, Any]) -> ReplicaKey:
        directory = req.get("voter_directory_id")
        return ReplicaKey.of(int(req.get("voter_id", -1)),
                             directory if isinstance(directory, uuid.UUID) else None)

    def _voter_change_target(self, req: Mapping[str, Any]
                             ) -> tuple[LeaderState, ReplicaKey] | Message:
        """What AddRaftVoter and RemoveRaftVoter check first (Kafka's order): the leader and
        the voter's key (an id and a directory id), or the answer refusing them."""
        refused = self._voter_change_refused(req)
        if refused is not None:
            return m.voter_change_response(*refused)
        st = self.quorum.state
        assert isinstance(st, LeaderState)
        key = self._request_key(req)
        if key.id < 0 or key.directory_id is None:
            return m.voter_change_response(E.INVALID_REQUEST, "the voter needs an id and a "
                                           "directory id")
        return st, key

    def _handle_add_raft_voter_request(self, now: int, source: int,
                                       req: Mapping[str, Any]) -> Message | PendingVoterChange:
        target = self._voter_change_target(req)
        if not isinstance(target, tuple):
            return target
        st, key = target
        endpoints = m.endpoints_from_listeners(req.get("listeners") or [])
        if not any(e.name == self.settings.listener for e in endpoints):
            return m.voter_change_response(E.INVALID_REQUEST, "the voter has no endpoint on "
                                           f"the {self.settings.listener} listener")
        blocked = self._voter_change_blocked(st)
        if blocked is not None:
            return m.voter_change_response(*blocked)
        voters = self.quorum.voters
        if key.id in voters:
            return m.voter_change_response(E.DUPLICATE_VOTER, f"node {key.id} is a voter already")
        observer = st.observer_states.get(key)
        if observer is None or observer.last_caught_up_ms < 0 or \
                now - observer.last_fetch_ms >= self.settings.observer_session_timeout_ms:
            return m.voter_change_response(
                E.REQUEST_TIMED_OUT, f"{key!r} is not a caught-up observer of the leader: "
                "start it, and let it fetch the metadata log")
        # Kafka's next step: ask the new voter which kraft.version it supports (its
        # ApiVersions), answered in _handle_api_versions_response
        timeout = int(req.get("timeout", self.settings.request_timeout_ms))
        self._poll_voter_change(now)  # one committed before is answered first
        change = PendingVoterChange(ApiKey.ADD_RAFT_VOTER, st.epoch, ASKING_VERSIONS,
                                    now + max(0, timeout))
        self._voter_change = change
        self._adding = AddingVoter(key, endpoints, bool(req.get("ack_when_committed", True)),
                                   timeout, -1, change)
        self._adding.correlation_id = self._send(now, key.id, ApiKey.API_VERSIONS,
                                                 m.api_versions_request())
        return change

    def _handle_api_versions_response(self, now: int, source: int,
                                      resp: Mapping[str, Any]) -> bool:
        """The new voter's ApiVersions: the leader adds it if it supports the quorum's
        kraft.version (else INVALID_REQUEST) and nothing changed meanwhile."""
        adding = self._adding
        if adding is None or adding.key.id != source or self._voter_change is not adding.change:
            return True
        self._adding = None
        st = self.quorum.state
        if not isinstance(st, LeaderState) or st.epoch != adding.change.epoch:
            self._answer_voter_change(E.NOT_LEADER_OR_FOLLOWER, "the leader changed")
            return True
        error = int(resp.get("error_code", 0))
        if error != E.NONE:
            self._answer_voter_change(E.REQUEST_TIMED_OUT, f"node {source} answered "
                                      f"ApiVersions with {_name(error)}")
            return True
        lo, hi = m.supported_range(resp, "kraft.version")
        level = self.voter_history.kraft_version()
        if not lo <= level <= hi:
            logger.info("raft %d: AddRaftVoter of %r refused: it supports kraft.version %d-%d, "
                        "not the finalized %d", self.local.id, adding.key, lo, hi, level)
            self._answer_voter_change(E.INVALID_REQUEST, f"node {source} supports kraft.version "
                                      f"{lo} to {hi}, not the finalized {level}")
            return True
        blocked = self._voter_change_blocked(st)
        if blocked is None and adding.key.id in self.quorum.voters:
            blocked = E.DUPLICATE_VOTER, f"node {adding.key.id} is a voter already"
        if blocked is not None:
            self._answer_voter_change(*blocked)
            return True
        new = VoterSet.of([*self.quorum.voters, VoterNode(adding.key, adding.endpoints)])
        info = self._append_control(now, st, [voters_entry(new)])
        logger.info("raft %d: ADD_RAFT_VOTER: the voters become %s (offset %d, uncommitted)",
                    self.local.id, describe_voters(new), info.first_offset)
        adding.change.offset = info.first_offset
        if not adding.wait:
            self._answer_voter_change(E.NONE)
        return True

    def _adding_failed(self, destination: int, correlation_id: int) -> None:
        """The ApiVersions request to the new voter could not be sent or got no answer."""
        adding = self._adding
        if adding is not None and adding.key.id == destination \
                and adding.correlation_id == correlation_id:
            self._adding = None
            if self._voter_change is adding.change:
                self._answer_voter_change(E.REQUEST_TIMED_OUT, f"node {destination} is not "
                                          "ready to receive requests (ApiVersions failed)")

    def _handle_remove_raft_voter_request(self, now: int, source: int,
                                          req: Mapping[str, Any]) -> Message | PendingVoterChange:
        target = self._voter_change_target(req)
        if not isinstance(target, tuple):
            return target
        st, key = target
        blocked = self._voter_change_blocked(st)
        if blocked is not None:
            return m.voter_change_response(*blocked)
        voters = self.quorum.voters
        if not voters.is_voter(key) or voters.nodes[key.id].key.directory_id != key.directory_id:
            return m.voter_change_response(E.VOTER_NOT_FOUND, f"{key!r} is not a voter")
        if len(voters) == 1:
            return m.voter_change_response(E.VOTER_NOT_FOUND, "the only voter cannot be removed")
        new = VoterSet.of(n for n in voters if n.key.id != key.id)
        return self._append_voters(now, st, ApiKey.REMOVE_RAFT_VOTER, new,
                                   self.settings.request_timeout_ms, wait=True)

    def _handle_update_raft_voter_request(self, now: int, source: int,
                                          req: Mapping[str, Any]) -> Message:
        def answer(error: ErrorCode) -> Message:
            st = self.quorum.state
            leader_ep = next((e for e in st.leader_endpoints
                              if e.name == self.settings.listener), None)
            return m.update_raft_voter_response(error=error, leader_id=st.leader_id,
                                                epoch=self.quorum.epoch, leader_endpoint=leader_ep)

        if not self._cluster_ok(req.get("cluster_id")):
            return answer(E.INCONSISTENT_CLUSTER_ID)
        error = self._validate_leader_only(int(req.get("current_leader_epoch", -1)))
        if error is not None:
            return answer(error)
        st = self.quorum.state
        assert isinstance(st, LeaderState)
        key = self._request_key(req)
        endpoints = m.endpoints_from_listeners(req.get("listeners") or [])
        feature = req.get("k_raft_version_feature") or {}
        lo, hi = int(feature.get("min_supported_version", 0)), int(
            feature.get("max_supported_version", 0))
        if key.id < 0 or key.directory_id is None or lo > hi \
                or not any(e.name == self.settings.listener for e in endpoints):
            return answer(E.INVALID_REQUEST)
        blocked = self._voter_change_blocked(st)
        if blocked is not None:
            return answer(blocked[0])
        if not lo <= self.voter_history.kraft_version() <= hi:
            return answer(E.INVALID_REQUEST)
        voters = self.quorum.voters
        node = voters.nodes.get(key.id)
        if node is None or node.key.directory_id != key.directory_id:
            return answer(E.VOTER_NOT_FOUND)
        if set(node.endpoints) != set(endpoints):
            new = VoterSet.of(VoterNode(n.key, endpoints) if n.key.id == key.id else n
                              for n in voters)
            self._append_voters(now, st, ApiKey.UPDATE_RAFT_VOTER, new,
                                self.settings.request_timeout_ms, wait=False)
        return answer(E.NONE)

    def _append_voters(self, now: int, st: LeaderState, api_key: ApiKey, voters: VoterSet,
                       timeout_ms: int, *, wait: bool) -> Message | PendingVoterChange:
        """Append the new set after what the leader has taken so far; it counts at once."""
        info = self._append_control(now, st, [voters_entry(voters)])
        logger.info("raft %d: %s: the voters become %s (offset %d, uncommitted)",
                    self.local.id, api_key.name, describe_voters(voters), info.first_offset)
        if not wait:
            return m.voter_change_response(E.NONE)
        pending = PendingVoterChange(api_key, st.epoch, info.first_offset,
                                     now + max(0, timeout_ms))
        self._poll_voter_change(now)  # the one before committed: it is answered first
        self._voter_change = pending
        return pending

    def _answer_voter_change(self, error: ErrorCode, message: str | None = None) -> None:
        pending, self._voter_change = self._voter_change, None
        if pending is not None:
            pending.response = m.voter_change_response(error, message)
            self._completed.append(pending)

    def _poll_voter_change(self, now: int) -> int:
        """Answer a waiting voter change that committed, timed out, or lost its leader."""
        pending = self._voter_change
        if pending is None:
            return NEVER
        st = self.quorum.state
        asking = pending.offset == ASKING_VERSIONS
        if not isinstance(st, LeaderState) or st.epoch != pending.epoch:
            self._answer_voter_change(E.NOT_LEADER_OR_FOLLOWER, "the leader changed")
        elif not asking and st.high_watermark is not None and st.high_watermark > pending.offset:
            self._answer_voter_change(E.NONE)
        elif now >= pending.deadline_ms:
            self._answer_voter_change(
                E.REQUEST_TIMED_OUT, "the new voter did not answer ApiVersions in time" if asking
                else "the voter change did not commit in time (it may still commit)")
        else:
            return pending.deadline_ms
        if asking:
            self._adding = None
        return NEVER

    def _removed_leader_resigns(self, st: LeaderState) -> bool:
        """A leader no longer in the voter set leads until the removal commits."""
        return (not self.quorum.is_voter() and st.high_watermark is not None
                and self.voter_history.uncommitted_change(st.high_watermark) is None)

    def _maybe_update_own_entry(self, now: int, st: LeaderState) -> None:
        """A leader whose own voter entry has other endpoints than it listens on (it came back
        at another address and won) corrects it, as a follower would with UpdateRaftVoter."""
        q = self.quorum
        node = q.voters.nodes.get(self.local.id)
        if (node is None or not q.local_endpoints or self.local.directory_id is None
                or node.key.directory_id != self.local.directory_id
                or set(node.endpoints) == set(q.local_endpoints)
                or self._voter_change_blocked(st) is not None):
            return
        self._append_voters(now, st, ApiKey.UPDATE_RAFT_VOTER, VoterSet.of(
            VoterNode(n.key, q.local_endpoints) if n.key.id == self.local.id else n
            for n in q.voters), self.settings.request_timeout_ms, wait=False)

    def upgrade_kraft_version(self, level: int, now_ms: int | None = None) -> int | None:
        """kraft.version 0 -> 1 (``kafka-features upgrade --feature kraft.version=1``): the
        static voters, keyed with the directory ids they fetch with, become a VotersRecord,
        after a KRaftVersionRecord(1); from then on the voters can change. Returns the offset
        to wait for (None: at that level already). Raises NotLeaderError, or RaftError saying
        why not (a voter that never fetched with a directory id, no epoch committed yet)."""
        now = self._now if now_ms is None else now_ms
        st = self.quorum.state
        if not isinstance(st, LeaderState) or self._shutdown is not None:
            raise NotLeaderError(f"node {self.local.id} is not the leader")
        current = self.voter_history.kraft_version()
        if level == current:
            return None
        if level != KRaftVersion.DYNAMIC or current != KRaftVersion.STATIC:
            raise RaftError(f"kraft.version can go from 0 to 1 only, not from {int(current)} "
                            f"to {level}")
        if st.high_watermark is None:
            raise RaftError("the leader has not committed its epoch yet; try again")
        nodes, missing = [], []
        for node in self.quorum.voters:
            state = st.voter_states.get(node.key.id)
            directory = (self.local.directory_id if node.key.id == self.local.id
                         else state.fetched_directory_id if state is not None else None)
            if directory is None:
                missing.append(node.key.id)
            else:
                nodes.append(VoterNode(ReplicaKey(node.key.id, directory), node.endpoints))
        if missing:
            raise RaftError(f"voters {sorted(missing)} have not fetched with a directory id "
                            "(each needs a directory.id in its metadata log dir's "
                            "meta.properties, as `strom storage format` writes, and must be up)")
        info = self._append_control(now, st, [kraft_version_entry(KRaftVersion.DYNAMIC),
                                              voters_entry(VoterSet.of(nodes))])
        logger.info("raft %d: kraft.version 1: the voters are %s from now on (offset %d, "
                    "uncommitted)", self.local.id, describe_voters(VoterSet.of(nodes)),
                    info.last_offset)
        return info.last_offset

    def _append_control(self, now: int, st: LeaderState, entries: list[Entry]) -> LogAppendInfo:
        """A control batch of the leader's own, after the records it has taken so far: durable,
        followed (voter_history.py), and sent to the parked fetches at once."""
        if st.accumulator.groups:
            self._append_batches(now, st)  # records taken before it go first
        info = self.log.append_as_leader(entries, st.epoch, now)
        self.log.flush()
        st.accumulator.next_offset = self.log.end_offset()
        self._appended(info)
        for p in self._parked:
            p.woken = True
        if st.update_local_end_offset(self.log.end_offset()):
            self._on_leader_high_watermark(st)
        return info

    # -- voters and observers --------------------------------------------------------------

    def _maybe_send_voter_update(self, now: int, st: FollowerState) -> bool:
        """A voter whose entry in the set has other endpoints than its own sends
        UpdateRaftVoter to the leader (once per epoch when it succeeds). True if sent."""
        q = self.quorum
        if (self.voter_history.kraft_version() < KRaftVersion.DYNAMIC
                or not st.has_fetched_from_leader or self._voter_updated_epoch == st.epoch
                or not q.local_endpoints or self.local.directory_id is None):
            return False
        node = q.voters.nodes.get(self.local.id)
        if node is None or set(node.endpoints) == set(q.local_endpoints):
            return False
        if self.requests.has_any_inflight() or not self.requests.is_ready(st.leader, now):
            return False
        self._send(now, st.leader, ApiKey.UPDATE_RAFT_VOTER, m.update_raft_voter_request(
            cluster_id=self.cluster_id, epoch=st.epoch, voter=self.local,
            endpoints=q.local_endpoints, kraft_range=SUPPORTED_KRAFT_VERSIONS))
        return True

    def _maybe_auto_join(self, now: int, st: FollowerState) -> bool:
        """An observer controller with auto-join, caught up to the leader's high watermark,
        asks to become a voter (after removing a replica that had its id). True if sent."""
        q = self.quorum
        if (not self.auto_join or q.is_voter() or now < self._join_after_ms
                or self.voter_history.kraft_version() < KRaftVersion.DYNAMIC
                or not st.has_fetched_from_leader or st.high_watermark is None
                or self.log.end_offset() < st.high_watermark or not q.local_endpoints
                or self.local.directory_id is None):
            return False
        if self.requests.has_any_inflight() or not self.requests.is_ready(st.leader, now):
            return False
        self._join_after_ms = now + self.settings.request_timeout_ms
        old = q.voters.nodes.get(self.local.id)
        if old is not None:
            logger.info("raft %d: voter %d has another directory (%s): asking leader %d to "
                        "remove it, so this replica can join", self.local.id, self.local.id,
                        describe_voters(VoterSet.of([old])), st.leader)
            self._send(now, st.leader, ApiKey.REMOVE_RAFT_VOTER, m.remove_raft_voter_request(
                cluster_id=self.cluster_id, voter=old.key))
        else:
            logger.info("raft %d: caught up: asking leader %d to add it as a voter",
                        self.local.id, st.leader)
            self._send(now, st.leader, ApiKey.ADD_RAFT_VOTER, m.add_raft_voter_request(
                cluster_id=self.cluster_id, voter=self.local,
                timeout_ms=self.settings.request_timeout_ms, endpoints=q.local_endpoints,
                ack_when_committed=False))
        return True

    def _handle_add_raft_voter_response(self, now: int, source: int,
                                        resp: Mapping[str, Any]) -> bool:
        # taken: the next try (should this replica not see itself among the voters by then)
        # waits out the backoff set when it was sent
        return self._handle_voter_change_response(now, source, resp)

    def _handle_remove_raft_voter_response(self, now: int, source: int,
                                           resp: Mapping[str, Any]) -> bool:
        if int(resp.get("error_code", 0)) == E.NONE:
            self._join_after_ms = now  # the old key is gone: the AddRaftVoter may go at once
        return self._handle_voter_change_response(now, source, resp)

    def _handle_voter_change_response(self, now: int, source: int,
                                      resp: Mapping[str, Any]) -> bool:
        error = int(resp.get("error_code", 0))
        if error != E.NONE:
            logger.info("raft %d: voter change refused by node %d: %s %s", self.local.id,
                        source, _name(error), resp.get("error_message") or "")
        return True

    def _handle_update_raft_voter_response(self, now: int, source: int,
                                           resp: Mapping[str, Any]) -> bool:
        error = int(resp.get("error_code", 0))
        if error == E.NONE:
            self._voter_updated_epoch = self.quorum.epoch
            return True
        current = resp.get("current_leader") or {}
        leader = m.opt_id(int(current.get("leader_id", -1)))
        epoch = int(current.get("leader_epoch", -1))
        endpoints: tuple[Endpoint, ...] = ()
        if leader is not None and current.get("host"):
            endpoints = (Endpoint(self.settings.listener, str(current["host"]),
                                  int(current["port"])),)
        handled = self._common_response(now, error, leader, epoch, endpoints)
        if handled is None:
            logger.info("raft %d: UpdateRaftVoter refused by node %d: %s", self.local.id,
                        source, _name(error))
            return False
        return handled


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
