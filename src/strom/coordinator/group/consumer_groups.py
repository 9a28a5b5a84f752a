"""KIP-848, the consumer rebalance protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

The server owns the assignment. A heartbeat (1) creates or updates the member, bumping the
group epoch when subscriptions or the subscribed topics' partition counts change; (2) computes a
new target assignment when the group epoch is ahead of the assignment epoch; (3) moves the
member towards its target (Kafka's CurrentAssignmentBuilder): partitions the member must give up
are revoked first (UNREVOKED_PARTITIONS, the member keeps its epoch) and a partition is handed to
its new owner only after the previous owner has confirmed the revocation, so no partition is ever
owned by two members. Members that miss `group.consumer.session.timeout.ms` or do not revoke
within their rebalance timeout are fenced.

Regular-expression subscriptions are resolved on the broker with Python's `re` (Kafka uses
RE2/J; the common subset is the same) against the user topics, refreshed whenever topics change.

State changes are written to `__consumer_offsets` as Kafka's ConsumerGroup* records (types 3-8)
and replayed on load, so a broker restart keeps members, epochs and assignments.

`ConsumerGroupManager` serves the consumer groups of the shared `GroupShards` (its shards,
store, timers and topics view); the reconciliation itself is `reconciliation.reconcile`.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import Any

from strom.common.regex import RegexError, compile_regex
from strom.coordinator.group import migration
from strom.coordinator.group import records as rec
from strom.coordinator.group.assignors import ASSIGNORS
from strom.coordinator.group.classic_groups import ClassicGroupManager
from strom.coordinator.group.reconciliation import reconcile
from strom.coordinator.group.replies import (
    ConsumerGroupDescription,
    ConsumerMemberDescription,
    HeartbeatReply,
    described_assignment,
    reply_assignment,
)
from strom.coordinator.group.shards import GroupShards, Shard, group_tombstones
from strom.coordinator.group.share_state import ShareGroup
from strom.coordinator.group.state import (
    GROUP_AUTHORIZED_OPERATIONS,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    Assignment,
    ClassicGroup,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    copy_assignment,
    same_assignment,
)
from strom.coordinator.group.streams_state import StreamsGroup
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1


def owned_from_request(entries: list[Any] | None) -> Assignment | None:
    """The request's TopicPartitions (topic_id, partitions) as an assignment (None stays None)."""
    if entries is None:
        return None
    out: Assignment = {}
    for e in entries:
        topic_id = e["topic_id"] if isinstance(e, dict) else e.topic_id
        partitions = e["partitions"] if isinstance(e, dict) else e.partitions
        out.setdefault(topic_id, set()).update(partitions)
    return out


def _updated_member(old: ConsumerMember, member_id: str, instance_id: str | None,
                    rack_id: str | None, rebalance_timeout: int, assignor: str | None,
                    names: list[str] | None, regex: str | None, client_id: str,
                    client_host: str) -> ConsumerMember:
    """A copy of the member with what the heartbeat sent (absent fields keep their value)."""
    member = ConsumerMember(**{**old.__dict__})
    member.assigned = copy_assignment(old.assigned)
    member.pending_revocation = copy_assignment(old.pending_revocation)
    member.member_id = member_id
    if instance_id is not None:
        member.instance_id = instance_id
    if rack_id is not None:
        member.rack_id = rack_id
    if rebalance_timeout != -1:
        member.rebalance_timeout = rebalance_timeout
    if assignor is not None:
        member.server_assignor = assignor
    if names is not None:
        member.subscribed_topic_names = list(names)
    if regex is not None:
        member.subscribed_topic_regex = regex or None
    member.client_id = client_id
    member.client_host = client_host
    return member


def with_classic(member: ConsumerMember, classic: ClassicMetadata | None) -> ConsumerMember:
    """A copy of the member with its classic-protocol metadata replaced."""
    out = ConsumerMember(**{**member.__dict__})
    out.classic = classic
    return out


