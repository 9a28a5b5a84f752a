"""Moving a KIP-848 member towards its target assignment (Kafka's CurrentAssignmentBuilder).

Pure: given the group (its target assignment and who owns which partition) and what the member
says it owns, compute the member's next state. Partitions the member must give up are revoked
first (UNREVOKED_PARTITIONS, the member keeps its epoch); a partition is handed to its new owner
only once no other member holds it (UNRELEASED_PARTITIONS until then), so no partition is ever
owned by two members. The caller persists the result and arms the rebalance timeout.
"""

from __future__ import annotations

import logging

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


def reconcile(group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None
              ) -> ConsumerMember:
    """Kafka's CurrentAssignmentBuilder; returns `member` itself when nothing changes."""
    epoch = group.assignment_epoch
    if member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH or \
            member.is_reconciled_to(epoch):
        return member
    target = group.target.get(member.member_id, {})

    def owns_any(revoking: Assignment) -> bool:
        if owned is None:
            return True
        return any(p in revoking.get(t, ()) for t, ps in owned.items() for p in ps)

    def next_state(member_epoch: int, current: Assignment) -> ConsumerMember:
        assigned: Assignment = {}
        revoking: Assignment = {}
        pending: Assignment = {}
        unreleased = False
        for topic_id in set(target) | set(current):
            want = target.get(topic_id, set())
            have = current.get(topic_id, set())
            keep = have & want
            gone = have - keep
            add = set()
            for p in want - keep:
                if group.current_partition_epoch(topic_id, p) != -1 and \
                        (topic_id, p) not in own_claims:
                    unreleased = True
                else:
                    add.add(p)
            if keep:
                assigned[topic_id] = keep
            if gone:
                revoking[topic_id] = gone
            if add:
                pending[topic_id] = add
        new = ConsumerMember(**{**member.__dict__})
        if revoking and owns_any(revoking):
            new.state = MemberState.UNREVOKED_PARTITIONS
            new.previous_member_epoch, new.member_epoch = member.member_epoch, member_epoch
            new.assigned, new.pending_revocation = assigned, revoking
            return new
        for topic_id, ps in pending.items():
            assigned.setdefault(topic_id, set()).update(ps)
        new.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        new.previous_member_epoch, new.member_epoch = member.member_epoch, epoch
        new.assigned, new.pending_revocation = assigned, {}
        return new

    # Partitions this member itself holds (assigned or being revoked) are not "taken".
    own_claims = {(t, p) for a in (member.assigned, member.pending_revocation)
                  for t, ps in a.items() for p in ps}
    if member.state == MemberState.STABLE:
        new = next_state(member.member_epoch, member.assigned)
    elif member.state == MemberState.UNREVOKED_PARTITIONS:
        if owns_any(member.pending_revocation):
            return member
        own_claims = {(t, p) for t, ps in member.assigned.items() for p in ps}
        # the revoked partitions are released before computing what can be added
        released = ConsumerMember(**{**member.__dict__})
        released.pending_revocation = {}
        group.put_member(released)
        new = next_state(member.member_epoch + 1, member.assigned)
    elif member.state == MemberState.UNRELEASED_PARTITIONS:
        new = next_state(member.member_epoch, member.assigned)
    else:
        if owned is None or owned:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             "The consumer group member is in an unknown state. The member "
                             "must abandon all its partitions and rejoin.")
        new = next_state(epoch, member.assigned)
    if (new.state, new.member_epoch, new.previous_member_epoch) == (
            member.state, member.member_epoch, member.previous_member_epoch) and \
            same_assignment(new.assigned, member.assigned) and \
            same_assignment(new.pending_revocation, member.pending_revocation):
        return member
    log.debug("group %s: member %s -> epoch %d state %s assigned %s revoking %s",
              group.group_id, member.member_id, new.member_epoch, new.state.name,
              new.assigned, new.pending_revocation)
    return new
