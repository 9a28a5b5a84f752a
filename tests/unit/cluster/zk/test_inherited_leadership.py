"""A broker restarted (kill -9) before ZooKeeper ended its old session still finds itself the
leader in the partition states: that leadership was its previous process's (issue 28). It must
not act on it: the image shows those partitions without a leader until a state written after
this process registered names one, and the broker asks for that election itself.

ZooKeeper here is an in-memory tree with zxids and versions (what the mirror and the
controller read and compare-and-set), so each step's outcome can be checked."""

from __future__ import annotations

import asyncio
import itertools
import uuid

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from strom.cluster.decisions import NO_LEADER, StateWrite, reelected_after_restart
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState
from strom.cluster.zk import znodes as zn
from strom.cluster.zk.controller import ZkController
from strom.cluster.zk.mirror import ZkMirror

TOPIC = "orders"
TID = uuid.UUID(int=42)
ME = 1


class MemoryZk:
    """The parts of ZkClient the mirror and the controller use, over a dict of znodes."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, ZnodeStat]] = {}
        self._zxid = itertools.count(100)
        self.session_id = 0xA
        self.connected = True

    def add_watch_listener(self, listener) -> None:
        pass

    def add_state_listener(self, listener) -> None:
        pass

    def put(self, path: str, data: bytes, *, owner: int = 0) -> ZnodeStat:
        zxid = next(self._zxid)
        old = self.nodes.get(path)
        czxid = old[1].czxid if old else zxid
        version = old[1].version + 1 if old else 0
        stat = ZnodeStat(czxid, zxid, 0, 0, version, 0, 0, owner, len(data), 0, zxid)
        self.nodes[path] = (data, stat)
        return stat

    async def get(self, path: str, *, watch: bool = False):
        return self.nodes.get(path)

    async def get_or_watch(self, path: str):
        return self.nodes.get(path)

    async def exists(self, path: str, *, watch: bool = False):
        got = self.nodes.get(path)
        return got[1] if got else None

    async def children(self, path: str, *, watch: bool = False):
        prefix = path + "/"
        names = {p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)}
        return sorted(names) if names or path in self.nodes else None

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> None:
        if path in self.nodes:
            raise NodeExistsError()
        self.put(path, data, owner=self.session_id if ephemeral else 0)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        got = self.nodes.get(path)
        if got is None:
            raise NoNodeError()
        if version != -1 and got[1].version != version:
            raise BadVersionError()
        return self.put(path, data, owner=got[1].ephemeralOwner)

    async def delete(self, path: str, version: int = -1) -> None:
        self.nodes.pop(path, None)

    def state(self, partition: int) -> zn.LeaderAndIsr:
        return zn.decode_state(self.nodes[zn.state_path(TOPIC, partition)][0])


def _cluster(live: list[int], states: dict[int, zn.LeaderAndIsr]) -> MemoryZk:
    """A topic whose partitions have replicas [1, 2, 3], these states, and these brokers
    registered (broker 1's node, if listed, is its previous process's)."""
    zk = MemoryZk()
    zk.put(zn.TOPICS, b"")
    assignment = zn.TopicAssignment(TID, {p: [1, 2, 3] for p in states})
    zk.put(zn.topic_path(TOPIC), zn.encode_topic(assignment))
    for p, s in states.items():
        zk.put(zn.state_path(TOPIC, p), zn.encode_state(s))
    for b in live:
        zk.put(zn.broker_path(b), zn.encode_broker(BrokerInfo(b, "127.0.0.1", 9000 + b), 0),
               owner=0xB0 + b)
    return zk


def _parts(zk: MemoryZk) -> tuple[ZkMirror, ZkController, MetadataImage]:
    image = MetadataImage(cluster_id="c")
    mirror = ZkMirror(zk, image, own_broker=ME)  # type: ignore[arg-type]
    controller = ZkController(zk, mirror, image, BrokerInfo(ME, "127.0.0.1", 9001),  # type: ignore[arg-type]
                              unclean_for=lambda t: False)
    return mirror, controller, image


def _leader(image: MetadataImage, partition: int) -> tuple[int, int]:
    s = image.topics[TOPIC].partitions[partition]
    return s.leader, s.leader_epoch


def test_a_restarted_leader_serves_nothing_until_another_replica_is_elected() -> None:
    zk = _cluster([1, 2, 3], {0: zn.LeaderAndIsr(ME, 4, (1, 2, 3), 1),
                              1: zn.LeaderAndIsr(2, 7, (2, 1, 3), 1)})
    mirror, controller, image = _parts(zk)

    async def run() -> None:
        await mirror._full_read()  # start-up: before this process registers
        assert _leader(image, 0) == (NO_LEADER, 4)  # ZooKeeper says 1: that was the old one
        assert _leader(image, 1) == (2, 7)
        assert set(mirror.inherited) == {(TOPIC, 0)}
        await controller.register()  # replaces the old process's registration
        assert mirror.registration_zxid is not None
        await controller._move_inherited()
        assert zk.state(0) == zn.LeaderAndIsr(2, 5, (2, 3), 0)  # a live ISR member, epoch up
        await controller._move_inherited()  # asked once per state version
        assert zk.nodes[zn.state_path(TOPIC, 0)][1].version == 1
        await mirror._process({("state", TOPIC, 0)})
        assert _leader(image, 0) == (2, 5) and mirror.inherited == {}

    asyncio.run(run())


def test_with_no_other_replica_in_sync_the_restarted_broker_leads_at_a_new_epoch() -> None:
    zk = _cluster([1], {0: zn.LeaderAndIsr(ME, 4, (1,), 1)})
    mirror, controller, image = _parts(zk)

    async def run() -> None:
        await mirror._full_read()
        assert _leader(image, 0) == (NO_LEADER, 4)
        await controller.register()
        await mirror._process({("brokers",)})
        await controller._move_inherited()
        assert zk.state(0) == zn.LeaderAndIsr(ME, 5, (1,), 0)
        await mirror._process({("state", TOPIC, 0)})
        assert _leader(image, 0) == (ME, 5)  # written after we registered: ours to lead
        assert mirror.inherited == {}

    asyncio.run(run())


def test_a_leadership_granted_after_registration_is_taken_at_once() -> None:
    zk = _cluster([2, 3], {0: zn.LeaderAndIsr(2, 4, (2, 3), 1)})
    mirror, controller, image = _parts(zk)

    async def run() -> None:
        await mirror._full_read()
        await controller.register()
        zk.put(zn.state_path(TOPIC, 0), zn.encode_state(zn.LeaderAndIsr(ME, 5, (1, 2, 3), 1)))
        await mirror._process({("state", TOPIC, 0)})
        assert _leader(image, 0) == (ME, 5) and mirror.inherited == {}

    asyncio.run(run())


def test_a_stale_read_neither_grants_nor_forgets_an_inherited_leadership() -> None:
    mirror = ZkMirror(MemoryZk(), MetadataImage(cluster_id="c"), own_broker=ME)  # type: ignore[arg-type]
    masked = mirror.own_view(TOPIC, PartitionState(0, [1, 2], [1, 2], ME, 4, 9))
    assert masked.leader == NO_LEADER and mirror.inherited == {(TOPIC, 0): 9}
    older = mirror.own_view(TOPIC, PartitionState(0, [1, 2], [2], 2, 3, 8))
    assert older.leader == 2 and mirror.inherited == {(TOPIC, 0): 9}  # (the image keeps 9)
    newer = mirror.own_view(TOPIC, PartitionState(0, [1, 2], [2], 2, 5, 10))
    assert newer.leader == 2 and mirror.inherited == {}


def test_a_broker_without_an_id_masks_nothing() -> None:
    mirror = ZkMirror(MemoryZk(), MetadataImage(cluster_id="c"))  # type: ignore[arg-type]
    state = PartitionState(0, [1, 2], [1, 2], 1, 4, 9)
    assert mirror.own_view(TOPIC, state) is state and mirror.inherited == {}


def test_reelection_after_a_restart() -> None:
    s = PartitionState(0, [3, 1, 2], [1, 3, 2], 1, 6, 20)
    assert reelected_after_restart(s, 1, {1, 2, 3}) == StateWrite(3, 7, (3, 2))
    assert reelected_after_restart(s, 1, {1, 2}) == StateWrite(2, 7, (3, 2))
    assert reelected_after_restart(s, 1, {1}) == StateWrite(1, 7, (1, 3, 2))
    alone = PartitionState(0, [1, 2], [1], 1, 6, 20)
    assert reelected_after_restart(alone, 1, {1, 2}) == StateWrite(1, 7, (1,))


def test_many_state_changes_reach_the_subscribers_in_slices() -> None:
    """A failover moving many partitions: subscribers reconcile STATES_PER_SLICE at a time and
    the loop runs other work between the slices (issue 28)."""
    from strom.cluster.zk.mirror import STATES_PER_SLICE

    n = 2 * STATES_PER_SLICE + 50
    zk = _cluster([1, 2, 3], {p: zn.LeaderAndIsr(2, 1, (2, 3), 1) for p in range(n)})
    mirror, _, image = _parts(zk)
    sizes: list[int] = []
    seen_between: set[int] = set()

    async def ticker() -> None:
        while True:
            seen_between.add(len(sizes))
            await asyncio.sleep(0)

    async def run() -> None:
        await mirror._full_read()
        for p in range(n):
            zk.put(zn.state_path(TOPIC, p), zn.encode_state(zn.LeaderAndIsr(3, 2, (3,), 1)))
        mirror.subscribe(lambda changes: sizes.append(sum(len(c.partitions) for c in changes)))
        tick = asyncio.ensure_future(ticker())
        await mirror._process({("state", TOPIC, p) for p in range(n)})
        tick.cancel()

    asyncio.run(run())
    assert sizes == [STATES_PER_SLICE, STATES_PER_SLICE, 50]
    assert {1, 2} <= seen_between  # the loop ran between the slices
    assert all(s.leader == 3 for s in image.topics[TOPIC].partitions.values())
