"""A deterministic simulation of a Raft quorum: simulated time, a lossy network, crashes.

`SimNetwork` runs `RaftClient`s (the sans-IO core) against each other with one seeded random
source: message delays, drops, partitions, crashes with or without the loss of unflushed data,
and restarts from the persisted log and quorum-state. Nothing reads a wall clock, so a seed
replays exactly. `History` checks Raft's safety properties as the run goes:
- at most one leader per epoch, across every node's whole history;
- committed entries are never lost or changed (every node's listener sees the same entry at an
  offset, and the log below each node's HW matches them);
- each node's HW never moves back (per incarnation; across restarts for voters too).

With ``wire=True`` every message also goes through Strom's codec at a version Kafka 4 speaks,
so field names and defaults are checked on every hop; records travel as a key into a side
table, since the memory log's records are Python objects.

Snapshots: each node's state machine (`SimListener.values`, the data records' values in
order) can be snapshotted and the log trimmed below it (`snapshot`, `schedule_snapshots`).
`History` then also checks every snapshot a listener loads against the committed entries: the
log prefix is gone, so the state machine state is what is compared.
"""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec, response_codec
from strom.raft.base import Parked, PendingVoterChange
from strom.raft.client import Pending, RaftClient
from strom.raft.leader import LeaderState
from strom.raft.log import MemoryRaftLog, SnapshotContent
from strom.raft.quorum_state import MemoryQuorumStateStore
from strom.raft.types import (
    DataRecord,
    Endpoint,
    Entry,
    KRaftVersion,
    LeaderAndEpoch,
    OffsetAndEpoch,
    RaftBatch,
    RaftSettings,
    ReplicaKey,
    VoterNode,
    VoterSet,
)

# Versions a Kafka 4.x node uses between controllers (Vote v2 carries pre_vote).
WIRE_VERSIONS: dict[int, tuple[int, ...]] = {
    ApiKey.FETCH: (13, 15, 16, 17, 18),
    ApiKey.VOTE: (2,),
    ApiKey.BEGIN_QUORUM_EPOCH: (0, 1),
    ApiKey.END_QUORUM_EPOCH: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (2,),
    ApiKey.FETCH_SNAPSHOT: (0, 1),
    ApiKey.ADD_RAFT_VOTER: (0, 1),
    ApiKey.REMOVE_RAFT_VOTER: (0,),
    ApiKey.UPDATE_RAFT_VOTER: (0,),
    ApiKey.API_VERSIONS: (3, 4),
}

ADMIN = 0  # the source of requests a test sends itself (AddRaftVoter, ...): no node
LISTENER = "CONTROLLER"


def sim_endpoints(node_id: int) -> tuple[Endpoint, ...]:
    return (Endpoint(LISTENER, f"node-{node_id}", 9093),)


def api_versions_response(node: SimNode) -> dict[str, Any]:
    """A node's ApiVersions answer, as far as Raft reads it (kraft.version's range)."""
    lo, hi = node.kraft_versions
    return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0,
            "supported_features": [{"name": "kraft.version", "min_version": lo,
                                    "max_version": hi}],
            "finalized_features_epoch": -1, "finalized_features": [],
            "zk_migration_ready": False}


class InvariantViolation(AssertionError):
    pass


class SimClock:
    def __init__(self) -> None:
        self.now = 0


