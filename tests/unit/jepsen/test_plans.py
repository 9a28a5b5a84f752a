"""The nemesis's plans: a fixed plan holds exactly the faults asked for, in a seeded order; a
random plan deals every kind once per round."""

from __future__ import annotations

import itertools
import random
from collections import Counter

from ...jepsen.nemesis import KILLS, PARTITION, fixed_plan, random_plan


def test_fixed_plan_has_each_fault_and_follows_the_seed():
    plan = fixed_plan(random.Random(28), 3, 1)
    assert Counter(plan) == {**dict.fromkeys(KILLS, 3), PARTITION: 1}
    assert plan == fixed_plan(random.Random(28), 3, 1)
    assert any(fixed_plan(random.Random(s), 3, 1) != plan for s in range(5))


def test_random_plan_deals_every_kind_each_round():
    plan = list(itertools.islice(random_plan(random.Random(7), True), 40))
    for i in range(0, 40, 4):
        assert sorted(plan[i:i + 4]) == sorted([*KILLS, PARTITION])


def test_random_plan_without_partitions():
    plan = list(itertools.islice(random_plan(random.Random(7), False), 30))
    assert PARTITION not in plan and Counter(plan) == dict.fromkeys(KILLS, 10)
