"""The group coordinator: classic groups, committed offsets, group administration, loading.

Kafka's GroupMetadataManager/OffsetMetadataManager in one event-loop-bound object. A group
belongs to partition `abs(hash(group_id)) % n` of `__consumer_offsets`; this coordinator serves
the groups of the partitions this broker leads (`on_leadership`), rebuilding them from the log
first (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and answering NOT_COORDINATOR for the others.

Requests that wait (JoinGroup, SyncGroup) take a `respond` callback that is called exactly once,
possibly right away; everything else returns its answer. Session, join, sync and initial-delay
deadlines are timers (`Timers`), re-armed on events, never polled. State changes that must
survive a restart are appended to the partition's log before the request is answered. The
KIP-848 consumer protocol lives in `consumer_protocol.py` (a mixin of this class).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from strom.coordinator.group import records as rec
from strom.coordinator.group.consumer_protocol import ConsumerGroupProtocol
from strom.coordinator.group.state import (
    ClassicGroup,
    ClassicMember,
    ClassicState,
    ConsumerGroup,
    OffsetAndMetadata,
    Protocols,
    Respond,
)
from strom.coordinator.group.store import GroupStore, OffsetsTopic, TxnMarkerRecord
from strom.coordinator.group.timers import Scheduler, Timers
from strom.coordinator.partitioning import partition_for
from strom.coordinator.sharding import ShardedCoordinator
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

INT_MAX = 2147483647
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648
# READ, DELETE and DESCRIBE: what a group allows when no authorizer is configured
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

Group = ClassicGroup | ConsumerGroup


@dataclass
class GroupConfig:
    """The broker configs the coordinator uses (Kafka's names in comments)."""

    offsets_partitions: int = 50  # offsets.topic.num.partitions
    min_session_timeout: int = 6000  # group.min.session.timeout.ms
    max_session_timeout: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay: int = 3000  # group.initial.rebalance.delay.ms
    max_group_size: int = INT_MAX  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval: int = 600000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    consumer_session_timeout: int = 45000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval: int = 5000  # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = INT_MAX  # group.consumer.max.size
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    new_member_join_timeout: int = 300000  # Kafka's fixed 5 minutes

    @classmethod
    def from_config(cls, get: Callable[[str], Any]) -> GroupConfig:
        def opt(name: str, default: Any) -> Any:
            try:
                value = get(name)
            except KeyError:
                return default
            return default if value is None else value

        return cls(
            offsets_partitions=opt("offsets.topic.num.partitions", 50),
            min_session_timeout=opt("group.min.session.timeout.ms", 6000),
            max_session_timeout=opt("group.max.session.timeout.ms", 1800000),
            initial_rebalance_delay=opt("group.initial.rebalance.delay.ms", 3000),
            max_group_size=opt("group.max.size", INT_MAX),
            offsets_retention_ms=opt("offsets.retention.minutes", 10080) * 60000,
            offsets_retention_check_interval=opt("offsets.retention.check.interval.ms", 600000),
            offset_metadata_max_bytes=opt("offset.metadata.max.bytes", 4096),
            consumer_session_timeout=opt("group.consumer.session.timeout.ms", 45000),
            consumer_heartbeat_interval=opt("group.consumer.heartbeat.interval.ms", 5000),
            consumer_max_size=opt("group.consumer.max.size", INT_MAX),
            consumer_assignors=tuple(opt("group.consumer.assignors", ["uniform", "range"])),
            rebalance_protocols=tuple(p.lower() for p in opt(
                "group.coordinator.rebalance.protocols", ["classic", "consumer"])),
        )


class TopicsView(Protocol):
    """The cluster's topics as the coordinator sees them (the metadata image, adapted)."""

    def version(self) -> int:
        """Changes whenever topics or partition counts change (cache key)."""

    def topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of a topic, or None."""

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    def names(self) -> Iterable[str]:
        """Names of the user topics (internal topics left out)."""


class Shard:
    """The groups of one `__consumer_offsets` partition this broker leads."""

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition = partition
        self.epoch = epoch
        self.loading = True
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.loader: Iterator[list[rec.CoordinatorRecord | TxnMarkerRecord]] | None = None
        # -- transactions: TxnOffsetCommit offsets waiting for their marker, per producer id --
        self.pending_txn: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: Protocols
    session_timeout: int
    rebalance_timeout: int
    client_id: str
    client_host: str
    require_known_member_id: bool = True  # JoinGroup v4+
    supports_skip_assignment: bool = False  # JoinGroup v9+
    reason: str | None = None


def join_error(member_id: str, code: int) -> dict[str, Any]:
    return {"error_code": int(code), "generation_id": -1, "protocol_type": None,
            "protocol_name": None, "leader": "", "skip_assignment": False,
            "member_id": member_id, "members": []}


def sync_error(code: int) -> dict[str, Any]:
    return {"error_code": int(code), "protocol_type": None, "protocol_name": None,
            "assignment": b""}


class GroupCoordinator(ConsumerGroupProtocol, ShardedCoordinator):
    def __init__(self, config: GroupConfig, offsets_topic: OffsetsTopic, topics: TopicsView,
                 scheduler: Scheduler, now_ms: Callable[[], int]) -> None:
        self.config = config
        self.offsets_topic = offsets_topic
        self.topics = topics
        self.store = GroupStore(offsets_topic, now_ms)
        self.timers = Timers(scheduler)
        self.scheduler = scheduler
        self.now_ms = now_ms
        self.shards: dict[int, Shard] = {}
        self._started = False
        self._init_consumer_protocol()

    # ========================================================================================
    # Lifecycle and leadership
    # ========================================================================================

    def start(self) -> None:
        """Arm the periodic offset-expiration check."""
        if not self._started:
            self._started = True
            self._schedule_expiration()

    def shutdown(self) -> None:
        for shard in list(self.shards.values()):
            self._unload(shard)
        self.shards.clear()
        self.timers.cancel_all()
        self._started = False

    def num_partitions(self) -> int:
        n = self.offsets_topic.num_partitions()
        return n if n else self.config.offsets_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def ensure_offsets_topic(self) -> int:
        """Create `__consumer_offsets` on first need (FindCoordinator); returns partitions."""
        n = self.offsets_topic.num_partitions()
        return n if n else self.offsets_topic.create()

    state_topic = "__consumer_offsets"

    def _new_shard(self, partition: int, epoch: int) -> Shard:
        return Shard(partition, epoch)

    def _replay_chunk(self, shard: Shard, chunk: Iterable[Any]) -> None:
        for record in chunk:
            self._replay(shard, record)

    def _loaded(self, shard: Shard) -> None:
        shard.loading = False
        now = self.now_ms()
        for group in shard.groups.values():
            if isinstance(group, ClassicGroup):
                for member in group.members.values():
                    self._reschedule_heartbeat(group, member)
            else:
                self._on_consumer_group_loaded(group, now)
        if shard.groups or shard.offsets:
            log.info("loaded %d groups and offsets of %d groups from __consumer_offsets-%d",
                     len(shard.groups), len(shard.offsets), shard.partition)

    def _unload(self, shard: Shard) -> None:
        for group in shard.groups.values():
            self.timers.cancel_group(group.group_id)
            if isinstance(group, ClassicGroup):
                for member in list(group.members.values()):
                    group.complete_join(member, join_error(member.member_id,
                                                           ErrorCode.NOT_COORDINATOR))
                    group.complete_sync(member, sync_error(ErrorCode.NOT_COORDINATOR))
        shard.groups.clear()
        shard.offsets.clear()
        shard.pending_txn.clear()  # transactions
        shard.loader = None

    def is_loading(self, partition: int) -> bool:
        shard = self.shards.get(partition)
        return shard is not None and shard.loading

    # ========================================================================================
    # Replay (load)
    # ========================================================================================

    def _replay(self, shard: Shard, r: rec.CoordinatorRecord | TxnMarkerRecord) -> None:
        # -- transactions: pending TxnOffsetCommit offsets and the markers that end them --
        if isinstance(r, TxnMarkerRecord):
            self._complete_txn_offsets(shard, r.producer_id, r.commit)
            return
        if r.producer_id >= 0:
            if r.type in (rec.OFFSET_COMMIT, rec.OFFSET_COMMIT_LEGACY) and r.value is not None:
                v = r.value
                shard.pending_txn.setdefault(r.producer_id, {}).setdefault(
                    r.key["group"], {})[(r.key["topic"], r.key["partition"])] = \
                    OffsetAndMetadata(v["offset"], v["leader_epoch"], v["metadata"],
                                      v["commit_timestamp"], v["expire_timestamp"])
            return
        # -- end transactions --
        if r.type in (rec.OFFSET_COMMIT, rec.OFFSET_COMMIT_LEGACY):
            gid = r.key["group"]
            tp = (r.key["topic"], r.key["partition"])
            if r.value is None:
                offsets = shard.offsets.get(gid)
                if offsets is not None:
                    offsets.pop(tp, None)
                    if not offsets:
                        del shard.offsets[gid]
                return
            v = r.value
            shard.offsets.setdefault(gid, {})[tp] = OffsetAndMetadata(
                v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"],
                v["expire_timestamp"])
            if gid not in shard.groups:  # a "simple" group: offsets without membership
                shard.groups[gid] = ClassicGroup(gid, self.now_ms())
        elif r.type == rec.GROUP_METADATA:
            gid = r.key["group"]
            if r.value is None:
                if isinstance(shard.groups.get(gid), ClassicGroup):
                    del shard.groups[gid]
                return
            shard.groups[gid] = self._classic_from_record(gid, r.value)
        else:
            self._replay_consumer_record(shard, r)

    def _classic_from_record(self, gid: str, v: dict[str, Any]) -> ClassicGroup:
        now = self.now_ms()
        group = ClassicGroup(gid, now, generation=v["generation"],
                             protocol_type=v["protocol_type"] or None,
                             protocol_name=v["protocol"], state_ts=v["current_state_timestamp"])
        for m in v["members"]:
            protocols = [(v["protocol"], m["subscription"])] if v["protocol"] else []
            member = ClassicMember(m["member_id"], m["group_instance_id"], m["client_id"],
                                   m["client_host"], m["rebalance_timeout"],
                                   m["session_timeout"], group.protocol_type or "", protocols,
                                   assignment=m["assignment"])
            group.add(member)
        group.protocol_type = v["protocol_type"] or None
        group.leader_id = v["leader"] if v["leader"] in group.members else group.leader_id
        if group.members:
            group.state = group.previous_state = ClassicState.STABLE
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    # ========================================================================================
    # Lookups and validation
    # ========================================================================================

    def _shard(self, group_id: str | None) -> Shard:
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "The group id must not be empty.")
        shard = self.shards.get(self.partition_for(group_id))
        if shard is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"This broker is not the coordinator of group {group_id}.")
        if shard.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"The coordinator is loading the state of group {group_id}.")
        return shard

    def group(self, group_id: str) -> Group | None:
        """The group if this broker coordinates it and it exists (tests and tools)."""
        shard = self.shards.get(self.partition_for(group_id)) if group_id else None
        return shard.groups.get(group_id) if shard is not None and not shard.loading else None

    def _new_classic_group(self, shard: Shard, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, self.now_ms())
        shard.groups[group_id] = group
        return group

    def _validate_member(self, group: ClassicGroup, member_id: str,
                         instance_id: str | None) -> int:
        if instance_id is not None:
            existing = group.static_member_id(instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                log.info("group %s: member %s with instance id %s is fenced by member %s",
                         group.group_id, member_id, instance_id, existing)
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    # ========================================================================================
    # JoinGroup
    # ========================================================================================

    def join_group(self, req: JoinRequest, respond: Respond) -> None:
        try:
            shard = self._shard(req.group_id)
        except KafkaError as exc:
            respond(join_error(req.member_id, exc.code))
            return
        cfg = self.config
        if not cfg.min_session_timeout <= req.session_timeout <= cfg.max_session_timeout:
            respond(join_error(req.member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        if "classic" not in cfg.rebalance_protocols:
            respond(join_error(req.member_id, ErrorCode.UNSUPPORTED_VERSION))
            return
        group = shard.groups.get(req.group_id)
        if isinstance(group, ConsumerGroup):
            if not group.is_empty:
                log.info("group %s: classic JoinGroup refused, the group uses the consumer "
                         "protocol", req.group_id)
                respond(join_error(req.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
                return
            try:
                self._delete_consumer_group_state(shard, group)
            except KafkaError as exc:
                respond(join_error(req.member_id, exc.code))
                return
            group = None
        unknown = req.member_id == ""
        if group is None:
            if not unknown:
                respond(join_error(req.member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            group = self._new_classic_group(shard, req.group_id)
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            respond(join_error("", ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif unknown:
            self._join_new_member(group, req, respond)
        else:
            self._join_existing_member(group, req, respond)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.config.max_group_size
        if group.is_state(ClassicState.EMPTY, ClassicState.DEAD):
            return True
        if group.is_state(ClassicState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.num_awaiting_join < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, respond: Respond) -> None:
        if group.is_state(ClassicState.DEAD):
            respond(join_error("", ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            respond(join_error("", ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = f"{req.instance_id or req.client_id}-{uuid.uuid4()}"
        if req.instance_id is not None:
            existing = group.static_member_id(req.instance_id)
            if existing is not None:
                log.info("group %s: static member %s rejoins in state %s, replacing member id "
                         "%s with %s", group.group_id, req.instance_id, group.state_name,
                         existing, new_id)
                self._update_static_member(group, req, existing, new_id, respond)
            else:
                self._add_member_and_rebalance(group, req, new_id, respond)
        elif req.require_known_member_id:
            group.pending_members.add(new_id)
            self.timers.schedule(("hb", group.group_id, new_id), req.session_timeout,
                                 lambda: self._expire_heartbeat(group.group_id, new_id))
            respond(join_error(new_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, req, new_id, respond)

    def _join_existing_member(self, group: ClassicGroup, req: JoinRequest,
                              respond: Respond) -> None:
        member_id = req.member_id
        if group.is_state(ClassicState.DEAD):
            respond(join_error(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            respond(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, req, member_id, respond)
            return
        error = self._validate_member(group, member_id, req.instance_id)
        if error:
            respond(join_error(member_id, error))
            return
        member = group.members[member_id]
        if group.is_state(ClassicState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_state(ClassicState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                respond(self._join_response(group, member_id,
                                            leader_view=group.leader_id == member_id))
            else:
                self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_state(ClassicState.STABLE):
            if group.leader_id == member_id or not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, respond)
            else:
                respond(self._join_response(group, member_id, leader_view=False))
        else:
            respond(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _join_response(self, group: ClassicGroup, member_id: str, *, leader_view: bool,
                       skip_assignment: bool = False, leader: str | None = None
                       ) -> dict[str, Any]:
        return {"error_code": 0, "generation_id": group.generation,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": (leader if leader is not None else group.leader_id) or "",
                "skip_assignment": skip_assignment, "member_id": member_id,
                "members": group.join_members() if leader_view else []}

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, member_id: str,
                                  respond: Respond) -> None:
        rebalance_timeout = req.rebalance_timeout if req.rebalance_timeout > 0 \
            else req.session_timeout
        member = ClassicMember(member_id, req.instance_id, req.client_id, req.client_host,
                               rebalance_timeout, req.session_timeout, req.protocol_type,
                               list(req.protocols), is_new=True)
        if group.is_state(ClassicState.PREPARING_REBALANCE) and \
                group.previous_state == ClassicState.EMPTY:
            group.new_member_added = True
        group.add(member, respond)
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"adding new member {member_id} with group instance id {req.instance_id}; "
                   f"client reason: {req.reason or 'not provided'}")

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicMember,
                                     req: JoinRequest, respond: Respond) -> None:
        if member.join_callback is not None:  # a duplicate join replaces the parked one
            group.complete_join(member, join_error(member.member_id,
                                                   ErrorCode.REBALANCE_IN_PROGRESS))
        rebalance_timeout = req.rebalance_timeout if req.rebalance_timeout > 0 \
            else req.session_timeout
        group.update_member(member, req.protocols, rebalance_timeout, req.session_timeout,
                            respond)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"member {member.member_id} joins in state {group.state_name}; "
                   f"client reason: {req.reason or 'not provided'}")

    def _update_static_member(self, group: ClassicGroup, req: JoinRequest, old_id: str,
                              new_id: str, respond: Respond) -> None:
        old_leader = group.leader_id
        member = group.replace_static_member(req.instance_id or "", old_id, new_id)
        self.timers.cancel(("hb", group.group_id, old_id))
        self._reschedule_heartbeat(group, member)
        saved = (member.protocols, member.rebalance_timeout, member.session_timeout)
        rebalance_timeout = req.rebalance_timeout if req.rebalance_timeout > 0 \
            else req.session_timeout
        group.update_member(member, req.protocols, rebalance_timeout, req.session_timeout,
                            respond)
        if group.is_state(ClassicState.STABLE):
            if group.protocol_name == group.select_protocol():
                # Same protocol: persist the new member id, keep the assignment, no rebalance.
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                try:
                    self.store.append(self.partition_for(group.group_id),
                                      [self._group_metadata_record(group, assignment)])
                except KafkaError as exc:
                    log.warning("group %s: cannot persist static member %s: %s", group.group_id,
                                req.instance_id, exc)
                    group.update_member(member, saved[0], saved[1], saved[2], None)
                    group.replace_static_member(req.instance_id or "", new_id, old_id)
                    self._reschedule_heartbeat(group, group.members[old_id])
                    respond({**join_error("", exc.code), "generation_id": group.generation,
                             "leader": old_leader or ""})
                    return
                leader = group.leader_id == new_id
                if req.supports_skip_assignment:
                    group.complete_join(member, self._join_response(
                        group, new_id, leader_view=leader, skip_assignment=leader))
                else:
                    group.complete_join(member, self._join_response(
                        group, new_id, leader_view=False, leader=old_leader))
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {new_id} with instance id {req.instance_id} "
                           "changed the group's protocol")
        elif group.is_state(ClassicState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"updating metadata of static member {new_id}")
        else:
            self._maybe_complete_join_phase(group)

    # -- rebalance machinery ---------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_state(ClassicState.COMPLETING_REBALANCE):
            self._reset_and_propagate(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        self.timers.cancel(("sync", group.group_id))
        initial = group.is_state(ClassicState.EMPTY)
        gid = group.group_id
        if initial:
            delay = self.config.initial_rebalance_delay
            remaining = max(group.rebalance_timeout() - delay, 0)
            self.timers.schedule(("join", gid), delay,
                                 lambda: self._try_complete_initial(gid, delay, remaining))
        group.transition(ClassicState.PREPARING_REBALANCE, self.now_ms())
        log.info("preparing to rebalance group %s with old generation %d (%s)", gid,
                 group.generation, reason)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self.timers.schedule(("join", gid), group.rebalance_timeout(),
                                     lambda: self._complete_join_by_id(gid))

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if (group.is_state(ClassicState.PREPARING_REBALANCE)
                and group.previous_state != ClassicState.EMPTY
                and group.has_all_members_joined()):
            self._complete_join(group)

    def _classic(self, group_id: str) -> ClassicGroup | None:
        shard = self.shards.get(self.partition_for(group_id))
        group = shard.groups.get(group_id) if shard is not None else None
        return group if isinstance(group, ClassicGroup) else None

    def _try_complete_initial(self, gid: str, delay: int, remaining: int) -> None:
        group = self._classic(gid)
        if group is None:
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay, remaining)
            new_remaining = max(remaining - delay, 0)
            self.timers.schedule(("join", gid), new_delay,
                                 lambda: self._try_complete_initial(gid, new_delay, new_remaining))
        else:
            self._complete_join(group)

    def _complete_join_by_id(self, gid: str) -> None:
        group = self._classic(gid)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        gid = group.group_id
        self.timers.cancel(("join", gid))
        missing = [m for m in group.not_yet_rejoined() if m.instance_id is None]
        for member in missing:
            group.remove(member.member_id)
            self.timers.cancel(("hb", gid, member.member_id))
        if missing:
            log.info("group %s removed dynamic members who have not rejoined: %s", gid,
                     [m.member_id for m in missing])
        if group.is_state(ClassicState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.error("group %s could not complete the rebalance: no member rejoined", gid)
            self.timers.schedule(("join", gid), group.rebalance_timeout(),
                                 lambda: self._complete_join_by_id(gid))
            return
        group.init_next_generation(self.now_ms())
        if group.is_state(ClassicState.EMPTY):
            log.info("group %s with generation %d is now empty", gid, group.generation)
            try:
                self.store.append(self.partition_for(gid), [self._group_metadata_record(group, {})])
            except KafkaError as exc:
                log.warning("group %s: cannot persist empty group metadata: %s", gid, exc)
            return
        log.info("stabilized group %s generation %d (protocol %s) with %d members", gid,
                 group.generation, group.protocol_name, len(group.members))
        for member in list(group.members.values()):
            leader = group.leader_id == member.member_id
            group.complete_join(member, self._join_response(group, member.member_id,
                                                            leader_view=leader))
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        generation = group.generation
        self.timers.schedule(("sync", gid), group.rebalance_timeout(),
                             lambda: self._expire_pending_sync(gid, generation))

    def _expire_pending_sync(self, gid: str, generation: int) -> None:
        group = self._classic(gid)
        if group is None or group.generation != generation:
            return
        if group.is_state(ClassicState.COMPLETING_REBALANCE, ClassicState.STABLE) and \
                group.pending_sync:
            pending = list(group.pending_sync)
            for member_id in pending:
                group.remove(member_id)
                self.timers.cancel(("hb", gid, member_id))
            log.info("group %s removed members that did not sync in time: %s", gid, pending)
            self._prepare_rebalance(group, f"removing {pending} on pending sync expiration")

    def _reset_and_propagate(self, group: ClassicGroup, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        ok = error == ErrorCode.NONE
        for member in list(group.members.values()):
            response = {"error_code": int(error),
                        "protocol_type": group.protocol_type if ok else None,
                        "protocol_name": group.protocol_name if ok else None,
                        "assignment": member.assignment}
            if group.complete_sync(member, response):
                self._reschedule_heartbeat(group, member)

    # -- heartbeats and expiry ---------------------------------------------------------------

    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicMember,
                              timeout: int | None = None) -> None:
        gid, mid = group.group_id, member.member_id
        self.timers.schedule(("hb", gid, mid),
                             member.session_timeout if timeout is None else timeout,
                             lambda: self._expire_heartbeat(gid, mid))

    def _expire_heartbeat(self, gid: str, member_id: str) -> None:
        group = self._classic(gid)
        if group is None or group.is_state(ClassicState.DEAD):
            return
        if member_id in group.pending_members:
            log.info("group %s: pending member %s removed after session timeout", gid, member_id)
            group.remove(member_id)
            if group.is_state(ClassicState.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s failed its session timeout, removing it", gid, member_id)
        self._remove_member_and_update(group, member, f"member {member_id} session expired")

    def _remove_member_and_update(self, group: ClassicGroup, member: ClassicMember,
                                  reason: str) -> None:
        group.complete_join(member, join_error("", ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.is_state(ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_state(ClassicState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    # ========================================================================================
    # SyncGroup, Heartbeat, LeaveGroup
    # ========================================================================================

    def sync_group(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
                   assignments: list[tuple[str, bytes]], respond: Respond) -> None:
        try:
            shard = self._shard(group_id)
        except KafkaError as exc:
            respond(sync_error(exc.code))
            return
        group = shard.groups.get(group_id)
        if not isinstance(group, ClassicGroup) or group.is_empty:
            respond(sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.is_state(ClassicState.DEAD):
            respond(sync_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        error = self._validate_member(group, member_id, instance_id)
        if not error and generation != group.generation:
            error = ErrorCode.ILLEGAL_GENERATION
        if not error and ((protocol_type is not None and protocol_type != group.protocol_type)
                          or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error:
            respond(sync_error(error))
            return
        member = group.members[member_id]
        if group.is_state(ClassicState.PREPARING_REBALANCE):
            respond(sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_state(ClassicState.STABLE):
            self._remove_pending_sync(group, member_id)
            respond({"error_code": 0, "protocol_type": group.protocol_type,
                     "protocol_name": group.protocol_name, "assignment": member.assignment})
        else:  # CompletingRebalance
            if member.sync_callback is not None:
                group.complete_sync(member, sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_callback = respond
            self._remove_pending_sync(group, member_id)
            if group.leader_id == member_id:
                self._store_assignment(group, dict(assignments))

    def _store_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        for member_id in group.members:
            assignment.setdefault(member_id, b"")
        generation = group.generation
        log.info("group %s: assignment received from leader %s for generation %d", group.group_id,
                 group.leader_id, generation)
        try:
            self.store.append(self.partition_for(group.group_id),
                              [self._group_metadata_record(group, assignment)])
        except KafkaError as exc:
            if group.is_state(ClassicState.COMPLETING_REBALANCE) and \
                    group.generation == generation:
                self._reset_and_propagate(group, exc.code)
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"error {exc.code.name} storing the group assignment")
            return
        if group.is_state(ClassicState.COMPLETING_REBALANCE) and group.generation == generation:
            for member in group.members.values():
                member.assignment = assignment.get(member.member_id, b"")
            self._propagate_assignment(group, ErrorCode.NONE)
            group.transition(ClassicState.STABLE, self.now_ms())

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync or group.is_state(
                ClassicState.DEAD, ClassicState.EMPTY, ClassicState.PREPARING_REBALANCE):
            self.timers.cancel(("sync", group.group_id))

    def _group_metadata_record(self, group: ClassicGroup,
                               assignment: dict[str, bytes]) -> rec.KeyValue:
        members = [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "rebalance_timeout": m.rebalance_timeout,
                    "session_timeout": m.session_timeout,
                    "subscription": m.metadata(group.protocol_name),
                    "assignment": assignment.get(m.member_id, b"")}
                   for m in group.members.values()]
        return rec.group_metadata(group.group_id, {
            "protocol_type": group.protocol_type or "", "generation": group.generation,
            "protocol": group.protocol_name, "leader": group.leader_id,
            "current_state_timestamp": group.state_ts, "members": members})

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        try:
            shard = self._shard(group_id)
        except KafkaError as exc:
            return exc.code
        group = shard.groups.get(group_id)
        if not isinstance(group, ClassicGroup):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_state(ClassicState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_state(ClassicState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.is_state(ClassicState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, members: list[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[dict[str, Any]]]:
        """members: (member id, instance id, reason). Returns (top-level error, per member)."""
        try:
            shard = self._shard(group_id)
        except KafkaError as exc:
            return exc.code, []
        group = shard.groups.get(group_id)
        if not isinstance(group, ClassicGroup):
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        if group.is_state(ClassicState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results = []
        left = []
        for member_id, instance_id, reason in members:
            error = ErrorCode.NONE
            if member_id == "":
                existing = group.static_member_id(instance_id)
                if existing is not None:
                    self._remove_current_member(group, existing, reason)
                    left.append(existing)
                else:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
            elif member_id in group.pending_members:
                group.remove(member_id)
                self.timers.cancel(("hb", group_id, member_id))
                left.append(member_id)
            else:
                error = self._validate_member(group, member_id, instance_id)
                if not error:
                    self._remove_current_member(group, member_id, reason)
                    left.append(member_id)
            results.append({"member_id": member_id, "group_instance_id": instance_id,
                            "error_code": int(error)})
        if left:
            reason = f"explicit LeaveGroup request for members {left}"
            if group.is_state(ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, reason)
            elif group.is_state(ClassicState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return ErrorCode.NONE, results

    def _remove_current_member(self, group: ClassicGroup, member_id: str,
                               reason: str | None) -> None:
        member = group.members[member_id]
        self.timers.cancel(("hb", group.group_id, member_id))
        log.info("group %s: member %s left (client reason: %s)", group.group_id, member_id,
                 reason or "not provided")
        group.complete_join(member, join_error("", ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # ========================================================================================
    # Offsets
    # ========================================================================================

    def commit_offsets(self, group_id: str, generation: int, member_id: str,
                       instance_id: str | None, retention_ms: int,
                       topics: list[tuple[str, list[tuple[int, int, int, str | None]]]],
                       api_version: int) -> list[tuple[str, list[tuple[int, int]]]]:
        """Commit (partition, offset, leader epoch, metadata) per topic; returns per-partition
        error codes. Group-level failures raise KafkaError (the handler applies them to all)."""
        shard = self._shard(group_id)
        group = shard.groups.get(group_id)
        created = False
        if group is None:
            if generation >= 0:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9
                                 else ErrorCode.ILLEGAL_GENERATION,
                                 f"Group {group_id} does not exist.")
            log.info("group %s: created as a simple group by a manual offset commit", group_id)
            group = self._new_classic_group(shard, group_id)
            created = True
        if isinstance(group, ClassicGroup):
            self._validate_classic_commit(group, member_id, instance_id, generation)
            member = group.members.get(member_id)
            if member is not None and group.is_state(ClassicState.STABLE,
                                                     ClassicState.PREPARING_REBALANCE):
                self._reschedule_heartbeat(group, member)
        else:
            self._validate_consumer_commit(group, member_id, generation, api_version)
        now = self.now_ms()
        expire = now + retention_ms if retention_ms is not None and retention_ms >= 0 else -1
        records: list[rec.KeyValue] = []
        accepted: list[tuple[tuple[str, int], OffsetAndMetadata]] = []
        results = []
        limit = self.config.offset_metadata_max_bytes
        for topic, partitions in topics:
            out = []
            for partition, offset, leader_epoch, metadata in partitions:
                if metadata is not None and len(metadata) > limit:
                    out.append((partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                    continue
                oam = OffsetAndMetadata(offset, leader_epoch, metadata or "", now, expire)
                records.append(rec.offset_commit(group_id, topic, partition, offset, leader_epoch,
                                                 oam.metadata, now, expire))
                accepted.append(((topic, partition), oam))
                out.append((partition, ErrorCode.NONE))
            results.append((topic, out))
        try:
            self.store.append(shard.partition, records)
        except KafkaError as exc:
            if created:
                shard.groups.pop(group_id, None)
            code = exc.code
            if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
            raise KafkaError(code, str(exc)) from None
        offsets = shard.offsets.setdefault(group_id, {}) if accepted else None
        for tp, oam in accepted:
            assert offsets is not None
            offsets[tp] = oam
        return results

    def _validate_classic_commit(self, group: ClassicGroup, member_id: str,
                                 instance_id: str | None, generation: int) -> None:
        if group.is_state(ClassicState.DEAD):
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation < 0 and group.is_state(ClassicState.EMPTY):
            return  # admin clients and assign() consumers commit into an empty group
        if generation >= 0 or member_id or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error:
                raise KafkaError(error)
            if generation != group.generation:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION)
        elif not group.is_state(ClassicState.EMPTY):
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             "Offsets without a member id can only be committed to an empty "
                             "group.")
        if group.is_state(ClassicState.COMPLETING_REBALANCE):
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> list[tuple[str, list[tuple[int, int, int, str]]]]:
        """Committed (partition, offset, leader epoch, metadata) per topic; -1 when none.
        topics None means every committed offset of the group."""
        shard = self._shard(group_id)
        group = shard.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            self._validate_consumer_fetch(group, member_id, member_epoch)
        offsets = shard.offsets.get(group_id, {})
        if isinstance(group, ClassicGroup) and group.is_state(ClassicState.DEAD):
            offsets = {}
        if topics is None:
            by_topic: dict[str, list[tuple[int, int, int, str]]] = {}
            for (topic, partition), oam in sorted(offsets.items()):
                by_topic.setdefault(topic, []).append(
                    (partition, oam.offset, oam.leader_epoch, oam.metadata))
            return list(by_topic.items())
        out = []
        for topic, partitions in topics:
            rows = []
            for partition in partitions:
                oam = offsets.get((topic, partition))
                rows.append((partition, -1, -1, "") if oam is None
                            else (partition, oam.offset, oam.leader_epoch, oam.metadata))
            out.append((topic, rows))
        return out

    # -- transactions: TxnOffsetCommit ---------------------------------------------------------

    def commit_transactional_offsets(
            self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
            generation: int, instance_id: str | None,
            topics: list[tuple[str, list[tuple[int, int, int, str | None]]]]
    ) -> list[tuple[str, list[tuple[int, int]]]]:
        """TxnOffsetCommit: log the offsets in a transactional batch of the producer; they count
        (OffsetFetch sees them) once its COMMIT marker lands, and vanish on ABORT. Group-level
        failures raise KafkaError; per-partition errors are returned."""
        shard = self._shard(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            if generation >= 0:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"Group {group_id} does not exist.")
        elif isinstance(group, ClassicGroup):
            if group.is_state(ClassicState.DEAD):
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if instance_id is not None:
                error = self._validate_member(group, member_id, instance_id)
                if error:
                    raise KafkaError(error)
            elif member_id and member_id not in group.members:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation >= 0 and generation != group.generation:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION)
        elif member_id or generation >= 0:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            if generation != member.member_epoch:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                                 f"The received member epoch {generation} does not match the "
                                 f"expected member epoch {member.member_epoch}.")
        now = self.now_ms()
        records: list[rec.KeyValue] = []
        accepted: list[tuple[tuple[str, int], OffsetAndMetadata]] = []
        results = []
        limit = self.config.offset_metadata_max_bytes
        for topic, partitions in topics:
            out = []
            for partition, offset, leader_epoch, metadata in partitions:
                if metadata is not None and len(metadata) > limit:
                    out.append((partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                    continue
                oam = OffsetAndMetadata(offset, leader_epoch, metadata or "", now)
                records.append(rec.offset_commit(group_id, topic, partition, offset,
                                                 leader_epoch, oam.metadata, now))
                accepted.append(((topic, partition), oam))
                out.append((partition, ErrorCode.NONE))
            results.append((topic, out))
        self.store.append(shard.partition, records, producer_id=producer_id,
                          producer_epoch=producer_epoch)
        if accepted:
            pending = shard.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
            for tp, oam in accepted:
                pending[tp] = oam
        return results

    def on_transaction_completed(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` was written to `__consumer_offsets-<partition>`
        (Kafka's onTransactionCompleted). While the partition loads, its replay sees the marker."""
        shard = self.shards.get(partition)
        if shard is not None and not shard.loading:
            self._complete_txn_offsets(shard, producer_id, commit)

    def _complete_txn_offsets(self, shard: Shard, producer_id: int, commit: bool) -> None:
        pending = shard.pending_txn.pop(producer_id, None)
        if not pending or not commit:
            return
        for gid, offsets in pending.items():
            if gid not in shard.groups:  # a "simple" group: offsets without membership
                shard.groups[gid] = ClassicGroup(gid, self.now_ms())
            shard.offsets.setdefault(gid, {}).update(offsets)

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of the group with a transactional commit still waiting for its marker
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        shard = self.shards.get(self.partition_for(group_id)) if group_id else None
        if shard is None:
            return set()
        return {tp for by_group in shard.pending_txn.values()
                for tp in by_group.get(group_id, {})}

    # -- end transactions ---------------------------------------------------------------------

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]
                       ) -> list[tuple[str, list[tuple[int, int]]]]:
        """OffsetDelete: per-partition errors; group-level failures raise KafkaError."""
        shard = self._shard(group_id)
        group = shard.groups.get(group_id)
        if group is None or (isinstance(group, ClassicGroup)
                             and group.is_state(ClassicState.DEAD)):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if isinstance(group, ClassicGroup) and not group.is_empty and \
                group.protocol_type != "consumer":
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP)
        offsets = shard.offsets.get(group_id, {})
        records = []
        doomed = []
        results = []
        for topic, partitions in topics:
            if group.is_subscribed_to(topic):
                results.append((topic, [(p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                                        for p in partitions]))
                continue
            for p in partitions:
                if (topic, p) in offsets:
                    records.append(rec.offset_tombstone(group_id, topic, p))
                    doomed.append((topic, p))
            results.append((topic, [(p, ErrorCode.NONE) for p in partitions]))
        self.store.append(shard.partition, records)
        for tp in doomed:
            offsets.pop(tp, None)
        if not offsets:
            shard.offsets.pop(group_id, None)
        return results

    # ========================================================================================
    # ListGroups, DescribeGroups, DeleteGroups
    # ========================================================================================

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()
                    ) -> tuple[int, list[dict[str, Any]]]:
        states_filter = {s.lower() for s in states}
        types_filter = {t.lower() for t in types}
        error = ErrorCode.NONE
        out = []
        for shard in self.shards.values():
            if shard.loading:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            for group in shard.groups.values():
                if states_filter and group.state_name.lower() not in states_filter:
                    continue
                if types_filter and group.type not in types_filter:
                    continue
                out.append({"group_id": group.group_id,
                            "protocol_type": group.protocol_type or "",
                            "group_state": group.state_name, "group_type": group.type})
        return error, out

    def describe_groups(self, group_ids: list[str], *, include_authorized_operations: bool,
                        version: int) -> list[dict[str, Any]]:
        out = []
        ops = GROUP_AUTHORIZED_OPERATIONS if include_authorized_operations \
            else UNKNOWN_AUTHORIZED_OPERATIONS
        for gid in group_ids:
            entry: dict[str, Any] = {"group_id": gid, "error_code": 0, "error_message": None,
                                     "group_state": "Dead", "protocol_type": "",
                                     "protocol_data": "", "members": [],
                                     "authorized_operations": ops}
            out.append(entry)
            try:
                shard = self._shard(gid)
            except KafkaError as exc:
                entry.update(error_code=int(exc.code), error_message=exc.message)
                continue
            group = shard.groups.get(gid)
            if group is None or (isinstance(group, ConsumerGroup) and version >= 6):
                if version >= 6:
                    what = "not found" if group is None else "is not a classic group"
                    entry.update(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
                                 error_message=f"Group {gid} {what}.")
                continue
            if isinstance(group, ConsumerGroup):
                entry.update(group_state=group.state_name, protocol_type="consumer")
                continue
            entry.update(group_state=group.state_name, protocol_type=group.protocol_type or "")
            stable = group.is_state(ClassicState.STABLE)
            if stable:
                entry["protocol_data"] = group.protocol_name or ""
            entry["members"] = [
                {"member_id": m.member_id, "group_instance_id": m.instance_id,
                 "client_id": m.client_id, "client_host": m.client_host,
                 "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                 "member_assignment": m.assignment if stable else b""}
                for m in group.members.values()]
        return out

    def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        out = []
        for gid in group_ids:
            try:
                shard = self._shard(gid)
                group = shard.groups.get(gid)
                if group is None or (isinstance(group, ClassicGroup)
                                     and group.is_state(ClassicState.DEAD)):
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND)
                if not group.is_empty:
                    raise KafkaError(ErrorCode.NON_EMPTY_GROUP)
                self._delete_group(shard, group)
                out.append((gid, ErrorCode.NONE))
            except KafkaError as exc:
                out.append((gid, exc.code))
        return out

    def _delete_group(self, shard: Shard, group: Group) -> None:
        """Tombstones for the group's offsets and metadata, then forget it."""
        gid = group.group_id
        records = [rec.offset_tombstone(gid, t, p) for (t, p) in shard.offsets.get(gid, {})]
        if isinstance(group, ClassicGroup):
            records.append(rec.group_tombstone(gid))
        else:
            records += self._consumer_group_tombstones(group)
        self.store.append(shard.partition, records)
        shard.offsets.pop(gid, None)
        shard.groups.pop(gid, None)
        self.timers.cancel_group(gid)
        if isinstance(group, ClassicGroup):
            group.state = ClassicState.DEAD
        else:
            group.deleted = True
        log.info("group %s deleted (%d records written)", gid, len(records))

    def on_topics_deleted(self, topics: set[str]) -> None:
        """Drop the committed offsets of deleted topics (Kafka's onPartitionsDeleted), so a
        topic created again under the same name starts without stale offsets."""
        for shard in self.shards.values():
            if shard.loading:
                continue
            for gid, offsets in list(shard.offsets.items()):
                doomed = [tp for tp in offsets if tp[0] in topics]
                if not doomed:
                    continue
                try:
                    self.store.append(shard.partition,
                                      [rec.offset_tombstone(gid, t, p) for t, p in doomed])
                except KafkaError as exc:
                    log.warning("group %s: cannot delete offsets of deleted topics: %s", gid, exc)
                    continue
                for tp in doomed:
                    del offsets[tp]
                if not offsets:
                    del shard.offsets[gid]

    # ========================================================================================
    # Offset expiration (offsets.retention.minutes)
    # ========================================================================================

    def _schedule_expiration(self) -> None:
        self.timers.schedule(("expire", ""), self.config.offsets_retention_check_interval,
                             self._run_expiration)

    def _run_expiration(self) -> None:
        try:
            self.expire_offsets()
        except Exception:
            log.exception("offset expiration failed")
        if self._started:
            self._schedule_expiration()

    def expire_offsets(self) -> int:
        """Drop expired offsets of groups that no longer use them, and empty groups with no
        offsets left (Kafka's cleanupGroupMetadata). Returns the number of offsets removed."""
        now = self.now_ms()
        retention = self.config.offsets_retention_ms
        removed = 0
        for shard in list(self.shards.values()):
            if shard.loading:
                continue
            for gid in list(set(shard.groups) | set(shard.offsets)):
                group = shard.groups.get(gid)
                offsets = shard.offsets.get(gid, {})
                base = self._expiration_base(group)
                records: list[rec.KeyValue] = []
                doomed = []
                if base is not None:
                    for (topic, partition), oam in offsets.items():
                        if group is not None and group.is_subscribed_to(topic) and \
                                not group.is_empty:
                            continue
                        if oam.expire_ts >= 0:
                            expired = now >= oam.expire_ts
                        else:
                            start = oam.commit_ts if base == "commit" else base
                            expired = now - start >= retention
                        if expired:
                            records.append(rec.offset_tombstone(gid, topic, partition))
                            doomed.append((topic, partition))
                delete_group = group is not None and group.is_empty and \
                    len(doomed) == len(offsets) and \
                    not (isinstance(group, ClassicGroup) and group.pending_members)
                if delete_group:
                    if isinstance(group, ClassicGroup):
                        records.append(rec.group_tombstone(gid))
                    else:
                        records += self._consumer_group_tombstones(group)
                if not records:
                    continue
                try:
                    self.store.append(shard.partition, records)
                except KafkaError as exc:
                    log.warning("group %s: cannot write expired offsets: %s", gid, exc)
                    continue
                for tp in doomed:
                    offsets.pop(tp, None)
                removed += len(doomed)
                if not offsets:
                    shard.offsets.pop(gid, None)
                if delete_group:
                    shard.groups.pop(gid, None)
                    self.timers.cancel_group(gid)
                if doomed:
                    log.info("group %s: expired %d offsets%s", gid, len(doomed),
                             " and removed the empty group" if delete_group else "")
        return removed

    @staticmethod
    def _expiration_base(group: Group | None) -> int | str | None:
        """When a group's offsets start ageing: the commit time, the time the group became
        empty, or never (None) while a classic group is mid-rebalance."""
        if group is None or isinstance(group, ConsumerGroup):
            return "commit"
        if group.protocol_type is None:
            return "commit"  # simple group: offsets only
        if group.is_empty:
            return group.state_ts
        if group.protocol_type == "consumer" and group.subscribed_topics is not None and \
                group.is_state(ClassicState.STABLE):
            return "commit"
        return None
