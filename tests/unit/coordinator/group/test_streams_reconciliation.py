"""Moving a streams member towards its target: revoke first, take only released tasks."""

from __future__ import annotations

import pytest

from strom.coordinator.group.streams_reconciliation import reconcile
from strom.coordinator.group.streams_state import (
    StreamsGroup,
    StreamsMember,
    StreamsMemberState,
    TasksTuple,
)
from strom.protocol.errors import ErrorCode, KafkaError

S = StreamsMemberState


def tasks(active=(), standby=()) -> TasksTuple:
    def of(ts):
        out: dict[str, set[int]] = {}
        for s, p in ts:
            out.setdefault(s, set()).add(p)
        return {s: frozenset(ps) for s, ps in out.items()}

    return TasksTuple(of(active), of(standby))


def group_with(*members: StreamsMember, epoch: int = 2, **target: TasksTuple) -> StreamsGroup:
    g = StreamsGroup("g", 0, group_epoch=epoch, assignment_epoch=epoch)
    for m in members:
        g.put_member(m)
    g.target.update(target)
    return g


def test_revokes_first_and_keeps_the_epoch() -> None:
    a = StreamsMember("a", process_id="A", member_epoch=1, assigned=tasks([("0", 0), ("0", 1)]))
    g = group_with(a, a=tasks([("0", 0)]))
    new = reconcile(g, a, tasks([("0", 0), ("0", 1)]))
    assert (new.state, new.member_epoch) == (S.UNREVOKED_TASKS, 1)
    assert new.assigned == tasks([("0", 0)]) and new.pending_revocation == tasks([("0", 1)])
    g.put_member(new)
    assert reconcile(g, new, tasks([("0", 0), ("0", 1)])) is new  # still holds it
    done = reconcile(g, new, tasks([("0", 0)]))
    assert (done.state, done.member_epoch) == (S.STABLE, 2)


def test_a_task_another_member_holds_is_unreleased() -> None:
    a = StreamsMember("a", process_id="A", member_epoch=1, assigned=tasks([("0", 0)]))
    b = StreamsMember("b", process_id="B", member_epoch=1)
    g = group_with(a, b, a=TasksTuple(), b=tasks([("0", 0)]))
    new_b = reconcile(g, b, TasksTuple())
    assert (new_b.state, new_b.member_epoch, new_b.assigned) == (S.UNRELEASED_TASKS, 2,
                                                                  TasksTuple())
    g.put_member(new_b)
    g.put_member(a.copy(assigned=TasksTuple(), member_epoch=2))  # a let go
    assert reconcile(g, new_b, TasksTuple()).assigned == tasks([("0", 0)])


def test_an_active_task_waits_for_a_standby_of_the_same_process() -> None:
    a = StreamsMember("a", process_id="P", member_epoch=1, assigned=tasks(standby=[("0", 0)]))
    b = StreamsMember("b", process_id="P", member_epoch=1)
    g = group_with(a, b, a=TasksTuple(), b=tasks([("0", 0)]))
    assert reconcile(g, b, TasksTuple()).state == S.UNRELEASED_TASKS
    c = StreamsMember("c", process_id="Q", member_epoch=1)  # another process need not wait
    g.put_member(c)
    g.target["c"] = tasks([("0", 0)])
    g.target["b"] = TasksTuple()
    assert reconcile(g, c, TasksTuple()).assigned == tasks([("0", 0)])


def test_an_unknown_state_fences_unless_the_member_gave_everything_up() -> None:
    a = StreamsMember("a", process_id="A", member_epoch=1, state=S.UNKNOWN,
                      assigned=tasks([("0", 0)]))
    g = group_with(a, a=tasks([("0", 0)]))
    with pytest.raises(KafkaError) as exc:
        reconcile(g, a, tasks([("0", 0)]))
    assert exc.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    assert reconcile(g, a, TasksTuple()).state == S.STABLE
