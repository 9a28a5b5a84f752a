"""The Raft client's state and plumbing, shared by its message handlers: transitions between
epoch states, request validation, and the error handling every response goes through.

`RaftClient` (client.py) is this plus `ElectionHandlers` (elections.py: Vote, Begin/EndQuorumEpoch)
and `ReplicationHandlers` (replication.py: Fetch, FetchSnapshot, DescribeQuorum).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

from . import messages as m
from .channels import RequestManager
from .leader import LeaderState
from .log import LogAppendInfo, RaftLog, RawSnapshotWriter, SnapshotContent, snapshot_quorum
from .messages import Message
from .quorum import QuorumState
from .quorum_state import QuorumStateStore
from .states import EpochState, ResignedState
from .types import (
    Endpoint,
    Entry,
    FatalRaftError,
    KRaftVersion,
    LeaderAndEpoch,
    OffsetAndEpoch,
    RaftBatch,
    RaftSettings,
    ReplicaKey,
    VoterSet,
    leader_change_record,
)
from .voter_history import (
    VoterHistory,
    describe_voters,
    kraft_version_entry,
    voter_set_of_record,
    voters_entry,
)

logger = logging.getLogger("strom.raft.client")

E = ErrorCode


class RaftListener(Protocol):
    """The state machine: sees only committed batches, in order, and leader changes."""

    def handle_commit(self, batches: list[RaftBatch]) -> None: ...

    def handle_load_snapshot(self, snapshot: SnapshotContent) -> None:
        """Replace the whole state with a snapshot's; commits go on from its end offset. Comes
        first to a new listener when the log has a snapshot, and whenever the listener is
        behind the log start (after a snapshot download, or a trim it had not caught up to)."""
        ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


@dataclass(eq=False)
class Pending:
    """A parked Fetch. `response` is set when it completes (reported by `poll`)."""

    source: int
    replica: ReplicaKey
    partition: Mapping[str, Any]
    max_bytes: int
    epoch: int
    deadline_ms: int
    woken: bool = False
    response: Message | None = None


@dataclass(eq=False)
class PendingVoterChange:
    """An AddRaftVoter/RemoveRaftVoter/UpdateRaftVoter answered once its VotersRecord (at
    `offset`) commits, or at `deadline_ms`, or when this leadership ends (voter_changes.py)."""

    api_key: ApiKey
    epoch: int
    offset: int
    deadline_ms: int
    response: Message | None = None


Parked = Pending | PendingVoterChange  # a request answered later, from `poll`


@dataclass(eq=False)
class AddingVoter:
    """An AddRaftVoter waiting for the new voter's ApiVersions answer (its kraft.version
    range), sent as correlation id `correlation_id`; `change` is the parked request."""

    key: ReplicaKey
    endpoints: tuple[Endpoint, ...]
    wait: bool  # ack_when_committed
    timeout_ms: int
    correlation_id: int
    change: PendingVoterChange


@dataclass(frozen=True)
class Outbound:
    destination: int
    api_key: ApiKey
    correlation_id: int
    request: Message


@dataclass
class PollResult:
    outbound: list[Outbound]
    completed: list[Parked]
    deadline_ms: int  # absolute: call poll again by then


@dataclass
class ListenerContext:
    listener: RaftListener
    next_offset: int = 0
    last_leader: LeaderAndEpoch | None = None
    fresh: bool = True  # nothing loaded or committed yet: starts from the latest snapshot


@dataclass
class Shutdown:
    deadline_ms: int


class ClientBase:
    def __init__(self, *, node_id: int, voters: VoterSet, log: RaftLog, store: QuorumStateStore,
                 rng: random.Random, cluster_id: str | None = None,
                 settings: RaftSettings | None = None, directory_id: uuid.UUID | None = None,
                 bootstrap: Sequence[int] | None = None,
                 local_endpoints: tuple[Endpoint, ...] = (),
                 kraft_version: KRaftVersion = KRaftVersion.STATIC,
                 bootstrap_endpoints: Mapping[int, Endpoint] | None = None,
                 auto_join: bool = False) -> None:
        self.settings = settings or RaftSettings()
        self.local = ReplicaKey(node_id, directory_id)
        self.cluster_id = cluster_id
        self.log = log
        self.quorum = QuorumState(local=self.local, voters=voters, store=store, rng=rng,
                                  settings=self.settings, local_endpoints=local_endpoints,
                                  kraft_version=kraft_version)
        # the voters in force: the configured ones (kraft.version 0), or the latest VotersRecord
        # of snapshot and log (1); `_load_voters` reads them at start-up
        self.voter_history = VoterHistory(voters, kraft_version)
        self.requests = RequestManager(
            self.settings, list(bootstrap) if bootstrap is not None else voters.ids(), rng)
        self._bootstrap = list(bootstrap) if bootstrap is not None else []
        self._parked: list[Pending] = []
        self._completed: list[Parked] = []
        self._voter_change: PendingVoterChange | None = None
        self._adding: AddingVoter | None = None  # asked for its ApiVersions
        # pseudo node ids (-2, -3, ...) of controller.quorum.bootstrap.servers, for the driver
        self.bootstrap_endpoints: dict[int, Endpoint] = dict(bootstrap_endpoints or {})
        self.auto_join = auto_join
        self._join_after_ms = 0  # auto-join: when it may ask the leader again
        self._voter_updated_epoch: int | None = None  # UpdateRaftVoter done in this epoch
        self._out: list[Outbound] = []
        self._listeners: list[ListenerContext] = []
        self._next_cid = 0
        self._now = 0
        self._shutdown: Shutdown | None = None
        self._initialized = False
        # The snapshot a Follower is downloading (its state's `fetching_snapshot`).
        self._snapshot_download: RawSnapshotWriter | None = None

    @property
    def state(self) -> EpochState:
        return self.quorum.state

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def high_watermark(self) -> int | None:
        return self.quorum.state.high_watermark

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.quorum.leader_id, self.quorum.epoch)

    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, LeaderState)

    def _require_initialized(self) -> None:
        if not self._initialized:
            raise RuntimeError("call initialize() first")

    def _send(self, now: int, destination: int, api_key: ApiKey, request: Message) -> int:
        cid = self._next_cid
        self._next_cid += 1
        self.requests.on_sent(destination, cid, now)
        self._out.append(Outbound(destination, api_key, cid, request))
        return cid

    def adding_voter_endpoints(self, node_id: int) -> tuple[Endpoint, ...]:
        """The endpoints of a replica an AddRaftVoter names, while the leader asks it for its
        ApiVersions (it is no voter yet: the driver finds its address here)."""
        adding = self._adding
        return adding.endpoints if adding is not None and adding.key.id == node_id else ()

    def _before_transition(self) -> None:
        # Answers to requests made in the old state must not steer the new one.
        self.requests.reset_all()
        if self._snapshot_download is not None:  # a download belongs to its Follower state
            self._snapshot_download.abort()
            self._snapshot_download = None

    def _to_unattached(self, now: int, epoch: int) -> None:
        self._before_transition()
        self.quorum.to_unattached(now, epoch)
        self._log_state()

    def _to_unattached_voted(self, now: int, epoch: int, candidate: ReplicaKey) -> None:
        self._before_transition()
        self.quorum.to_unattached_voted(now, epoch, candidate)
        self._log_state()

    def _to_follower(self, now: int, epoch: int, leader: int,
                     endpoints: tuple[Endpoint, ...]) -> None:
        self._before_transition()
        self.quorum.to_follower(now, epoch, leader, endpoints)
        self._log_state()

    def _to_prospective(self, now: int) -> None:
        self._before_transition()
        self.quorum.to_prospective(now)
        self._log_state()

    def _to_candidate(self, now: int) -> None:
        self._before_transition()
        self.quorum.to_candidate(now)
        self._log_state()

    def _to_resigned(self, now: int, successors: list[ReplicaKey]) -> None:
        self._before_transition()
        self.quorum.to_resigned(now, successors)
        self._log_state()

    def _to_leader(self, now: int) -> None:
        self._before_transition()
        st = self.quorum.to_leader(now, epoch_start_offset=self.log.end_offset())
        self._log_state()
        # The epoch starts with a LeaderChange control batch: the HW may only pass records of
        # older epochs once a record of this one commits, and this is that record.
        self.log.initialize_leader_epoch(st.epoch)
        records: list[Entry] = [
            leader_change_record(self.local.id, self.quorum.voters.ids(), set(st.granting))]
        if self.voter_history.needs_logging():
            # The voters come from the bootstrap snapshot, which no replica fetches: the
            # first leader writes them into the log (Kafka does the same).
            records += [kraft_version_entry(self.voter_history.kraft_version()),
                        voters_entry(self.quorum.voters)]
        self._appended(self.log.append_as_leader(records, st.epoch, now))
        self.log.flush()
        st.accumulator.next_offset = self.log.end_offset()
        if st.update_local_end_offset(self.log.end_offset()):
            self._on_leader_high_watermark(st)

    def _append_batches(self, now: int, st: LeaderState) -> None:
        for records in st.accumulator.drain():
            self._appended(self.log.append_as_leader(list(records), st.epoch, now))
        self.log.flush()  # the leader counts its own end offset only once it is durable
        leo = self.log.end_offset()
        if leo != st.accumulator.next_offset:
            raise FatalRaftError(f"log end {leo} != accumulator {st.accumulator.next_offset}")
        for p in self._parked:
            if int(p.partition["fetch_offset"]) < leo:
                p.woken = True
        if st.update_local_end_offset(leo):
            self._on_leader_high_watermark(st)

    # -- the voter set (voter_history.py) ----------------------------------------------------

    def _load_voters(self) -> None:
        """At start-up: the voter set of the latest snapshot, then of the log's control
        records after it."""
        history = self.voter_history
        sid = self.log.latest_snapshot_id()
        if sid is not None:
            self._reset_voters_to_snapshot(sid)
        else:
            history.next_offset = self.log.start_offset()
        end = self.log.end_offset()
        history.add(self.log.control_entries(history.next_offset, end), end)
        self._voters_changed()

    def _reset_voters_to_snapshot(self, sid: OffsetAndEpoch) -> None:
        level, record = snapshot_quorum(self.log, sid)
        self.voter_history.reset(sid.offset, KRaftVersion(level),
                                 voter_set_of_record(record) if record is not None else None)

    def _appended(self, info: LogAppendInfo | None) -> None:
        """Follow the control records just appended to the log (voter changes count at once)."""
        if info is None:
            return
        if self.voter_history.add(info.controls, self.log.end_offset()):
            self._voters_changed()

    def _truncated(self, offset: int) -> None:
        if self.voter_history.truncate_to(offset):
            self._voters_changed()

    def _voters_changed(self) -> None:
        q = self.quorum
        voters = self.voter_history.latest()
        q.kraft_version = self.voter_history.kraft_version()
        if voters == q.voters:
            return  # (the voters' keys and addresses are the same; kraft.version may be not)
        q.voters = voters
        # whom to ask for the leader: the voters, and a dynamic quorum's bootstrap servers too
        # (the voters may have moved on from the ones those name)
        self.requests.bootstrap = [*self._bootstrap,
                                   *(i for i in voters.ids() if i not in self._bootstrap)]
        st = q.state
        if isinstance(st, LeaderState):
            st.update_voters(voters, self._now)
            if st.update_local_end_offset(self.log.end_offset()):
                self._on_leader_high_watermark(st)
        if self._initialized:
            logger.info("raft %d: the voters are now %s", self.local.id, describe_voters(voters))

    def _log_state(self) -> None:
        logger.info("raft %d: %s", self.local.id, self.quorum.state.describe())

    def _consistent_leader(self, epoch: int, leader: int | None) -> bool:
        q = self.quorum
        if leader is not None and leader == self.local.id:
            if epoch > q.epoch:
                return False
            return epoch < q.epoch or isinstance(q.state, LeaderState | ResignedState)
        return (epoch != q.epoch or leader is None or q.leader_id is None
                or leader == q.leader_id)

    def _maybe_transition(self, now: int, leader: int | None, epoch: int,
                          endpoints: tuple[Endpoint, ...]) -> None:
        """Follow what a message says of the leader and epoch, if it is news."""
        q = self.quorum
        if not self._consistent_leader(epoch, leader):
            raise FatalRaftError(
                f"node {self.local.id}: leader {leader} in epoch {epoch} contradicts "
                f"{q.state.describe()}")
        if epoch > q.epoch:
            if leader is not None:
                self._to_follower(now, epoch, leader, endpoints)
            else:
                self._to_unattached(now, epoch)
        elif leader is not None and leader != self.local.id and (
                q.leader_id is None or len(endpoints) > len(q.state.leader_endpoints)):
            self._to_follower(now, epoch, leader, endpoints)

    def _cluster_ok(self, cluster_id: object) -> bool:
        return cluster_id is None or self.cluster_id is None or cluster_id == self.cluster_id

    def _validate_voter_only(self, remote_id: int, epoch: int) -> ErrorCode | None:
        if epoch < self.quorum.epoch:
            return E.FENCED_LEADER_EPOCH
        if remote_id < 0:
            return E.INVALID_REQUEST
        return None

    def _validate_leader_only(self, epoch: int) -> ErrorCode | None:
        if epoch < self.quorum.epoch:
            return E.FENCED_LEADER_EPOCH
        if epoch > self.quorum.epoch:
            return E.UNKNOWN_LEADER_EPOCH
        if not isinstance(self.quorum.state, LeaderState):
            return E.NOT_LEADER_OR_FOLLOWER
        if self._shutdown is not None:
            return E.BROKER_NOT_AVAILABLE
        return None

    def _valid_voter_key(self, voter_id: int, directory_id: object) -> bool:
        """Whether a Vote/BeginQuorumEpoch meant this replica (an unset key means any)."""
        if voter_id < 0:
            return True
        if voter_id != self.local.id:
            return False
        key = ReplicaKey.of(voter_id, directory_id if isinstance(directory_id, uuid.UUID)
                            else None)
        return key.directory_id is None or key.directory_id == self.local.directory_id

    def _nodes(self, *, with_rack: bool = False) -> list[Message]:
        st = self.quorum.state
        return m.node_endpoints(st.leader_id, st.leader_endpoints, self.settings.listener,
                                with_rack=with_rack)

    def _leader_endpoints(self, nodes: object, leader: int | None) -> tuple[Endpoint, ...]:
        if leader is None:
            return ()
        found = m.endpoints_from_nodes(nodes if isinstance(nodes, list) else [], leader,
                                       self.settings.listener)
        return found or self.quorum.voters.endpoints(leader)

    def _endpoints_of(self, node: int) -> tuple[Endpoint, ...]:
        """Where requests to `node` go: a bootstrap server's address, or a voter's."""
        bootstrap = self.bootstrap_endpoints.get(node)
        return (bootstrap,) if bootstrap is not None else self.quorum.voters.endpoints(node)

    def _common_response(self, now: int, error: int, leader: int | None, epoch: int,
                         endpoints: tuple[Endpoint, ...]) -> bool | None:
        """Errors every response shares (brief §2.6). None: go on with the API's own handling;
        True/False: handled, and whether the peer is ready again (False = back off)."""
        q = self.quorum
        if epoch < q.epoch or error == E.UNKNOWN_LEADER_EPOCH:
            return True  # we are ahead: the answer is stale
        if epoch > q.epoch or error in (E.FENCED_LEADER_EPOCH, E.NOT_LEADER_OR_FOLLOWER):
            self._maybe_transition(now, leader, epoch, endpoints)
            return True
        if epoch == q.epoch and leader is not None and (
                q.leader_id is None or (endpoints and not q.state.leader_endpoints)):
            self._maybe_transition(now, leader, epoch, endpoints)
            # An observer learns the leader and takes the records of the same answer.
            return None if error == E.NONE else True
        if error == E.BROKER_NOT_AVAILABLE:
            return False
        if error == E.INVALID_VOTER_KEY:
            return True
        if error == E.INVALID_REQUEST:
            # Kafka treats this as a bug and throws; a peer must not be able to stop us.
            logger.error("raft %d: a peer answered INVALID_REQUEST", self.local.id)
            return False
        return None

    def _top_level_error(self, error: int) -> bool:
        if error != E.BROKER_NOT_AVAILABLE:
            logger.warning("raft %d: top-level error %s in a response", self.local.id,
                           _error_name(error))
        return False

    def _unexpected_error(self, error: int) -> bool:
        logger.warning("raft %d: unexpected error %s in a response", self.local.id,
                       _error_name(error))
        return False

    def _on_leader_high_watermark(self, st: LeaderState) -> None:
        assert st.high_watermark is not None
        self.log.update_high_watermark(st.high_watermark)
        for p in self._parked:  # every waiting follower learns the new HW
            p.woken = True


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
