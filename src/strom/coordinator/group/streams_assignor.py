"""The sticky task assignor of streams groups (the semantics of Kafka's StickyTaskAssignor).

Active tasks are spread so that every member gets the same number give or take one (a process
with more stream threads therefore takes proportionally more), and so that each subtopology's
tasks are spread the same way where that is possible (Strom's addition: a member should not end
up with all the stateless tasks and another with all the stateful ones), preferring to leave a
task with the member that had it, then with another member of the same process (a restarted
thread), and otherwise giving it to the least loaded member of the least loaded process. Standby tasks
(`num_standby` per task) go to other processes than the task's active one, one per process,
preferring previous standby owners, then the least loaded members; only tasks with state
stores get standbys. Warm-up tasks are not
assigned (Kafka uses them to move a task only once its new owner has caught up; here a task
moves at once and is restored from its changelog by its new owner).

Pure: members and tasks in, a `TasksTuple` per member out; deterministic for the same input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.coordinator.group.streams_state import Task, TasksTuple, task_set, tasks_from_set


@dataclass(frozen=True)
class MemberSpec:
    member_id: str
    process_id: str
    previous: TasksTuple = field(default_factory=TasksTuple)


class _Load:
    def __init__(self, members: list[MemberSpec]) -> None:
        self.process = {m.member_id: m.process_id for m in members}
        self.capacity: dict[str, int] = {}
        for m in members:
            self.capacity[m.process_id] = self.capacity.get(m.process_id, 0) + 1
        self.active: dict[str, set[Task]] = {m.member_id: set() for m in members}
        self.standby: dict[str, set[Task]] = {m.member_id: set() for m in members}

    def member_load(self, member_id: str) -> int:
        return len(self.active[member_id]) + len(self.standby[member_id])

    def process_load(self, process_id: str) -> float:
        total = sum(self.member_load(m) for m, p in self.process.items() if p == process_id)
        return total / self.capacity[process_id]

    def process_has(self, process_id: str, task: Task) -> bool:
        return any(task in self.active[m] or task in self.standby[m]
                   for m, p in self.process.items() if p == process_id)

    def least_loaded(self, candidates: list[str]) -> str:
        return min(candidates, key=lambda m: (self.process_load(self.process[m]),
                                              self.member_load(m), self.process[m], m))


def assign(members: list[MemberSpec], task_counts: dict[str, int], num_standby: int = 0,
           stateful: frozenset[str] = frozenset()) -> dict[str, TasksTuple]:
    """The target assignment of every member; standby tasks only for the `stateful`
    subtopologies (those with state stores: a standby of a stateless task keeps nothing)."""
    if not members:
        return {}
    members = sorted(members, key=lambda m: m.member_id)
    tasks = sorted((s, p) for s, n in task_counts.items() for p in range(n))
    load = _Load(members)
    _assign_active(members, tasks, load)
    if num_standby > 0:
        _assign_standby(members, [t for t in tasks if t[0] in stateful], load, num_standby)
    return {m.member_id: TasksTuple(tasks_from_set(load.active[m.member_id]),
                                    tasks_from_set(load.standby[m.member_id]))
            for m in members}


class _Quota:
    """At most `floor` items per member, `floor + 1` for the first `extra` members to get
    one more: a spread that is even give or take one."""

    def __init__(self, items: int, members: int) -> None:
        self.floor, self.extra = divmod(items, members)
        self.count: dict[str, int] = {}

    def room(self, member_id: str) -> bool:
        n = self.count.get(member_id, 0)
        return n < self.floor or (n == self.floor and self.extra > 0)

    def take(self, member_id: str) -> None:
        n = self.count.get(member_id, 0)
        if n >= self.floor:
            self.extra -= 1
        self.count[member_id] = n + 1


def _assign_active(members: list[MemberSpec], tasks: list[Task], load: _Load) -> None:
    """Even in total and, where that allows, within each subtopology (its tasks usually differ
    in cost: stateless against stateful), so every member gets a share of each."""
    total = _Quota(len(tasks), len(members))
    per_sub: dict[str, _Quota] = {}
    for sub in {t[0] for t in tasks}:
        per_sub[sub] = _Quota(sum(1 for t in tasks if t[0] == sub), len(members))

    def room(member_id: str, t: Task, strict: bool = True) -> bool:
        return total.room(member_id) and (not strict or per_sub[t[0]].room(member_id))

    def give(member_id: str, t: Task) -> None:
        total.take(member_id)
        per_sub[t[0]].take(member_id)
        load.active[member_id].add(t)

    unassigned = set(tasks)
    previous_owner: dict[Task, str] = {}
    for m in members:
        for t in task_set(m.previous.active):
            previous_owner.setdefault(t, m.member_id)
    # 1. with the member that had it
    for t in tasks:
        owner = previous_owner.get(t)
        if owner is not None and room(owner, t):
            give(owner, t)
            unassigned.discard(t)
    # 2. with another member of the process that had it (a thread that came back)
    by_process: dict[str, list[str]] = {}
    for m in members:
        by_process.setdefault(m.process_id, []).append(m.member_id)
    for t in sorted(unassigned):
        owner = previous_owner.get(t)
        if owner is None:
            continue
        mates = [m for m in by_process[load.process[owner]] if room(m, t)]
        if mates:
            give(load.least_loaded(mates), t)
            unassigned.discard(t)
    # 3. the rest to the least loaded (within the subtopology's spread if anyone has room)
    for t in sorted(unassigned):
        candidates = [m.member_id for m in members if room(m.member_id, t)] or \
            [m.member_id for m in members if room(m.member_id, t, strict=False)]
        give(load.least_loaded(candidates), t)


def _assign_standby(members: list[MemberSpec], tasks: list[Task], load: _Load,
                    num_standby: int) -> None:
    previous: dict[Task, list[str]] = {}
    for m in members:
        for t in task_set(m.previous.standby) | task_set(m.previous.active):
            previous.setdefault(t, []).append(m.member_id)
    for t in tasks:
        for _ in range(num_standby):
            eligible = [m.member_id for m in members
                        if not load.process_has(m.process_id, t)]
            if not eligible:
                break  # fewer processes than replicas: Kafka assigns what it can, too
            sticky = [m for m in previous.get(t, ()) if m in eligible]
            chosen = load.least_loaded(sticky or eligible)
            load.standby[chosen].add(t)
