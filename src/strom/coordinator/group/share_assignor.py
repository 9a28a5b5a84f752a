"""The share-group assignor ("simple", Kafka's only one): partitions spread over members.

Share partitions are consumed by several members at once, so the assignor balances two ways:
with fewer members than partitions each partition goes to one member and every member gets
`n // k` or one more; with more members than partitions each member gets one partition and
each partition gets `k // n` or one more members, so every member has work. Previous owners
keep what still fits (moving a share partition is cheap, but it drops the in-flight batches a
member is working on from its next fetch).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from strom.coordinator.group.share_state import Assignment

NAME = "simple"


def _spread_partitions(members: list[str], partitions: int,
                       previous: dict[str, set[int]]) -> dict[str, set[int]]:
    """At most one owner per partition; member counts differ by at most one."""
    base, extra = divmod(partitions, len(members))
    # members that keep most of what they had get the larger quotas
    order = sorted(members, key=lambda m: (-len(previous.get(m, ())), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    out: dict[str, set[int]] = {m: set() for m in members}
    taken: set[int] = set()
    for m in order:
        for p in sorted(previous.get(m, ())):
            if p < partitions and p not in taken and len(out[m]) < quota[m]:
                out[m].add(p)
                taken.add(p)
    free = [p for p in range(partitions) if p not in taken]
    for m in order:
        while len(out[m]) < quota[m] and free:
            out[m].add(free.pop(0))
    return out


def _spread_members(members: list[str], partitions: int,
                    previous: dict[str, set[int]]) -> dict[str, set[int]]:
    """One partition per member; owner counts per partition differ by at most one."""
    base, extra = divmod(len(members), partitions)
    capacity = {p: base + (1 if p < extra else 0) for p in range(partitions)}
    out: dict[str, set[int]] = {}
    waiting = []
    for m in sorted(members):
        kept = next((p for p in sorted(previous.get(m, ()))
                     if p < partitions and capacity[p] > 0), None)
        if kept is None:
            waiting.append(m)
        else:
            out[m] = {kept}
            capacity[kept] -= 1
    for m in waiting:
        p = max(range(partitions), key=lambda q: (capacity[q], -q))
        out[m] = {p}
        capacity[p] -= 1
    return out


def assign(subscriptions: Mapping[str, set[str]], topics: Mapping[str, tuple[uuid.UUID, int]],
           previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Each member's partitions. `subscriptions`: member -> subscribed topic names;
    `topics`: name -> (id, partition count) of the topics that exist; `previous`: the last
    target assignment."""
    out: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in subscriptions}
    for name, (topic_id, partitions) in sorted(topics.items()):
        members = sorted(m for m, subscribed in subscriptions.items() if name in subscribed)
        if not members or partitions <= 0:
            continue
        before = {m: set(previous.get(m, {}).get(topic_id, ())) for m in members}
        spread = _spread_partitions if len(members) <= partitions else _spread_members
        for m, ps in spread(members, partitions, before).items():
            if ps:
                out[m][topic_id] = frozenset(ps)
    return out
