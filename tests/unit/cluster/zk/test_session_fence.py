"""The session fence: a broker whose ZooKeeper connection is down, or back but not re-read yet,
does not answer for leaderships its stale image still gives it; and the coordinators it gates
answer COORDINATOR_NOT_AVAILABLE (retriable, so their own waits try again) meanwhile."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from strom.broker.commit_gate import ReplicaCommits
from strom.cluster.zk.session import SessionFence
from strom.coordinator.runtime.commits import Commits
from strom.protocol.errors import ErrorCode as E


class StubZk:
    def __init__(self) -> None:
        self.listeners = []
        self.connected = True

    def add_state_listener(self, listener) -> None:
        self.listeners.append(listener)

    def state(self, name: str) -> None:
        for listener in self.listeners:
            listener(name)


def test_not_current_from_a_lost_connection_until_the_tree_is_read_again() -> None:
    zk, mirror = StubZk(), SimpleNamespace(full_reads=1)
    fence = SessionFence(zk, mirror)
    assert fence.current()
    zk.state("SUSPENDED")
    assert not fence.current()
    zk.state("CONNECTED")  # same session or a new one: the image may have missed changes
    assert not fence.current()
    mirror.full_reads += 1  # the mirror's read after the reconnection
    assert fence.current()
    zk.state("LOST")  # the session expired: other brokers may lead what we led
    zk.state("CONNECTED")
    assert not fence.current()
    mirror.full_reads += 1
    assert fence.current()
    zk.state("CONNECTED")  # a CONNECTED while connected changes nothing
    assert fence.current()


def test_not_current_when_built_while_the_connection_is_down() -> None:
    zk, mirror = StubZk(), SimpleNamespace(full_reads=1)
    zk.connected = False
    fence = SessionFence(zk, mirror)
    assert not fence.current()
    zk.state("CONNECTED")
    assert not fence.current()
    mirror.full_reads += 1
    assert fence.current()


class Replicas:
    """A replica manager whose waits succeed at once, unless told to hold."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.release.set()

    def min_isr_error(self, key) -> int:
        return E.NONE

    async def wait_for_replication(self, key, offset: int, timeout_s: float) -> int:
        await self.release.wait()
        return E.NONE


def test_coordinator_waits_fail_retriably_while_the_view_is_stale() -> None:
    async def scenario() -> None:
        current = [True]
        replicas = Replicas()
        node = SimpleNamespace(partitions=SimpleNamespace(
            get=lambda topic, p: SimpleNamespace(log_end_offset=5)))
        commits = Commits(ReplicaCommits(node, replicas, lambda: current[0]))
        key = ("__consumer_offsets", 1)
        assert await commits.settle({key}) == E.NONE
        current[0] = False  # cut off: another broker may lead it now
        assert await commits.settle({key}) == E.COORDINATOR_NOT_AVAILABLE
        try:
            commits.check(*key)
            raise AssertionError("an append was allowed")
        except Exception as refused:
            assert getattr(refused, "code", None) == E.COORDINATOR_NOT_AVAILABLE
        # a wait that started while current fails if the view went stale meanwhile
        current[0] = True
        replicas.release.clear()
        waiting = asyncio.ensure_future(commits.settle({key}))
        await asyncio.sleep(0)
        current[0] = False
        replicas.release.set()
        assert await asyncio.wait_for(waiting, 5) == E.COORDINATOR_NOT_AVAILABLE

    asyncio.run(scenario())
