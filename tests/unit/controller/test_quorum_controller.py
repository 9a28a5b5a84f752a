"""QuorumController: a change is appended to the Raft log and answered once the quorum has
committed it and the loader has put it in the image; never before, and one at a time.

A fake quorum stands in for the Raft client: `append` gives the values offsets and, unless
held, commits them at once by handing them to the loader as a batch (as the Raft client calls
`handle_commit` once a majority has them)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from strom.cluster.image import BrokerInfo, MetadataImage
from strom.cluster.records import Change
from strom.controller.loader import MetadataLoader
from strom.controller.quorum_controller import QuorumController
from strom.protocol.errors import ErrorCode, KafkaError
from strom.raft.types import DataRecord, NotLeaderError, RaftBatch

DEADLINE_S = 10.0
BROKER = BrokerInfo(0, "localhost", 9092)


def run(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(factory(), DEADLINE_S))


class FakeQuorum:
    """The leader's log: appends get offsets; commits reach the loader in offset order."""

    def __init__(self, loader: MetadataLoader) -> None:
        self.loader = loader
        self.end = 0
        self.appended: list[dict[str, Any]] = []  # every record appended, in order
        self.hold = False  # keep appended batches uncommitted until `release`
        self.held: list[RaftBatch] = []
        self.delay_s = 0.0  # the commit's wait for the fsync
        self.fail: Exception | None = None

    async def append(self, values: list[bytes]) -> int:
        if self.fail is not None:
            raise self.fail
        batch = RaftBatch(self.end, 1, tuple(DataRecord(v) for v in values))
        self.end = batch.end_offset
        self.appended += [json.loads(v) for v in values]
        if self.hold:
            self.held.append(batch)
        elif self.delay_s:
            asyncio.get_running_loop().call_later(self.delay_s, self.loader.handle_commit, [batch])
        else:
            self.loader.handle_commit([batch])
        return batch.last_offset

    def release(self) -> None:
        batches, self.held = self.held, []
        self.loader.handle_commit(batches)

    async def wait_held(self) -> None:
        while not self.held:
            await asyncio.sleep(0.001)


class Harness:
    def __init__(self, commit_timeout_s: float = DEADLINE_S) -> None:
        self.image = MetadataImage(cluster_id="c-quorum")
        self.loader = MetadataLoader(self.image, asyncio.get_running_loop())
        self.quorum = FakeQuorum(self.loader)
        self.controller = QuorumController(self.loader, self.quorum.append, BROKER,
                                           commit_timeout_s=commit_timeout_s)
        self.changes: list[Change] = []
        self.controller.subscribe(self.changes.extend)

    async def held_until_commit(self, operation: Coroutine[Any, Any, Any],
                                before: Callable[[], None]) -> Any:
        """Run `operation` with its records held uncommitted: `before()` checks the image
        meanwhile; the result once they are committed."""
        self.quorum.hold = True
        task = asyncio.ensure_future(operation)
        await self.quorum.wait_held()
        await asyncio.sleep(0.01)  # time enough to answer early, were it to
        assert not task.done()
        before()
        self.quorum.hold = False
        self.quorum.release()
        return await task


def test_the_controller_is_this_broker() -> None:
    async def scenario() -> None:
        h = Harness()
        assert h.image.brokers == {0: BROKER} and h.image.controller_id == 0
        assert h.controller.image is h.loader.image

    run(scenario)


def test_changes_show_in_the_image_only_once_committed() -> None:
    async def scenario() -> None:
        h = Harness()

        def not_yet_created() -> None:
            assert "orders" not in h.image.topics and h.changes == []

        topic = await h.held_until_commit(
            h.controller.create_topic("orders", 3, 1, None, {"retention.ms": "1000"}),
            not_yet_created)
        assert h.image.topics["orders"] is topic
        assert sorted(topic.partitions) == [0, 1, 2] and topic.configs == {"retention.ms": "1000"}
        assert all(p.replicas == [0] and p.leader == 0 for p in topic.partitions.values())
        assert [c.kind for c in h.changes] == \
            ["topic_created", "topic_configs"] + ["partitions_created"] * 3
        assert h.loader.applied_offset == h.quorum.end

        def old_config() -> None:
            assert h.image.topics["orders"].configs == {"retention.ms": "1000"}

        await h.held_until_commit(
            h.controller.alter_configs("topic", "orders", {"retention.ms": "5", "x.y": None}),
            old_config)
        assert h.image.topics["orders"].configs == {"retention.ms": "5"}

        def still_there() -> None:
            assert "orders" in h.image.topics

        await h.held_until_commit(h.controller.delete_topic(topic), still_there)
        assert "orders" not in h.image.topics and topic.topic_id not in h.image.topics_by_id
        assert h.changes[-1].kind == "topic_deleted"

        def no_ids_yet() -> None:
            assert h.image.next_producer_id == 0

        first = await h.held_until_commit(h.controller.allocate_producer_ids(0), no_ids_yet)
        assert first == (0, 1000) and h.image.next_producer_id == 1000
        assert await h.controller.allocate_producer_ids(0) == (1000, 1000)
        assert h.image.next_producer_id == 2000

    run(scenario)


