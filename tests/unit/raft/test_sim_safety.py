"""Raft's safety under random faults, over fixed seeds: crashes (with and without losing
unflushed data), restarts, partitions, message loss and delay, with a writer appending to
whoever leads. `History` checks on every step that no epoch has two leaders, committed entries
never change, HWs never move back and logs agree below the HW; after the faults stop, the
quorum must elect a leader and every node must hold the whole committed log."""

from __future__ import annotations

import random

import pytest
from tests.unit.raft.sim import History, InvariantViolation, SimNetwork, random_faults

SEEDS = range(24)


def chaos(seed: int, *, duration_ms: int = 20_000, wire: bool = False) -> SimNetwork:
    rng = random.Random(seed * 7919 + 1)
    n_voters = rng.choice([3, 3, 5])
    voters = list(range(1, n_voters + 1))
    net = SimNetwork(seed, voters, observers=[100], drop_rate=rng.choice([0.0, 0.02, 0.1]),
                     max_delay_ms=rng.choice([2, 5, 30]), wire=wire).start()
    net.schedule_appends(duration_ms)
    random_faults(net, rng, voters, duration_ms)
    return net


def settle(net: SimNetwork) -> None:
    """Faults over: everyone up and connected; a leader must emerge and everyone catch up."""
    net.heal()
    net.drop_rate = 0.0
    for i in list(net.nodes):
        if net.nodes[i].client is None:
            net.restart(i)
    net.schedule_appends(net.clock.now + 2000)  # a fresh entry commits everything before it
    net.run_for(12_000)
    net.check_logs_agree()
    leader = net.leader()
    assert leader is not None, net.states()
    lead = net.nodes[leader].client
    assert lead is not None and lead.high_watermark is not None
    end = net.history.committed_end()
    assert set(net.history.committed) == set(range(end)), "committed offsets have a gap"
    assert lead.high_watermark >= end
    for node in net.nodes.values():
        assert node.client is not None and node.listener is not None
        assert node.client.high_watermark == lead.high_watermark, net.states()
        # Each node's state machine saw exactly the committed log, in order.
        assert node.listener.next_offset == lead.high_watermark
        assert [net.history.committed[o] for o in range(len(node.listener.entries))] == \
            node.listener.entries


@pytest.mark.parametrize("seed", SEEDS)
def test_safety_under_random_faults(seed: int) -> None:
    net = chaos(seed, wire=seed % 6 == 0)
    settle(net)
    assert len(net.history.leaders) >= 1


def test_the_checker_sees_two_leaders_and_a_changed_entry() -> None:
    from strom.raft.types import DataRecord

    h = History()
    h.check_leader(0, 1, 5)
    h.check_leader(1, 1, 5)
    with pytest.raises(InvariantViolation):
        h.check_leader(2, 2, 5)
    h.check_entry(1, 0, 1, DataRecord(b"a"))
    with pytest.raises(InvariantViolation):
        h.check_entry(2, 0, 1, DataRecord(b"b"))
    h.check_hw(1, 1, 5, voter=True)
    with pytest.raises(InvariantViolation):
        h.check_hw(1, 1, 4, voter=True)
    with pytest.raises(InvariantViolation):
        h.check_hw(1, 2, 4, voter=True)  # a voter's HW never goes back, even across a restart


def test_a_seed_replays_exactly() -> None:
    def trace(seed: int) -> tuple[object, ...]:
        net = chaos(seed, duration_ms=6000)
        return (net.steps, net.delivered, net.history.became_leader,
                sorted(net.history.committed.items(), key=lambda kv: kv[0]))

    assert trace(5) == trace(5)
