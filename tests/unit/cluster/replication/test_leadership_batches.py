"""A broker taking over many partitions at once (a failover, a preferred-leader election) does
no disk work on its event loop for them (issue 28): each new leader epoch is in memory at once
and reaches leader-epoch-checkpoint from a worker thread; the role changes are logged as one
line."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

from strom.cluster.image import MetadataImage, PartitionState, TopicState
from strom.cluster.records import Change
from strom.cluster.replication.fetcher import FetcherSettings
from strom.cluster.replication.manager import LOG_EACH_UP_TO, ReplicaManager
from strom.common.waiters import WaiterRegistry
from strom.storage import epochs as epochs_module
from strom.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint
from strom.storage.log import PartitionLog

N = 3 * LOG_EACH_UP_TO


def test_becoming_leader_of_many_partitions_writes_their_epochs_off_the_loop(
        tmp_path, monkeypatch, caplog) -> None:
    tid = uuid.uuid4()
    logs = {p: PartitionLog(tmp_path / f"t-{p}", "t", p, tid, hw_follows_leo=False)
            for p in range(N)}
    for plog in logs.values():
        plog.epochs.assign(1, 0)  # no loop: written at once (as followers of broker 2)
    topic = TopicState("t", tid, {p: PartitionState(p, [2, 1], [2, 1], 2, 1, 1)
                                  for p in range(N)})
    image = MetadataImage(cluster_id="c")
    image.topics["t"], image.topics_by_id[tid] = topic, topic
    writers: list[int] = []
    real = epochs_module.write_leader_epoch_checkpoint

    def spy(*args, **kwargs):
        writers.append(threading.get_ident())
        real(*args, **kwargs)

    monkeypatch.setattr(epochs_module, "write_leader_epoch_checkpoint", spy)

    async def run() -> None:
        manager = ReplicaManager(1, image, None, lambda t, p: logs.get(p), WaiterRegistry(),
                                 FetcherSettings(broker_id=1), lag_max_ms=30_000,
                                 min_isr_for=lambda t: 1)
        manager._started = True
        for p in range(N):  # broker 2 is gone: broker 1 leads every partition at epoch 2
            topic.partitions[p] = PartitionState(p, [2, 1], [1], 1, 2, 2)
        with caplog.at_level(logging.INFO, logger="strom.cluster.replication.manager"):
            manager.on_changes([Change("partition_changed", topic, tuple(range(N)))])
        assert len(manager.leaders) == N
        assert all(plog.latest_epoch == 2 for plog in logs.values())  # in memory at once
        assert writers == []  # and no file written on the loop
        await asyncio.gather(*({plog.epochs.persisted() for plog in logs.values()} - {None}))
        await manager.shutdown()

    loop_thread = threading.get_ident()
    asyncio.run(run())
    assert len(writers) == N and loop_thread not in writers
    for plog in logs.values():
        # (epoch 2 starts where epoch 1 did: at offset 0, as nothing was written in 1)
        assert read_leader_epoch_checkpoint(plog.dir / LEADER_EPOCH_CHECKPOINT) == [(2, 0)]
        plog.close()
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == [f"now leading {N} and following 0 more partitions (one metadata change; "
                     "each at DEBUG)"]
