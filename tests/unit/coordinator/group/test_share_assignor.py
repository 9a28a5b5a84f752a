"""The share-group assignor: balanced both ways, every member busy, previous owners kept."""

from __future__ import annotations

import uuid
from collections import Counter

from strom.coordinator.group.share_assignor import assign

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def _owners(result, topic=T1) -> Counter:
    return Counter(p for a in result.values() for p in a.get(topic, ()))


def test_fewer_members_than_partitions_split_the_partitions() -> None:
    out = assign({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": (T1, 7)}, {})
    sizes = sorted(len(a[T1]) for a in out.values())
    assert sizes == [2, 2, 3]
    assert _owners(out) == Counter(range(7))  # every partition exactly once


def test_more_members_than_partitions_share_the_partitions() -> None:
    members = {f"m{i}": {"t"} for i in range(5)}
    out = assign(members, {"t": (T1, 2)}, {})
    assert all(len(a[T1]) == 1 for a in out.values())  # every member has work
    assert sorted(_owners(out).values()) == [2, 3]


def test_one_partition_goes_to_everyone() -> None:
    out = assign({f"m{i}": {"t"} for i in range(4)}, {"t": (T1, 1)}, {})
    assert all(a == {T1: frozenset({0})} for a in out.values())


def test_previous_owners_keep_what_still_fits() -> None:
    before = assign({"a": {"t"}, "b": {"t"}}, {"t": (T1, 4)}, {})
    after = assign({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": (T1, 4)}, before)
    for m in ("a", "b"):
        assert len(after[m][T1] & before[m][T1]) >= 1
    assert _owners(after) == Counter(range(4))


def test_members_get_only_topics_they_subscribe_to() -> None:
    out = assign({"a": {"t"}, "b": {"u"}}, {"t": (T1, 2), "u": (T2, 2)}, {})
    assert out["a"] == {T1: frozenset({0, 1})} and out["b"] == {T2: frozenset({0, 1})}
    assert assign({"a": {"missing"}}, {"t": (T1, 2)}, {}) == {"a": {}}


def test_same_subscriptions_share_out_all_partitions_together() -> None:
    """Kafka's homogeneous case: 2 members, topics of 1 and 2 partitions: 3 partitions, each
    to exactly one member."""
    out = assign({"a": {"t", "u"}, "b": {"t", "u"}}, {"t": (T1, 1), "u": (T2, 2)}, {})
    owned = [(t, p) for a in out.values() for t, ps in a.items() for p in ps]
    assert sorted(owned) == sorted([(T1, 0), (T2, 0), (T2, 1)])
    assert sorted(sum(len(ps) for ps in a.values()) for a in out.values()) == [1, 2]
