"""The follower's answer to a leader that says its log diverged: it must converge on the leader's
log whatever leader epochs it holds, and never loop on the same answer without progress.

The leader here is a plain PartitionLog answered the way the Fetch handler answers a follower
(Fetch v12+: `last_fetched_epoch` → `diverging_epoch`, else the records from the fetch offset),
so each test can build the exact epoch histories that brokers reach after failovers."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from strom.cluster.replication.fetcher import FetcherSettings, FollowedPartition, ReplicaFetcher
from strom.record import Record, build_batch
from strom.storage.log import PartitionLog
from strom.storage.validator import ORIGIN_REPLICATION

TOPIC = "t"
TID = uuid.UUID(int=7)
MAX_ROUNDS = 10  # a follower that needs more fetches than this to converge is looping


def _log(path: Path) -> PartitionLog:
    return PartitionLog(path, TOPIC, 0, TID, hw_follows_leo=False)


def _write(plog: PartitionLog, epoch: int, count: int) -> None:
    """``count`` records as the leader of ``epoch`` writes them (one batch of 10 at a time)."""
    while count > 0:
        n = min(10, count)
        recs = [Record(i, 1_000 + i, b"k", b"v") for i in range(n)]
        plog.append(build_batch(recs), leader_epoch=epoch, now_ms=1_000)
        count -= n


def _copy(leader: PartitionLog, follower: PartitionLog) -> None:
    """The follower replicates everything the leader has (a fetch loop that went well)."""
    data = leader.read(follower.log_end_offset, 1 << 24, max_offset=leader.log_end_offset)
    if data.slice is not None:
        follower.append(data.slice.read_bytes(), leader_epoch=-1, now_ms=1_000,
                        origin=ORIGIN_REPLICATION)


def _answer(leader: PartitionLog, fetch: dict[str, Any]) -> SimpleNamespace:
    """The leader's partition response to one follower fetch (as handlers/fetch.py)."""
    r = SimpleNamespace(error_code=0, diverging_epoch=None, records=None,
                        high_watermark=leader.log_end_offset,
                        log_start_offset=leader.log_start_offset)
    last = fetch["last_fetched_epoch"]
    if last >= 0:
        epoch, end = leader.end_offset_for_epoch(last)
        if epoch != last or end < fetch["fetch_offset"]:
            r.diverging_epoch = SimpleNamespace(epoch=epoch, end_offset=end)
            return r
    if fetch["fetch_offset"] < leader.log_end_offset:
        got = leader.read(fetch["fetch_offset"], 1 << 24, max_offset=leader.log_end_offset)
        r.records = got.slice.read_bytes() if got.slice is not None else None
    return r


async def _until_fetchable(fetcher: ReplicaFetcher, p: FollowedPartition) -> None:
    """A truncation holds the partition until its leader-epoch checkpoint is written (in a
    worker thread): wait for that, as the fetch loop does."""
    deadline = asyncio.get_running_loop().time() + 10
    while (p.topic, p.partition) in fetcher._persisting:
        assert asyncio.get_running_loop().time() < deadline, "the checkpoint never landed"
        await asyncio.sleep(0.005)


def _follow(leader: PartitionLog, follower: PartitionLog, leader_epoch: int) -> int:
    """Run the follower's fetches against ``leader`` until it has the leader's log; returns
    how many fetches that took (fails after MAX_ROUNDS)."""
    fetcher = ReplicaFetcher(1, "127.0.0.1", 1, FetcherSettings(broker_id=2),
                             lambda t, p: follower, lambda t, p: None)
    followed = FollowedPartition(TOPIC, TID, 0, leader_epoch)
    fetcher.add(followed)

    async def run() -> int:
        for rounds in range(1, MAX_ROUNDS + 1):
            request = fetcher._request([followed])
            fetch = request["topics"][0]["partitions"][0]
            await fetcher._handle(followed, _answer(leader, fetch))
            await _until_fetchable(fetcher, followed)
            if follower.log_end_offset == leader.log_end_offset \
                    and follower.epochs.entries() == leader.epochs.entries():
                return rounds
        raise AssertionError(
            f"the follower is stuck at {follower.log_end_offset} (leader at "
            f"{leader.log_end_offset}); epochs {follower.epochs.entries()} against the "
            f"leader's {leader.epochs.entries()}")

    try:
        return asyncio.run(run())
    finally:
        fetcher._client.close()


def test_a_follower_that_led_an_epoch_without_writing_in_it_catches_up(tmp_path) -> None:
    """Issue 28: broker 2 led epoch 5 for a moment and wrote nothing in it, so its epoch cache
    ends with (5, 178) at its log end; the new leader (epoch 6) never saw epoch 5. The leader
    answers "diverging at epoch 3, ending at 178": nothing to cut from the log, but the
    follower must drop its (5, 178) entry, or it asks with epoch 5 for ever, gets the same
    answer, never appends and never rejoins the ISR (seen as a follower at 178 against a
    leader at 12,152)."""
    leader, follower = _log(tmp_path / "leader"), _log(tmp_path / "follower")
    leader.epochs.assign(3, 0)
    _write(leader, 3, 178)
    _copy(leader, follower)
    follower.epochs.assign(5, follower.log_end_offset)  # led epoch 5, wrote nothing
    leader.epochs.assign(6, leader.log_end_offset)  # the next leader, after it
    _write(leader, 6, 500)
    assert _follow(leader, follower, leader_epoch=6) <= 3
    assert follower.epochs.entries() == [(3, 0), (6, 178)]
    follower.close()
    assert PartitionLog(tmp_path / "follower", TOPIC, 0, TID).epochs.entries() == [(3, 0),
                                                                                   (6, 178)]


def test_a_follower_with_an_epoch_unknown_to_the_leader_and_a_tail_truncates(tmp_path) -> None:
    """As above, but the follower wrote in its epoch (an unreplicated tail): the tail goes."""
    leader, follower = _log(tmp_path / "leader"), _log(tmp_path / "follower")
    _write(leader, 3, 100)
    _copy(leader, follower)
    _write(follower, 5, 30)  # led epoch 5, its writes never replicated
    leader.epochs.assign(6, leader.log_end_offset)
    _write(leader, 6, 50)
    _follow(leader, follower, leader_epoch=6)
    assert follower.log_end_offset == 150


class _Boom(BaseException):
    """Not an Exception: escapes the fetch loop's error handling and ends its task."""


def test_a_fetcher_whose_task_dies_is_restarted() -> None:
    """A fetcher task that ends while its partitions are still wanted would leave them unfetched
    for good (a follower stuck behind its leader): it is restarted after the backoff."""
    fetcher = ReplicaFetcher(1, "127.0.0.1", 1, FetcherSettings(broker_id=2, backoff_ms=10),
                             lambda t, p: None, lambda t, p: None)
    fetcher.add(FollowedPartition(TOPIC, TID, 0, 1))
    calls: list[int] = []

    async def fetch_once(ready) -> None:
        calls.append(len(ready))
        if len(calls) == 1:
            raise _Boom()
        await asyncio.sleep(0.01)

    fetcher._fetch_once = fetch_once  # type: ignore[method-assign]

    async def run() -> None:
        fetcher.start()
        deadline = asyncio.get_running_loop().time() + 10
        while len(calls) < 2:
            assert asyncio.get_running_loop().time() < deadline, "never restarted"
            await asyncio.sleep(0.01)
        await fetcher.stop()

    asyncio.run(run())
    assert calls[:2] == [1, 1]
