"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups.

Kafka's classic rebalance (the part of GroupMetadataManager that serves ClassicGroups): members
join, the coordinator waits for everyone (rebalance timeout, or the initial delay for an empty
group), elects a leader, hands it the members' subscriptions, and SyncGroup spreads the leader's
assignment. Static members (group.instance.id) keep their assignment across restarts.
Requests that wait (JoinGroup, SyncGroup) take a `respond` callback called exactly once,
possibly right away. Session, join, sync and initial-delay deadlines are timers on the shared
`GroupShards`, re-armed on events, never polled; the group's metadata record is appended to the
partition's log before the assignment is handed out.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from strom.coordinator.group import records as rec
from strom.coordinator.group.replies import (
    ClassicGroupDescription,
    ClassicMemberDescription,
    JoinReply,
    JoinRespond,
    LeaveResult,
    SyncReply,
    SyncRespond,
)
from strom.coordinator.group.shards import GroupShards, Shard
from strom.coordinator.group.share_state import ShareGroup
from strom.coordinator.group.state import (
    GROUP_AUTHORIZED_OPERATIONS,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    ClassicGroup,
    ClassicMember,
    ClassicState,
    ConsumerGroup,
    Protocols,
)
from strom.coordinator.group.streams_state import StreamsGroup
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


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


def validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
    """NONE, or the error for a request naming a member the group does not have (or a static
    member whose instance id now belongs to another member id)."""
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