class History:
    """Everything every node said, checked against Raft's safety properties as it arrives."""

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.committed: dict[int, tuple[int, Entry]] = {}  # offset -> (epoch, record)
        self.hw: dict[tuple[int, int], int] = {}  # (node, incarnation) -> highest HW seen
        self.voter_hw: dict[int, int] = {}
        self.leader_changes: list[tuple[int, int, LeaderAndEpoch]] = []  # (time, node, leader)
        self.became_leader: list[tuple[int, int, int]] = []  # (time, node, epoch)
        self.snapshots_loaded: list[tuple[int, OffsetAndEpoch]] = []  # (node, snapshot id)

    def check_leader(self, now: int, node: int, epoch: int) -> None:
        known = self.leaders.get(epoch)
        if known is None:
            self.leaders[epoch] = node
            self.became_leader.append((now, node, epoch))
        elif known != node:
            raise InvariantViolation(f"two leaders in epoch {epoch}: {known} and {node}")

    def check_hw(self, node: int, incarnation: int, hw: int | None, voter: bool) -> None:
        if hw is None:
            return
        key = (node, incarnation)
        if hw < self.hw.get(key, -1):
            raise InvariantViolation(f"node {node}: HW went back {self.hw[key]} -> {hw}")
        self.hw[key] = hw
        if voter:
            if hw < self.voter_hw.get(node, -1):
                raise InvariantViolation(
                    f"voter {node}: HW went back across a restart {self.voter_hw[node]} -> {hw}")
            self.voter_hw[node] = hw

    def check_entry(self, node: int, offset: int, epoch: int, record: Entry) -> None:
        known = self.committed.setdefault(offset, (epoch, record))
        if known != (epoch, record):
            raise InvariantViolation(
                f"node {node}: committed offset {offset} is {(epoch, record)}, "
                f"another node committed {known}")

    def committed_end(self) -> int:
        end = 0
        while end in self.committed:
            end += 1
        return end

    def state_at(self, end: int) -> list[bytes]:
        """The state machine after the committed entries below `end`: its data values."""
        missing = [o for o in range(end) if o not in self.committed]
        if missing:
            raise InvariantViolation(f"state at {end} asked, offsets {missing[:5]}... unknown")
        return [r.value for o in range(end) for r in (self.committed[o][1],)
                if isinstance(r, DataRecord)]

    def check_snapshot(self, node: int, snapshot: SnapshotContent) -> None:
        """A snapshot a listener loads holds exactly the committed state at its end offset."""
        end, epoch = snapshot.snapshot_id.offset, snapshot.snapshot_id.epoch
        if list(snapshot.values) != self.state_at(end):
            raise InvariantViolation(f"node {node}: snapshot {snapshot.snapshot_id} differs from "
                                     "the committed state at its end")
        if end > 0 and self.committed[end - 1][0] != epoch:
            raise InvariantViolation(f"node {node}: snapshot {snapshot.snapshot_id}, but offset "
                                     f"{end - 1} was committed in epoch "
                                     f"{self.committed[end - 1][0]}")
        self.snapshots_loaded.append((node, snapshot.snapshot_id))


class SimListener:
    def __init__(self, node: SimNode, history: History, clock: SimClock) -> None:
        self.node = node
        self.history = history
        self.clock = clock
        self.next_offset = 0
        self.entries_start = 0  # offset of entries[0]: the end of the last snapshot loaded
        self.entries: list[tuple[int, Entry]] = []
        self.values: list[bytes] = []  # the state machine: every committed data value, in order

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        for batch in batches:
            if batch.base_offset != self.next_offset:
                raise InvariantViolation(
                    f"node {self.node.id}: commit gap, expected {self.next_offset}, "
                    f"got {batch.base_offset}")
            for k, record in enumerate(batch.records):
                self.history.check_entry(self.node.id, batch.base_offset + k, batch.epoch, record)
                self.entries.append((batch.epoch, record))
                if isinstance(record, DataRecord):
                    self.values.append(record.value)
            self.next_offset = batch.end_offset

    def handle_load_snapshot(self, snapshot: SnapshotContent) -> None:
        self.history.check_snapshot(self.node.id, snapshot)
        self.values = list(snapshot.values)
        self.next_offset = self.entries_start = snapshot.snapshot_id.offset
        self.entries = []

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.history.leader_changes.append((self.clock.now, self.node.id, leader))


@dataclass
class SimNode:
    id: int
    voter: bool
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    store: MemoryQuorumStateStore = field(default_factory=MemoryQuorumStateStore)
    client: RaftClient | None = None
    listener: SimListener | None = None
    incarnation: int = 0
    wake_token: int = 0
    verified_to: int = 0  # log prefix already checked against the committed entries
    directory_id: uuid.UUID | None = None  # a dynamic quorum's replicas have one
    kraft_versions: tuple[int, int] = (0, 1)  # the range its ApiVersions answers

    @property
    def alive(self) -> bool:
        return self.client is not None


