"""AlterPartitionBatcher: ISR changes made together go to the controller in one AlterPartition
request, one change per partition in each; the controller's answer is handed back per
partition (its error as KafkaError), and a failed request fails every change it carried."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from strom.broker.alter_partition import AlterPartitionBatcher, IsrChange
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

TOPIC = uuid.uuid4()


def change(partition: int, isr: tuple[int, ...] = (1, 2)) -> IsrChange:
    return IsrChange(TOPIC, "t", partition, 5, 7, isr, (1, 2))


class Controller:
    """Answers each AlterPartition: partition 9 refused, every other accepted."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail = fail

    async def send(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> Any:
        assert api_key == ApiKey.ALTER_PARTITION
        self.requests.append(body)
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        return SimpleNamespace(error_code=0, topics=[SimpleNamespace(
            topic_id=t["topic_id"], partitions=[SimpleNamespace(
                partition_index=p["partition_index"],
                error_code=ErrorCode.FENCED_LEADER_EPOCH if p["partition_index"] == 9 else 0,
                leader_id=1, leader_epoch=p["leader_epoch"], partition_epoch=8,
                isr=[b["broker_id"] for b in p["new_isr_with_epochs"]])
                for p in t["partitions"]]) for t in body["topics"]])


def test_changes_made_together_go_in_one_request() -> None:
    async def main() -> None:
        controller = Controller()
        batcher = AlterPartitionBatcher(controller.send, 1, lambda: 42)
        results = await asyncio.gather(*(batcher.submit(change(p)) for p in range(5)),
                                       batcher.submit(change(9)), return_exceptions=True)
        assert len(controller.requests) == 1 and controller.requests[0]["broker_epoch"] == 42
        assert [len(t["partitions"]) for t in controller.requests[0]["topics"]] == [6]
        assert [r.partition_epoch for r in results[:5]] == [8] * 5  # type: ignore[union-attr]
        assert isinstance(results[5], KafkaError)
        assert results[5].code == ErrorCode.FENCED_LEADER_EPOCH

    asyncio.run(main())


def test_a_partition_named_twice_waits_for_the_next_request() -> None:
    async def main() -> None:
        controller = Controller()
        batcher = AlterPartitionBatcher(controller.send, 1, lambda: 42)
        first, second = await asyncio.gather(batcher.submit(change(0, (1,))),
                                             batcher.submit(change(0, (1, 2))))
        assert (first.isr, second.isr) == ([1], [1, 2])
        assert len(controller.requests) == 2

    asyncio.run(main())


def test_a_failed_request_fails_each_change() -> None:
    async def main() -> None:
        controller = Controller(KafkaError(ErrorCode.REQUEST_TIMED_OUT, "no controller"))
        batcher = AlterPartitionBatcher(controller.send, 1, lambda: 42)
        for outcome in await asyncio.gather(batcher.submit(change(0)), batcher.submit(change(1)),
                                            return_exceptions=True):
            assert isinstance(outcome, KafkaError)
            assert outcome.code == ErrorCode.REQUEST_TIMED_OUT

    asyncio.run(main())




class LocalController:
    """This node's active controller: commits a batch at once, refusing partition 9."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int, int, int, list[int]]]] = []

    async def alter_isrs(self, changes: Any) -> list[Any]:
        self.batches.append(list(changes))
        await asyncio.sleep(0.01)  # a commit takes a while: later changes gather meanwhile
        return [KafkaError(ErrorCode.FENCED_LEADER_EPOCH, "old") if p == 9 else
                SimpleNamespace(partition=p, isr=isr, partition_epoch=pe + 1)
                for _t, p, _le, pe, isr in changes]


def test_an_active_controller_in_this_process_commits_each_batch_at_once() -> None:
    """A combined node's own controller: no request, one commit per batch (it was one commit
    per change, one at a time)."""
    async def main() -> None:
        remote, local = Controller(), LocalController()
        batcher = AlterPartitionBatcher(remote.send, 1, lambda: 42, lambda: local)
        first = [asyncio.ensure_future(batcher.submit(change(p))) for p in (0, 1, 9)]
        await asyncio.sleep(0.001)  # the first batch is committing: these go in the next
        second = [asyncio.ensure_future(batcher.submit(change(p))) for p in range(2, 6)]
        results = await asyncio.gather(*first, *second, return_exceptions=True)
        assert not remote.requests
        assert [[c[1] for c in b] for b in local.batches] == [[0, 1, 9], [2, 3, 4, 5]]
        assert local.batches[0][0] == ("t", 0, 5, 7, [1, 2])
        assert isinstance(results[2], KafkaError)
        assert results[2].code == ErrorCode.FENCED_LEADER_EPOCH
        assert [r.partition_epoch for i, r in enumerate(results) if i != 2] == [8] * 6

    asyncio.run(main())


def test_a_controller_that_stopped_being_active_here_gets_requests_again() -> None:
    async def main() -> None:
        remote, local = Controller(), LocalController()
        active: list[Any] = [local]
        batcher = AlterPartitionBatcher(remote.send, 1, lambda: 42, lambda: active[0])
        await batcher.submit(change(0))
        active[0] = None  # another node's controller is active now
        await batcher.submit(change(1))
        assert len(local.batches) == 1 and len(remote.requests) == 1

    asyncio.run(main())
