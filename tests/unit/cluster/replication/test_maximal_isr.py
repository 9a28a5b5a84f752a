"""A leader counts the replicas it asked to add to the ISR in its high watermark from the
moment it asks, until its image shows the change (Kafka's "maximal ISR", KIP-497).

Seen in CI (issue 28): during a reassignment the leader's ISR expansion committed in ZooKeeper
while its image still showed the old ISR; the leader counted offset 243 committed without the
added replica, the controller then elected that replica, and an acknowledged record was gone
(the producer met OUT_OF_ORDER_SEQUENCE_NUMBER on the new leader)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strom.cluster.image import MetadataImage, PartitionState, TopicState
from strom.cluster.replication.fetcher import FetcherSettings
from strom.cluster.replication.manager import ReplicaManager
from strom.common.waiters import WaiterRegistry
from strom.protocol.errors import ErrorCode, KafkaError
from strom.record import records as R
from strom.storage.log import PartitionLog

KEY = ("t", 0)


class SlowController:
    """Commits an ISR change (or refuses it) without updating the image: the image learns it
    later, as a broker's mirror of ZooKeeper or the metadata log does."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.asked: list[list[int]] = []

    async def alter_isr(self, topic: str, partition: int, leader_epoch: int,
                        partition_epoch: int, isr: list[int]) -> PartitionState:
        self.asked.append(list(isr))
        if self.refuse:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, "changed meanwhile")
        return PartitionState(partition, [1, 2, 3], list(isr), 1, 1, partition_epoch + 1)


def _setup(tmp_path):
    tid = uuid.uuid4()
    plog = PartitionLog(tmp_path / "t-0", "t", 0, tid, hw_follows_leo=False)
    topic = TopicState("t", tid, {0: PartitionState(0, [1, 2, 3], [1, 2], 1, 1, 5)})
    image = MetadataImage(cluster_id="c")
    image.topics["t"], image.topics_by_id[tid] = topic, topic
    image.brokers.update({1: None, 2: None, 3: None})  # type: ignore[dict-item]
    return plog, topic, image


def _append(plog: PartitionLog, n: int) -> None:
    for i in range(n):
        batch = R.build_batch([R.Record(0, 1_000, None, b"v%d" % i)])
        plog.append(bytearray(batch), leader_epoch=1, now_ms=0)


@pytest.mark.parametrize("refused", [False, True])
def test_a_replica_being_added_holds_the_high_watermark_until_the_image_knows(
        tmp_path, refused) -> None:
    plog, topic, image = _setup(tmp_path)
    controller = SlowController(refuse=refused)

    async def run() -> None:
        manager = ReplicaManager(1, image, controller, lambda t, p: plog, WaiterRegistry(),
                                 FetcherSettings(broker_id=1), lag_max_ms=30_000,
                                 min_isr_for=lambda t: 1)
        manager._started = True
        manager.sync_all()
        assert manager.is_leader(KEY)
        _append(plog, 10)
        manager.on_replica_fetch(KEY, 2, 4, plog)
        assert plog.high_watermark == 4
        # broker 3 has caught up to the high watermark: the leader asks to add it
        manager.on_replica_fetch(KEY, 3, 4, plog)
        for _ in range(3):  # let the request run (the stub answers at once)
            await asyncio.sleep(0)
        assert controller.asked == [[1, 2, 3]]
        # broker 2 reaches the log end; broker 3 stays at 4
        manager.on_replica_fetch(KEY, 2, 10, plog)
        try:
            if refused:  # nothing was written: broker 3 is in no ISR, so it does not count
                assert plog.high_watermark == 10
                return
            assert plog.high_watermark == 4  # 3 is in the controller's ISR: it counts
            # the image learns the change: from now on it alone decides
            topic.partitions[0] = PartitionState(0, [1, 2, 3], [1, 2, 3], 1, 1, 6)
            manager.on_replica_fetch(KEY, 3, 7, plog)
            assert plog.high_watermark == 7
            assert manager._isr_maximal == {}
        finally:
            await manager.shutdown()

    asyncio.run(run())
    plog.close()
