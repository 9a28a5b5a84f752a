"""A cluster's replication as the coordinator runtime sees it, under the test's control."""

from __future__ import annotations

import asyncio

from strom.protocol.errors import ErrorCode as E


class HeldReplication:
    """`Replication` whose high watermarks move only when the test says (`commit`), whose
    partitions can be made to refuse acks=all writes (`below_min_isr`) and whose waits can be
    made to fail (`fail_with`)."""

    def __init__(self) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        self.hw: dict[tuple[str, int], int] = {}
        self.below_min_isr: set[tuple[str, int]] = set()
        self.fail_with: int = E.NONE
        self.waits: list[tuple[str, int, int]] = []
        self._moved = asyncio.Event()

    def check(self, topic: str, partition: int) -> int:
        return E.NOT_ENOUGH_REPLICAS if (topic, partition) in self.below_min_isr else E.NONE

    def end_offset(self, topic: str, partition: int) -> int | None:
        return self.ends.get((topic, partition))

    async def wait(self, topic: str, partition: int, offset: int, timeout_s: float) -> int:
        self.waits.append((topic, partition, offset))
        while self.hw.get((topic, partition), 0) < offset:
            if self.fail_with:
                return self.fail_with
            self._moved.clear()
            await self._moved.wait()
        return E.NONE

    def commit(self, topic: str, partition: int, offset: int) -> None:
        self.hw[(topic, partition)] = offset
        self._moved.set()

    def fail(self, code: int) -> None:
        self.fail_with = code
        self._moved.set()