@dataclass
class _Envelope:
    src: int
    dst: int
    src_incarnation: int
    dst_incarnation: int
    api_key: int
    correlation_id: int
    message: Any
    is_request: bool
    version: int = -1


class SimNetwork:
    def __init__(self, seed: int, voters: Iterable[int], observers: Iterable[int] = (), *,
                 settings: RaftSettings | None = None, min_delay_ms: int = 1,
                 max_delay_ms: int = 5, drop_rate: float = 0.0, wire: bool = False,
                 cluster_id: str | None = "sim-cluster", dynamic: bool = False,
                 auto_join: Iterable[int] = (), directories: bool = False) -> None:
        self.rng = random.Random(seed)
        self.clock = SimClock()
        self.settings = settings or RaftSettings()
        self.dynamic = dynamic  # kraft.version 1: voters with directory ids, voter changes
        self.auto_join = set(auto_join)
        self.nodes = {i: SimNode(i, True) for i in voters}
        self.nodes.update({i: SimNode(i, False) for i in observers})
        if dynamic or directories:  # a static quorum's replicas may have directory ids too
            for node in self.nodes.values():
                node.directory_id = uuid.UUID(int=self.rng.getrandbits(128))
        if dynamic:
            self.voter_set = VoterSet.of(
                VoterNode(ReplicaKey(i, self.nodes[i].directory_id), sim_endpoints(i))
                for i in voters)
        else:  # controller.quorum.voters: ids and addresses only
            self.voter_set = VoterSet.static(voters)
        self.bootstrap = list(voters)
        self.admin_responses: dict[int, Any] = {}  # correlation id -> response to ADMIN
        self._admin_ids = itertools.count(1)
        self.min_delay_ms = min_delay_ms
        self.max_delay_ms = max_delay_ms
        self.drop_rate = drop_rate
        self.wire = wire
        self.cluster_id = cluster_id
        self.history = History()
        self._queue: list[tuple[int, int, str, Any]] = []
        self._seq = itertools.count()
        self._groups: list[frozenset[int]] | None = None
        self._pending: dict[int, tuple[Parked, _Envelope]] = {}
        self._records: dict[int, object] = {}
        self._record_keys = itertools.count(1)
        self.delivered = 0
        self.steps = 0
        self.sent: dict[tuple[int, int], int] = {}  # (source, api key) -> requests sent
        self.watchers: list[Callable[[_Envelope], None]] = []  # see every delivered message
        self.snapshots_made: list[tuple[int, OffsetAndEpoch]] = []  # (node, snapshot id)

    # ------------------------------------------------------------------ set-up and faults

    def start(self) -> SimNetwork:
        for node in self.nodes.values():
            self._boot(node)
        return self

    def _boot(self, node: SimNode) -> None:
        node.incarnation += 1
        # a dynamic quorum's later replicas start knowing no voters (formatted without
        # initial controllers): they learn them from the log
        initial = node.id in self.voter_set or not self.dynamic
        client = RaftClient(
            node_id=node.id, voters=self.voter_set if initial else VoterSet.none(),
            log=node.log, store=node.store,
            rng=random.Random(self.rng.getrandbits(64)), cluster_id=self.cluster_id,
            settings=self.settings, directory_id=node.directory_id,
            bootstrap=self.bootstrap if self.dynamic else None,
            bootstrap_endpoints={i: sim_endpoints(i)[0] for i in self.bootstrap}
            if self.dynamic else None,
            local_endpoints=sim_endpoints(node.id),
            kraft_version=KRaftVersion.DYNAMIC if self.dynamic else KRaftVersion.STATIC,
            auto_join=node.id in self.auto_join)
        listener = SimListener(node, self.history, self.clock)
        client.register(listener)
        client.initialize(self.clock.now)
        node.client, node.listener = client, listener
        node.verified_to = 0
        self._schedule_poll(node, self.clock.now)

    def crash(self, node_id: int, *, lose_unflushed: bool = False) -> None:
        node = self.nodes[node_id]
        node.client = node.listener = None
        node.incarnation += 1  # whatever is in flight to it is lost with its connections
        node.log.crash(lose_unflushed=lose_unflushed)

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        assert node.client is None, f"node {node_id} is running"
        self._boot(node)

    def add_observer(self, node_id: int, *, auto_join: bool = False,
                     log: MemoryRaftLog | None = None) -> SimNode:
        """A brand-new observer joins now, with an empty log (`log`: of the kind the other
        nodes have, e.g. a disk log)."""
        assert node_id not in self.nodes
        node = self.nodes[node_id] = SimNode(node_id, False)
        if log is not None:
            node.log = log
        if self.dynamic:
            node.directory_id = uuid.UUID(int=self.rng.getrandbits(128))
        if auto_join:
            self.auto_join.add(node_id)
        self._boot(node)
        return node

    def wipe(self, node_id: int, *, auto_join: bool = False) -> None:
        """Crash a node and bring it back on an empty disk, formatted anew (a new directory
        id, no voters known): under a dynamic quorum it is an observer."""
        self.crash(node_id)
        node = self.nodes[node_id]
        node.log, node.store = MemoryRaftLog(), MemoryQuorumStateStore()
        node.directory_id = uuid.UUID(int=self.rng.getrandbits(128))
        node.voter = False
        self.history.voter_hw.pop(node_id, None)
        (self.auto_join.add if auto_join else self.auto_join.discard)(node_id)
        self._boot(node)

    def admin(self, node_id: int, api_key: ApiKey, message: dict[str, Any]) -> int:
        """Send `message` to a node as an admin client would; the response lands in
        `admin_responses[<the returned id>]`."""
        cid = next(self._admin_ids)
        dst = self.nodes[node_id]
        env = _Envelope(ADMIN, node_id, 0, dst.incarnation, api_key, cid, message, True)
        self._push(self.clock.now + 1, "deliver", self._through_codec(env) if self.wire else env)
        return cid

    def partition(self, *groups: Iterable[int]) -> None:
        """Only nodes in the same group talk; nodes named nowhere form one more group."""
        named = [frozenset(g) for g in groups]
        rest = frozenset(self.nodes) - frozenset().union(*named)
        self._groups = [*named, rest] if rest else named

    def heal(self) -> None:
        self._groups = None

    def connected(self, a: int, b: int) -> bool:
        if self._groups is None or ADMIN in (a, b):
            return True
        return any(a in g and b in g for g in self._groups)

    # ------------------------------------------------------------------ the event loop

    def _push(self, at: int, kind: str, payload: Any) -> None:
        heapq.heappush(self._queue, (at, next(self._seq), kind, payload))

    def _schedule_poll(self, node: SimNode, at: int) -> None:
        node.wake_token += 1
        self._push(at, "poll", (node.id, node.incarnation, node.wake_token))

    def _send(self, env: _Envelope) -> None:
        if not self.connected(env.src, env.dst) or self.rng.random() < self.drop_rate:
            return
        if self.wire:
            env = self._through_codec(env)
        self._push(self.clock.now + self.rng.randint(self.min_delay_ms, self.max_delay_ms),
                   "deliver", env)

    def run_until(self, t_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        """Run events up to time `t_ms`; True if `stop` became true first."""
        while self._queue and self._queue[0][0] <= t_ms:
            at, _, kind, payload = heapq.heappop(self._queue)
            self.clock.now = at
            self.steps += 1
            if kind == "poll":
                node_id, incarnation, token = payload
                node = self.nodes[node_id]
                if node.alive and node.incarnation == incarnation and node.wake_token == token:
                    self._poll(node)
            elif kind == "deliver":
                self._deliver(payload)
            elif kind == "call":
                payload()
            if stop is not None and stop():
                return True
        self.clock.now = max(self.clock.now, t_ms)
        return stop is not None and stop()

    def run_for(self, ms: int, stop: Callable[[], bool] | None = None) -> bool:
        return self.run_until(self.clock.now + ms, stop)

    def at(self, t_ms: int, action: Callable[[], None]) -> None:
        self._push(t_ms, "call", action)

    def _deliver(self, env: _Envelope) -> None:
        if env.dst == ADMIN:
            self.admin_responses[env.correlation_id] = env.message
            return
        node = self.nodes[env.dst]
        if node.client is None or node.incarnation != env.dst_incarnation \
                or not self.connected(env.src, env.dst):
            return
        self.delivered += 1
        for watch in self.watchers:
            watch(env)
        now = self.clock.now
        if env.is_request and env.api_key == ApiKey.API_VERSIONS:
            self._reply(env, api_versions_response(node))  # the node's broker side answers
        elif env.is_request:
            result = node.client.handle_request(now, env.src, env.api_key, env.message)
            if isinstance(result, Pending | PendingVoterChange):
                self._pending[id(result)] = (result, env)
            else:
                self._reply(env, result)
        else:
            node.client.handle_response(now, env.src, env.api_key, env.correlation_id,
                                        env.message)
        self._poll(node)

    def _reply(self, request: _Envelope, response: Any) -> None:
        self._send(_Envelope(request.dst, request.src, request.dst_incarnation,
                             request.src_incarnation, request.api_key, request.correlation_id,
                             response, False, request.version))

    def _poll(self, node: SimNode) -> None:
        client = node.client
        assert client is not None
        now = self.clock.now
        result = client.poll(now)
        for ob in result.outbound:
            key = (node.id, int(ob.api_key))
            self.sent[key] = self.sent.get(key, 0) + 1
            dst = self.nodes[ob.destination]
            self._send(_Envelope(node.id, ob.destination, node.incarnation, dst.incarnation,
                                 ob.api_key, ob.correlation_id, ob.request, True))
        for done in result.completed:
            pending, env = self._pending.pop(id(done))
            assert pending.response is not None
            self._reply(env, pending.response)
        self._schedule_poll(node, max(result.deadline_ms, now + 1))
        self._check_node(node)

    # ------------------------------------------------------------------ invariants

    def _check_node(self, node: SimNode) -> None:
        client = node.client
        assert client is not None
        state = client.state
        if isinstance(state, LeaderState):
            self.history.check_leader(self.clock.now, node.id, state.epoch)
        hw = client.high_watermark
        if self.dynamic:
            node.voter = client.quorum.is_voter()
        self.history.check_hw(node.id, node.incarnation, hw, node.voter)
        if hw is not None and hw > node.verified_to:
            for offset, epoch, record in node.log.records_between(node.verified_to, hw):
                self.history.check_entry(node.id, offset, epoch, record)
            node.verified_to = hw

    def check_logs_agree(self) -> None:
        """Every live node's log below its HW is the committed log."""
        for node in self.nodes.values():
            if node.client is None or node.client.high_watermark is None:
                continue
            for offset, epoch, record in node.log.records_between(0, node.client.high_watermark):
                self.history.check_entry(node.id, offset, epoch, record)

    # ------------------------------------------------------------------ workload and queries

    def leader(self) -> int | None:
        """The live node leading the highest epoch, if any."""
        best: tuple[int, int] | None = None
        for node in self.nodes.values():
            client = node.client
            if client is not None and client.is_leader() \
                    and (best is None or client.epoch > best[0]):
                best = (client.epoch, node.id)
        return best[1] if best else None

    def append(self, node_id: int, payload: bytes) -> int | None:
        """Append at `node_id` if it is a leader (even a stale one); None otherwise."""
        client = self.nodes[node_id].client
        if client is None or not client.is_leader():
            return None
        try:
            return client.append([payload], now_ms=self.clock.now)
        finally:
            self._schedule_poll(self.nodes[node_id], self.clock.now)

    def schedule_appends(self, until_ms: int, every_ms: tuple[int, int] = (20, 60),
                         prefix: str = "w") -> list[bytes]:
        """A writer that appends to whichever node leads, now and then, until `until_ms`.
        Returns the list the payloads it managed to hand to a leader are added to."""
        written: list[bytes] = []
        counter = itertools.count()

        def tick() -> None:
            leader = self.leader()
            if leader is not None:
                payload = f"{prefix}{next(counter)}@{leader}".encode()
                if self.append(leader, payload) is not None:
                    written.append(payload)
            nxt = self.clock.now + self.rng.randint(*every_ms)
            if nxt < until_ms:
                self.at(nxt, tick)

        self.at(self.clock.now, tick)
        return written

    def snapshot(self, node_id: int, *, trim: bool = True) -> OffsetAndEpoch | None:
        """Snapshot a node's state machine where its listener is, then (if `trim`) start its
        log at its latest snapshot. None if it is down or has nothing new to snapshot."""
        node = self.nodes[node_id]
        client, listener = node.client, node.listener
        if client is None or listener is None \
                or listener.next_offset > client.log.high_watermark():
            return None
        sid = client.create_snapshot(listener.next_offset, listener.values,
                                     now_ms=self.clock.now)
        if sid is not None:
            self.snapshots_made.append((node_id, sid))
        if trim:
            client.trim_log()
        return sid

    def schedule_snapshots(self, until_ms: int, every_ms: tuple[int, int] = (300, 1500),
                           trim_rate: float = 0.7) -> None:
        """Now and then, until `until_ms`, a random live node snapshots and mostly trims."""
        def tick() -> None:
            alive = self.alive()
            if alive:
                self.snapshot(self.rng.choice(alive), trim=self.rng.random() < trim_rate)
            nxt = self.clock.now + self.rng.randint(*every_ms)
            if nxt < until_ms:
                self.at(nxt, tick)

        self.at(self.clock.now + self.rng.randint(*every_ms), tick)

    def alive(self) -> list[int]:
        return [n.id for n in self.nodes.values() if n.client is not None]

    def states(self) -> dict[int, str]:
        return {n.id: n.client.state.describe() if n.client else "down"
                for n in self.nodes.values()}

    # ------------------------------------------------------------------ the wire

    def _through_codec(self, env: _Envelope) -> _Envelope:
        """Encode and decode with Strom's codec, as a socket driver would."""
        if env.is_request:
            env.version = self.rng.choice(WIRE_VERSIONS[env.api_key])
            codec = request_codec(env.api_key, env.version)
        else:
            codec = response_codec(env.api_key, env.version)
        message = self._stash_records(env.message)
        decoded, _ = codec.decode(codec.encode(message))
        env.message = self._unstash_records(decoded.to_dict())
        return env

    def _stash_records(self, message: dict[str, Any]) -> dict[str, Any]:
        responses = message.get("responses")
        if not responses:
            return message
        topics = []
        for topic in responses:
            parts = []
            for part in topic.get("partitions") or []:
                records = part.get("records")
                if records is not None:
                    key = next(self._record_keys)
                    self._records[key] = records
                    part = {**part, "records": key.to_bytes(8, "big")}
                parts.append(part)
            topics.append({**topic, "partitions": parts})
        return {**message, "responses": topics}

    def _unstash_records(self, message: dict[str, Any]) -> dict[str, Any]:
        for topic in message.get("responses") or []:
            for part in topic.get("partitions") or []:
                records = part.get("records")
                if records is not None and len(records) == 8:
                    part["records"] = self._records.pop(int.from_bytes(bytes(records), "big"))
                elif records is not None and len(records) == 0:
                    part["records"] = None
        return message


def random_faults(net: SimNetwork, rng: random.Random, voters: list[int],
                  duration_ms: int) -> None:
    """Run `net` to `duration_ms` with a random fault every 0.3-3 s: a crash (never of the last
    live voter; half of them lose what was not flushed), a restart, a partition or a heal."""
    t = 0
    while t < duration_ms:
        t += rng.randint(300, 3000)
        net.run_until(t)
        alive = net.alive()
        down = [i for i in net.nodes if i not in alive]
        r = rng.random()
        if r < 0.25 and sum(1 for a in alive if a in voters) > 1:
            net.crash(rng.choice(alive), lose_unflushed=rng.random() < 0.5)
        elif r < 0.5 and down:
            net.restart(rng.choice(down))
        elif r < 0.7:
            ids = list(net.nodes)
            rng.shuffle(ids)
            net.partition(ids[: rng.randint(1, len(ids) - 1)])
        elif r < 0.85:
            net.heal()
