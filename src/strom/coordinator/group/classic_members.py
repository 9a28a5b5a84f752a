"""Classic members of a consumer group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup sent to
a KIP-848 consumer group (Kafka's classicGroup*ToConsumerGroup).

During an online migration some members of a consumer group still run the classic protocol.
The group's server-side assignor assigns them too, from the subscription in their JoinGroup
metadata. A JoinGroup updates the member like a ConsumerGroupHeartbeat would (bumping the group
epoch when its subscription changed), computes the target assignment and moves the member
towards it, taking the partitions it says it still owns (its subscription's owned partitions;
none for eager clients, which give everything up before rejoining). The JoinGroup answer has
no leader and no member list: generation = the member epoch, and SyncGroup hands out the
member's current assignment, serialized in its own subscription version. A Heartbeat answers
REBALANCE_IN_PROGRESS while the member must rejoin: the group epoch moved past it, it has
partitions to revoke, or partitions it waited for were released. Deadlines: the session
(the JoinGroup session timeout), the rejoin after REBALANCE_IN_PROGRESS and the SyncGroup after
a JoinGroup (both the rebalance timeout) fence the member.
"""

from __future__ import annotations

import dataclasses
import logging

from strom.coordinator.group import consumer_protocol as cp
from strom.coordinator.group import migration
from strom.coordinator.group import records as rec
from strom.coordinator.group.classic_groups import JoinRequest
from strom.coordinator.group.consumer_groups import (
    ConsumerGroupManager,
    known_static_member,
    with_classic,
)
from strom.coordinator.group.replies import (
    JoinReply,
    JoinRespond,
    LeaveResult,
    SyncReply,
    SyncRespond,
)
from strom.coordinator.group.shards import Shard
from strom.coordinator.group.state import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from strom.protocol.errors import ErrorCode, KafkaError, ProtocolError

log = logging.getLogger(__name__)


