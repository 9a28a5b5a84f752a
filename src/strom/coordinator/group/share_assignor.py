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


Item = tuple[uuid.UUID, int]  # (topic id, partition)


def _spread_partitions(members: list[str], items: list[Item],
                       previous: dict[str, set[Item]]) -> dict[str, set[Item]]:
    """At most one owner per partition; member counts differ by at most one."""
    base, extra = divmod(len(items), len(members))
    # members that keep most of what they had get the larger quotas
    order = sorted(members, key=lambda m: (-len(previous.get(m, ())), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    out: dict[str, set[Item]] = {m: set() for m in members}
    known = set(items)
    taken: set[Item] = set()
    for m in order:
        for item in sorted(previous.get(m, ()), key=str):
            if item in known and item not in taken and len(out[m]) < quota[m]:
                out[m].add(item)
                taken.add(item)
    free = [item for item in items if item not in taken]
    turn = 0
    while free:  # round robin over the members with room, so topics interleave
        m = order[turn % len(order)]
        turn += 1
        if len(out[m]) < quota[m]:
            out[m].add(free.pop(0))
    return out


def _spread_members(members: list[str], items: list[Item],
                    previous: dict[str, set[Item]]) -> dict[str, set[Item]]:
    """One partition per member; owner counts per partition differ by at most one."""
    base, extra = divmod(len(members), len(items))
    capacity = {item: base + (1 if i < extra else 0) for i, item in enumerate(items)}
    out: dict[str, set[Item]] = {}
    waiting = []
    for m in sorted(members):
        kept = next((item for item in sorted(previous.get(m, ()), key=str)
                     if capacity.get(item, 0) > 0), None)
        if kept is None:
            waiting.append(m)
        else:
            out[m] = {kept}
            capacity[kept] -= 1
    for m in waiting:
        item = max(items, key=lambda i: (capacity[i], -items.index(i)))
        out[m] = {item}
        capacity[item] -= 1
    return out


def _spread(members: list[str], items: list[Item], previous: Mapping[str, Assignment]
            ) -> dict[str, set[Item]]:
    before = {m: {(t, p) for t, ps in previous.get(m, {}).items() for p in ps} for m in members}
    spread = _spread_partitions if len(members) <= len(items) else _spread_members
    return spread(members, items, before)


def assign(subscriptions: Mapping[str, set[str]], topics: Mapping[str, tuple[uuid.UUID, int]],
           previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Each member's partitions. `subscriptions`: member -> subscribed topic names;
    `topics`: name -> (id, partition count) of the topics that exist; `previous`: the last
    target assignment. Members with the same subscription (the usual case) share out all
    their partitions together, as Kafka's homogeneous assignment does; otherwise each topic
    is shared out among its subscribers."""
    found: dict[str, set[Item]] = {m: set() for m in subscriptions}
    groups: dict[frozenset[str], list[str]] = {}
    for m, subscribed in subscriptions.items():
        groups.setdefault(frozenset(t for t in subscribed if t in topics), []).append(m)
    if len(groups) == 1:
        [(names, members)] = groups.items()
        items = [(topics[n][0], p) for n in sorted(names) for p in range(topics[n][1])]
        if items:
            found.update(_spread(sorted(members), items, previous))
    else:
        for name, (topic_id, partitions) in sorted(topics.items()):
            members = sorted(m for m, subscribed in subscriptions.items() if name in subscribed)
            if members and partitions > 0:
                spread = _spread(members, [(topic_id, p) for p in range(partitions)], previous)
                for m, got in spread.items():
                    found[m] |= got
    out: dict[str, Assignment] = {}
    for m, got in found.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, p in got:
            by_topic.setdefault(topic_id, set()).add(p)
        out[m] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out
