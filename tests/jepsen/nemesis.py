"""The nemesis: finds who holds a role right now and hurts that broker.

Faults (one at a time; after each the cluster must be whole again before the next):

- ``kill-txn``: kill -9 the transaction coordinator of one of the run's transactional ids
  (FindCoordinator, key type TRANSACTION), restart it after a moment;
- ``kill-group``: the same for the consumer group's coordinator (FindCoordinator, key type GROUP);
- ``kill-leader``: the same for the leader of a partition of the transactional topic (Metadata);
- ``partition``: cut the leader of a partition off the network, heal it once the leadership
  has moved.

A broker stays killed or cut off until its role has moved to another broker (its ZooKeeper
session, its KRaft heartbeat expired: the cluster failed over), then it is restarted or healed.

A short run plays a fixed list of faults in a seeded order; a long one draws them at random.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from confluent_kafka.admin import AdminClient

from strom.cluster.client import BrokerClient
from strom.protocol.api_keys import ApiKey

from .workload import CLIENT

KILLS = ("kill-txn", "kill-group", "kill-leader")
PARTITION = "partition"
GROUP_KEY, TXN_KEY = 0, 1
NOT_READY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
HEALTHY_TIMEOUT = 60.0


class Target(Protocol):
    """A 3-broker cluster the nemesis can hurt (tests/integration/cluster/test_jepsen.py: Strom
    in network namespaces; kafka.py: Apache Kafka's KRaft nodes)."""

    name: str
    node_ids: list[int]
    can_partition: bool

    def bootstrap(self) -> str: ...                    # every broker, up or not
    def address(self, node_id: int) -> str: ...        # host:port of one broker
    def running(self, node_id: int) -> bool: ...
    def kill(self, node_id: int) -> None: ...          # SIGKILL, by PID
    def restart(self, node_id: int) -> None: ...       # start again; returns once it serves
    def isolate(self, node_id: int) -> None: ...
    def heal(self, node_id: int) -> None: ...
    def stop_all(self) -> None: ...
    def replica_dir(self, node_id: int, topic: str, partition: int) -> Path: ...


@dataclass(frozen=True)
class Timing:
    """The least time a broker stays down or cut off (drawn), the most it waits for its role
    to move, and the calm between faults (drawn), in seconds."""

    down: tuple[float, float] = (0.3, 1.0)
    longest: float = 20.0
    calm: tuple[float, float] = (0.2, 0.6)
    # the share of kills restarted at once, before the cluster noticed (the broker comes back
    # while ZooKeeper, or the quorum, still names it as the holder of its roles)
    quick: float = 0.0


def fixed_plan(rng: random.Random, kills_each: int, partitions: int) -> list[str]:
    plan = [*(k for k in KILLS for _ in range(kills_each)), *([PARTITION] * partitions)]
    rng.shuffle(plan)
    return plan


def random_plan(rng: random.Random, can_partition: bool) -> Iterator[str]:
    """Rounds of every kind of fault, each round in a random order."""
    kinds = [*KILLS, *([PARTITION] if can_partition else [])]
    while True:
        yield from rng.sample(kinds, len(kinds))


def find_coordinator(address: str, key_type: int, key: str) -> int | None:
    """The node id FindCoordinator (v4+: batched keys) names, or None while there is none."""
    host, port = address.rsplit(":", 1)

    async def ask() -> int | None:
        client = BrokerClient(host, int(port), client_id="jepsen-nemesis", timeout_s=5)
        try:
            r = await client.request(ApiKey.FIND_COORDINATOR, 4, {
                "key_type": key_type, "coordinator_keys": [key]})
        finally:
            client.close()
        c = r.coordinators[0]
        if c.error_code in NOT_READY:
            return None
        if c.error_code:
            raise RuntimeError(f"FindCoordinator({key!r}): error {c.error_code}")
        return int(c.node_id)

    return asyncio.run(ask())


@dataclass
class Event:
    at: float
    fault: str
    victim: int
    note: str = ""


@dataclass
class Nemesis:
    target: Target
    rng: random.Random
    txn_ids: list[str]
    group: str
    topic: str
    partitions: int
    timing: Timing = field(default_factory=Timing)
    log: object = print
    # waits for the moment to strike a role's holder (run.py: right after a commit)
    moment: Callable[[str, str | int], None] | None = None
    events: list[Event] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)  # faults whose victim could not be found
    # faults after which the cluster was not whole again (every replica in its ISR) within
    # HEALTHY_TIMEOUT: a liveness failure, which the run reports and the test fails on
    unhealed: list[str] = field(default_factory=list)
    _isolated: set[int] = field(default_factory=set)

    def counts(self) -> Counter[str]:
        return Counter(e.fault for e in self.events)

    def _admin(self) -> AdminClient:
        return AdminClient({**CLIENT, "bootstrap.servers": self.target.bootstrap()})

    def _live_address(self) -> str:
        return next(self.target.address(n) for n in self.target.node_ids
                    if self.target.running(n) and n not in self._isolated)

    def _role(self, fault: str) -> str | int:
        """The role's key: a transactional id, the group, or a partition of the topic."""
        if fault == "kill-txn":
            return self.rng.choice(self.txn_ids)
        if fault == "kill-group":
            return self.group
        return self.rng.randrange(self.partitions)

    def holder(self, fault: str, key: str | int) -> int | None:
        """The broker that holds the role now, as the cluster answers."""
        if fault == "kill-txn":
            return find_coordinator(self._live_address(), TXN_KEY, str(key))
        if fault == "kill-group":
            return find_coordinator(self._live_address(), GROUP_KEY, str(key))
        md = self._admin().list_topics(self.topic, timeout=5).topics[self.topic]
        leader = md.partitions[int(key)].leader
        return leader if leader >= 0 else None

    def _poll(self, fault: str, key: str | int, accept, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                found = self.holder(fault, key)
            except Exception:  # a broker between lives: ask again
                found = None
            if found is not None and accept(found):
                return found
            time.sleep(0.3)  # poll interval, not synchronisation
        return None

    def play(self, plan: Iterator[str] | list[str], until: float,
             stop: threading.Event | None = None) -> None:
        """Run the faults of ``plan`` one after another until it ends or the monotonic clock
        passes ``until``. A killed or cut-off broker stays so until its role has moved to
        another broker (the cluster noticed: a real failover), at least ``timing.down``'s
        draw, at most ``timing.longest``."""
        for fault in plan:
            if time.monotonic() >= until or (stop is not None and stop.is_set()):
                return
            key = self._role(fault)
            victim = self._poll(fault, key, lambda n: n in self.target.node_ids, 15)
            if victim is None:
                self.missed.append(fault)
                self.log(f"nemesis: no broker found for {fault} ({key})")
                continue
            if self.moment is not None:
                self.moment(fault, key)
            t0 = time.monotonic()
            shortest = self.rng.uniform(*self.timing.down)
            quick = (fault != PARTITION and self.timing.quick > 0
                     and self.rng.random() < self.timing.quick)
            if fault == PARTITION:
                self.target.isolate(victim)
                self._isolated.add(victim)
            else:
                self.target.kill(victim)
            moved = None if quick else self._poll(fault, key, lambda n, v=victim: n != v,
                                                  self.timing.longest)
            took = time.monotonic() - t0
            time.sleep(max(0.0, shortest - took))  # the fault's length
            if fault == PARTITION:
                self.target.heal(victim)
                self._isolated.discard(victim)
            else:
                self.target.restart(victim)
            note = (f"moved to {moved} in {took:.1f} s" if moved else
                    "restarted at once" if quick else "did not move")
            self.events.append(Event(t0, fault, victim, note))
            self.log(f"nemesis: {fault} ({key}) on broker {victim}: {note}")
            if not wait_healthy(self.target, HEALTHY_TIMEOUT, self.log):
                self.unhealed.append(f"{fault} on broker {victim} at {t0:.0f}")
            time.sleep(self.rng.uniform(*self.timing.calm))  # calm between faults


def unhealthy(target: Target) -> str | None:
    """Why the cluster is not whole (None: every broker serves and is registered, and every
    partition, the internal topics' too, has a leader and all its replicas in sync)."""
    down = [n for n in target.node_ids if not target.running(n)]
    if down:
        return f"brokers {down} not running"
    md = AdminClient({**CLIENT, "bootstrap.servers": target.bootstrap()}).list_topics(timeout=5)
    if sorted(md.brokers) != sorted(target.node_ids):
        return f"registered brokers {sorted(md.brokers)}"
    lagging = [f"{t.topic}-{p.id} leader {p.leader} isr {sorted(p.isrs)}"
               for t in md.topics.values() for p in t.partitions.values()
               if p.error is not None or p.leader < 0 or len(p.isrs) != len(p.replicas)]
    return f"partitions not whole: {lagging[:6]}" if lagging else None


def wait_healthy(target: Target, timeout: float, log=None) -> bool:
    deadline = time.monotonic() + timeout
    why: str | None = "not asked yet"
    while time.monotonic() < deadline:
        try:
            why = unhealthy(target)
            if why is None:
                return True
        except Exception as e:  # KafkaException while brokers come back
            why = repr(e)
        time.sleep(0.3)  # poll interval, not synchronisation
    if log is not None:
        log(f"cluster not whole after {timeout:.0f} s: {why}")
    return False
