"""The seam through which the transaction coordinator writes COMMIT/ABORT markers.

Kafka's coordinator sends WriteTxnMarkers to the leaders of a transaction's partitions. Strom
keeps that behind `MarkerWriter` (`strom.broker.markers.ClusterMarkerWriter`): partitions the
coordinator's broker leads get their control batches written straight into the local logs; the
others get WriteTxnMarkers requests to their leaders, whose per-partition errors are reported. The
coordinator retries partitions that failed with a retriable error and completes the transaction
(CompleteCommit/CompleteAbort) once every partition has its marker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from strom.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
MarkerResults = dict[TopicPartition, int]  # partition -> Kafka error code


@dataclass(frozen=True)
class TxnMarker:
    """One WriteTxnMarkers entry: the marker for one producer's transaction."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    transactional_id: str = ""  # for logs only; not on the wire


class MarkerWriter(Protocol):
    def write(self, marker: TxnMarker, done: Callable[[MarkerResults], None]) -> None:
        """Write `marker` to every partition it names, then call `done` exactly once (possibly
        before returning) with an error code per partition."""


# A partition that no longer exists needs no marker (Kafka skips partitions without a leader,
# which is what a deleted topic looks like).
DONE_CODES = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        ErrorCode.UNKNOWN_TOPIC_ID})
# The producer or coordinator epoch moved on: Kafka stops sending this marker.
GIVE_UP_CODES = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH,
                           ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                           ErrorCode.PRODUCER_FENCED})
