"""KIP-848 online migration: turning a live classic group into a consumer group and back.

Upgrade: the first ConsumerGroupHeartbeat to a non-empty classic group of the "consumer"
protocol type converts it (group.consumer.migration.policy permitting). Every classic member
becomes a consumer-group member that keeps speaking JoinGroup/SyncGroup (its `classic`
metadata), at member epoch = the classic generation, owning what the last SyncGroup gave it
(also its target), so nothing moves until the new member's join bumps the group epoch.
Downgrade: when the last consumer-protocol member leaves a group whose other members all use
the classic protocol, the group becomes a classic group again at generation = group epoch, each
member holding its target assignment in its own subscription version, and a rebalance starts.
Both conversions are pure here: the managers write the records and swap the group.
"""

from __future__ import annotations

import uuid
from typing import Any

from strom.coordinator.group import consumer_protocol as cp
from strom.coordinator.group import records as rec
from strom.coordinator.group.shards import TopicsView
from strom.coordinator.group.state import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ClassicGroup,
    ClassicMember,
    ClassicMetadata,
    ClassicState,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    copy_assignment,
)
from strom.protocol.errors import ErrorCode, KafkaError, ProtocolError


def to_topic_ids(partitions: cp.TopicPartitions, topics: TopicsView) -> Assignment:
    """Topic names to ids, leaving out topics the cluster no longer has (as Kafka does)."""
    out: Assignment = {}
    for name, ps in partitions.items():
        info = topics.topic(name)
        if info is not None and ps:
            out.setdefault(info[0], set()).update(ps)
    return out


def to_topic_names(assignment: Assignment, topics: TopicsView) -> cp.TopicPartitions:
    out: cp.TopicPartitions = {}
    for topic_id, ps in assignment.items():
        name = topics.topic_name(topic_id)
        if name is not None and ps:
            out[name] = sorted(ps)
    return out


def serialized_assignment(member_protocols: tuple[tuple[str, bytes], ...] | list[Any],
                          assignment: Assignment, topics: TopicsView) -> bytes:
    """A member's assignment as SyncGroup bytes, in the version of its first subscription."""
    version = cp.subscription_version(member_protocols[0][1]) if member_protocols else 0
    return cp.encode_assignment(to_topic_names(assignment, topics), version)


def check_upgrade(group: ClassicGroup, policy_allows: bool, max_size: int) -> None:
    """Kafka's validateOnlineUpgrade: GROUP_ID_NOT_FOUND with the reason when refused."""
    gid = group.group_id
    if not policy_allows:
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                         f"Cannot upgrade classic group {gid} to consumer group because online "
                         "upgrade is disabled.")
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                         f"Cannot upgrade classic group {gid} to consumer group because the group "
                         "does not use the consumer embedded protocol.")
    if len(group.members) > max_size:
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                         f"Cannot upgrade classic group {gid} to consumer group because the group "
                         "size exceeds the consumer group maximum size.")


def consumer_group_from_classic(classic: ClassicGroup, topics: TopicsView,
                                now_ms: int) -> ConsumerGroup:
    """The consumer group a classic group becomes; raises GROUP_ID_NOT_FOUND if a member's
    bytes cannot be read or carry a custom assignor's user data (it would be lost)."""
    gid = classic.group_id
    generation = classic.generation
    group = ConsumerGroup(gid, now_ms, group_epoch=generation, assignment_epoch=generation)
    for m in classic.members.values():
        protocol = classic.protocol_name or (m.protocols[0][0] if m.protocols else None)
        try:
            assignment = cp.parse_assignment(m.assignment)
            subscription = cp.parse_subscription(m.metadata(protocol))
        except ProtocolError:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                             f"Cannot upgrade classic group {gid} to consumer group because the "
                             "embedded consumer protocol is malformed.") from None
        if assignment.user_data:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                             f"Cannot upgrade classic group {gid} to consumer group because an "
                             "unsupported custom assignor is in use. Please refer to the "
                             "documentation or switch to a default assignor before re-attempting "
                             "the upgrade.")
        assigned = to_topic_ids(assignment.partitions, topics)
        member = ConsumerMember(
            m.member_id, instance_id=m.instance_id, rack_id=subscription.rack_id,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(subscription.topics),
            rebalance_timeout=m.rebalance_timeout, member_epoch=generation,
            previous_member_epoch=generation, state=MemberState.STABLE, assigned=assigned,
            classic=ClassicMetadata(m.session_timeout,
                                    tuple((n, bytes(b)) for n, b in m.protocols)))
        group.target[m.member_id] = copy_assignment(assigned)
        group.put_member(member)
    return group


def current_assignment_record(group_id: str, m: ConsumerMember) -> rec.KeyValue:
    return rec.consumer_group_record(
        rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, m.member_id,
        {"member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
         "state": int(m.state), "assigned_partitions": rec.topic_partitions(m.assigned),
         "partitions_pending_revocation": rec.topic_partitions(m.pending_revocation)})


def consumer_group_records(group: ConsumerGroup) -> list[rec.KeyValue]:
    """Everything a converted consumer group is replayed from (Kafka's
    createConsumerGroupRecords order: members, epoch, targets, target epoch, assignments)."""
    gid = group.group_id
    out = [rec.consumer_group_record(rec.CONSUMER_GROUP_MEMBER_METADATA, gid, mid,
                                     m.metadata_fields()) for mid, m in group.members.items()]
    out.append(rec.consumer_group_record(rec.CONSUMER_GROUP_METADATA, gid, None,
                                         {"epoch": group.group_epoch}))
    out += [rec.consumer_group_record(
        rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, mid,
        {"topic_partitions": rec.topic_partitions(group.target.get(mid, {}))})
        for mid in group.members]
    out.append(rec.consumer_group_record(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gid,
                                         None, {"assignment_epoch": group.assignment_epoch}))
    out += [current_assignment_record(gid, m) for m in group.members.values()]
    return out


def can_downgrade(group: ConsumerGroup, leaving: set[str], policy_allows: bool,
                  classic_max_size: int) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMembers."""
    remaining = len([m for m in group.members if m not in leaving])
    return (group.all_classic_except(leaving) and remaining > 0 and policy_allows
            and remaining <= classic_max_size)


def classic_group_from_consumer(group: ConsumerGroup, leaving: set[str], topics: TopicsView,
                                now_ms: int) -> ClassicGroup:
    """The classic group the remaining (classic) members form; each member's assignment is its
    target, serialized in its own subscription version. Stable at generation = group epoch;
    the caller starts the rebalance."""
    classic = ClassicGroup(group.group_id, now_ms, state=ClassicState.STABLE,
                           previous_state=ClassicState.STABLE, generation=group.group_epoch,
                           protocol_type=CONSUMER_PROTOCOL_TYPE, state_ts=now_ms)
    for mid, m in group.members.items():
        if mid in leaving or m.classic is None:
            continue
        classic.add(ClassicMember(mid, m.instance_id, m.client_id, m.client_host,
                                  m.rebalance_timeout, m.classic.session_timeout,
                                  CONSUMER_PROTOCOL_TYPE, list(m.classic.protocols)))
    classic.protocol_name = classic.select_protocol()
    classic.subscribed_topics = classic.compute_subscribed_topics()
    for cm in classic.members.values():
        version = cp.subscription_version(cm.metadata(classic.protocol_name))
        cm.assignment = cp.encode_assignment(
            to_topic_names(group.target.get(cm.member_id, {}), topics), version)
    return classic


def new_member_id() -> str:
    return str(uuid.uuid4())
