"""Value types shared by the Raft core: replica keys, offsets with epochs, voter sets, log records.

Everything here is immutable and free of I/O. Names follow Kafka's Raft where one exists
(`OffsetAndEpoch`, `ReplicaKey`, `VoterSet`, `LeaderAndEpoch`, `ValidOffsetAndEpoch`) so the
design brief and Kafka's sources read alike.
"""

from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import total_ordering

from .control import ControlType

# The one topic-partition every Raft RPC carries (Kafka's METADATA_TOPIC_ID is UUID 0...01).
METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = uuid.UUID(int=1)
ZERO_UUID = uuid.UUID(int=0)

# Kafka's "no epoch / no offset / no node" sentinel in messages.
NO_ID = -1


class RaftError(Exception):
    """Base of the core's own errors."""


class NotLeaderError(RaftError):
    """An append or a leader-only call on a replica that is not the leader of that epoch."""


class FatalRaftError(RaftError):
    """An invariant broke (two leaders in one epoch, truncation below the high watermark):
    the replica must stop rather than risk serving wrong committed data."""


@total_ordering
@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    """A log position. Ordered by epoch first, then offset: that is Raft's "more up to date"."""

    offset: int
    epoch: int

    def __lt__(self, other: OffsetAndEpoch) -> bool:
        return (self.epoch, self.offset) < (other.epoch, other.offset)