class ClassicMemberManager:
    """The classic protocol's four requests, when the group is a consumer group."""

    def __init__(self, consumer: ConsumerGroupManager) -> None:
        self.consumer = consumer
        self.state = consumer.state
        self.config = consumer.config
        self.topics = consumer.topics
        self.store = consumer.store
        self.timers = consumer.timers

    # -- JoinGroup ---------------------------------------------------------------------------

    def join_group(self, shard: Shard, group: ConsumerGroup, req: JoinRequest,
                   respond: JoinRespond) -> None:
        try:
            if self._downgrade_for_static_member(shard, group, req, respond):
                return
            respond(self._join(shard, group, req))
        except KafkaError as exc:
            log.info("group %s: classic JoinGroup of %s refused: %s", group.group_id,
                     req.member_id or "a new member", exc.message or exc.code.name)
            respond(JoinReply.failed(req.member_id, exc.code))

    def _join(self, shard: Shard, group: ConsumerGroup, req: JoinRequest) -> JoinReply:
        gid = group.group_id
        if self.config.migration_policy == "disabled":
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"Cannot join the consumer group {gid} with the classic protocol "
                             "because the group migration is disabled.")
        unknown = req.member_id == ""
        member_id = migration.new_member_id() if unknown else req.member_id
        if len(group.members) >= self.config.consumer_max_size and \
                member_id not in group.members:
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The consumer group has reached its maximum capacity of "
                             f"{self.config.consumer_max_size} members.")
        if not group.supports_classic_protocols(req.protocol_type,
                                                {n for n, _ in req.protocols}):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"Member {member_id}'s protocols are not supported.")
        if unknown and req.require_known_member_id and req.instance_id is None:
            log.info("group %s: a dynamic classic member joins the consumer group; asking it "
                     "to rejoin with member id %s", gid, member_id)
            return JoinReply.failed(member_id, ErrorCode.MEMBER_ID_REQUIRED)
        try:
            subscription = cp.parse_subscription(req.protocols[0][1])
        except ProtocolError as exc:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"Malformed embedded consumer protocol: {exc}") from None
        records: list[rec.KeyValue] = []
        old = self._member_for_join(group, member_id, req.instance_id, unknown, records)
        member = with_classic(old, ClassicMetadata(
            req.session_timeout, tuple((n, bytes(m)) for n, m in req.protocols)))
        member.member_id = member_id
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if subscription.rack_id is not None:
            member.rack_id = subscription.rack_id
        if req.rebalance_timeout > 0:
            member.rebalance_timeout = req.rebalance_timeout
        member.subscribed_topic_names = list(subscription.topics)
        member.subscribed_topic_regex = None
        member.client_id, member.client_host = req.client_id, req.client_host
        is_new = member_id not in group.members
        if is_new or member.metadata_fields() != old.metadata_fields():
            records.append(rec.consumer_group_record(rec.CONSUMER_GROUP_MEMBER_METADATA, gid,
                                                     member_id, member.metadata_fields()))
        group.put_member(member)
        self.consumer.maybe_bump_group_epoch(
            group, member.subscription_key() != old.subscription_key(), records)
        if group.group_epoch > group.assignment_epoch:
            records += self.consumer.update_target_assignment(group)
        owned = migration.to_topic_ids(subscription.owned_partitions, self.topics)
        updated = self.consumer.reconcile_member(group, member, owned, is_new, records)
        self.store.append(shard.partition, records)
        self.timers.cancel(("classic-join", gid, member_id))
        self.consumer.schedule_session_timeout(group, updated)
        rebalance_timeout = updated.rebalance_timeout if updated.rebalance_timeout > 0 \
            else req.session_timeout
        self.timers.schedule(("classic-sync", gid, member_id), rebalance_timeout,
                             lambda: self.consumer.fence_if_present(
                                 gid, member_id, None, "the member failed to sync within "
                                                       "timeout"))
        log.info("group %s: classic member %s joined at epoch %d (%s)", gid, member_id,
                 updated.member_epoch, updated.state.name)
        return JoinReply(member_id=member_id, generation_id=updated.member_epoch,
                         protocol_type=CONSUMER_PROTOCOL_TYPE,
                         protocol_name=req.protocols[0][0])

    def _downgrade_for_static_member(self, shard: Shard, group: ConsumerGroup,
                                     req: JoinRequest, respond: JoinRespond) -> bool:
        """A static classic member replacing the group's last consumer-protocol member (a
        rolling downgrade with group.instance.id): the group goes back to classic, the new
        instance takes the old one's place and joins the classic rebalance that follows."""
        existing = group.static_member(req.instance_id)
        if (req.member_id or existing is None or existing.classic is not None
                or not group.all_classic_except({existing.member_id})
                or not self.config.downgrade_enabled
                or len(group.members) > self.config.max_group_size
                or self.config.migration_policy == "disabled"
                or not group.supports_classic_protocols(req.protocol_type,
                                                        {n for n, _ in req.protocols})):
            return False
        member_id = migration.new_member_id()
        records: list[rec.KeyValue] = []
        target = group.target.get(existing.member_id)
        replacement = self.consumer.replace_static_member(group, existing, member_id, records)
        group.put_member(with_classic(replacement, ClassicMetadata(
            req.session_timeout, tuple((n, bytes(m)) for n, m in req.protocols))))
        log.info("group %s: static member %s replaced the last consumer-protocol member %s "
                 "using the classic protocol", group.group_id, req.instance_id,
                 existing.member_id)
        try:
            self.consumer.downgrade(shard, group, set(), before=records)
        except KafkaError:
            group.remove_member(member_id)
            group.put_member(existing)
            if target is not None:
                group.target[existing.member_id] = target
            raise
        self.consumer.classic.join_group(
            dataclasses.replace(req, member_id=member_id), respond)
        return True

    def _member_for_join(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                         unknown: bool, records: list[rec.KeyValue]) -> ConsumerMember:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                log.info("group %s: member %s joins the consumer group using the classic "
                         "protocol", group.group_id, member_id)
                return ConsumerMember(member_id)
            return member
        existing = group.static_member(instance_id)
        if unknown:
            if existing is None:
                return ConsumerMember(member_id)
            return self.consumer.replace_static_member(group, existing, member_id, records)
        return known_static_member(existing, instance_id, member_id)

    # -- SyncGroup, Heartbeat ----------------------------------------------------------------

    def _classic_member(self, group: ConsumerGroup, member_id: str,
                        instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group "
                                 f"{group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member with instance id {instance_id} is not a member of "
                                 f"group {group.group_id}.")
            if member.member_id != member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} was "
                                 f"fenced by member {member.member_id}.")
        if member.classic is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member.member_id} does not use the classic protocol.")
        return member

    @staticmethod
    def _check_generation(member: ConsumerMember, generation: int) -> None:
        if member.member_epoch != generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                             f"The request generation id {generation} is not equal to the "
                             f"member epoch {member.member_epoch} of member "
                             f"{member.member_id}.")

    def _must_rejoin(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """The rejoin deadline starts when the member is first told to rejoin."""
        gid, mid = group.group_id, member.member_id
        timeout = member.rebalance_timeout if member.rebalance_timeout > 0 \
            else self.state.settings(gid).consumer_session_timeout_ms
        self.timers.schedule_if_absent(
            ("classic-join", gid, mid), timeout,
            lambda: self.consumer.fence_if_present(
                gid, mid, None, "the classic member failed to join within the rebalance "
                                "timeout"))

    def sync_group(self, group: ConsumerGroup, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, respond: SyncRespond) -> None:
        try:
            member = self._classic_member(group, member_id, instance_id)
            self._check_generation(member, generation)
            assert member.classic is not None
            name = member.classic.protocols[0][0] if member.classic.protocols else ""
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                 f"The protocol type {protocol_type} from member {member_id} "
                                 f"request is not equal to the group protocol type "
                                 f"{CONSUMER_PROTOCOL_TYPE}.")
            if protocol_name is not None and protocol_name != name:
                raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                 f"The protocol name {protocol_name} from member {member_id} "
                                 f"request is not equal to the protocol name {name} returned "
                                 "in the join response.")
            if group.group_epoch > member.member_epoch and \
                    member.state != MemberState.UNREVOKED_PARTITIONS:
                self._must_rejoin(group, member)
                raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS,
                                 f"A new rebalance is triggered in group {group.group_id} and "
                                 f"member {member_id} should rejoin to catch up.")
        except KafkaError as exc:
            respond(SyncReply.failed(exc.code))
            return
        self.timers.cancel(("classic-sync", group.group_id, member.member_id))
        self.consumer.schedule_session_timeout(group, member)
        respond(SyncReply(protocol_type=protocol_type, protocol_name=protocol_name,
                          assignment=migration.serialized_assignment(
                              member.classic.protocols, member.assigned, self.topics)))

    def heartbeat(self, group: ConsumerGroup, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        try:
            member = self._classic_member(group, member_id, instance_id)
            self._check_generation(member, generation)
        except KafkaError as exc:
            return exc.code
        self.consumer.schedule_session_timeout(group, member)
        if (member.member_epoch < group.group_epoch
                or member.state == MemberState.UNREVOKED_PARTITIONS
                or (member.state == MemberState.UNRELEASED_PARTITIONS
                    and not group.waiting_on_unreleased(member))):
            self._must_rejoin(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- LeaveGroup --------------------------------------------------------------------------

    def leave_group(self, shard: Shard, group: ConsumerGroup,
                    members: list[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[LeaveResult]]:
        """members: (member id, instance id, reason). Any member may be removed this way
        (kafka-consumer-groups removes members by instance id); then maybe a downgrade."""
        gid = group.group_id
        results: list[LeaveResult] = []
        leaving: list[str] = []
        for member_id, instance_id, reason in members:
            error = ErrorCode.NONE
            if instance_id is None:
                member = group.members.get(member_id)
                if member is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                member = group.static_member(instance_id)
                if member is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and member.member_id != member_id:
                    error = ErrorCode.FENCED_INSTANCE_ID
            if not error and member is not None:
                log.info("group %s: member %s left through LeaveGroup (client reason: %s)",
                         gid, member.member_id, reason or "not provided")
                if member.member_id not in leaving:
                    leaving.append(member.member_id)
            results.append(LeaveResult(member_id, instance_id, int(error)))
        if leaving:
            self.consumer.fence_members(shard, group, leaving)
        return ErrorCode.NONE, results
