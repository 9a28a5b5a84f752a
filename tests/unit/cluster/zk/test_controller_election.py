"""The controller election survives a dropped ZooKeeper connection (seen in CI: a broker's
create of /controller went through, its answer was lost with the connection, and the broker then
took the znode its own session owned for another broker's: no controller for as long as that
session lived, so a reassignment never completed)."""

from __future__ import annotations

import asyncio

from kazoo.exceptions import ConnectionLoss

from strom.cluster.zk import znodes as zn

from .test_inherited_leadership import ME, MemoryZk, _cluster, _parts


class LosesCreateAnswer(MemoryZk):
    """The first create of /controller is made, but its answer is lost with the connection."""

    lost = False

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> None:
        await super().create(path, data, ephemeral=ephemeral)
        if path == zn.CONTROLLER and not self.lost:
            self.lost = True
            raise ConnectionLoss()


class DropsBeforeEpoch(MemoryZk):
    """The connection drops right after /controller is created, before the epoch is read."""

    dropped = False

    async def get(self, path: str, *, watch: bool = False):
        if path == zn.CONTROLLER_EPOCH and not self.dropped:
            self.dropped = True
            raise ConnectionLoss()
        return await super().get(path, watch=watch)


def _elect(zk: MemoryZk) -> tuple[bool, int | None]:
    """Two election attempts, as two turns of the controller loop (the first may fail)."""
    _, controller, _ = _parts(zk)

    async def run() -> None:
        for _ in range(2):
            try:
                await controller._try_to_become_controller()
            except ConnectionLoss:
                continue
            if controller.active:
                return

    asyncio.run(run())
    return controller.active, controller.epoch if controller.active else None


def _with(zk_class: type[MemoryZk]) -> MemoryZk:
    template = _cluster([ME], {})
    zk = zk_class()
    zk.nodes = template.nodes
    return zk


def test_a_create_whose_answer_was_lost_still_makes_this_broker_the_controller() -> None:
    zk = _with(LosesCreateAnswer)
    assert _elect(zk) == (True, 1)
    assert zk.nodes[zn.CONTROLLER][1].ephemeralOwner == zk.session_id


def test_an_attempt_cut_before_the_epoch_is_finished_on_the_next_turn() -> None:
    zk = _with(DropsBeforeEpoch)
    assert _elect(zk) == (True, 1)


def test_a_controller_znode_of_another_session_is_left_alone() -> None:
    zk = _with(MemoryZk)
    zk.put(zn.CONTROLLER, zn.encode_controller(2, 0), owner=0xB2)
    assert _elect(zk) == (False, None)
    assert zk.nodes[zn.CONTROLLER][1].ephemeralOwner == 0xB2
