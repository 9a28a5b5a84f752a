"""Group state: classic groups (JoinGroup/SyncGroup) and KIP-848 consumer groups.

Plain data plus the small invariants Kafka keeps on them (protocol vote counts, awaiting-join
counts, static member index, partition owners). The transitions that need timers, records or
responses live in the coordinator; these classes never do I/O.
"""

from __future__ import annotations

import struct
import uuid
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any

from strom.coordinator.group.replies import (
    JoinMember,
    JoinReply,
    JoinRespond,
    SyncReply,
    SyncRespond,
)

CONSUMER_PROTOCOL_TYPE = "consumer"
CLASSIC = "classic"
CONSUMER = "consumer"

# DescribeGroups/ConsumerGroupDescribe: READ, DELETE and DESCRIBE, what a group allows when no
# authorizer is configured, and Kafka's "not asked for" value
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_ts: int = -1
    expire_ts: int = -1  # only set by OffsetCommit v2-v4 with an explicit retention time


# --------------------------------------------------------------------------------------------
# Classic groups
# --------------------------------------------------------------------------------------------


class ClassicState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    ClassicState.EMPTY: {ClassicState.PREPARING_REBALANCE},
    ClassicState.PREPARING_REBALANCE: {ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE,
                                       ClassicState.EMPTY},
    ClassicState.COMPLETING_REBALANCE: {ClassicState.PREPARING_REBALANCE},
    ClassicState.STABLE: {ClassicState.COMPLETING_REBALANCE},
    ClassicState.DEAD: {ClassicState.STABLE, ClassicState.PREPARING_REBALANCE,
                        ClassicState.COMPLETING_REBALANCE, ClassicState.EMPTY, ClassicState.DEAD},
}

Protocols = list[tuple[str, bytes]]


@dataclass
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_callback: JoinRespond | None = None
    sync_callback: SyncRespond | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def matches(self, protocols: Protocols) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def vote(self, candidates: set[str]) -> str | None:
        """The member's most preferred protocol among the candidates."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        return None

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka: members parked in a join or sync satisfy heartbeats, unless they are new."""
        return not self.is_new and (self.awaiting_join or self.awaiting_sync)


