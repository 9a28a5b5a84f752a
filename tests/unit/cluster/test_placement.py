"""Kafka's replica placement: balanced leaders, distinct brokers, racks spread."""

import random
from collections import Counter

import pytest

from strom.cluster.placement import assign_replicas, rack_alternated
from strom.protocol.errors import KafkaError


@pytest.mark.parametrize("seed", range(20))
def test_rack_unaware_spreads_leaders_and_never_repeats_a_broker(seed):
    plan = assign_replicas([1, 2, 3, 4], {}, 8, 3, rng=random.Random(seed))
    assert sorted(plan) == list(range(8))
    for replicas in plan.values():
        assert len(set(replicas)) == 3
    assert Counter(r[0] for r in plan.values()) == {1: 2, 2: 2, 3: 2, 4: 2}


def test_rack_alternated_interleaves_racks():
    assert rack_alternated({1: "a", 2: "a", 3: "b", 4: "c", 5: "c"}) == [1, 3, 4, 2, 5]


@pytest.mark.parametrize("seed", range(20))
def test_rack_aware_uses_min_racks_rf_racks(seed):
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    plan = assign_replicas(list(racks), racks, 12, 3, rng=random.Random(seed))
    for replicas in plan.values():
        assert len({racks[b] for b in replicas}) == 3
        assert len(set(replicas)) == 3
    assert Counter(r[0] for r in plan.values()) == dict.fromkeys(racks, 2)
    plan2 = assign_replicas(list(racks), racks, 6, 2, rng=random.Random(seed))
    for replicas in plan2.values():
        assert len({racks[b] for b in replicas}) == 2


def test_rack_aware_with_more_replicas_than_racks():
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in assign_replicas(list(racks), racks, 8, 3).values():
        assert len(set(replicas)) == 3 and len({racks[b] for b in replicas}) == 2


def test_partial_rack_information_is_refused():
    with pytest.raises(KafkaError, match="rack information"):
        assign_replicas([1, 2], {1: "a", 2: None}, 1, 2)


def test_replication_factor_above_the_brokers_is_refused():
    with pytest.raises(KafkaError):
        assign_replicas([1, 2], {}, 1, 3)


def test_added_partitions_continue_the_numbering():
    plan = assign_replicas([1, 2, 3], {}, 2, 2, first_partition=4)
    assert sorted(plan) == [4, 5]


def test_imbalance_picks_partitions_of_a_broker_leading_too_few():
    import uuid

    from strom.cluster.decisions import imbalanced
    from strom.cluster.image import PartitionState, TopicState

    t = TopicState("t", uuid.uuid4())
    # broker 1 is preferred for 0, 1, 2 but leads none; broker 2 leads its own
    t.partitions = {
        0: PartitionState(0, [1, 2], [1, 2], 2, 3, 1),
        1: PartitionState(1, [1, 2], [2], 2, 3, 1),  # 1 not in sync: cannot move
        2: PartitionState(2, [1, 2], [1, 2], 2, 3, 1),
        3: PartitionState(3, [2, 1], [1, 2], 2, 3, 1),
    }
    assert imbalanced([t], {1, 2}, 10) == [("t", 0), ("t", 2)]
    assert imbalanced([t], {2}, 10) == []  # broker 1 is down
    assert imbalanced([t], {1, 2}, 100) == []  # any imbalance tolerated
