"""Moving a streams-group member towards its target tasks (Kafka's streams
CurrentAssignmentBuilder).

Pure, like `reconciliation` for consumer groups: tasks the member must give up are revoked
first (UNREVOKED_TASKS, the member keeps its epoch); a task is handed over only once its
previous owner has let go (UNRELEASED_TASKS until then). An active task is unreleased while any
member holds it as active, or a member of the same process holds it as standby or warm-up; a
standby or warm-up task while its own process holds it in any role. So a task never runs twice
and a process never holds two copies of one task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from strom.coordinator.group.state import LEAVE_GROUP_STATIC_MEMBER_EPOCH
from strom.coordinator.group.streams_state import (
    StreamsGroup,
    StreamsMember,
    StreamsMemberState,
    Task,
    Tasks,
    TasksTuple,
    task_set,
    tasks_from_set,
)
from strom.protocol.errors import ErrorCode, KafkaError


@dataclass
class Owners:
    """Who holds each task now (assigned or pending revocation), by process id."""

    active: dict[Task, str]
    standby: dict[Task, set[str]]
    warmup: dict[Task, set[str]]

    @classmethod
    def of(cls, group: StreamsGroup, skip: str | None = None) -> Owners:
        out = cls({}, {}, {})
        for m in group.members.values():
            if m.member_id == skip:
                continue
            out.add(m.assigned, m.process_id)
            out.add(m.pending_revocation, m.process_id)
        return out

    def add(self, tasks: TasksTuple, process_id: str) -> None:
        for t in task_set(tasks.active):
            self.active[t] = process_id
        for t in task_set(tasks.standby):
            self.standby.setdefault(t, set()).add(process_id)
        for t in task_set(tasks.warmup):
            self.warmup.setdefault(t, set()).add(process_id)

    def active_unreleased(self, t: Task, process_id: str) -> bool:
        return t in self.active or process_id in self.standby.get(t, ()) or \
            process_id in self.warmup.get(t, ())

    def replica_unreleased(self, t: Task, process_id: str) -> bool:
        return self.active.get(t) == process_id or process_id in self.standby.get(t, ()) or \
            process_id in self.warmup.get(t, ())


def _diff(current: Tasks, target: Tasks,
          unreleased: Callable[[Task], bool]) -> tuple[set[Task], set[Task], set[Task], bool]:
    """(kept, revoking, adding now, some target task still held elsewhere)."""
    have, want = task_set(current), task_set(target)
    kept = have & want
    adding = {t for t in want - kept if not unreleased(t)}
    return kept, have - kept, adding, bool(want - kept - adding)


def _next(member: StreamsMember, target: TasksTuple, owners: Owners, owned: TasksTuple | None,
          revoking_epoch: int, epoch: int) -> StreamsMember:
    pid = member.process_id
    parts = [
        _diff(member.assigned.active, target.active, lambda t: owners.active_unreleased(t, pid)),
        _diff(member.assigned.standby, target.standby,
              lambda t: owners.replica_unreleased(t, pid)),
        _diff(member.assigned.warmup, target.warmup,
              lambda t: owners.replica_unreleased(t, pid)),
    ]
    kept = TasksTuple(*(tasks_from_set(p[0]) for p in parts))
    revoking = TasksTuple(*(tasks_from_set(p[1]) for p in parts))
    unreleased = any(p[3] for p in parts)
    if not revoking.is_empty and (owned is None or owned.contains_any(revoking)):
        return member.copy(state=StreamsMemberState.UNREVOKED_TASKS,
                           previous_member_epoch=member.member_epoch,
                           member_epoch=revoking_epoch, assigned=kept,
                           pending_revocation=revoking)
    assigned = TasksTuple(*(tasks_from_set(p[0] | p[2]) for p in parts))
    state = StreamsMemberState.UNRELEASED_TASKS if unreleased else StreamsMemberState.STABLE
    return member.copy(state=state, previous_member_epoch=member.member_epoch,
                       member_epoch=epoch, assigned=assigned, pending_revocation=TasksTuple())


def reconcile(group: StreamsGroup, member: StreamsMember, owned: TasksTuple | None
              ) -> StreamsMember:
    """The member's next state; `member` itself when nothing changes. `owned` is what the
    member reported holding (None: it did not say)."""
    epoch = group.assignment_epoch
    if member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH or member.is_reconciled_to(epoch):
        return member
    target = group.target.get(member.member_id, TasksTuple())
    revoking_epoch = member.member_epoch
    base = member
    if member.state == StreamsMemberState.UNREVOKED_TASKS:
        if owned is None or owned.contains_any(member.pending_revocation):
            return member
        base = member.copy(pending_revocation=TasksTuple())
        revoking_epoch = member.member_epoch + 1
    elif member.state == StreamsMemberState.UNKNOWN:
        if owned is None or not owned.is_empty:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             "The streams group member is in a unknown state. The member must "
                             "abandon all its tasks and rejoin.")
        revoking_epoch = epoch
    owners = Owners.of(group, skip=member.member_id)
    new = _next(base, target, owners, owned, revoking_epoch, epoch)
    unchanged = (new.state, new.member_epoch, new.assigned, new.pending_revocation) == (
        member.state, member.member_epoch, member.assigned, member.pending_revocation)
    return member if unchanged else new
