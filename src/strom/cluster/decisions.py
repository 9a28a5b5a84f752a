"""The active controller's partition decisions, as pure functions over metadata states.

Given what the image says (replicas, leader, ISR, epochs) and which brokers are live, decide
each partition's next state. Both active controllers use them: ZooKeeper mode's writes what
these return with a compare-and-set on the state znode, KRaft's as partition records checked
against the partition epoch; a lost race just means deciding again on fresher state.

Kafka's rules (as its controllers apply them):
- a new partition's leader is its first live replica, its ISR the live replicas;
- a partition whose leader is gone gets the first replica (in assignment order) that is live
  and in the ISR; with unclean leader election, else the first live replica (the ISR becomes
  just that one); with none, leader -1 (offline), and the ISR keeps its last member so a clean
  election is possible when that broker returns;
- dead brokers leave every ISR (never the last member);
- every leader or ISR change the controller makes bumps the leader epoch;
- a reassignment completes once every target replica is in the ISR: the leader moves into the
  target if it is not there, the leaving replicas leave the ISR, then the assignment becomes
  the target (see cluster/reassignment.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from strom.cluster.image import PartitionState, TopicState

NO_LEADER = -1
NO_STATE = -1  # partition_epoch of a partition whose state znode does not exist yet


@dataclass(frozen=True)
class StateWrite:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Decision:
    topic: str
    partition: int
    write: StateWrite
    expected_version: int  # the state znode version to CAS on; NO_STATE: create it


def initial_state(replicas: list[int], live: Collection[int]) -> StateWrite | None:
    """First state of a new partition; None while none of its replicas is live."""
    alive = tuple(r for r in replicas if r in live)
    if not alive:
        return None
    return StateWrite(alive[0], 0, alive)


def next_state(state: PartitionState, live: Collection[int], unclean: bool) -> StateWrite | None:
    """The state to move an existing partition to, or None when it is fine as it is."""
    if any(r not in state.replicas for r in state.isr) or (
            state.leader != NO_LEADER and state.leader not in state.replicas):
        # a broker that is no longer a replica (a reassignment dropped it) counts as gone
        live = [r for r in live if r in state.replicas]
    live_isr = tuple(r for r in state.isr if r in live)
    epoch = state.leader_epoch + 1
    if state.leader != NO_LEADER and state.leader in live:
        if len(live_isr) == len(state.isr):
            return None
        return StateWrite(state.leader, epoch, live_isr or (state.leader,))
    # the leader is gone (or there was none): elect
    candidates = [r for r in state.replicas if r in live_isr]
    if candidates:
        return StateWrite(candidates[0], epoch, live_isr)
    if unclean:
        alive = [r for r in state.replicas if r in live]
        if alive:
            return StateWrite(alive[0], epoch, (alive[0],))
    kept = _last_isr_member(state)
    if state.leader == NO_LEADER and tuple(state.isr) == kept:
        return None  # already offline; nothing to write until a replica returns
    return StateWrite(NO_LEADER, epoch, kept)


def _last_isr_member(state: PartitionState) -> tuple[int, ...]:
    """The ISR of an offline partition: its previous leader if it was in sync, else one member."""
    if state.leader in state.isr:
        return (state.leader,)
    return tuple(state.isr[:1])


def decide(topics: Iterable[TopicState], live: Collection[int],
           unclean: Callable[[TopicState], bool],
           unavailable: Callable[[PartitionState], Collection[int]] | None = None,
           ) -> list[Decision]:
    """Every state write the controller should make now, over the whole image. `unavailable`:
    replicas of a partition that count as gone although their broker is live (kept in a log
    dir that is offline)."""
    out: list[Decision] = []
    for topic in topics:
        allow_unclean: bool | None = None
        for p in sorted(topic.partitions):
            state = topic.partitions[p]
            lost = unavailable(state) if unavailable is not None else ()
            here = [b for b in live if b not in lost] if lost else live
            if state.partition_epoch == NO_STATE:
                write = initial_state(state.replicas, here)
            else:
                if allow_unclean is None:
                    allow_unclean = unclean(topic)
                write = next_state(state, here, allow_unclean)
            if write is not None:
                out.append(Decision(topic.name, p, write, state.partition_epoch))
    return out


def reelected_after_restart(state: PartitionState, restarted: int,
                            live: Collection[int]) -> StateWrite:
    """The next state of a partition led by a broker that restarted before the controller saw
    it go (its leadership belonged to its previous process): as for a failed leader, another
    live ISR member in assignment order leads and the restarted broker leaves the ISR (its log
    may have lost what it acknowledged; it rejoins once caught up); with none, the restarted
    broker leads again. The leader epoch goes up either way, fencing the old process's."""
    others = [r for r in state.replicas if r in state.isr and r in live and r != restarted]
    if others:
        return StateWrite(others[0], state.leader_epoch + 1,
                          tuple(r for r in state.isr if r != restarted))
    return StateWrite(restarted, state.leader_epoch + 1, tuple(state.isr) or (restarted,))


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types


