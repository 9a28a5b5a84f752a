"""Spark's ``kafkaConsumer.pollTimeoutMs`` for both range readers (strom.spark.fetcher and
strom.spark.consumer): a task that makes no progress for that long fails."""

from __future__ import annotations

import time

from strom.spark.offsets import OffsetRange


class ProgressDeadline:
    """``kafkaConsumer.pollTimeoutMs``: a read that makes no progress for that long fails
    (both readers)."""

    def __init__(self, r: OffsetRange, timeout_ms: int, label: str) -> None:
        self.r, self.timeout_ms, self.label = r, timeout_ms, label
        self.deadline = time.monotonic() + timeout_ms / 1000.0

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def check(self, before: int, pos: int) -> None:
        """After one step of the read, from offset ``before`` to ``pos``."""
        if pos > before:
            self.deadline = time.monotonic() + self.timeout_ms / 1000.0
        elif time.monotonic() >= self.deadline:
            r = self.r
            raise TimeoutError(
                f"Cannot fetch record for offset {pos} of {self.label} in {self.timeout_ms} "
                f"milliseconds (range [{r.start}, {r.end})); set the source option "
                "kafkaConsumer.pollTimeoutMs to wait longer")
