"""A KRaft broker's ISR changes, sent to the active controller in batches (Kafka's
AlterPartitionManager).

A leader changes the ISRs of its partitions one by one (a follower caught up, another fell
behind); after a failover that is hundreds at once. Each change is queued here, and one
AlterPartition request carries every change queued meanwhile: while one is in flight the next
ones gather, so 1,000 changes take a few requests (and a few commits on the controller), not
1,000 round trips on the one controller connection.

A combined node whose own controller is active commits its batches there directly, with no
request; before, each change was a commit of its own there, one at a time: a restarted
follower rejoined 1,000 ISRs one per Raft commit, about 30 s (issue 28's failover-stall).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from strom.cluster.image import PartitionState
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

VERSION = 3

Send = Callable[[ApiKey, int, dict[str, Any]], Awaitable[Struct]]  # ControllerChannel.request
Batch = dict[tuple[uuid.UUID, int], tuple["IsrChange", "asyncio.Future[PartitionState]"]]


class LocalController(Protocol):
    """The active controller in this process (`ClusterQuorumController.alter_isrs`)."""

    async def alter_isrs(self, changes: Sequence[tuple[str, int, int, int, list[int]]]
                         ) -> list[PartitionState | KafkaError]: ...


@dataclass(frozen=True)
class IsrChange:
    topic_id: uuid.UUID
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]  # for the state the answer rebuilds


class AlterPartitionBatcher:
    """`submit` one change and get the partition's new state (or the controller's error as
    KafkaError); one request in flight at a time, carrying every change queued before it."""

    def __init__(self, send: Send, broker_id: int, broker_epoch: Callable[[], int],
                 local: Callable[[], LocalController | None] = lambda: None) -> None:
        self._send = send
        self._local = local
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._pending: list[tuple[IsrChange, asyncio.Future[PartitionState]]] = []
        self._task: asyncio.Task[None] | None = None

    async def submit(self, change: IsrChange) -> PartitionState:
        future: asyncio.Future[PartitionState] = asyncio.get_running_loop().create_future()
        self._pending.append((change, future))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._send_all(),
                                                                name="alter-partition")
        return await future

    async def _send_all(self) -> None:
        while self._pending:
            await asyncio.sleep(0)  # the changes made in this loop turn go together
            batch: Batch
            batch, later = {}, []
            for change, future in self._pending:  # one change per partition in a request
                key = (change.topic_id, change.partition)
                if key in batch:
                    later.append((change, future))
                else:
                    batch[key] = (change, future)
            self._pending = later
            try:
                await self._send_batch(batch)
            except Exception as exc:  # the channel's timeout, a lost controller: each fails
                error = exc if isinstance(exc, KafkaError) else KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"AlterPartition: {exc}")
                for _change, future in batch.values():
                    if not future.done():
                        future.set_exception(error)

    async def _send_batch(self, batch: Batch) -> None:
        local = self._local()
        if local is not None:
            await self._commit_locally(local, batch)
            return
        by_topic: dict[uuid.UUID, list[IsrChange]] = {}
        for change, _future in batch.values():
            by_topic.setdefault(change.topic_id, []).append(change)
        response = await self._send(ApiKey.ALTER_PARTITION, VERSION, {
            "broker_id": self._broker_id, "broker_epoch": self._broker_epoch(),
            "topics": [{"topic_id": topic_id, "partitions": [{
                "partition_index": c.partition, "leader_epoch": c.leader_epoch,
                "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in c.isr],
                "leader_recovery_state": 0, "partition_epoch": c.partition_epoch}
                for c in changes]} for topic_id, changes in by_topic.items()]})
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(response.error_code), "AlterPartition refused")
        for t in response.topics:
            for p in t.partitions:
                found = batch.pop((t.topic_id, int(p.partition_index)), None)
                if found is None or found[1].done():
                    continue
                change, future = found
                if p.error_code != ErrorCode.NONE:
                    future.set_exception(KafkaError(
                        ErrorCode(p.error_code),
                        f"AlterPartition of {change.topic}-{change.partition}"))
                else:
                    future.set_result(PartitionState(
                        change.partition, list(change.replicas), list(p.isr), int(p.leader_id),
                        int(p.leader_epoch), int(p.partition_epoch)))
        for change, future in batch.values():  # not in the answer
            if not future.done():
                future.set_exception(KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"AlterPartition answered nothing for {change.topic}-{change.partition}"))

    @staticmethod
    async def _commit_locally(local: LocalController, batch: Batch) -> None:
        """The batch as one commit of this node's active controller (it checks each change as
        it checks an AlterPartition's)."""
        items = list(batch.values())
        outcomes = await local.alter_isrs([
            (c.topic, c.partition, c.leader_epoch, c.partition_epoch, list(c.isr))
            for c, _future in items])
        for (_change, future), outcome in zip(items, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, KafkaError):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
