"""Server-side assignors of KIP-848 consumer groups: `uniform` (sticky, balanced) and `range`.

Input: each member's subscribed topic names (regexes already resolved), the topics' ids and
partition counts, and the current target assignment (for stickiness). Output: a new target
assignment, member id -> {topic id: partitions}. Both assign every partition of every subscribed
topic to exactly one subscribed member.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from strom.coordinator.group.state import Assignment

TopicInfo = tuple[uuid.UUID, int]  # (topic id, partition count)


class Assignor:
    name = ""

    def assign(self, subscriptions: Mapping[str, set[str]], topics: Mapping[str, TopicInfo],
               current: Mapping[str, Assignment]) -> dict[str, Assignment]:
        raise NotImplementedError


def _to_assignment(owned: Mapping[str, set[tuple[uuid.UUID, int]]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for member, partitions in owned.items():
        a: Assignment = {}
        for topic_id, p in partitions:
            a.setdefault(topic_id, set()).add(p)
        out[member] = a
    return out


class UniformAssignor(Assignor):
    """Balanced and sticky: members keep what they had where they still may, the rest goes to
    the least loaded subscribed member, then partitions move from the most to the least loaded
    member until no eligible move narrows the spread (counts differ by at most one whenever
    subscriptions are identical)."""

    name = "uniform"

    def assign(self, subscriptions: Mapping[str, set[str]], topics: Mapping[str, TopicInfo],
               current: Mapping[str, Assignment]) -> dict[str, Assignment]:
        eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
        for name in sorted({t for subs in subscriptions.values() for t in subs}):
            info = topics.get(name)
            if info is None:
                continue
            members = sorted(m for m, subs in subscriptions.items() if name in subs)
            for p in range(info[1]):
                eligible[(info[0], p)] = members
        owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in subscriptions}
        owner: dict[tuple[uuid.UUID, int], str] = {}
        for member in sorted(subscriptions):  # 1. stickiness
            for topic_id, partitions in current.get(member, {}).items():
                for p in partitions:
                    tp = (topic_id, p)
                    if member in eligible.get(tp, ()) and tp not in owner:
                        owner[tp] = member
                        owned[member].add(tp)
        # 2. unowned partitions, most constrained first, to the least loaded eligible member
        free = sorted((tp for tp in eligible if tp not in owner),
                      key=lambda tp: (len(eligible[tp]), str(tp[0]), tp[1]))
        for tp in free:
            member = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            owner[tp] = member
            owned[member].add(tp)
        # 3. balance: move from the most loaded to a less loaded eligible member
        while True:
            moved = False
            for donor in sorted(owned, key=lambda m: (-len(owned[m]), m)):
                for tp in sorted(owned[donor], key=lambda t: (str(t[0]), t[1]), reverse=True):
                    target = min(eligible[tp], key=lambda m: (len(owned[m]), m))
                    if len(owned[target]) + 1 < len(owned[donor]):
                        owned[donor].discard(tp)
                        owned[target].add(tp)
                        owner[tp] = target
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                break
        return _to_assignment(owned)


class RangeAssignor(Assignor):
    """Per topic, the subscribed members (sorted by id) get contiguous ranges of partitions;
    the first `partitions % members` of them get one more."""

    name = "range"

    def assign(self, subscriptions: Mapping[str, set[str]], topics: Mapping[str, TopicInfo],
               current: Mapping[str, Assignment]) -> dict[str, Assignment]:
        owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in subscriptions}
        for name in sorted({t for subs in subscriptions.values() for t in subs}):
            info = topics.get(name)
            if info is None:
                continue
            topic_id, count = info
            members = sorted(m for m, subs in subscriptions.items() if name in subs)
            quota, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                n = quota + (1 if i < extra else 0)
                owned[member].update((topic_id, p) for p in range(start, start + n))
                start += n
        return _to_assignment(owned)


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
