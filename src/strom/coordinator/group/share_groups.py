"""KIP-932 share groups: ShareGroupHeartbeat and ShareGroupDescribe.

Members of a share group subscribe to topics; the coordinator assigns partitions to them with
`share_assignor` (several members may share a partition, which is the point) and each member's
assignment is its target at once: nothing is owned, so nothing must be revoked first. The
group epoch is bumped when a member joins or leaves, when a subscription changes and when a
subscribed topic appears, disappears or grows; the target is recomputed at the next heartbeat.

The records are Kafka's ShareGroup* records (types 10-15) in `__consumer_offsets`. Type 15
(ShareGroupStatePartitionMetadata) lists the partitions the group has been assigned, whose
share-partition state (in `__share_group_state`) the admin calls describe, reset and delete.
The state itself is created by the partition's leader on its first fetch, at the offset
`share.auto.offset.reset` names.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from strom.coordinator.group import records as rec
from strom.coordinator.group import share_assignor
from strom.coordinator.group.replies import (
    HeartbeatReply,
    ShareGroupDescription,
    ShareMemberDescription,
    described_assignment,
    reply_assignment,
)
from strom.coordinator.group.shards import GroupShards, Shard
from strom.coordinator.group.share_state import (
    Assignment,
    ShareGroup,
    ShareMember,
    assignment_of,
)
from strom.coordinator.group.state import (
    GROUP_AUTHORIZED_OPERATIONS,
    LEAVE_GROUP_MEMBER_EPOCH,
    UNKNOWN_AUTHORIZED_OPERATIONS,
)
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

MemberRemoved = Callable[[str, str], None]  # (group id, member id)


def _no_listener(group_id: str, member_id: str) -> None:
    return None


class ShareGroupManager:
    """The share groups of the shards in `state`."""

    def __init__(self, state: GroupShards) -> None:
        self.state = state
        self.config = state.config
        self.topics = state.topics
        self.store = state.store
        self.timers = state.timers
        self.now_ms = state.now_ms
        # The share-partition leaders release a fenced member's records (wiring sets it).
        self.on_member_removed: MemberRemoved = _no_listener

    # ========================================================================================
    # ShareGroupHeartbeat
    # ========================================================================================

    def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int,
                  rack_id: str | None, subscribed_topic_names: list[str] | None,
                  client_id: str, client_host: str) -> HeartbeatReply:
        try:
            self._validate(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
            shard = self.state.serving(group_id)
            if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(shard, group_id, member_id)
            return self._heartbeat(shard, group_id, member_id, member_epoch, rack_id,
                                   subscribed_topic_names, client_id, client_host)
        except KafkaError as exc:
            return HeartbeatReply.failed(exc.code, exc.message)

    @staticmethod
    def _validate(group_id: str, member_id: str, epoch: int, rack_id: str | None,
                  names: list[str] | None) -> None:
        def invalid(message: str) -> KafkaError:
            return KafkaError(ErrorCode.INVALID_REQUEST, message)

        if not group_id:
            raise invalid("GroupId can't be empty.")
        if not member_id:
            raise invalid("MemberId can't be empty.")
        if rack_id == "":
            raise invalid("RackId can't be empty.")
        if epoch == 0 and not names:
            raise invalid("SubscribedTopicNames must be set in first request.")
        if epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -1.")

    def _group(self, shard: Shard, group_id: str, create: bool) -> ShareGroup:
        group = shard.groups.get(group_id)
        if group is None or getattr(group, "deleted", False):
            if not create:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Share group {group_id} not found.")
            group = ShareGroup(group_id, self.now_ms())
            shard.groups[group_id] = group
            log.info("share group %s created", group_id)
            return group
        if not isinstance(group, ShareGroup):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                             f"Group {group_id} is not a share group.")
        return group

    def _heartbeat(self, shard: Shard, group_id: str, member_id: str, epoch: int,
                   rack_id: str | None, names: list[str] | None, client_id: str,
                   client_host: str) -> HeartbeatReply:
        group = self._group(shard, group_id, create=epoch == 0)
        old = group.members.get(member_id)
        if old is None:
            if epoch != 0:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            if len(group.members) >= self.config.share_max_size:
                raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The share group has reached its maximum capacity of "
                                 f"{self.config.share_max_size} members.")
            log.info("share group %s: member %s joins", group_id, member_id)
        elif epoch not in (0, old.member_epoch):
            which = "greater" if epoch > old.member_epoch else "smaller"
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The share group member has a {which} "
                             f"member epoch ({epoch}) than the one known by the group "
                             f"coordinator ({old.member_epoch}). The member must abandon all its "
                             "partitions and rejoin.")
        member = ShareMember(**{**old.__dict__}) if old is not None else ShareMember(member_id)
        if rack_id is not None:
            member.rack_id = rack_id
        if names is not None:
            member.subscribed_topic_names = tuple(sorted(set(names)))
        member.client_id, member.client_host = client_id, client_host
        records: list[rec.KeyValue] = []
        if old is None or member.metadata_fields() != old.metadata_fields():
            records.append(rec.consumer_group_record(rec.SHARE_GROUP_MEMBER_METADATA, group_id,
                                                     member_id, member.metadata_fields()))
        group.members[member_id] = member
        bump = old is None or member.subscribed_topic_names != old.subscribed_topic_names
        self._maybe_bump_group_epoch(group, bump, records)
        if group.group_epoch > group.assignment_epoch:
            records += self._update_target(group)
        target = group.target.get(member_id, {})
        if member.member_epoch != group.assignment_epoch or member.assigned != target:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
            member.assigned = target
            records.append(rec.consumer_group_record(
                rec.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, member_id,
                member.assignment_fields()))
        records += self._initialize(group, target)
        try:
            self.store.append(shard.partition, records)
        except KafkaError:
            if old is None:
                group.members.pop(member_id, None)
            else:
                group.members[member_id] = old
            raise
        self._schedule_session_timeout(group_id, member_id)
        changed = epoch == 0 or old is None or old.assigned != member.assigned
        return HeartbeatReply(
            member_id=member_id, member_epoch=member.member_epoch,
            heartbeat_interval=self.state.settings(group_id).share_heartbeat_interval_ms,
            assignment=reply_assignment(member.assigned) if changed else None)

    # -- group epoch, target assignment, initialized partitions --------------------------------

    def _subscribed_metadata(self, group: ShareGroup) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for name in group.subscribed_topics():
            info = self.topics.topic(name)
            if info is not None:
                out[name] = info
        return out

    def _maybe_bump_group_epoch(self, group: ShareGroup, bump: bool,
                                records: list[rec.KeyValue]) -> None:
        version = self.topics.version()
        if bump or group.metadata_version != version:
            group.metadata_version = version
            metadata = self._subscribed_metadata(group)
            if metadata != group.subscribed:
                group.subscribed = metadata
                bump = True
        if bump:
            group.group_epoch += 1
            group.metadata_hash = hash(tuple(sorted(group.subscribed.items()))) & (2**63 - 1)
            records.append(rec.consumer_group_record(
                rec.SHARE_GROUP_METADATA, group.group_id, None,
                {"epoch": group.group_epoch, "metadata_hash": group.metadata_hash}))
            log.info("share group %s: bumped group epoch to %d", group.group_id,
                     group.group_epoch)

    def _update_target(self, group: ShareGroup) -> list[rec.KeyValue]:
        subscriptions = {mid: set(m.subscribed_topic_names) for mid, m in group.members.items()}
        new = share_assignor.assign(subscriptions, group.subscribed, group.target)
        records = []
        for mid in group.members:
            target = new.get(mid, {})
            if mid not in group.target or group.target[mid] != target:
                records.append(rec.consumer_group_record(
                    rec.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, group.group_id, mid,
                    {"topic_partitions": rec.topic_partitions(dict(target))}))
            group.target[mid] = target
        group.assignment_epoch = group.group_epoch
        records.append(rec.consumer_group_record(
            rec.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, group.group_id, None,
            {"assignment_epoch": group.assignment_epoch, "assignment_timestamp": self.now_ms()}))
        log.info("share group %s: new target assignment at epoch %d", group.group_id,
                 group.assignment_epoch)
        return records

    def _initialize(self, group: ShareGroup, assignment: Assignment) -> list[rec.KeyValue]:
        """Partitions assigned for the first time join the group's initialized partitions."""
        changed = False
        for topic_id, partitions in assignment.items():
            name, known = group.initialized.get(topic_id, (None, frozenset()))
            if partitions <= known:
                continue
            name = name or self.topics.topic_name(topic_id) or ""
            group.initialized[topic_id] = (name, known | partitions)
            changed = True
        if not changed:
            return []
        return [rec.consumer_group_record(rec.SHARE_GROUP_STATE_PARTITION_METADATA,
                                          group.group_id, None, group.initialized_fields())]

    def mark_initialized(self, group_id: str, topic_id: uuid.UUID, name: str,
                         partitions: set[int]) -> None:
        """AlterShareGroupOffsets gave these partitions share state."""
        shard = self.state.serving(group_id)
        group = shard.groups.get(group_id)
        if not isinstance(group, ShareGroup):
            return
        records = self._initialize(group, {topic_id: frozenset(partitions)})
        if records:
            self.store.append(shard.partition, records)

    def forget_partitions(self, group_id: str, topic_id: uuid.UUID,
                          partitions: set[int] | None) -> None:
        """The share state of these partitions (None: the whole topic) was deleted."""
        shard = self.state.shard_of(group_id)
        if shard is None:
            return
        group = shard.groups.get(group_id)
        if not isinstance(group, ShareGroup) or topic_id not in group.initialized:
            return
        name, known = group.initialized[topic_id]
        left = frozenset() if partitions is None else known - partitions
        if left:
            group.initialized[topic_id] = (name, left)
        else:
            del group.initialized[topic_id]
        self.store.append(shard.partition, [rec.consumer_group_record(
            rec.SHARE_GROUP_STATE_PARTITION_METADATA, group_id, None,
            group.initialized_fields())])

    def on_topics_deleted(self, topics: set[str]) -> None:
        """Deleted topics leave the groups' initialized partitions (the share coordinator
        deletes their state itself, as Kafka's does)."""
        for shard in self.state.loaded_shards():
            for group in list(shard.groups.values()):
                if not isinstance(group, ShareGroup):
                    continue
                gone = [t for t, (name, _) in group.initialized.items() if name in topics]
                if not gone:
                    continue
                for topic_id in gone:
                    del group.initialized[topic_id]
                try:
                    self.store.append(shard.partition, [rec.consumer_group_record(
                        rec.SHARE_GROUP_STATE_PARTITION_METADATA, group.group_id, None,
                        group.initialized_fields())])
                except KafkaError as exc:
                    log.warning("share group %s: cannot record deleted topics: %s",
                                group.group_id, exc)

    # -- leaving and fencing ---------------------------------------------------------------------

    def _leave(self, shard: Shard, group_id: str, member_id: str) -> HeartbeatReply:
        group = shard.groups.get(group_id)
        if not isinstance(group, ShareGroup) or member_id not in group.members:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {group_id}.")
        log.info("share group %s: member %s left", group_id, member_id)
        # As Kafka: leaving the group leaves the member's share sessions alone. A leaving
        # client sends its last acknowledgements and closes its sessions (epoch -1) around the
        # same time as this heartbeat; closing them here would refuse those acknowledgements
        # (SHARE_SESSION_NOT_FOUND) and redeliver records it had accepted. The session's close,
        # or its connection's, releases what the member still holds.
        self._remove_member(shard, group, member_id, notify=False)
        return HeartbeatReply(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)

    def _remove_member(self, shard: Shard, group: ShareGroup, member_id: str, *,
                       notify: bool = True) -> None:
        gid = group.group_id
        records = rec.share_member_tombstones(gid, member_id)
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        self.timers.cancel(("share-session", gid, member_id))
        metadata = self._subscribed_metadata(group)
        group.subscribed = metadata
        group.group_epoch += 1
        records.append(rec.consumer_group_record(
            rec.SHARE_GROUP_METADATA, gid, None,
            {"epoch": group.group_epoch, "metadata_hash": group.metadata_hash}))
        try:
            self.store.append(shard.partition, records)
        except KafkaError as exc:
            log.warning("share group %s: cannot persist the removal of member %s: %s", gid,
                        member_id, exc)
        if notify:
            self.on_member_removed(gid, member_id)

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        self.timers.schedule(("share-session", group_id, member_id),
                             self.state.settings(group_id).share_session_timeout_ms,
                             lambda: self._session_expired(group_id, member_id))

    def _session_expired(self, group_id: str, member_id: str) -> None:
        shard = self.state.shard_of(group_id)
        if shard is None or shard.loading:
            return
        group = shard.groups.get(group_id)
        if isinstance(group, ShareGroup) and member_id in group.members:
            log.info("share group %s: member %s fenced because its session expired",
                     group_id, member_id)
            self._remove_member(shard, group, member_id)

    # ========================================================================================
    # ShareGroupDescribe
    # ========================================================================================

    def describe(self, group_ids: list[str], *,
                 include_authorized_operations: bool) -> list[ShareGroupDescription]:
        ops = GROUP_AUTHORIZED_OPERATIONS if include_authorized_operations \
            else UNKNOWN_AUTHORIZED_OPERATIONS
        return [self._describe_group(gid, ops) for gid in group_ids]

    def _describe_group(self, gid: str, ops: int) -> ShareGroupDescription:
        try:
            group = self.share_group(gid)
        except KafkaError as exc:
            return ShareGroupDescription.failed(gid, ops, exc.code, exc.message, "Dead")
        return ShareGroupDescription(
            gid, ops, group_state=group.state_name, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self.config.share_assignors[0] if self.config.share_assignors
            else share_assignor.NAME,
            members=tuple(self._describe_member(m) for m in group.members.values()))

    def share_group(self, group_id: str) -> ShareGroup:
        """The share group, or KafkaError (NOT_COORDINATOR, GROUP_ID_NOT_FOUND, ...)."""
        shard = self.state.serving(group_id)
        group = shard.groups.get(group_id)
        if not isinstance(group, ShareGroup) or group.deleted:
            what = "not found" if group is None else "is not a share group"
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} {what}.")
        return group

    def _describe_member(self, m: ShareMember) -> ShareMemberDescription:
        return ShareMemberDescription(
            m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
            subscribed_topic_names=tuple(m.subscribed_topic_names),
            assignment=described_assignment(m.assigned, self.topics.topic_name))

    # ========================================================================================
    # Load
    # ========================================================================================

    def replay(self, shard: Shard, r: rec.CoordinatorRecord) -> None:
        """A ShareGroup* record (types 10-15) or its tombstone read back from the log."""
        gid = r.key["group_id"]
        group = shard.groups.get(gid)
        mid = r.key.get("member_id")
        if r.value is None:
            if not isinstance(group, ShareGroup):
                return
            if r.type == rec.SHARE_GROUP_METADATA:
                del shard.groups[gid]
            elif r.type == rec.SHARE_GROUP_STATE_PARTITION_METADATA:
                group.initialized = {}
            elif r.type == rec.SHARE_GROUP_MEMBER_METADATA and mid is not None:
                group.members.pop(mid, None)
            elif r.type == rec.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER and mid is not None:
                group.target.pop(mid, None)
            elif r.type == rec.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT and mid is not None:
                member = group.members.get(mid)
                if member is not None:
                    member.member_epoch = member.previous_member_epoch = 0
                    member.assigned = {}
            return
        if not isinstance(group, ShareGroup):
            if group is not None and not group.is_empty:
                return
            group = ShareGroup(gid, self.now_ms())
            shard.groups[gid] = group
        v = r.value
        if r.type == rec.SHARE_GROUP_METADATA:
            group.group_epoch = v["epoch"]
            group.metadata_hash = v["metadata_hash"]
        elif r.type == rec.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = v["assignment_epoch"]
        elif r.type == rec.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER and mid is not None:
            group.target[mid] = assignment_of(v["topic_partitions"])
        elif r.type == rec.SHARE_GROUP_MEMBER_METADATA and mid is not None:
            member = group.members.setdefault(mid, ShareMember(mid))
            member.rack_id = v["rack_id"]
            member.client_id = v["client_id"]
            member.client_host = v["client_host"]
            member.subscribed_topic_names = tuple(v["subscribed_topic_names"] or ())
        elif r.type == rec.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT and mid is not None:
            member = group.members.setdefault(mid, ShareMember(mid))
            member.member_epoch = v["member_epoch"]
            member.previous_member_epoch = v["previous_member_epoch"]
            member.assigned = assignment_of(v["assigned_partitions"])
        elif r.type == rec.SHARE_GROUP_STATE_PARTITION_METADATA:
            group.initialized = {
                t["topic_id"]: (t["topic_name"], frozenset(t["partitions"]))
                for t in (*v["initializing_topics"], *v["initialized_topics"])}

    def on_loaded(self, group: ShareGroup) -> None:
        """Arm the session timers of a loaded group's members; the subscribed-topic metadata
        is recomputed at the next heartbeat."""
        for member_id in group.members:
            self._schedule_session_timeout(group.group_id, member_id)
