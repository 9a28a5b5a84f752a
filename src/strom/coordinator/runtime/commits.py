"""Answers after replication: a coordinator's reply waits until its state is committed.

A coordinator applies a change to memory as soon as its record is appended to the leader's
log, so that the next request sees it; but the client must not hear "done" before the
partition's in-sync replicas have the record, or a failover could lose what was acknowledged
(Kafka's CoordinatorRuntime holds each write's response until the high watermark passes it).

Two ways in, one mechanism:

- Requests: `tracking()` collects the state partitions a request touched, by writing
  (`StateStore.append`) or by reading a shard (`touch`); `Commits.settle` then waits until the
  high watermark of each reaches its log end offset *at that moment*. Waiting for the log end
  rather than the request's own records also covers what the request read: a reply built from
  state that another request wrote a moment earlier (a SyncGroup follower's assignment, an
  OffsetFetch of a just-committed offset) is not sent before that state is committed either.
- Internal steps: `after_commit` runs a continuation once one record is committed (the
  transaction coordinator writes markers only after PrepareCommit/PrepareAbort is).

A single node has no replicas to wait for (`Commits(None)`): everything answers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Protocol

from strom.coordinator.runtime.errors import coordinator_error
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

Key = tuple[str, int]  # (state topic, partition)

DEFAULT_TIMEOUT_MS = 5000  # a state topic nobody registered (Kafka's offsets.commit.timeout.ms)


class Replication(Protocol):
    """How a state partition's records reach its in-sync replicas (the replica manager)."""

    def check(self, topic: str, partition: int) -> int:
        """Before appending: NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas,
        NOT_LEADER_OR_FOLLOWER when this broker does not lead the partition, else 0."""

    def end_offset(self, topic: str, partition: int) -> int | None:
        """The log end offset of a partition this broker has a log of (None: no log)."""

    async def wait(self, topic: str, partition: int, offset: int, timeout_s: float) -> int:
        """Wait until the high watermark reaches `offset`; a Kafka error code (0: done)."""


_touched: ContextVar[set[Key] | None] = ContextVar("strom_coordinator_touched", default=None)


@contextlib.contextmanager
def tracking() -> Iterator[set[Key]]:
    """Collect the state partitions touched in this context (this task and what it awaits)."""
    touched: set[Key] = set()
    token = _touched.set(touched)
    try:
        yield touched
    finally:
        _touched.reset(token)


def touch(topic: str, partition: int) -> None:
    """Note that the current request's answer depends on this state partition."""
    touched = _touched.get()
    if touched is not None:
        touched.add((topic, partition))


class Commits:
    """Waits for the replication of coordinator state, with each state topic's timeout."""

    def __init__(self, replication: Replication | None = None) -> None:
        self.replication = replication
        self._timeouts_s: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def register(self, topic: str, timeout_ms: int) -> None:
        """The write timeout of a state topic (offsets.commit.timeout.ms, ...)."""
        self._timeouts_s[topic] = timeout_ms / 1000

    def timeout_s(self, topic: str) -> float:
        return self._timeouts_s.get(topic, DEFAULT_TIMEOUT_MS / 1000)

    def check(self, topic: str, partition: int) -> None:
        """Raise the coordinator's error when an append would be refused as acks=all."""
        if self.replication is None:
            return
        code = self.replication.check(topic, partition)
        if code:
            raise KafkaError(coordinator_error(code),
                             f"{topic}-{partition} cannot take an acks=all write now "
                             f"({ErrorCode(code).name})")

    async def wait(self, topic: str, partition: int, offset: int) -> ErrorCode:
        """Wait until `offset` of the partition is committed; the coordinator's error code."""
        if self.replication is None:
            return ErrorCode.NONE
        code = await self.replication.wait(topic, partition, offset, self.timeout_s(topic))
        return coordinator_error(code)

    async def settle(self, touched: Iterable[Key]) -> ErrorCode:
        """Wait until every touched partition is committed up to its log end offset now; the
        first failure's coordinator error code, or NONE."""
        if self.replication is None:
            return ErrorCode.NONE
        waits = []
        for topic, partition in touched:
            end = self.replication.end_offset(topic, partition)
            if end is None:
                return ErrorCode.NOT_COORDINATOR
            waits.append(self.wait(topic, partition, end))
        for code in await asyncio.gather(*waits):
            if code:
                return code
        return ErrorCode.NONE

    def after_commit(self, topic: str, partition: int, offset: int,
                     then: Callable[[ErrorCode], None]) -> None:
        """Call `then` with the outcome once `offset` is committed (or the wait failed): at
        once on a single node, else from a task on the running loop."""
        if self.replication is None:
            then(ErrorCode.NONE)
            return

        async def wait_then() -> None:
            code = await self.wait(topic, partition, offset)
            try:
                then(code)
            except Exception:
                log.exception("continuation after a commit of %s-%d failed", topic, partition)

        task = asyncio.get_running_loop().create_task(wait_then())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