class ClassicMembersOfConsumerGroups(Protocol):
    """Who serves the classic requests of a consumer group's members (`classic_members`)."""

    def join_group(self, shard: Shard, group: ConsumerGroup, req: JoinRequest,
                   respond: JoinRespond) -> None: ...

    def sync_group(self, group: ConsumerGroup, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, respond: SyncRespond) -> None: ...

    def heartbeat(self, group: ConsumerGroup, generation: int, member_id: str,
                  instance_id: str | None) -> int: ...

    def leave_group(self, shard: Shard, group: ConsumerGroup,
                    members: list[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[LeaveResult]]: ...


class ClassicGroupManager:
    """Classic groups of the shards in `state`: the join/sync state machine and its timers."""

    def __init__(self, state: GroupShards) -> None:
        self.state = state
        self.config = state.config
        self.store = state.store
        self.timers = state.timers
        self.now_ms = state.now_ms
        # serves the classic requests of members of a (non-empty) consumer group; set by the
        # coordinator, which builds the consumer-group side after this manager
        self.in_consumer_groups: ClassicMembersOfConsumerGroups | None = None

    # -- load --------------------------------------------------------------------------------

    def replay(self, shard: Shard, r: rec.CoordinatorRecord) -> None:
        """A GroupMetadata record (or its tombstone) read back from the log."""
        gid = r.key["group"]
        if r.value is None:
            if isinstance(shard.groups.get(gid), ClassicGroup):
                del shard.groups[gid]
            return
        shard.groups[gid] = self._classic_from_record(gid, r.value)

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


    def on_loaded(self, group: ClassicGroup) -> None:
        for member in group.members.values():
            self._reschedule_heartbeat(group, member)

    def on_unloading(self, group: ClassicGroup) -> None:
        """Parked JoinGroup/SyncGroup requests learn that this broker no longer coordinates."""
        for member in list(group.members.values()):
            group.complete_join(member, JoinReply.failed(member.member_id,
                                                         ErrorCode.NOT_COORDINATOR))
            group.complete_sync(member, SyncReply.failed(ErrorCode.NOT_COORDINATOR))

    def abort_parked(self, group: ClassicGroup, error: int) -> None:
        """Answer every parked JoinGroup and SyncGroup with `error` (the group is converted)."""
        for member in list(group.members.values()):
            group.complete_join(member, JoinReply.failed(member.member_id, error))
            group.complete_sync(member, SyncReply.failed(error))

    def adopt(self, group: ClassicGroup, reason: str) -> None:
        """Take over a group a downgrade just made classic: arm its members' sessions and
        start the rebalance that gives them classic assignments."""
        for member in group.members.values():
            self._reschedule_heartbeat(group, member)
        self._prepare_rebalance(group, reason)

    def metadata_record(self, group: ClassicGroup, assignment: dict[str, bytes]) -> rec.KeyValue:
        return self._group_metadata_record(group, assignment)

    def touch_member(self, group: ClassicGroup, member_id: str) -> None:
        """An OffsetCommit of a member counts as a heartbeat while the group is stable or
        preparing a rebalance (Kafka's rescheduleClassicGroupMemberHeartbeat)."""
        member = group.members.get(member_id)
        if member is not None and group.is_state(ClassicState.STABLE,
                                                 ClassicState.PREPARING_REBALANCE):
            self._reschedule_heartbeat(group, member)


    # ========================================================================================
    # JoinGroup
    # ========================================================================================

    def join_group(self, req: JoinRequest, respond: JoinRespond) -> None:
        try:
            shard = self.state.serving(req.group_id)
        except KafkaError as exc:
            respond(JoinReply.failed(req.member_id, exc.code))
            return
        cfg = self.config
        if not cfg.min_session_timeout <= req.session_timeout <= cfg.max_session_timeout:
            respond(JoinReply.failed(req.member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        if "classic" not in cfg.rebalance_protocols:
            respond(JoinReply.failed(req.member_id, ErrorCode.UNSUPPORTED_VERSION))
            return
        group = shard.groups.get(req.group_id)
        if isinstance(group, ConsumerGroup) and not group.is_empty and \
                self.in_consumer_groups is not None:
            self.in_consumer_groups.join_group(shard, group, req, respond)
            return
        if isinstance(group, StreamsGroup | ShareGroup):
            log.info("group %s: classic JoinGroup refused, the group is a %s group",
                     req.group_id, group.type)
            respond(JoinReply.failed(req.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if isinstance(group, ConsumerGroup):
            if not group.is_empty:
                log.info("group %s: classic JoinGroup refused, the group uses the consumer "
                         "protocol", req.group_id)
                respond(JoinReply.failed(req.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
                return
            try:
                self.state.delete_group_state(shard, group)
            except KafkaError as exc:
                respond(JoinReply.failed(req.member_id, exc.code))
                return
            group = None
        unknown = req.member_id == ""
        if group is None:
            if not unknown:
                respond(JoinReply.failed(req.member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            group = self.state.new_classic_group(shard, req.group_id)
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            respond(JoinReply.failed("", ErrorCode.GROUP_MAX_SIZE_REACHED))
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

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, respond: JoinRespond) -> None:
        if group.is_state(ClassicState.DEAD):
            respond(JoinReply.failed("", ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            respond(JoinReply.failed("", ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
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
            respond(JoinReply.failed(new_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, req, new_id, respond)

    def _join_existing_member(self, group: ClassicGroup, req: JoinRequest,
                              respond: JoinRespond) -> None:
        member_id = req.member_id
        if group.is_state(ClassicState.DEAD):
            respond(JoinReply.failed(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            respond(JoinReply.failed(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, req, member_id, respond)
            return
        error = validate_member(group, member_id, req.instance_id)
        if error:
            respond(JoinReply.failed(member_id, error))
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
            respond(JoinReply.failed(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _join_response(self, group: ClassicGroup, member_id: str, *, leader_view: bool,
                       skip_assignment: bool = False, leader: str | None = None
                       ) -> JoinReply:
        return JoinReply(member_id=member_id, generation_id=group.generation,
                         protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                         leader=(leader if leader is not None else group.leader_id) or "",
                         skip_assignment=skip_assignment,
                         members=group.join_members() if leader_view else ())

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, member_id: str,
                                  respond: JoinRespond) -> None:
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
                                     req: JoinRequest, respond: JoinRespond) -> None:
        if member.join_callback is not None:  # a duplicate join replaces the parked one
            group.complete_join(member, JoinReply.failed(member.member_id,
                                                   ErrorCode.REBALANCE_IN_PROGRESS))
        rebalance_timeout = req.rebalance_timeout if req.rebalance_timeout > 0 \
            else req.session_timeout
        group.update_member(member, req.protocols, rebalance_timeout, req.session_timeout,
                            respond)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"member {member.member_id} joins in state {group.state_name}; "
                   f"client reason: {req.reason or 'not provided'}")

    def _update_static_member(self, group: ClassicGroup, req: JoinRequest, old_id: str,
                              new_id: str, respond: JoinRespond) -> None:
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
                    self.store.append(self.state.partition_for(group.group_id),
                                      [self._group_metadata_record(group, assignment)])
                except KafkaError as exc:
                    log.warning("group %s: cannot persist static member %s: %s", group.group_id,
                                req.instance_id, exc)
                    group.update_member(member, saved[0], saved[1], saved[2], None)
                    group.replace_static_member(req.instance_id or "", new_id, old_id)
                    self._reschedule_heartbeat(group, group.members[old_id])
                    respond(JoinReply(member_id="", error_code=int(exc.code),
                                      generation_id=group.generation, leader=old_leader or ""))
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
        shard = self.state.shard_of(group_id)
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
                self.store.append(self.state.partition_for(gid), [self._group_metadata_record(group, {})])
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
            response = SyncReply(error_code=int(error),
                                 protocol_type=group.protocol_type if ok else None,
                                 protocol_name=group.protocol_name if ok else None,
                                 assignment=member.assignment)
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
        group.complete_join(member, JoinReply.failed("", ErrorCode.UNKNOWN_MEMBER_ID))
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
                   assignments: list[tuple[str, bytes]], respond: SyncRespond) -> None:
        try:
            shard = self.state.serving(group_id)
        except KafkaError as exc:
            respond(SyncReply.failed(exc.code))
            return
        group = shard.groups.get(group_id)
        if isinstance(group, ConsumerGroup) and not group.is_empty and \
                self.in_consumer_groups is not None:
            self.in_consumer_groups.sync_group(group, generation, member_id, instance_id,
                                               protocol_type, protocol_name, respond)
            return
        if not isinstance(group, ClassicGroup) or group.is_empty:
            respond(SyncReply.failed(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.is_state(ClassicState.DEAD):
            respond(SyncReply.failed(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        error = validate_member(group, member_id, instance_id)
        if not error and generation != group.generation:
            error = ErrorCode.ILLEGAL_GENERATION
        if not error and ((protocol_type is not None and protocol_type != group.protocol_type)
                          or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error:
            respond(SyncReply.failed(error))
            return
        member = group.members[member_id]
        if group.is_state(ClassicState.PREPARING_REBALANCE):
            respond(SyncReply.failed(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_state(ClassicState.STABLE):
            self._remove_pending_sync(group, member_id)
            respond(SyncReply(protocol_type=group.protocol_type,
                              protocol_name=group.protocol_name, assignment=member.assignment))
        else:  # CompletingRebalance
            if member.sync_callback is not None:
                group.complete_sync(member, SyncReply.failed(ErrorCode.REBALANCE_IN_PROGRESS))
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
            self.store.append(self.state.partition_for(group.group_id),
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
            shard = self.state.serving(group_id)
        except KafkaError as exc:
            return exc.code
        group = shard.groups.get(group_id)
        if isinstance(group, ConsumerGroup) and self.in_consumer_groups is not None:
            return self.in_consumer_groups.heartbeat(group, generation, member_id, instance_id)
        if not isinstance(group, ClassicGroup):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_state(ClassicState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = validate_member(group, member_id, instance_id)
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
                    ) -> tuple[int, list[LeaveResult]]:
        """members: (member id, instance id, reason). Returns (top-level error, per member)."""
        try:
            shard = self.state.serving(group_id)
        except KafkaError as exc:
            return exc.code, []
        group = shard.groups.get(group_id)
        if isinstance(group, ConsumerGroup) and self.in_consumer_groups is not None:
            return self.in_consumer_groups.leave_group(shard, group, members)
        if not isinstance(group, ClassicGroup):
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        if group.is_state(ClassicState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results: list[LeaveResult] = []
        left = []
        for member_id, instance_id, reason in members:
            error: int = ErrorCode.NONE
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
                error = validate_member(group, member_id, instance_id)
                if not error:
                    self._remove_current_member(group, member_id, reason)
                    left.append(member_id)
            results.append(LeaveResult(member_id, instance_id, int(error)))
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
        group.complete_join(member, JoinReply.failed("", ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)


    def describe_groups(self, group_ids: list[str], *, include_authorized_operations: bool,
                        version: int) -> list[ClassicGroupDescription]:
        ops = GROUP_AUTHORIZED_OPERATIONS if include_authorized_operations \
            else UNKNOWN_AUTHORIZED_OPERATIONS
        return [self._describe_group(gid, ops, version) for gid in group_ids]

    def _describe_group(self, gid: str, ops: int, version: int) -> ClassicGroupDescription:
        try:
            shard = self.state.serving(gid)
        except KafkaError as exc:
            return ClassicGroupDescription(gid, ops, error_code=int(exc.code),
                                           error_message=exc.message)
        group = shard.groups.get(gid)
        modern = isinstance(group, ConsumerGroup | StreamsGroup | ShareGroup)
        if group is None or (modern and version >= 6):
            if version >= 6:
                what = "not found" if group is None else "is not a classic group"
                return ClassicGroupDescription(gid, ops,
                                               error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
                                               error_message=f"Group {gid} {what}.")
            return ClassicGroupDescription(gid, ops)
        if not isinstance(group, ClassicGroup):
            # Kafka: a consumer or streams group is Dead to DescribeGroups v0-v5
            return ClassicGroupDescription(gid, ops)
        stable = group.is_state(ClassicState.STABLE)
        return ClassicGroupDescription(
            gid, ops, group_state=group.state_name, protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=tuple(ClassicMemberDescription(
                m.member_id, m.instance_id, m.client_id, m.client_host,
                metadata=m.metadata(group.protocol_name) if stable else b"",
                assignment=m.assignment if stable else b"")
                for m in group.members.values()))