def test_broker_configs_and_a_deleted_topic_deleted_again() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.controller.alter_configs("broker", "", {"log.retention.ms": "1000"})
        assert h.image.broker_configs == {"": {"log.retention.ms": "1000"}}
        topic = await h.controller.create_topic("t", 1, 1, None, {})
        await h.controller.delete_topic(topic)
        appended = len(h.quorum.appended)
        await h.controller.delete_topic(topic)  # gone already: nothing more to commit
        assert len(h.quorum.appended) == appended

    run(scenario)


def test_validate_only_commits_nothing() -> None:
    async def scenario() -> None:
        h = Harness()
        topic = await h.controller.create_topic("t", 2, 1, None, {}, validate_only=True)
        assert sorted(topic.partitions) == [0, 1]
        assert h.quorum.appended == [] and "t" not in h.image.topics

    run(scenario)


def test_a_node_that_does_not_lead_answers_not_controller() -> None:
    async def scenario() -> None:
        h = Harness()
        h.quorum.fail = NotLeaderError("node 0 is not the leader of epoch 2")
        with pytest.raises(KafkaError) as caught:
            await h.controller.create_topic("t", 1, 1, None, {})
        assert caught.value.code == ErrorCode.NOT_CONTROLLER
        assert "not the leader" in str(caught.value.message)
        assert "t" not in h.image.topics
        with pytest.raises(KafkaError) as caught:
            await h.controller.allocate_producer_ids(0)
        assert caught.value.code == ErrorCode.NOT_CONTROLLER and h.image.next_producer_id == 0
        # a failed operation does not block the next
        h.quorum.fail = None
        await h.controller.create_topic("t", 1, 1, None, {})
        assert "t" in h.image.topics

    run(scenario)


def test_records_that_never_commit_time_out() -> None:
    async def scenario() -> None:
        h = Harness(commit_timeout_s=0.05)
        h.quorum.hold = True
        with pytest.raises(KafkaError) as caught:
            await h.controller.alter_configs("broker", "", {"a.b": "c"})
        assert caught.value.code == ErrorCode.REQUEST_TIMED_OUT
        assert "did not commit" in str(caught.value.message)
        assert h.image.broker_configs == {}
        # committed later after all: the image follows the log, not the answer
        h.quorum.hold = False
        h.quorum.release()
        assert await h.controller.wait_until(lambda i: i.broker_configs != {}, DEADLINE_S)
        assert h.image.broker_configs == {"": {"a.b": "c"}}

    run(scenario)


def test_concurrent_creates_of_one_name_give_one_topic() -> None:
    async def scenario() -> None:
        h = Harness()
        h.quorum.delay_s = 0.02  # both would pass the check if they were not serialized
        results = await asyncio.gather(
            h.controller.create_topic("same", 2, 1, None, {}),
            h.controller.create_topic("same", 3, 1, None, {}),
            return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        created = [r for r in results if not isinstance(r, BaseException)]
        assert len(created) == 1 and len(errors) == 1, results
        assert isinstance(errors[0], KafkaError)
        assert errors[0].code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert h.image.topics["same"] is created[0]
        assert [r["name"] for r in h.quorum.appended if r["type"] == "topic"] == ["same"]
        assert len(h.image.topics_by_id) == 1

    run(scenario)


def test_operations_run_one_at_a_time_in_order() -> None:
    async def scenario() -> None:
        h = Harness()
        h.quorum.delay_s = 0.01
        await asyncio.gather(*(h.controller.create_topic(f"t{i}", 1, 1, None, {})
                               for i in range(5)),
                             h.controller.allocate_producer_ids(0),
                             h.controller.allocate_producer_ids(0))
        assert list(h.image.topics) == [f"t{i}" for i in range(5)]
        assert h.image.next_producer_id == 2000
        assert h.loader.applied_offset == h.quorum.end

    run(scenario)