def known_static_member(existing: ConsumerMember | None, instance_id: str,
                        member_id: str) -> ConsumerMember:
    """The static member a rejoining request names: the instance's current member, else
    UNKNOWN_MEMBER_ID (no such instance) or FENCED_INSTANCE_ID (another member took it)."""
    if existing is None:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                         f"Static member {member_id} with instance id {instance_id} was "
                         f"fenced by member {existing.member_id}.")
    return existing


class ConsumerGroupManager:
    """KIP-848 consumer groups of the shards in `state`."""

    def __init__(self, state: GroupShards, classic: ClassicGroupManager) -> None:
        self.state = state
        self.classic = classic  # a downgrade hands the group to the classic manager
        self.config = state.config
        self.topics = state.topics
        self.store = state.store
        self.timers = state.timers
        self.now_ms = state.now_ms
        # regex -> (topics-view version, matching topic names)
        self._regex_cache: dict[str, tuple[int, frozenset[str]]] = {}

    # ========================================================================================
    # ConsumerGroupHeartbeat
    # ========================================================================================

    def consumer_group_heartbeat(self, *, group_id: str, member_id: str, member_epoch: int,
                                 instance_id: str | None, rack_id: str | None,
                                 rebalance_timeout: int, subscribed_topic_names: list[str] | None,
                                 subscribed_topic_regex: str | None, server_assignor: str | None,
                                 topic_partitions: list[Any] | None, client_id: str,
                                 client_host: str, version: int = 1) -> HeartbeatReply:
        owned = owned_from_request(topic_partitions)
        try:
            if "consumer" not in self.config.rebalance_protocols:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                 "The consumer rebalance protocol is disabled.")
            self._validate_heartbeat(group_id, member_id, member_epoch, instance_id, rack_id,
                                     rebalance_timeout, subscribed_topic_names,
                                     subscribed_topic_regex, server_assignor, topic_partitions,
                                     version)
            shard = self.state.serving(group_id)
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._consumer_leave(shard, group_id, member_id, member_epoch, instance_id)
            return self._consumer_heartbeat(
                shard, group_id, member_id, member_epoch, instance_id, rack_id,
                rebalance_timeout, subscribed_topic_names, subscribed_topic_regex,
                server_assignor, owned, client_id, client_host)
        except KafkaError as exc:
            return HeartbeatReply.failed(exc.code, exc.message)

    def _validate_heartbeat(self, group_id: str, member_id: str, epoch: int,
                            instance_id: str | None, rack_id: str | None,
                            rebalance_timeout: int, names: list[str] | None, regex: str | None,
                            assignor: str | None, topic_partitions: list[Any] | None,
                            version: int) -> None:
        def invalid(message: str) -> KafkaError:
            return KafkaError(ErrorCode.INVALID_REQUEST, message)

        if not group_id:
            raise invalid("GroupId can't be empty.")
        if instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if rack_id == "":
            raise invalid("RackId can't be empty.")
        if not member_id and (version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH):
            raise invalid("MemberId can't be empty.")
        if epoch == 0:
            if rebalance_timeout == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if topic_partitions is None or len(topic_partitions) > 0:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if names is None and not regex:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be "
                              "non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if assignor is not None and assignor not in self._assignor_names():
            raise KafkaError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {assignor} is not supported. Supported assignors: "
                             f"{', '.join(self._assignor_names())}.")
        if regex:
            try:
                compile_regex(regex)
            except RegexError as exc:
                raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                 f"SubscribedTopicRegex `{regex}` is not a valid regular "
                                 f"expression: {exc}.") from None

    def _assignor_names(self) -> list[str]:
        return [a for a in self.config.consumer_assignors if a in ASSIGNORS] or ["uniform"]

    def _consumer_heartbeat(self, shard: Shard, group_id: str, member_id: str, epoch: int,
                            instance_id: str | None, rack_id: str | None,
                            rebalance_timeout: int, names: list[str] | None, regex: str | None,
                            assignor: str | None, owned: Assignment | None, client_id: str,
                            client_host: str) -> HeartbeatReply:
        records: list[rec.KeyValue] = []
        before = shard.groups.get(group_id)
        group = self._group_for_heartbeat(shard, group_id, epoch, records)
        try:
            response = self._heartbeat_in_group(
                shard, group, member_id, epoch, instance_id, rack_id, rebalance_timeout, names,
                regex, assignor, owned, client_id, client_host, records)
        except KafkaError:
            if isinstance(before, ClassicGroup) and shard.groups.get(group_id) is group:
                shard.groups[group_id] = before  # the upgrade did not happen after all
            raise
        if isinstance(before, ClassicGroup) and not before.is_empty:
            self._upgraded(before, group)
        return response

    def _heartbeat_in_group(self, shard: Shard, group: ConsumerGroup, member_id: str,
                            epoch: int, instance_id: str | None, rack_id: str | None,
                            rebalance_timeout: int, names: list[str] | None,
                            regex: str | None, assignor: str | None, owned: Assignment | None,
                            client_id: str, client_host: str,
                            records: list[rec.KeyValue]) -> HeartbeatReply:
        group_id = group.group_id
        self._check_capacity(group, member_id, instance_id)
        if not member_id:
            member_id = str(uuid.uuid4())
        old = self._member_for_heartbeat(group, member_id, epoch, instance_id, owned, records)
        member = with_classic(_updated_member(old, member_id, instance_id, rack_id,
                                              rebalance_timeout, assignor, names, regex,
                                              client_id, client_host), None)
        is_new = member_id not in group.members
        if is_new or member.metadata_fields() != old.metadata_fields():
            records.append(rec.consumer_group_record(rec.CONSUMER_GROUP_MEMBER_METADATA, group_id,
                                                     member_id, member.metadata_fields()))
        group.put_member(member)
        # 1. subscription metadata and group epoch
        self.maybe_bump_group_epoch(
            group, member.subscription_key() != old.subscription_key(), records)
        # 2. target assignment
        if group.group_epoch > group.assignment_epoch:
            records += self.update_target_assignment(group)
        # 3. reconcile the member towards its target
        updated = self.reconcile_member(group, member, owned, is_new, records)
        self.store.append(shard.partition, records)
        self.schedule_session_timeout(group, updated)
        interval = self.state.settings(group_id).consumer_heartbeat_interval_ms
        full = epoch == 0 or (rebalance_timeout != -1 and names is not None
                              and owned is not None)
        sent = None  # the assignment goes back when asked for in full, or when it changed
        if full or not same_assignment(old.assigned, updated.assigned):
            sent = reply_assignment({t: ps for t, ps in updated.assigned.items() if ps})
        return HeartbeatReply(member_id=member_id, member_epoch=updated.member_epoch,
                              heartbeat_interval=interval, assignment=sent)

    def _group_for_heartbeat(self, shard: Shard, group_id: str, epoch: int,
                             records: list[rec.KeyValue]) -> ConsumerGroup:
        """The consumer group, created on a first join: an empty classic group is replaced, a
        non-empty one of the consumer protocol type is upgraded (the migration policy
        permitting; the caller undoes it if the heartbeat then fails)."""
        group = shard.groups.get(group_id)
        if isinstance(group, ClassicGroup) and not group.is_empty and epoch == 0:
            migration.check_upgrade(group, self.config.upgrade_enabled,
                                    self.config.consumer_max_size)
            converted = migration.consumer_group_from_classic(group, self.topics, self.now_ms())
            records.append(rec.group_tombstone(group_id))
            records += migration.consumer_group_records(converted)
            shard.groups[group_id] = converted
            return converted
        if isinstance(group, StreamsGroup | ShareGroup):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                             f"Group {group_id} is not a consumer group.")
        if isinstance(group, ClassicGroup):
            if not group.is_empty or group.pending_members:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"Group {group_id} is not a consumer group.")
            log.info("group %s: converting the empty classic group to a consumer group", group_id)
            records.append(rec.group_tombstone(group_id))
            self.timers.cancel_group(group_id)
            del shard.groups[group_id]
            group = None
        if group is None:
            if epoch != 0:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Consumer group {group_id} not found.")
            group = ConsumerGroup(group_id, self.now_ms())
            shard.groups[group_id] = group
        return group

    def _upgraded(self, classic: ClassicGroup, group: ConsumerGroup) -> None:
        """The upgrade is written: parked classic requests learn that a rebalance is under way
        (they rejoin the consumer group), the classic timers stop, the converted members get
        their classic session timeouts."""
        gid = group.group_id
        self.classic.abort_parked(classic, ErrorCode.REBALANCE_IN_PROGRESS)
        for member_id in classic.members:
            self.timers.cancel(("hb", gid, member_id))
        for key in (("join", gid), ("sync", gid)):
            self.timers.cancel(key)
        for member in group.classic_members():
            self.schedule_session_timeout(group, member)
        log.info("group %s: converted the classic group (generation %d, %d members) to a "
                 "consumer group", gid, classic.generation, len(classic.members))

    def _check_capacity(self, group: ConsumerGroup, member_id: str,
                        instance_id: str | None) -> None:
        """group.consumer.max.size: only members not in the group yet are refused."""
        if len(group.members) >= self.config.consumer_max_size and \
                member_id not in group.members and group.static_member(instance_id) is None:
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The consumer group has reached its maximum capacity of "
                             f"{self.config.consumer_max_size} members.")

    def maybe_bump_group_epoch(self, group: ConsumerGroup, bump: bool,
                                records: list[rec.KeyValue]) -> None:
        """Bump the group epoch when a subscription, or a subscribed topic, changed."""
        version = self.topics.version()
        if bump or group.metadata_version != version:
            group.metadata_version = version
            metadata = self._subscription_metadata(group)
            if metadata != group.subscription_metadata:
                group.subscription_metadata = metadata
                records.append(self._partition_metadata_record(group))
                bump = True
        if bump:
            group.group_epoch += 1
            records.append(rec.consumer_group_record(rec.CONSUMER_GROUP_METADATA,
                                                     group.group_id, None,
                                                     {"epoch": group.group_epoch}))
            log.info("group %s: bumped group epoch to %d", group.group_id, group.group_epoch)

    def reconcile_member(self, group: ConsumerGroup, member: ConsumerMember,
                         owned: Assignment | None, is_new: bool,
                         records: list[rec.KeyValue]) -> ConsumerMember:
        """Move the member towards its target; arm or clear its revocation deadline (classic
        members have join and sync deadlines instead)."""
        updated = reconcile(group, member, owned)
        if updated is not member or is_new:
            group.put_member(updated)
            records.append(self._current_assignment_record(group.group_id, updated))
            if updated.state == MemberState.UNREVOKED_PARTITIONS and \
                    not updated.uses_classic_protocol:
                self._schedule_rebalance_timeout(group.group_id, updated)
            else:
                self.timers.cancel(("rebalance", group.group_id, member.member_id))
        return updated

    def _member_for_heartbeat(self, group: ConsumerGroup, member_id: str, epoch: int,
                              instance_id: str | None, owned: Assignment | None,
                              records: list[rec.KeyValue]) -> ConsumerMember:
        """The member this heartbeat is about (new, existing or a replaced static member)."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if epoch != 0:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group "
                                     f"{group.group_id}.")
                log.info("group %s: member %s joins", group.group_id, member_id)
                return ConsumerMember(member_id)
            if epoch != 0:
                self._check_member_epoch(member, epoch, owned)
            return member
        existing = group.static_member(instance_id)
        if epoch == 0:
            if existing is None or existing.member_id == member_id:
                if existing is None:
                    log.info("group %s: static member %s (instance %s) joins", group.group_id,
                             member_id, instance_id)
                return existing or group.members.get(member_id) or ConsumerMember(member_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise KafkaError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} "
                                 f"cannot join the group because the instance id is owned by "
                                 f"member {existing.member_id}.")
            return self.replace_static_member(group, existing, member_id, records)
        existing = known_static_member(existing, instance_id, member_id)
        self._check_member_epoch(existing, epoch, owned)
        return existing

    def replace_static_member(self, group: ConsumerGroup, existing: ConsumerMember,
                              member_id: str, records: list[rec.KeyValue]) -> ConsumerMember:
        """The static member comes back: a new member id takes over its assignment."""
        log.info("group %s: static member %s rejoins as %s", group.group_id,
                 existing.instance_id, member_id)
        replacement = ConsumerMember(**{**existing.__dict__})
        replacement.member_id = member_id
        replacement.member_epoch = replacement.previous_member_epoch = 0
        replacement.assigned = copy_assignment(existing.assigned)
        replacement.pending_revocation = {}
        target = group.target.get(existing.member_id)
        records += rec.member_tombstones(group.group_id, existing.member_id)
        group.remove_member(existing.member_id)
        self.cancel_member_timers(group.group_id, existing.member_id)
        if target is not None:
            group.target[member_id] = target
            records.append(rec.consumer_group_record(
                rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id,
                {"topic_partitions": rec.topic_partitions(target)}))
        records.append(rec.consumer_group_record(rec.CONSUMER_GROUP_MEMBER_METADATA,
                                                 group.group_id, member_id,
                                                 replacement.metadata_fields()))
        group.put_member(replacement)
        return replacement

    @staticmethod
    def _check_member_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
        if epoch > member.member_epoch:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a greater member epoch ({epoch}) "
                             f"than the one known by the group coordinator "
                             f"({member.member_epoch}). The member must abandon all its "
                             "partitions and rejoin.")
        if epoch < member.member_epoch:
            subset = owned is not None and all(
                p in member.assigned.get(t, ()) for t, ps in owned.items() for p in ps)
            if epoch != member.previous_member_epoch or not subset:
                raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a smaller member epoch "
                                 f"({epoch}) than the one known by the group coordinator "
                                 f"({member.member_epoch}). The member must abandon all its "
                                 "partitions and rejoin.")

    # -- subscriptions and target assignment ---------------------------------------------------

    def _regex_topics(self, regex: str) -> frozenset[str]:
        version = self.topics.version()
        cached = self._regex_cache.get(regex)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            pattern = compile_regex(regex)
        except RegexError:
            matched: frozenset[str] = frozenset()
        else:
            matched = frozenset(n for n in self.topics.names() if pattern.fullmatch(n))
        self._regex_cache[regex] = (version, matched)
        return matched

    def _member_topics(self, member: ConsumerMember) -> set[str]:
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            topics |= self._regex_topics(member.subscribed_topic_regex)
        return topics

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for member in group.members.values():
            for name in self._member_topics(member):
                info = self.topics.topic(name)
                if info is not None:
                    out[name] = info
        return out

    def _partition_metadata_record(self, group: ConsumerGroup) -> rec.KeyValue:
        return rec.consumer_group_record(
            rec.CONSUMER_GROUP_PARTITION_METADATA, group.group_id, None,
            {"topics": [{"topic_id": tid, "topic_name": name, "num_partitions": n,
                         "partition_metadata": []}
                        for name, (tid, n) in sorted(group.subscription_metadata.items())]})

    def _preferred_assignor(self, group: ConsumerGroup) -> str:
        names = self._assignor_names()
        votes = Counter(m.server_assignor for m in group.members.values()
                        if m.server_assignor in names)
        return votes.most_common(1)[0][0] if votes else names[0]

    def update_target_assignment(self, group: ConsumerGroup) -> list[rec.KeyValue]:
        name = self._preferred_assignor(group)
        subscriptions = {mid: self._member_topics(m) & set(group.subscription_metadata)
                         for mid, m in group.members.items()}
        new = ASSIGNORS[name].assign(subscriptions, group.subscription_metadata, group.target)
        records = []
        for mid in group.members:
            target = new.get(mid, {})
            if not same_assignment(group.target.get(mid, {}), target) or mid not in group.target:
                records.append(rec.consumer_group_record(
                    rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group.group_id, mid,
                    {"topic_partitions": rec.topic_partitions(target)}))
            group.target[mid] = target
        group.assignment_epoch = group.group_epoch
        records.append(rec.consumer_group_record(
            rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group.group_id, None,
            {"assignment_epoch": group.assignment_epoch}))
        log.info("group %s: new target assignment at epoch %d with the %s assignor",
                 group.group_id, group.assignment_epoch, name)
        return records

    def _current_assignment_record(self, group_id: str, m: ConsumerMember) -> rec.KeyValue:
        return migration.current_assignment_record(group_id, m)

    # -- leaving and fencing -------------------------------------------------------------------

    def _consumer_leave(self, shard: Shard, group_id: str, member_id: str, epoch: int,
                        instance_id: str | None) -> HeartbeatReply:
        group = shard.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Consumer group {group_id} not found.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} was "
                                 f"fenced by member {member.member_id}.")
        response = HeartbeatReply(member_id=member_id, member_epoch=epoch)
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("group %s: static member %s (instance %s) left temporarily", group_id,
                     member_id, instance_id)
            left = ConsumerMember(**{**member.__dict__})
            left.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            left.pending_revocation = {}
            left.assigned = copy_assignment(member.assigned)
            self.store.append(shard.partition, [self._current_assignment_record(group_id, left)])
            group.put_member(left)
            self.timers.cancel(("rebalance", group_id, member_id))
            return response
        log.info("group %s: member %s left", group_id, member_id)
        self._fence_member(shard, group, member)
        return response

    def _fence_member(self, shard: Shard, group: ConsumerGroup, member: ConsumerMember) -> None:
        self.fence_members(shard, group, [member.member_id])

    def cancel_member_timers(self, group_id: str, member_id: str) -> None:
        for kind in ("session", "rebalance", "classic-join", "classic-sync"):
            self.timers.cancel((kind, group_id, member_id))

    def fence_members(self, shard: Shard, group: ConsumerGroup, member_ids: list[str]) -> None:
        """Remove members and bump the group epoch so the others get their partitions; when
        only classic members remain, the group goes back to the classic protocol instead
        (Kafka's consumerGroupFenceMembers)."""
        gid = group.group_id
        leaving = set(member_ids)
        if migration.can_downgrade(group, leaving, self.config.downgrade_enabled,
                                   self.config.max_group_size):
            try:
                self.downgrade(shard, group, leaving)
            except KafkaError as exc:
                log.warning("group %s: cannot persist the downgrade to a classic group: %s",
                            gid, exc)
            return
        if not self.config.downgrade_enabled and group.all_classic_except(leaving):
            log.info("group %s: cannot downgrade to a classic group because the online "
                     "downgrade is disabled", gid)
        records: list[rec.KeyValue] = []
        for mid in member_ids:
            records += rec.member_tombstones(gid, mid)
            group.remove_member(mid)
            self.cancel_member_timers(gid, mid)
        metadata = self._subscription_metadata(group)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            records.append(self._partition_metadata_record(group))
        group.group_epoch += 1
        records.append(rec.consumer_group_record(rec.CONSUMER_GROUP_METADATA, gid, None,
                                                 {"epoch": group.group_epoch}))
        try:
            self.store.append(shard.partition, records)
        except KafkaError as exc:
            log.warning("group %s: cannot persist the removal of members %s: %s", gid,
                        member_ids, exc)

    def downgrade(self, shard: Shard, group: ConsumerGroup, leaving: set[str],
                  before: list[rec.KeyValue] | None = None) -> ClassicGroup:
        """Turn the group back into a classic group of its classic members, then rebalance.
        `before`: records of in-memory changes to write first (a replaced static member).
        Raises KafkaError (nothing changed) when the records cannot be written."""
        gid = group.group_id
        classic = migration.classic_group_from_consumer(group, leaving, self.topics,
                                                        self.now_ms())
        assignment = {m.member_id: m.assignment for m in classic.members.values()}
        records = list(before or []) + group_tombstones(group)
        records.append(self.classic.metadata_record(classic, assignment))
        self.store.append(shard.partition, records)
        for mid in group.members:
            self.cancel_member_timers(gid, mid)
        shard.groups[gid] = classic
        log.info("group %s: converted the consumer group (epoch %d) to a classic group of %d "
                 "members", gid, group.group_epoch, len(classic.members))
        self.classic.adopt(classic, f"Downgrade group {gid} from consumer to classic for member "
                                    "leaving.")
        return classic

    def _session_expired(self, group_id: str, member_id: str) -> None:
        self.fence_if_present(group_id, member_id, None, "its session expired")

    def _rebalance_expired(self, group_id: str, member_id: str, epoch: int) -> None:
        self.fence_if_present(group_id, member_id, epoch,
                               f"it did not revoke its partitions within its rebalance timeout "
                               f"(epoch {epoch})")

    def fence_if_present(self, group_id: str, member_id: str, epoch: int | None,
                          why: str) -> None:
        shard = self.state.shard_of(group_id)
        if shard is None or shard.loading:
            return
        group = shard.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            return
        member = group.members.get(member_id)
        if member is None or (epoch is not None and member.member_epoch != epoch):
            return
        log.info("group %s: member %s fenced because %s", group_id, member_id, why)
        self._fence_member(shard, group, member)

    def schedule_session_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A classic member's session is its JoinGroup session timeout, a consumer-protocol
        member's group.consumer.session.timeout.ms."""
        group_id, member_id = group.group_id, member.member_id
        timeout = member.classic.session_timeout if member.classic is not None \
            else self.state.settings(group_id).consumer_session_timeout_ms
        self.timers.schedule(("session", group_id, member_id), timeout,
                             lambda: self._session_expired(group_id, member_id))

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerMember) -> None:
        mid, epoch = member.member_id, member.member_epoch
        timeout = member.rebalance_timeout if member.rebalance_timeout > 0 \
            else self.state.settings(group_id).consumer_session_timeout_ms
        self.timers.schedule(("rebalance", group_id, mid), timeout,
                             lambda: self._rebalance_expired(group_id, mid, epoch))

    # ========================================================================================
    # ConsumerGroupDescribe
    # ========================================================================================

    def consumer_group_describe(self, group_ids: list[str], *, include_authorized_operations: bool
                                ) -> list[ConsumerGroupDescription]:
        ops = GROUP_AUTHORIZED_OPERATIONS if include_authorized_operations \
            else UNKNOWN_AUTHORIZED_OPERATIONS
        return [self._describe_group(gid, ops) for gid in group_ids]

    def _describe_group(self, gid: str, ops: int) -> ConsumerGroupDescription:
        try:
            shard = self.state.serving(gid)
        except KafkaError as exc:
            return ConsumerGroupDescription.failed(gid, ops, exc.code, exc.message, "Dead")
        group = shard.groups.get(gid)
        if not isinstance(group, ConsumerGroup):
            what = "not found" if group is None else "is not a consumer group"
            return ConsumerGroupDescription.failed(gid, ops, ErrorCode.GROUP_ID_NOT_FOUND,
                                                   f"Group {gid} {what}.", "Dead")
        return ConsumerGroupDescription(
            gid, ops, group_state=group.state_name, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self._preferred_assignor(group),
            members=tuple(self._describe_member(group, m) for m in group.members.values()))

    def _describe_member(self, group: ConsumerGroup,
                         m: ConsumerMember) -> ConsumerMemberDescription:
        name = self.topics.topic_name
        return ConsumerMemberDescription(
            m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
            subscribed_topic_names=tuple(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=described_assignment(m.assigned, name),
            target_assignment=described_assignment(group.target.get(m.member_id, {}), name),
            member_type=MEMBER_TYPE_CLASSIC if m.uses_classic_protocol
            else MEMBER_TYPE_CONSUMER)

    # ========================================================================================
    # Load
    # ========================================================================================

    def replay(self, shard: Shard, r: rec.CoordinatorRecord) -> None:
        """A ConsumerGroup* record (types 3-8) or its tombstone read back from the log."""
        gid = r.key["group_id"]
        group = shard.groups.get(gid)
        if r.value is None:
            if not isinstance(group, ConsumerGroup):
                return
            mid = r.key.get("member_id")
            if r.type == rec.CONSUMER_GROUP_METADATA:
                del shard.groups[gid]
            elif r.type == rec.CONSUMER_GROUP_PARTITION_METADATA:
                group.subscription_metadata = {}
            elif r.type == rec.CONSUMER_GROUP_MEMBER_METADATA and mid is not None:
                group.remove_member(mid)
            elif r.type == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER and mid is not None:
                group.target.pop(mid, None)
            elif r.type == rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT and mid is not None:
                member = group.members.get(mid)
                if member is not None:
                    reset = ConsumerMember(**{**member.__dict__})
                    reset.member_epoch = reset.previous_member_epoch = 0
                    reset.state = MemberState.STABLE
                    reset.assigned, reset.pending_revocation = {}, {}
                    group.put_member(reset)
            return
        if not isinstance(group, ConsumerGroup):
            if isinstance(group, ClassicGroup) and not group.is_empty:
                return
            group = ConsumerGroup(gid, self.now_ms())
            shard.groups[gid] = group
        v = r.value
        if r.type == rec.CONSUMER_GROUP_METADATA:
            group.group_epoch = v["epoch"]
        elif r.type == rec.CONSUMER_GROUP_PARTITION_METADATA:
            group.subscription_metadata = {t["topic_name"]: (t["topic_id"], t["num_partitions"])
                                           for t in v["topics"]}
        elif r.type == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = v["assignment_epoch"]
        elif r.type == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            group.target[r.key["member_id"]] = rec.assignment_from(v["topic_partitions"])
        elif r.type == rec.CONSUMER_GROUP_MEMBER_METADATA:
            mid = r.key["member_id"]
            old = group.members.get(mid) or ConsumerMember(mid)
            member = ConsumerMember(**{**old.__dict__})
            member.instance_id = v["instance_id"]
            member.rack_id = v["rack_id"]
            member.client_id = v["client_id"]
            member.client_host = v["client_host"]
            member.subscribed_topic_names = list(v["subscribed_topic_names"] or [])
            member.subscribed_topic_regex = v["subscribed_topic_regex"]
            member.rebalance_timeout = v["rebalance_timeout"]
            member.server_assignor = v["server_assignor"]
            member.classic = ClassicMetadata.from_fields(v.get("classic_member_metadata"))
            group.put_member(member)
        elif r.type == rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            mid = r.key["member_id"]
            old = group.members.get(mid) or ConsumerMember(mid)
            member = ConsumerMember(**{**old.__dict__})
            member.member_epoch = v["member_epoch"]
            member.previous_member_epoch = v["previous_member_epoch"]
            try:
                member.state = MemberState(v["state"])
            except ValueError:
                member.state = MemberState.UNKNOWN
            member.assigned = rec.assignment_from(v["assigned_partitions"])
            member.pending_revocation = rec.assignment_from(v["partitions_pending_revocation"])
            group.put_member(member)

    def on_loaded(self, group: ConsumerGroup) -> None:
        """Arm the session (and pending revocation) timers of a loaded group's members."""
        for member in group.members.values():
            self.schedule_session_timeout(group, member)
            if member.state == MemberState.UNREVOKED_PARTITIONS and member.classic is None:
                self._schedule_rebalance_timeout(group.group_id, member)