@dataclass
class ClassicGroup:
    group_id: str
    now_ms: int
    state: ClassicState = ClassicState.EMPTY
    previous_state: ClassicState = ClassicState.EMPTY
    state_ts: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)
    supported_protocols: Counter[str] = field(default_factory=Counter)
    num_awaiting_join: int = 0
    new_member_added: bool = False
    subscribed_topics: set[str] | None = None

    type = CLASSIC

    def __post_init__(self) -> None:
        if self.state_ts < 0:
            self.state_ts = self.now_ms

    # -- state -----------------------------------------------------------------------------

    def is_state(self, *states: ClassicState) -> bool:
        return self.state in states

    def transition(self, state: ClassicState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} "
                                 f"-> {state.value}")
        self.previous_state = self.state
        self.state = state
        self.state_ts = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[ClassicState.PREPARING_REBALANCE]

    @property
    def is_empty(self) -> bool:
        return self.state == ClassicState.EMPTY

    @property
    def state_name(self) -> str:
        return self.state.value

    # -- members -----------------------------------------------------------------------------

    def add(self, member: ClassicMember, callback: JoinRespond | None = None) -> None:
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        for name, _ in member.protocols:
            self.supported_protocols[name] += 1
        member.join_callback = callback
        if member.awaiting_join:
            self.num_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            for name, _ in member.protocols:
                self.supported_protocols[name] -= 1
            if member.awaiting_join:
                self.num_awaiting_join -= 1
            if member.instance_id is not None:
                self.static_members.pop(member.instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def update_member(self, member: ClassicMember, protocols: Protocols, rebalance_timeout: int,
                      session_timeout: int, callback: JoinRespond | None) -> None:
        for name, _ in member.protocols:
            self.supported_protocols[name] -= 1
        member.protocols = list(protocols)
        for name, _ in member.protocols:
            self.supported_protocols[name] += 1
        member.rebalance_timeout = rebalance_timeout
        member.session_timeout = session_timeout
        if callback is not None and not member.awaiting_join:
            self.num_awaiting_join += 1
        elif callback is None and member.awaiting_join:
            self.num_awaiting_join -= 1
        member.join_callback = callback

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        """Give a rejoining static member a new member id, keeping everything else."""
        member = self.members.pop(old_id)
        if member.join_callback is not None:
            member.join_callback(JoinReply.failed(old_id, 82))  # FENCED_INSTANCE_ID
            member.join_callback = None
            self.num_awaiting_join -= 1
        if member.sync_callback is not None:
            member.sync_callback(SyncReply.failed(82))
            member.sync_callback = None
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        self.pending_sync.discard(old_id)
        return member

    def complete_join(self, member: ClassicMember, response: JoinReply) -> bool:
        if member.join_callback is None:
            return False
        callback, member.join_callback = member.join_callback, None
        self.num_awaiting_join -= 1
        callback(response)
        return True

    def complete_sync(self, member: ClassicMember, response: SyncReply) -> bool:
        if member.sync_callback is None:
            return False
        callback, member.sync_callback = member.sync_callback, None
        callback(response)
        return True

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout for m in self.members.values()), default=0)

    def static_member_id(self, instance_id: str | None) -> str | None:
        return self.static_members.get(instance_id) if instance_id is not None else None

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols ---------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str | None:
        """Each member votes for its most preferred common protocol; most votes wins."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            choice = member.vote(candidates)
            if choice is not None:
                votes[choice] += 1
        return votes.most_common(1)[0][0] if votes else None

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state == ClassicState.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return (self.protocol_type == protocol_type
                and any(self.supported_protocols.get(name, 0) == n for name in names))

    def init_next_generation(self, now_ms: int) -> None:
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition(ClassicState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition(ClassicState.EMPTY, now_ms)
        self.pending_sync.clear()

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics of the consumer protocol subscriptions; None when they cannot be known."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = consumer_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE and bool(self.members)

    def join_members(self) -> tuple[JoinMember, ...]:
        return tuple(JoinMember(m.member_id, m.instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())


def consumer_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topic names of a ConsumerProtocolSubscription (the v0 prefix every version shares)."""
    try:
        buf = memoryview(metadata)
        pos = 2  # int16 version
        (n,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        if n < 0 or n > len(buf):
            return None
        topics = []
        for _ in range(n):
            (size,) = struct.unpack_from(">h", buf, pos)
            pos += 2
            if size < 0 or pos + size > len(buf):
                return None
            topics.append(bytes(buf[pos:pos + size]).decode("utf-8"))
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


# --------------------------------------------------------------------------------------------
# KIP-848 consumer groups
# --------------------------------------------------------------------------------------------

Assignment = dict[uuid.UUID, set[int]]


def copy_assignment(a: Assignment) -> Assignment:
    """A deep copy without empty topics (members are replaced, never mutated in place)."""
    return {t: set(ps) for t, ps in a.items() if ps}


def same_assignment(a: Assignment, b: Assignment) -> bool:
    return copy_assignment(a) == copy_assignment(b)


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


@dataclass(frozen=True)
class ClassicMetadata:
    """What a member of a consumer group that speaks the classic protocol (JoinGroup/SyncGroup)
    joined with: Kafka's ClassicMemberMetadata of the ConsumerGroupMemberMetadata record."""

    session_timeout: int
    protocols: tuple[tuple[str, bytes], ...]

    def fields(self) -> dict[str, Any]:
        return {"session_timeout": self.session_timeout,
                "supported_protocols": [{"name": n, "metadata": m} for n, m in self.protocols]}

    @classmethod
    def from_fields(cls, v: dict[str, Any] | None) -> ClassicMetadata | None:
        if v is None:
            return None
        return cls(v["session_timeout"],
                   tuple((p["name"], bytes(p["metadata"])) for p in v["supported_protocols"]))


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMetadata | None = None  # set while the member uses the classic protocol

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == epoch

    def subscription_key(self) -> tuple[tuple[str, ...], str | None]:
        return (tuple(sorted(self.subscribed_topic_names)), self.subscribed_topic_regex)

    def metadata_fields(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "rack_id": self.rack_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "subscribed_topic_names": list(self.subscribed_topic_names),
                "subscribed_topic_regex": self.subscribed_topic_regex,
                "rebalance_timeout": self.rebalance_timeout,
                "server_assignor": self.server_assignor,
                "classic_member_metadata": None if self.classic is None
                else self.classic.fields()}


@dataclass
class ConsumerGroup:
    group_id: str
    now_ms: int
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # (topic id, partition) -> epoch of the member that owns it (assigned or being revoked)
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # topic name -> (topic id, partition count) of every topic some member subscribes to
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    state_ts: int = -1
    deleted: bool = False
    # the topics-view version the subscription metadata was last computed at (not persisted)
    metadata_version: int | None = None

    type = CONSUMER
    protocol_type = CONSUMER_PROTOCOL_TYPE

    def __post_init__(self) -> None:
        if self.state_ts < 0:
            self.state_ts = self.now_ms

    @property
    def state(self) -> ConsumerState:
        if self.deleted:
            return ConsumerState.DEAD
        if not self.members:
            return ConsumerState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerState.RECONCILING
        return ConsumerState.STABLE

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def put_member(self, member: ConsumerMember) -> None:
        """Insert or replace a member, keeping the owner index in step with its assignment."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._claim(member)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)
            if member.instance_id is not None and \
                    self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def _claim(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch

    def _release(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.partition_epochs.pop((topic_id, p), None)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def subscribed_topic_names(self) -> set[str]:
        return set(self.subscription_metadata)

    # -- classic members (KIP-848 online migration) ----------------------------------------

    def classic_members(self) -> list[ConsumerMember]:
        return [m for m in self.members.values() if m.classic is not None]

    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """A classic member may join when it speaks the consumer protocol type and shares a
        protocol (assignor) name with every classic member already in the group."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        if not self.members:
            return bool(names)
        classic = self.classic_members()
        counts = Counter(n for m in classic if m.classic is not None
                         for n in {p for p, _ in m.classic.protocols})
        return any(counts.get(name, 0) == len(classic) for name in names)

    def all_classic_except(self, member_ids: set[str]) -> bool:
        """Whether every member but these uses the classic protocol, and at least one of these
        does not (the condition for downgrading to a classic group when they leave)."""
        leaving = [self.members[m] for m in member_ids if m in self.members]
        rest = [m for mid, m in self.members.items() if mid not in member_ids]
        return all(m.classic is not None for m in rest) and \
            any(m.classic is None for m in leaving)

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Whether a member still waits for a target partition another member holds."""
        if member.state != MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, partitions in self.target.get(member.member_id, {}).items():
            held = member.assigned.get(topic_id, set())
            for p in partitions:
                if p not in held and self.current_partition_epoch(topic_id, p) != -1:
                    return True
        return False

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscription_metadata
