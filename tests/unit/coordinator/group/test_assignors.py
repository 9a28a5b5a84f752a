"""Server-side assignors (KIP-848): coverage, exclusivity, balance and stickiness."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.coordinator.group.assignors import ASSIGNORS, RangeAssignor, UniformAssignor

TOPIC_IDS = {f"t{i}": uuid.UUID(int=i + 1) for i in range(4)}


def flat(assignment):
    return {(t, p) for ps in [assignment] for t, parts in ps.items() for p in parts}


def check_valid(result, subscriptions, topics):
    owners: dict = {}
    for member, assignment in result.items():
        for topic_id, parts in assignment.items():
            name = next(n for n, (tid, _) in topics.items() if tid == topic_id)
            assert name in subscriptions[member], "assigned an unsubscribed topic"
            for p in parts:
                assert (topic_id, p) not in owners, "partition assigned twice"
                owners[(topic_id, p)] = member
    wanted = {(topics[n][0], p) for subs in subscriptions.values() for n in subs if n in topics
              for p in range(topics[n][1])}
    assert set(owners) == wanted, "not every subscribed partition is assigned"


@st.composite
def scenarios(draw, homogeneous=False):
    topics = {n: (TOPIC_IDS[n], draw(st.integers(1, 12)))
              for n in draw(st.lists(st.sampled_from(list(TOPIC_IDS)), min_size=1, unique=True))}
    members = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    names = sorted(topics)
    if homogeneous:
        subs = set(names)
        subscriptions = {m: set(subs) for m in members}
    else:
        subscriptions = {m: set(draw(st.lists(st.sampled_from(names), unique=True)))
                         for m in members}
    return subscriptions, topics


@settings(max_examples=150, deadline=None)
@given(scenario=scenarios(), name=st.sampled_from(sorted(ASSIGNORS)))
def test_every_partition_exactly_once_to_a_subscriber(scenario, name):
    subscriptions, topics = scenario
    check_valid(ASSIGNORS[name].assign(subscriptions, topics, {}), subscriptions, topics)


@settings(max_examples=150, deadline=None)
@given(scenario=scenarios(homogeneous=True))
def test_uniform_is_balanced_for_identical_subscriptions(scenario):
    subscriptions, topics = scenario
    result = UniformAssignor().assign(subscriptions, topics, {})
    counts = [len(flat(a)) for a in result.values()]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=100, deadline=None)
@given(scenario=scenarios(), data=st.data())
def test_uniform_is_sticky(scenario, data):
    subscriptions, topics = scenario
    assignor = UniformAssignor()
    first = assignor.assign(subscriptions, topics, {})
    assert assignor.assign(subscriptions, topics, first) == first  # nothing changed: no moves
    # one member leaves: everyone else keeps what they had
    if len(subscriptions) > 1:
        gone = data.draw(st.sampled_from(sorted(subscriptions)))
        rest = {m: s for m, s in subscriptions.items() if m != gone}
        second = assignor.assign(rest, topics, first)
        check_valid(second, rest, topics)
        if all(s == next(iter(subscriptions.values())) for s in subscriptions.values()):
            for m in rest:
                assert flat(first[m]) <= flat(second[m])


def test_range_gives_contiguous_ranges_per_topic():
    topics = {"a": (TOPIC_IDS["t0"], 5), "b": (TOPIC_IDS["t1"], 2)}
    subs = {"m1": {"a", "b"}, "m2": {"a", "b"}}
    result = RangeAssignor().assign(subs, topics, {})
    assert result["m1"] == {TOPIC_IDS["t0"]: {0, 1, 2}, TOPIC_IDS["t1"]: {0}}
    assert result["m2"] == {TOPIC_IDS["t0"]: {3, 4}, TOPIC_IDS["t1"]: {1}}


def test_uniform_moves_only_what_a_new_member_needs():
    t = TOPIC_IDS["t0"]
    topics = {"a": (t, 6)}
    first = UniformAssignor().assign({"m1": {"a"}}, topics, {})
    assert first == {"m1": {t: set(range(6))}}
    second = UniformAssignor().assign({"m1": {"a"}, "m2": {"a"}}, topics, first)
    assert len(second["m1"][t]) == len(second["m2"][t]) == 3
    assert second["m1"][t] <= first["m1"][t]
