"""Partition reassignment (KIP-455) as pure functions: what a request turns an assignment into.

A partition being reassigned keeps three lists, as Kafka stores them in its topic znode:
`replicas` is the full set (the target replicas first, then the original ones leaving),
`adding` the target replicas that were not there before, `removing` the original replicas that
are not in the target. The new replicas catch up as ordinary followers; once every target
replica is in the ISR the controller moves leadership into the target, takes the removed ones
out of the ISR and writes `replicas = target`. The brokers that are no longer replicas then
stop following and delete their copy.

A new request for a partition that is already moving starts again from its *original* replicas
(Kafka's rule), so adding replicas that are not in the new target are dropped at once; a
cancellation (`target None`) goes back to the original replicas.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from strom.cluster.image import PartitionState
from strom.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True)
class Assignment:
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)


def check_target(target: Sequence[int]) -> None:
    """Kafka's checks of a requested replica list (INVALID_REPLICA_ASSIGNMENT)."""
    if not target:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "the target replica list is empty")
    if len(set(target)) != len(target):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"the target replica list {list(target)} names a broker twice")
    if any(r < 0 for r in target):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"the target replica list {list(target)} has a negative broker id")


def reassign(current: Assignment, target: Sequence[int] | None, live: Collection[int], *,
             allow_rf_change: bool = True) -> Assignment:
    """The assignment that moves `current` towards `target` (None: cancel). Raises KafkaError
    for a request Kafka refuses."""
    origin = current.original
    if target is None:
        if not current.reassigning:
            raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                             "there is no reassignment of this partition to cancel")
        target = origin
    else:
        check_target(target)
        if not allow_rf_change and len(target) != len(origin):
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"the target has {len(target)} replicas where the partition has {len(origin)},"
                " and the request does not allow changing the replication factor")
    full = tuple(dict.fromkeys([*target, *origin]))
    adding = tuple(r for r in full if r not in origin)
    removing = tuple(r for r in full if r not in target)
    dead = [r for r in adding if r not in live]
    if dead:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"brokers {dead} of the target are not live (live brokers: "
                         f"{sorted(live)})")
    return Assignment(full, adding, removing)


Outcome = tuple[int, str | None, Assignment | None]  # error code, message, assignment written


def reassign_state(state: PartitionState | None, name: str, partition: int,
                   target: Sequence[int] | None, live: Collection[int], *,
                   allow_rf_change: bool = False) -> tuple[Outcome, PartitionState | None]:
    """One partition of an AlterPartitionReassignments request against its current state:
    the outcome, and the partition's next state (None when nothing is to be written)."""
    if state is None:
        return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no such partition {name}-{partition}",
                None), None
    current = Assignment(tuple(state.replicas), tuple(state.adding_replicas),
                         tuple(state.removing_replicas))
    try:
        new = reassign(current, target, live, allow_rf_change=allow_rf_change)
    except KafkaError as exc:
        return (exc.code, exc.message, None), None
    return (ErrorCode.NONE, None, new), dataclasses.replace(
        state, replicas=list(new.replicas), adding_replicas=list(new.adding),
        removing_replicas=list(new.removing), partition_epoch=state.partition_epoch + 1)
