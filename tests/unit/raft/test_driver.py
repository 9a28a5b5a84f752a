"""The asyncio driver over real sockets and disk logs, in one process: three voters serve their
CONTROLLER routers on localhost, elect a leader, commit appended records on every node, go on
without a stopped follower, and catch it up when it is back."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from strom.broker.server import BrokerServer
from strom.controller.apis import ControllerRouter
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.raft.client import RaftClient
from strom.raft.driver import RaftDriver, _is_pre_vote, _pick_version
from strom.raft.messages import Message
from strom.raft.quorum_state import FileQuorumStateStore
from strom.raft.storage import PartitionRaftLog
from strom.raft.types import (
    DataRecord,
    Endpoint,
    LeaderAndEpoch,
    NotLeaderError,
    RaftBatch,
    RaftSettings,
    ReplicaKey,
    VoterNode,
    VoterSet,
)

SETTINGS = RaftSettings(election_timeout_ms=300, fetch_timeout_ms=600, request_timeout_ms=1000,
                        fetch_max_wait_ms=100, append_linger_ms=5)


class Values:
    """A state machine: the committed data values (called in the Raft thread)."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        self.values += [r.value for b in batches for r in b.records if isinstance(r, DataRecord)]

    def handle_load_snapshot(self, snapshot: Any) -> None:
        self.values = list(snapshot.values)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        pass


class Node:
    """The `ControllerNode` the router's handlers see, around one driver."""

    stats = None
    authorizer = None  # no ACLs: every request allowed

    def __init__(self, node_id: int, root: Path) -> None:
        self.node_id = node_id
        self.root = root
        self.cluster_id = "driver-test"
        self.driver: RaftDriver | None = None
        self.log: PartitionRaftLog | None = None
        self.values = Values()
        self.voters: VoterSet | None = None

    async def raft_request(self, api_key: ApiKey, request: Mapping[str, Any]) -> Message:
        if self.driver is None:  # stopped: as a stopping node answers
            return {"error_code": int(ErrorCode.BROKER_NOT_AVAILABLE)}
        return await self.driver.handle_request(-1, api_key, request)

    def leader_id(self) -> int | None:
        return self.driver.client.quorum.leader_id if self.driver else None

    def controller_endpoints(self) -> dict[int, tuple[str, int]]:
        assert self.voters is not None
        return {n.key.id: (n.endpoints[0].host, n.endpoints[0].port) for n in self.voters}

    async def start(self, voters: VoterSet) -> None:
        self.voters = voters
        self.values = Values()
        self.log = await asyncio.to_thread(PartitionRaftLog.open, self.root, sync=False)
        client = RaftClient(node_id=self.node_id, voters=voters, log=self.log,
                            store=FileQuorumStateStore(self.root / "quorum-state"),
                            rng=random.Random(self.node_id), cluster_id=self.cluster_id,
                            settings=SETTINGS)
        client.register(self.values)
        self.driver = RaftDriver(client, client_id=f"test-{self.node_id}",
                                 request_timeout_ms=SETTINGS.request_timeout_ms)
        await self.driver.start()

    async def stop(self) -> None:
        assert self.driver is not None and self.log is not None
        await self.driver.stop(500)
        await self.driver.call(self.log.close)
        self.driver.close_executor()
        self.driver = None


async def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)  # poll interval, not synchronisation


def _leader(nodes: list[Node]) -> Node | None:
    leading = [n for n in nodes if n.driver is not None and n.driver.client.is_leader()]
    return leading[0] if len(leading) == 1 else None


async def _append(nodes: list[Node], values: list[bytes], timeout: float = 10) -> Node:
    """Append at whoever leads, again if leadership moved meanwhile (as a controller's client
    retries on NOT_CONTROLLER); returns the node that took them."""
    deadline = time.monotonic() + timeout
    while True:
        leader = _leader(nodes)
        if leader is not None and leader.driver is not None:
            try:
                await leader.driver.append(values)
                return leader
            except NotLeaderError:
                pass
        assert time.monotonic() < deadline, "no leader took the append"
        await asyncio.sleep(0.01)  # poll interval, not synchronisation


async def _quorum(tmp_path: Path) -> None:
    nodes = [Node(i, tmp_path / f"n{i}") for i in (1, 2, 3)]
    servers = [BrokerServer(ControllerRouter(n), "127.0.0.1", 0, max_request_bytes=1 << 26)
               for n in nodes]
    for s in servers:
        await s.start()
    voters = VoterSet.of(VoterNode(ReplicaKey(n.node_id),
                                   (Endpoint("CONTROLLER", "127.0.0.1", s.port),))
                         for n, s in zip(nodes, servers, strict=True))
    try:
        for n in nodes:
            await n.start(voters)
        await _until(lambda: _leader(nodes) is not None, 10, "a leader")
        await _append(nodes, [b"a", b"b"])
        await _until(lambda: all(n.values.values == [b"a", b"b"] for n in nodes), 10,
                     "every node to commit the records")
        leader = await _append(nodes, [b"c"])
        await _until(lambda: all(n.values.values == [b"a", b"b", b"c"] for n in nodes), 10,
                     "every node to commit the records")

        # A follower stops: the other two still commit; back, it catches up from its log.
        follower = next(n for n in nodes if n is not leader)
        await follower.stop()
        await _append(nodes, [b"d"])
        others = [n for n in nodes if n is not follower]
        await _until(lambda: all(n.values.values[-1:] == [b"d"] for n in others), 10,
                     "two of three to commit")
        await follower.start(voters)
        await _until(lambda: follower.values.values == [b"a", b"b", b"c", b"d"], 10,
                     "the restarted follower to catch up")
        assert follower.driver is not None and not follower.driver.client.is_leader()
        # Every log holds the same batches, read back from disk.
        ends = set()
        for n in nodes:
            assert n.driver is not None and n.log is not None
            ends.add(await n.driver.call(n.log.end_offset))
        assert len(ends) == 1
    finally:
        for n in nodes:
            if n.driver is not None:
                await n.stop()
        for s in servers:
            await s.stop()


def test_three_drivers_elect_commit_and_catch_up(tmp_path: Path) -> None:
    asyncio.run(_quorum(tmp_path))


def test_versions_are_the_highest_both_sides_speak() -> None:
    assert _pick_version(ApiKey.VOTE, (0, 2)) == 2
    assert _pick_version(ApiKey.VOTE, (0, 1)) == 1
    assert _pick_version(ApiKey.FETCH, (4, 99)) == 18
    assert _pick_version(ApiKey.FETCH, (30, 40)) is None
    assert _pick_version(ApiKey.FETCH, None) is None
    pre = {"topics": [{"partitions": [{"pre_vote": True}]}]}
    assert _is_pre_vote(pre) and not _is_pre_vote({"topics": [{"partitions": [{}]}]})
