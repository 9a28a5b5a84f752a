"""Transaction state: Kafka's `TransactionState` values and one transactional id's metadata.

Plain data plus the transitions Kafka allows; the coordinator decides when to take them and
persists the result before it becomes visible. `pending` marks a transition that is in flight
(markers being written): any request meanwhile gets CONCURRENT_TRANSACTIONS, as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from strom.coordinator.transaction import records as rec

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767


class TxnState(Enum):
    """(id written to the log, name shown by DescribeTransactions/ListTransactions)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def display(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for s in cls:
            if s.id == state_id:
                return s
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for s in cls:
            if s.display == name:
                return s
        return None


# Kafka's validPreviousStates: a transition from anything else is a bug, not a client error.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT}),
}
EXPIRATION_ALLOWED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
COMPLETED = EXPIRATION_ALLOWED


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last two epochs of a producer id for fencing and rotation."""
    return epoch >= SHORT_MAX - 1


@dataclass
class TxnMetadata:
    """What the coordinator knows about one transactional id (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # for retried InitProducerId (not persisted)
    previous_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None  # the state a write in flight is heading to
    # transaction version 2 (KIP-890): the producer id handed out when EndTxn exhausted the
    # epoch (takes over once the markers are written), and the client's transaction version
    # as of its last transition (2 bumps the epoch on every EndTxn)
    next_producer_id: int = NO_PRODUCER_ID
    client_tv: int = 0

    @property
    def bumps_epoch(self) -> bool:
        """Whether EndTxn bumps this id's epoch (transaction version 2)."""
        return self.client_tv >= 2

    def check_transition(self, new: TxnState) -> None:
        if self.state not in VALID_PREVIOUS.get(new, frozenset()):
            raise IllegalTransition(f"transactional id {self.transactional_id}: {self.state.display}"
                                    f" -> {new.display} is not a valid transition")

    def to_value(self, *, state: TxnState | None = None, producer_epoch: int | None = None
                 ) -> dict[str, Any]:
        """The TransactionLogValue fields for this metadata (optionally with a new state or
        epoch, for the record of a transition not applied yet)."""
        st = state or self.state
        return {
            "producer_id": self.producer_id,
            "previous_producer_id": self.previous_producer_id,
            "producer_epoch": self.producer_epoch if producer_epoch is None else producer_epoch,
            "transaction_timeout_ms": self.timeout_ms,
            "transaction_status": st.id,
            "transaction_partitions": (None if st == TxnState.EMPTY
                                       else rec.partitions_field(self.partitions)),
            "transaction_last_update_timestamp_ms": self.last_update_ms,
            "transaction_start_timestamp_ms": self.start_ms,
            "next_producer_id": self.next_producer_id,
            "client_transaction_version": self.client_tv,
        }

    @classmethod
    def from_value(cls, transactional_id: str, v: dict[str, Any]) -> TxnMetadata:
        state = TxnState.from_id(v["transaction_status"])
        partitions: set[tuple[str, int]] = set()
        if state != TxnState.EMPTY:
            for entry in v["transaction_partitions"] or ():
                partitions.update((entry["topic"], p) for p in entry["partition_ids"])
        return cls(transactional_id, v["producer_id"], v["producer_epoch"],
                   previous_producer_id=v.get("previous_producer_id", NO_PRODUCER_ID),
                   timeout_ms=v["transaction_timeout_ms"], state=state, partitions=partitions,
                   start_ms=v["transaction_start_timestamp_ms"],
                   last_update_ms=v["transaction_last_update_timestamp_ms"],
                   next_producer_id=v.get("next_producer_id", NO_PRODUCER_ID),
                   client_tv=v.get("client_transaction_version", 0))

    def copy(self) -> TxnMetadata:
        return TxnMetadata(self.transactional_id, self.producer_id, self.producer_epoch,
                           self.last_producer_epoch, self.previous_producer_id, self.timeout_ms,
                           self.state, set(self.partitions), self.start_ms, self.last_update_ms,
                           self.pending, self.next_producer_id, self.client_tv)


class IllegalTransition(RuntimeError):
    """A transition Kafka's state machine forbids: a coordinator bug."""
