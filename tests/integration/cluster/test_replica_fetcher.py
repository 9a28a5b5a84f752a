"""The replica fetcher against a real broker: it copies a partition record for record, keeps
offsets, leader epochs and producer state, follows the high watermark, and truncates a diverged
tail. The broker here is a single node (no ZooKeeper needed): to it the fetcher is a client."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strom.cluster.replication.fetcher import FetcherSettings, FollowedPartition, ReplicaFetcher
from strom.record import Record, build_batch
from strom.storage.checkpoints import read_partition_metadata
from strom.storage.log import PartitionLog

from ..clients import Msg, create_topic, produce
from .faults import replica_records

pytestmark = pytest.mark.timeout(120)


def _leader_dir(broker, topic: str, partition: int = 0):
    return broker.data_dir / f"{topic}-{partition}"


def _topic_id(broker, topic: str) -> uuid.UUID:
    tid = read_partition_metadata(_leader_dir(broker, topic) / "partition.metadata")
    assert tid is not None
    return tid


async def _copy_until(fetcher: ReplicaFetcher, follower: PartitionLog, end: int,
                      timeout: float = 30.0) -> None:
    fetcher.start()
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while follower.log_end_offset < end or follower.high_watermark < end:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"follower stuck at {follower.log_end_offset}/{end}")
            await asyncio.sleep(0.02)
    finally:
        await fetcher.stop()


def _fetcher(broker, follower: PartitionLog, topic: str, tid: uuid.UUID) -> ReplicaFetcher:
    settings = FetcherSettings(broker_id=2, max_wait_ms=100, backoff_ms=50)
    host, port = broker.bootstrap.split(":")
    fetcher = ReplicaFetcher(1, host, int(port), settings,
                             lambda t, p: follower if (t, p) == (topic, 0) else None,
                             lambda t, p: None)
    fetcher.add(FollowedPartition(topic, tid, 0, leader_epoch=-1))
    return fetcher


def test_follower_copies_the_leader_record_for_record(strom_broker, unique_topic, tmp_path):
    topic = unique_topic("copy")
    create_topic(strom_broker.bootstrap, topic, 1)
    msgs = [Msg(f"k{i}".encode(), f"v{i}".encode() * (1 + i % 7)) for i in range(500)]
    produce(strom_broker.bootstrap, topic, msgs, partition=0, enable_idempotence=True)
    tid = _topic_id(strom_broker, topic)
    follower = PartitionLog(tmp_path / f"{topic}-0", topic, 0, tid, hw_follows_leo=False)
    try:
        asyncio.run(_copy_until(_fetcher(strom_broker, follower, topic, tid), follower, 500))
        assert follower.high_watermark == 500
        # idempotent producer state was rebuilt from the replicated batch headers
        assert len(follower.producer_state.producers) == 1
        follower.flush()
        assert replica_records(follower.dir) == replica_records(_leader_dir(strom_broker, topic))
    finally:
        follower.close()


def test_follower_truncates_a_diverged_tail(strom_broker, unique_topic, tmp_path):
    """The follower holds records past the leader's end of their shared epoch (written by a
    leader that lost them): the leader's diverging-epoch answer makes the follower cut them,
    then it copies the leader's records instead."""
    topic = unique_topic("diverge")
    create_topic(strom_broker.bootstrap, topic, 1)
    produce(strom_broker.bootstrap, topic, [Msg(None, f"a{i}".encode()) for i in range(10)],
            partition=0)
    tid = _topic_id(strom_broker, topic)
    follower = PartitionLog(tmp_path / f"{topic}-0", topic, 0, tid, hw_follows_leo=False)
    try:
        asyncio.run(_copy_until(_fetcher(strom_broker, follower, topic, tid), follower, 10))
        stale = build_batch([Record(10 + i, 0, None, b"stale") for i in range(5)],
                            base_offset=10, partition_leader_epoch=0)
        follower.append(memoryview(bytearray(stale)), leader_epoch=0, now_ms=0,
                        origin="replication")
        assert follower.log_end_offset == 15

        async def until_truncated() -> None:
            fetcher = _fetcher(strom_broker, follower, topic, tid)
            fetcher.start()
            try:
                deadline = asyncio.get_running_loop().time() + 30
                while follower.log_end_offset != 10:
                    assert asyncio.get_running_loop().time() < deadline, "no truncation"
                    await asyncio.sleep(0.02)
            finally:
                await fetcher.stop()

        asyncio.run(until_truncated())
        produce(strom_broker.bootstrap, topic, [Msg(None, f"b{i}".encode()) for i in range(20)],
                partition=0)
        asyncio.run(_copy_until(_fetcher(strom_broker, follower, topic, tid), follower, 30))
        follower.flush()
        assert replica_records(follower.dir) == replica_records(_leader_dir(strom_broker, topic))
        assert b"stale" not in {v for _, _, v in replica_records(follower.dir)}
    finally:
        follower.close()
