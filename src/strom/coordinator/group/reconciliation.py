"""Moving a KIP-848 member towards its target assignment (Kafka's CurrentAssignmentBuilder).

Pure: given the group (its target assignment and who owns which partition) and what the member
says it owns, compute the member's next state. Partitions the member must give up are revoked
first (UNREVOKED_PARTITIONS, the member keeps its epoch); a partition is handed to its new owner
only once no other member holds it (UNRELEASED_PARTITIONS until then), so no partition is ever
owned by two members. The caller persists the result and arms the rebalance timeout.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from strom.coordinator.group.state import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    same_assignment,
)
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


@dataclass
class _Diff:
    """The member's current partitions against its target."""

    kept: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    adding: Assignment = field(default_factory=dict)  # free to take now
    unreleased: bool = False  # some target partitions are still held by another member


def _claims(*assignments: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for a in assignments for t, ps in a.items() for p in ps}


def _owns_any(owned: Assignment | None, revoking: Assignment) -> bool:
    """Whether the member still reports one of the partitions (None: it did not say)."""
    if owned is None:
        return True
    return any(p in revoking.get(t, ()) for t, ps in owned.items() for p in ps)


def _diff(group: ConsumerGroup, target: Assignment, current: Assignment,
          own_claims: set[tuple[uuid.UUID, int]]) -> _Diff:
    diff = _Diff()
    for topic_id in set(target) | set(current):
        want = target.get(topic_id, set())
        have = current.get(topic_id, set())
        keep = have & want
        gone = have - keep
        add = set()
        for p in want - keep:
            if group.current_partition_epoch(topic_id, p) != -1 and \
                    (topic_id, p) not in own_claims:
                diff.unreleased = True
            else:
                add.add(p)
        if keep:
            diff.kept[topic_id] = keep
        if gone:
            diff.revoking[topic_id] = gone
        if add:
            diff.adding[topic_id] = add
    return diff


def _next_state(member: ConsumerMember, diff: _Diff, owned: Assignment | None,
                revoking_epoch: int, epoch: int) -> ConsumerMember:
    """Revoke first (keeping `revoking_epoch`), else take what is free at `epoch`."""
    new = ConsumerMember(**{**member.__dict__})
    if diff.revoking and _owns_any(owned, diff.revoking):
        new.state = MemberState.UNREVOKED_PARTITIONS
        new.previous_member_epoch, new.member_epoch = member.member_epoch, revoking_epoch
        new.assigned, new.pending_revocation = diff.kept, diff.revoking
        return new
    assigned = diff.kept
    for topic_id, ps in diff.adding.items():
        assigned.setdefault(topic_id, set()).update(ps)
    new.state = MemberState.UNRELEASED_PARTITIONS if diff.unreleased else MemberState.STABLE
    new.previous_member_epoch, new.member_epoch = member.member_epoch, epoch
    new.assigned, new.pending_revocation = assigned, {}
    return new


def _unchanged(new: ConsumerMember, member: ConsumerMember) -> bool:
    return (new.state, new.member_epoch, new.previous_member_epoch) == (
        member.state, member.member_epoch, member.previous_member_epoch) and \
        same_assignment(new.assigned, member.assigned) and \
        same_assignment(new.pending_revocation, member.pending_revocation)


def reconcile(group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None
              ) -> ConsumerMember:
    """Kafka's CurrentAssignmentBuilder; returns `member` itself when nothing changes."""
    epoch = group.assignment_epoch
    if member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH or \
            member.is_reconciled_to(epoch):
        return member
    target = group.target.get(member.member_id, {})
    # Partitions this member itself holds (assigned or being revoked) are not "taken".
    own_claims = _claims(member.assigned, member.pending_revocation)
    revoking_epoch = member.member_epoch
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        own_claims = _claims(member.assigned)
        # the revoked partitions are released before computing what can be added
        released = ConsumerMember(**{**member.__dict__})
        released.pending_revocation = {}
        group.put_member(released)
        revoking_epoch = member.member_epoch + 1
    elif member.state not in (MemberState.STABLE, MemberState.UNRELEASED_PARTITIONS):
        if owned is None or owned:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             "The consumer group member is in an unknown state. The member "
                             "must abandon all its partitions and rejoin.")
        revoking_epoch = epoch
    new = _next_state(member, _diff(group, target, member.assigned, own_claims), owned,
                      revoking_epoch, epoch)
    if _unchanged(new, member):
        return member
    log.debug("group %s: member %s -> epoch %d state %s assigned %s revoking %s",
              group.group_id, member.member_id, new.member_epoch, new.state.name,
              new.assigned, new.pending_revocation)
    return new