def elected_state(state: PartitionState, live: Collection[int],
                  election_type: int) -> tuple[StateWrite | None, str | None]:
    """ElectLeaders for one partition: (the write, None), or (None, why not) where why is
    'not needed' or 'not available' (Kafka's ELECTION_NOT_NEEDED / *_NOT_AVAILABLE)."""
    if election_type == PREFERRED:
        preferred = state.replicas[0] if state.replicas else NO_LEADER
        if state.leader == preferred:
            return None, "not needed"
        if preferred not in live or preferred not in state.isr:
            return None, "not available"
        return StateWrite(preferred, state.leader_epoch + 1, tuple(state.isr)), None
    if state.leader != NO_LEADER and state.leader in live:
        return None, "not needed"
    alive = [r for r in state.replicas if r in live]
    if not alive:
        return None, "not available"
    return StateWrite(alive[0], state.leader_epoch + 1, (alive[0],)), None


def imbalanced(topics: Iterable[TopicState], live: Collection[int],
               max_percentage: int) -> list[tuple[str, int]]:
    """Kafka's auto leader rebalance: partitions to move back to their preferred replica,
    for every broker that leads less than (100 - max_percentage)% of the partitions it is
    preferred for (only where that replica is live and in sync)."""
    preferred_of: dict[int, list[tuple[str, int, PartitionState]]] = {}
    for topic in topics:
        for p, state in topic.partitions.items():
            if state.replicas and state.partition_epoch != NO_STATE:
                preferred_of.setdefault(state.replicas[0], []).append((topic.name, p, state))
    out: list[tuple[str, int]] = []
    for broker, parts in sorted(preferred_of.items()):
        if broker not in live:
            continue
        not_led = [(t, p, s) for t, p, s in parts if s.leader != broker]
        if len(not_led) * 100 > max_percentage * len(parts):
            out += [(t, p) for t, p, s in not_led if broker in s.isr]
    return out


def reassignment_state(state: PartitionState, live: Collection[int]) -> StateWrite | None:
    """The state write that lets a reassignment complete once all its target replicas are in
    sync: a leader in the target (the current one if it is there and live), and an ISR without
    the leaving replicas. None when there is nothing to write (yet)."""
    if not state.reassigning or state.partition_epoch == NO_STATE:
        return None
    target = state.target_replicas
    if any(r not in state.isr for r in target):
        return None  # still catching up
    isr = tuple(r for r in state.isr if r in target)
    leader = state.leader
    if leader not in target or leader not in live:
        leader = next((r for r in target if r in isr and r in live), NO_LEADER)
        if leader == NO_LEADER:
            return None
    if leader == state.leader and isr == tuple(state.isr):
        return None
    return StateWrite(leader, state.leader_epoch + 1, isr)


def reassignment_done(state: PartitionState) -> bool:
    """True when the assignment can become the target: it leads and is exactly the ISR."""
    if not state.reassigning or state.partition_epoch == NO_STATE:
        return False
    target = state.target_replicas
    return state.leader in target and sorted(state.isr) == sorted(target)


def shutdown_move(state: PartitionState, leaving: set[int], live: set[int]) -> StateWrite | None:
    """The state that takes a stopping broker out of a partition's leadership and ISR, when
    another live in-sync replica can take over; None when nothing needs to change."""
    if state.partition_epoch == NO_STATE or state.leader == NO_LEADER:
        return None
    remaining = tuple(r for r in state.isr if r not in leaving and r in live)
    if not remaining:
        return None
    if state.leader in leaving:
        leader = next(r for r in state.replicas if r in remaining) if any(
            r in remaining for r in state.replicas) else remaining[0]
        return StateWrite(leader, state.leader_epoch + 1, remaining)
    if any(r in leaving for r in state.isr):
        return StateWrite(state.leader, state.leader_epoch + 1, remaining)
    return None


class ElectionCount:
    """Leader elections an active controller made (Kafka's LeaderElectionRateAndTimeMs and
    UncleanLeaderElectionsPerSec): a new leader, and one that was not in the ISR."""

    def __init__(self) -> None:
        self.leader_elections = 0
        self.unclean_leader_elections = 0

    def count(self, before: PartitionState, leader: int) -> None:
        if leader != NO_LEADER and leader != before.leader:
            self.leader_elections += 1
            if leader not in before.isr:
                self.unclean_leader_elections += 1


class RebalanceSchedule:
    """Kafka's auto leader rebalance: every ``leader.imbalance.check.interval.seconds`` (None:
    ``auto.leader.rebalance.enable=false``), the partitions to move back to their preferred
    replica (`imbalanced`); the first check comes one interval after the controller starts."""

    def __init__(self, interval_s: float | None, max_percentage: int) -> None:
        self.interval_s = interval_s
        self.max_percentage = max_percentage
        self._next = 0.0

    def due(self, now: float, topics: Iterable[TopicState],
            live: Collection[int]) -> list[tuple[str, int]]:
        if self.interval_s is None:
            return []
        if self._next == 0.0:
            self._next = now + self.interval_s
        if now < self._next:
            return []
        self._next = now + self.interval_s
        return imbalanced(topics, live, self.max_percentage)