@dataclass(frozen=True, slots=True)
class ReplicaKey:
    """A replica: node id plus, under kraft.version 1, the metadata log directory id."""

    id: int
    directory_id: uuid.UUID | None = None

    def matches(self, other: ReplicaKey) -> bool:
        """Same id, and the same directory unless either side left it unset."""
        if self.id != other.id:
            return False
        if self.directory_id is None or other.directory_id is None:
            return True
        return self.directory_id == other.directory_id

    @staticmethod
    def of(node_id: int, directory_id: uuid.UUID | None) -> ReplicaKey:
        """From message fields, where the zero UUID means "no directory id"."""
        if directory_id is None or directory_id == ZERO_UUID:
            return ReplicaKey(node_id)
        return ReplicaKey(node_id, directory_id)

    def wire_directory_id(self) -> uuid.UUID:
        return self.directory_id if self.directory_id is not None else ZERO_UUID

    def __repr__(self) -> str:
        """The directory id as Kafka's tools and meta.properties print it (base64url)."""
        if self.directory_id is None:
            return f"ReplicaKey(id={self.id})"
        text = base64.urlsafe_b64encode(self.directory_id.bytes).decode().rstrip("=")
        return f"ReplicaKey(id={self.id}, directory_id={text})"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a node: name (e.g. CONTROLLER), host, port."""

    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class VoterNode:
    key: ReplicaKey
    endpoints: tuple[Endpoint, ...] = ()

    def endpoint(self, listener: str) -> Endpoint | None:
        for ep in self.endpoints:
            if ep.name == listener:
                return ep
        return None


@dataclass(frozen=True)
class VoterSet:
    """The voters of the quorum, by node id.

    Under kraft.version 0 this is `controller.quorum.voters` and never changes; under
    kraft.version 1 voter_history.py keeps these by log offset (VotersRecord).
    """

    nodes: Mapping[int, VoterNode]

    @staticmethod
    def of(nodes: Iterable[VoterNode]) -> VoterSet:
        by_id = {n.key.id: n for n in nodes}
        if not by_id:
            raise ValueError("a voter set needs at least one voter")
        return VoterSet(dict(sorted(by_id.items())))

    @staticmethod
    def none() -> VoterSet:
        """No voters known yet: a controller of a dynamic quorum formatted without initial
        controllers, until it has fetched the set (it is an observer meanwhile)."""
        return VoterSet({})

    @staticmethod
    def static(ids: Iterable[int], listener: str = "CONTROLLER") -> VoterSet:
        """Voters without real addresses (tests and the simulation): host "node-<id>"."""
        return VoterSet.of(VoterNode(ReplicaKey(i), (Endpoint(listener, f"node-{i}", 9093),))
                           for i in ids)

    def ids(self) -> list[int]:
        return list(self.nodes)

    def __iter__(self) -> Iterator[VoterNode]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.nodes

    def is_voter(self, key: ReplicaKey) -> bool:
        node = self.nodes.get(key.id)
        return node is not None and node.key.matches(key)

    def majority(self) -> int:
        return len(self.nodes) // 2 + 1

    def endpoints(self, node_id: int) -> tuple[Endpoint, ...]:
        node = self.nodes.get(node_id)
        return node.endpoints if node is not None else ()


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    leader_id: int | None
    epoch: int


class ValidKind(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    """The leader's verdict on a follower's (fetch offset, last fetched epoch)."""

    kind: ValidKind
    offset_and_epoch: OffsetAndEpoch


class KRaftVersion(enum.IntEnum):
    STATIC = 0  # controller.quorum.voters, no VotersRecord
    DYNAMIC = 1  # KIP-853 voter changes


@dataclass(frozen=True, slots=True)
class DataRecord:
    """A state-machine record: opaque bytes (Strom's JSON metadata records)."""

    value: bytes

    def size(self) -> int:
        return len(self.value) + 8


@dataclass(frozen=True)
class ControlEntry:
    """A Raft control record as a log entry. ``body`` has the kio message's snake_case fields
    (LeaderChangeMessage: leader_id, voters[voter_id], granting_voters[voter_id]), which is
    what `control.encode_control_body(type, body)` takes for the bytes."""

    type: ControlType
    body: Mapping[str, object] = field(default_factory=dict)

    def size(self) -> int:
        return 64


Entry = DataRecord | ControlEntry  # one offset of the log


@dataclass(frozen=True)
class RaftBatch:
    """A record batch as the core sees it: one epoch, consecutive offsets, all control records
    or all data records (Kafka never mixes them in one batch)."""

    base_offset: int
    epoch: int
    records: tuple[Entry, ...]
    append_time_ms: int = 0

    def __post_init__(self) -> None:
        if not self.records:
            raise ValueError("empty batch")
        kinds = {isinstance(r, ControlEntry) for r in self.records}
        if len(kinds) != 1:
            raise ValueError("a batch holds only control records or only data records")

    @property
    def is_control(self) -> bool:
        return isinstance(self.records[0], ControlEntry)

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.records)

    def size(self) -> int:
        return 61 + sum(r.size() for r in self.records)

    def slice_from(self, offset: int) -> RaftBatch:
        """The part of this batch from `offset` on (memory logs only; disk logs cut whole batches)."""
        if offset <= self.base_offset:
            return self
        return RaftBatch(offset, self.epoch, self.records[offset - self.base_offset:],
                         self.append_time_ms)

    def slice_to(self, end: int) -> RaftBatch | None:
        if end >= self.end_offset:
            return self
        if end <= self.base_offset:
            return None
        return RaftBatch(self.base_offset, self.epoch, self.records[: end - self.base_offset],
                         self.append_time_ms)


def leader_change_record(leader_id: int, voters: Iterable[int],
                         granting: Iterable[int]) -> ControlEntry:
    """The LeaderChange control record a new leader appends first in its epoch."""
    return ControlEntry(ControlType.LEADER_CHANGE, {
        "version": 0,
        "leader_id": leader_id,
        "voters": [{"voter_id": v} for v in sorted(voters)],
        "granting_voters": [{"voter_id": v} for v in sorted(granting)],
    })


@dataclass(frozen=True)
class RaftSettings:
    """Timing and size knobs of the core (Kafka's `controller.quorum.*` defaults).

    config.py turns broker properties into a QuorumConfig; the driver maps that onto this.
    """

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 1 << 20
    fetch_snapshot_max_bytes: int = 1 << 20  # a FetchSnapshot's chunk (KIP-1219)
    max_batch_bytes: int = 8 << 20
    listener: str = "CONTROLLER"
    observer_session_timeout_ms: int = 300_000

    @property
    def check_quorum_timeout_ms(self) -> int:
        return self.fetch_timeout_ms * 3 // 2

    @property
    def begin_quorum_epoch_interval_ms(self) -> int:
        return self.fetch_timeout_ms // 2
