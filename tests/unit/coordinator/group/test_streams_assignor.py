"""The sticky task assignor of streams groups: balance, stickiness, standby placement."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.coordinator.group.streams_assignor import MemberSpec, assign
from strom.coordinator.group.streams_state import TasksTuple, task_set

TASKS = {"0": 4, "1": 4}


def active(result: dict[str, TasksTuple]) -> dict[str, set]:
    return {m: task_set(t.active) for m, t in result.items()}


def test_one_member_gets_everything() -> None:
    result = assign([MemberSpec("a", "p1")], TASKS)
    assert len(task_set(result["a"].active)) == 8
    assert result["a"].standby == {}


def test_a_new_member_gets_half_and_each_subtopology_is_shared() -> None:
    first = assign([MemberSpec("a", "p1")], TASKS)
    second = assign([MemberSpec("a", "p1", first["a"]), MemberSpec("b", "p2")], TASKS)
    a, b = active(second)["a"], active(second)["b"]
    assert len(a) == len(b) == 4
    assert a < task_set(first["a"].active)  # a keeps what it had, gives up the rest
    assert {s for s, _ in a} == {s for s, _ in b} == {"0", "1"}


def test_tasks_stay_with_their_owner_when_the_group_changes() -> None:
    members = [MemberSpec(m, f"p-{m}") for m in "abc"]
    before = assign(members, {"0": 6})
    after = assign([MemberSpec(m.member_id, m.process_id, before[m.member_id])
                    for m in members] + [MemberSpec("d", "p-d")], {"0": 6})
    moved = sum(len(task_set(before[m].active) - task_set(after[m].active)) for m in "abc")
    assert moved == 1  # 2/2/2 -> 2/2/1/1 moves one task only
    gone = assign([MemberSpec(m, f"p-{m}", after[m]) for m in "ab"], {"0": 6})
    for m in "ab":
        assert task_set(after[m].active) <= task_set(gone[m].active)


def test_a_returning_thread_of_the_same_process_gets_its_tasks() -> None:
    before = assign([MemberSpec("t1", "p"), MemberSpec("t2", "q")], {"0": 4})
    # t1 restarted as t3 on the same process p; the assignor sees t1's tasks as t1's previous
    after = assign([MemberSpec("t3", "p"), MemberSpec("t2", "q", before["t2"])], {"0": 4})
    assert task_set(after["t2"].active) == task_set(before["t2"].active)
    assert task_set(after["t3"].active) == task_set(before["t1"].active)


def test_processes_with_more_threads_take_more_tasks() -> None:
    members = [MemberSpec("a1", "A"), MemberSpec("a2", "A"), MemberSpec("b1", "B")]
    result = assign(members, {"0": 6})
    per_process = Counter({"a1": "A", "a2": "A", "b1": "B"}[m] for m, ts in active(result).items()
                          for _ in ts)
    assert per_process == {"A": 4, "B": 2}


def test_standbys_go_to_other_processes_and_only_for_stateful_tasks() -> None:
    members = [MemberSpec("a", "A"), MemberSpec("b", "B"), MemberSpec("c", "C")]
    result = assign(members, {"0": 3, "1": 3}, num_standby=1, stateful=frozenset({"1"}))
    owner = {t: m for m, ts in active(result).items() for t in ts}
    standbys = [(m, t) for m, r in result.items() for t in task_set(r.standby)]
    assert sorted(t for _, t in standbys) == [("1", 0), ("1", 1), ("1", 2)]
    for m, t in standbys:
        assert owner[t] != m


def test_no_more_standbys_than_other_processes() -> None:
    members = [MemberSpec("a", "A"), MemberSpec("b", "B")]
    result = assign(members, {"0": 2}, num_standby=2, stateful=frozenset({"0"}))
    assert sum(len(task_set(r.standby)) for r in result.values()) == 2


def test_standbys_stick_to_their_previous_owner() -> None:
    members = [MemberSpec(m, m.upper()) for m in "abc"]
    first = assign(members, {"0": 3}, num_standby=1, stateful=frozenset({"0"}))
    again = assign([MemberSpec(m, m.upper(), first[m]) for m in "abc"], {"0": 3}, num_standby=1,
                   stateful=frozenset({"0"}))
    assert again == first


@settings(max_examples=200, deadline=None)
@given(members=st.lists(st.tuples(st.sampled_from("PQRS"), st.booleans()), min_size=1,
                        max_size=7),
       counts=st.dictionaries(st.sampled_from("0123"), st.integers(0, 9), min_size=1),
       standby=st.integers(0, 2), seed_previous=st.booleans())
def test_every_task_runs_once_and_load_is_even(members, counts, standby, seed_previous) -> None:
    specs = [MemberSpec(f"m{i}", p) for i, (p, _) in enumerate(members)]
    stateful = frozenset(s for s in counts if int(s) % 2)
    result = assign(specs, counts, standby, stateful)
    if seed_previous:  # from an earlier assignment, one member gone
        previous = [MemberSpec(s.member_id, s.process_id, result[s.member_id]) for s in specs[1:]]
        if previous:
            specs, result = previous, assign(previous, counts, standby, stateful)
    all_tasks = {(s, p) for s, n in counts.items() for p in range(n)}
    owners = Counter(t for r in result.values() for t in task_set(r.active))
    assert set(owners) == all_tasks and set(owners.values()) <= {1}
    sizes = [len(task_set(r.active)) for r in result.values()]
    assert max(sizes) - min(sizes) <= 1
    process = {s.member_id: s.process_id for s in specs}
    for t in all_tasks:
        holders = [process[m] for m, r in result.items()
                   if t in task_set(r.active) | task_set(r.standby)]
        assert len(holders) == len(set(holders))  # never two copies in one process
        replicas = len(holders) - 1
        if t[0] in stateful:
            assert replicas == min(standby, len(set(process.values())) - 1)
        else:
            assert replicas == 0
