"""LocalController's large commits: prepared in a worker thread, merged in one step; small
commits arriving meanwhile are ordered before them, so the log replays to the live image."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from strom.cluster import controller as controller_module
from strom.cluster.controller import LARGE_COMMIT, LocalController
from strom.cluster.image import BrokerInfo, MetadataImage
from strom.cluster.metadata_log import MetadataLog
from strom.cluster.records import Change
from strom.common.immediate import run_now
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.manager import LogManager

DEADLINE_S = 20.0
BIG = LARGE_COMMIT * 4


class Harness:
    def __init__(self, root: Path) -> None:
        self.logs = LogManager([root])
        self.logs.load()
        self.metadata_log = MetadataLog(self.logs)
        self.image = self.metadata_log.load("c")
        self.controller = LocalController(self.metadata_log, self.image,
                                          BrokerInfo(0, "localhost", 9092, None))
        self.changes: list[Change] = []
        self.controller.subscribe(self.changes.extend)

    def replayed(self) -> MetadataImage:
        """The image a restart would build from the metadata log."""
        return MetadataLog(self.logs).load("c")

    def assert_log_matches_image(self) -> None:
        assert self.replayed().to_snapshot() == self.image.to_snapshot()


class Gate:
    """Holds the large commit's worker-thread step until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        prepare = controller_module._prepare

        def gated(*args: Any) -> Any:
            self.entered.set()
            assert self.release.wait(DEADLINE_S)
            return prepare(*args)

        monkeypatch.setattr(controller_module, "_prepare", gated)

    async def wait_entered(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not self.entered.is_set():
            assert time.monotonic() < deadline, "the large commit never reached its thread"
            await asyncio.sleep(0.001)


def run(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(factory(), DEADLINE_S))


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_a_large_topic_reaches_image_log_and_listeners_whole(h: Harness) -> None:
    async def scenario() -> None:
        topic = await h.controller.create_topic("big", BIG, 1, None, {"retention.ms": "5"})
        assert topic is h.image.topics["big"] and len(topic.partitions) == BIG
        assert topic.configs == {"retention.ms": "5"}
        created = [c for c in h.changes if c.kind == "partitions_created"]
        assert [c.topic for c in created] == [topic]  # one change for all, naming the image's
        assert created[0].partitions == tuple(range(BIG))
        h.assert_log_matches_image()

    run(scenario)


def test_a_large_commit_leaves_the_loop_free(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch)

    async def scenario() -> None:
        task = asyncio.create_task(h.controller.create_topic("big", BIG, 1, None, {}))
        await gate.wait_entered()  # the loop runs this coroutine while the commit is prepared
        assert "big" not in h.image.topics
        gate.release.set()
        await task
        assert len(h.image.topics["big"].partitions) == BIG

    run(scenario)


def test_small_commits_during_a_large_one_are_ordered_before_it(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch)

    async def scenario() -> None:
        task = asyncio.create_task(h.controller.create_topic("big", BIG, 1, None, {}))
        await gate.wait_entered()
        # synchronous callers (auto-creation, producer ids) cannot wait: they go first
        small = run_now(h.controller.create_topic("small", 2, 1, None, {}))
        first, _count = run_now(h.controller.allocate_producer_ids(0))
        run_now(h.controller.alter_configs("broker", "", {"log.retention.ms": "7"}))
        assert small is h.image.topics["small"] and "big" not in h.image.topics
        gate.release.set()
        await task
        kinds = [(c.kind, c.topic.name if c.topic else None) for c in h.changes]
        assert kinds.index(("topic_created", "small")) < kinds.index(("topic_created", "big"))
        assert h.image.next_producer_id == first + controller_module.PRODUCER_ID_BLOCK
        h.assert_log_matches_image()

    run(scenario)


def test_a_large_topic_loses_to_a_small_one_of_the_same_name_created_meanwhile(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch)

    async def scenario() -> None:
        task = asyncio.create_task(h.controller.create_topic("x", BIG, 1, None, {}))
        await gate.wait_entered()
        run_now(h.controller.create_topic("x", 1, 1, None, {}))
        gate.release.set()
        with pytest.raises(KafkaError) as info:
            await task
        assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert len(h.image.topics["x"].partitions) == 1
        h.assert_log_matches_image()  # the refused topic never reached the log

    run(scenario)


def test_large_create_partitions_keeps_changes_made_meanwhile(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        topic = await h.controller.create_topic("t", 1, 1, None, {})
        gate = Gate(monkeypatch)
        task = asyncio.create_task(h.controller.create_partitions(topic, BIG + 1, None))
        await gate.wait_entered()
        p0 = topic.partitions[0]
        await h.controller.alter_isr("t", 0, p0.leader_epoch, p0.partition_epoch, [0])
        gate.release.set()
        await task
        assert len(topic.partitions) == BIG + 1 and topic is h.image.topics["t"]
        assert topic.partitions[0].partition_epoch == p0.partition_epoch + 1  # not reverted
        created = [c for c in h.changes if c.kind == "partitions_created" and c.topic is topic]
        assert created[-1].partitions == tuple(range(1, BIG + 1))
        h.assert_log_matches_image()

    run(scenario)


def test_large_create_partitions_is_refused_when_the_count_changed_meanwhile(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        topic = await h.controller.create_topic("t", 1, 1, None, {})
        gate = Gate(monkeypatch)
        task = asyncio.create_task(h.controller.create_partitions(topic, BIG + 1, None))
        await gate.wait_entered()
        run_now(h.controller.create_partitions(topic, 2, None))
        gate.release.set()
        with pytest.raises(KafkaError) as info:
            await task
        assert info.value.code == ErrorCode.INVALID_PARTITIONS
        assert len(topic.partitions) == 2
        h.assert_log_matches_image()

    run(scenario)


def test_large_commits_run_one_at_a_time(h: Harness) -> None:
    async def scenario() -> None:
        await asyncio.gather(*(h.controller.create_topic(f"t{i}", BIG, 1, None, {})
                               for i in range(3)))
        assert [len(h.image.topics[f"t{i}"].partitions) for i in range(3)] == [BIG] * 3
        h.assert_log_matches_image()

    run(scenario)


def test_run_now_commits_a_large_topic_on_the_spot(h: Harness) -> None:
    async def scenario() -> None:  # e.g. auto-creation with a large num.partitions
        topic = run_now(h.controller.create_topic("big", BIG, 1, None, {}))
        assert topic is h.image.topics["big"] and len(topic.partitions) == BIG
        h.assert_log_matches_image()

    run(scenario)
    topic = run_now(h.controller.create_topic("other", BIG, 1, None, {}))  # and without a loop
    assert len(topic.partitions) == BIG


def test_small_commits_are_fsynced_off_the_loop_and_answered_after(tmp_path, monkeypatch):
    """A topic creation, a config change, an ACL: the record is in the image at once, the fsync
    runs in a worker thread, and the caller's answer waits for it (issue 28)."""
    import os

    from strom.storage import files

    monkeypatch.setattr(files, "FSYNC_ENABLED", True)  # the storage tests' session turns it off
    h = Harness(tmp_path)
    loop_thread: list[threading.Thread] = []
    fsyncs: list[str] = []
    real = os.fsync

    def watched(fd: int) -> None:
        fsyncs.append("loop" if threading.current_thread() in loop_thread else "worker")
        real(fd)

    monkeypatch.setattr(os, "fsync", watched)

    async def main() -> None:
        loop_thread.append(threading.current_thread())
        await h.controller.create_topic("t", 3, 1, None, {})
        assert "t" in h.image.topics
        recovery_point = h.metadata_log._log.recovery_point
        assert recovery_point == h.metadata_log._log.log_end_offset  # durable when answered
        await h.controller.alter_configs("topic", "t", {"retention.ms": "1000"})
        assert h.metadata_log._log.recovery_point == h.metadata_log._log.log_end_offset

    asyncio.run(main())
    assert "loop" not in fsyncs and "worker" in fsyncs
    h.assert_log_matches_image()


def test_a_synchronous_caller_is_not_held_and_its_commit_still_lands(tmp_path):
    h = Harness(tmp_path)

    async def main() -> None:
        run_now(h.controller.create_topic("auto", 1, 1, None, {}))  # a Metadata auto-create
        assert "auto" in h.image.topics
        deadline = time.monotonic() + DEADLINE_S
        log_ = h.metadata_log._log
        while log_.recovery_point < log_.log_end_offset:
            assert time.monotonic() < deadline, "the background fsync never landed"
            await asyncio.sleep(0.01)

    asyncio.run(main())
    h.assert_log_matches_image()
