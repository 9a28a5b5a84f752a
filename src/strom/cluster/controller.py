"""The seam between request handling and cluster coordination.

`Controller` is what handlers call to change metadata. `LocalController` is the single-node
implementation over the embedded metadata log; `cluster.zk.controller.ZkController` implements
the same methods over ZooKeeper, and listeners (the partition manager) react to the same
`Change` events either way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, TypeVar

from strom.cluster import records as rec
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState, TopicState
from strom.cluster.metadata_log import MetadataLog, encode_batch
from strom.cluster.placement import assign_replicas
from strom.cluster.quotas import QuotaEntity
from strom.cluster.reassignment import Assignment, reassign_state
from strom.cluster.records import Change
from strom.cluster.validation import check_topic_name, colliding
from strom.common.collections_held import collections_held
from strom.common.immediate import must_complete_now
from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.acl import AclBinding
from strom.storage.errors import StorageError

log = logging.getLogger(__name__)

Listener = Callable[[list[Change]], None]
PRODUCER_ID_BLOCK = 1000
# Kafka's controller writes at most this many records for one user operation
# (QuorumController.MAX_RECORDS_PER_USER_OP): a 40-byte request must not be able to ask for a
# million partitions. CreateTopics counts the partitions a request would create in total.
MAX_RECORDS_PER_USER_OP = 10_000
# The single node prepares a commit of more records than this (thousands of partitions) in a
# worker thread, so other clients are not stalled while it is encoded (see LocalController).
LARGE_COMMIT = 500

T = TypeVar("T")
Record = dict[str, Any]


def too_many_records(count: int, message: str) -> KafkaError | None:
    """The error (POLICY_VIOLATION, as Kafka) for an operation that would write more than
    MAX_RECORDS_PER_USER_OP records; checked before anything is planned or built."""
    if count > MAX_RECORDS_PER_USER_OP:
        return KafkaError(ErrorCode.POLICY_VIOLATION, message)
    return None


class Controller(Protocol):
    """What handlers call to change cluster metadata. Every change is awaitable: in a cluster it
    is a ZooKeeper write, and the image follows when the change is read back."""

    image: MetadataImage
    # True when calls complete without awaiting anything (the single node), so callers on
    # synchronous paths may run them to completion on the spot
    immediate: bool
    # True when this broker is the only one there can be (a single node, or a KRaft node that
    # is its own quorum): internal topics then take replication factor 1 whatever is configured
    single_broker: bool
    # leader elections this broker made as the active controller (metrics): all, and unclean
    @property
    def leader_elections(self) -> int: ...

    @property
    def unclean_leader_elections(self) -> int: ...

    def subscribe(self, listener: Listener) -> None: ...

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Mapping[int, list[int]] | None,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
    ) -> TopicState:
        """The topic as planned (id, replicas); it may reach the image later (wait_until)."""
        ...

    async def delete_topic(self, topic: TopicState) -> None: ...

    async def create_partitions(
        self, topic: TopicState, total: int, assignments: list[list[int]] | None, *,
        validate_only: bool = False,
    ) -> None: ...

    async def alter_configs(self, resource: str, name: str,
                            changes: Mapping[str, str | None]) -> None: ...

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        """A block of producer ids unique in the cluster: (first, count)."""
        ...

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        """Set (or, value None, remove) quotas of client quota entities, checked already
        (cluster.quota_admin): one commit on the single node, one compare-and-set per entity
        on ZooKeeper."""
        ...

    async def alter_acls(self, create: Sequence[AclBinding], delete: Sequence[AclBinding]) -> None:
        """Add and remove ACLs (one change: a cluster applies both at once)."""
        ...

    async def alter_isr(self, topic: str, partition: int, leader_epoch: int,
                        partition_epoch: int, isr: list[int]) -> PartitionState:
        """The leader changes the ISR of a partition it leads: a compare-and-set on the state
        at (leader_epoch, partition_epoch). Raises KafkaError FENCED_LEADER_EPOCH when the
        leader epoch moved on, INVALID_UPDATE_VERSION when the state changed otherwise."""
        ...

    async def wait_until(self, predicate: Callable[[MetadataImage], bool],
                         timeout_s: float) -> bool:
        """True once predicate(image) holds, False after timeout_s."""
        ...

    async def elect_leaders(self, election_type: int,
                            partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
        """ElectLeaders (0 preferred, 1 unclean): an error code per partition (all if None)."""
        ...

    async def alter_partition_reassignments(
        self, wanted: Mapping[tuple[str, int], list[int] | None], allow_rf_change: bool,
    ) -> dict[tuple[str, int], tuple[int, str | None, Assignment | None]]:
        """Start, change or cancel (target None) reassignments: per partition the error code,
        a message, and the assignment written (see reassignment.py)."""
        ...


# -- planning, shared by every controller ---------------------------------------------------------


def check_assignments(assignments: dict[int, list[int]], live: list[int]) -> dict[int, list[int]]:
    """Kafka's checks of explicit replica assignments (partition -> broker ids)."""
    if sorted(assignments) != list(range(len(assignments))):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "Partitions should be a consecutive 0-based integer sequence")
    sizes = {len(r) for r in assignments.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "All partitions should have the same number of replicas")
    for p, replicas in assignments.items():
        if len(set(replicas)) != len(replicas):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Duplicate replica assignment for partition {p}: {replicas}")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Unknown broker(s) {unknown} in assignment of partition {p}")
    return assignments


def check_new_topic(image: MetadataImage, name: str, existing_names: list[str]) -> None:
    check_topic_name(name)
    if name in image.topics or name in existing_names:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    other = colliding(name, list(image.topics) + list(existing_names))
    if other is not None:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topic: {other}",
        )


def plan_topic(num_partitions: int, replication_factor: int,
               assignments: Mapping[int, list[int]] | None,
               live: list[int], racks: Mapping[int, str | None] | None = None,
               ) -> dict[int, list[int]]:
    """Replicas per partition of a new topic, placed as Kafka places them (placement.py)."""
    if assignments:
        if num_partitions not in (-1, len(assignments)) or replication_factor != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set.",
            )
        return check_assignments(dict(assignments), live)
    if num_partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         "Replication factor must be larger than 0.")
    if replication_factor > len(live):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): The target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{len(live)} broker(s) are registered.",
        )
    return assign_replicas(live, racks or {}, num_partitions, replication_factor)


def plan_partitions(current: dict[int, list[int]], total: int,
                    assignments: list[list[int]] | None, live: list[int],
                    racks: Mapping[int, str | None] | None = None) -> dict[int, list[int]]:
    """Replicas of the partitions CreatePartitions adds to a topic that has `current`."""
    count = len(current)
    if total < count:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {count} partitions, which is higher than the requested "
            f"{total}.",
        )
    if total == count:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {count} partitions.")
    rf = len(next(iter(current.values()))) if current else 1
    new = list(range(count, total))
    if assignments is not None:
        if len(assignments) != len(new):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Increasing the number of partitions by {len(new)} but {len(assignments)} "
                "assignments provided.",
            )
        plan = check_assignments(
            {p - count: a for p, a in zip(new, assignments, strict=True)}, live)
        return {p + count: a for p, a in plan.items()}
    if rf > len(live):
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor {rf} exceeds {len(live)} live broker(s)")
    return assign_replicas(live, racks or {}, len(new), rf, first_partition=count)


class PlanningController:
    """The controller's decisions for a cluster of one broker, over an abstract commit: every
    operation is checked and planned against `image`, then its records go to `_commit`. The
    embedded metadata log (`LocalController`) and a one-voter KRaft quorum
    (`strom.controller.quorum_controller`) commit them differently."""

    immediate = False
    single_broker = True

    @property
    def leader_elections(self) -> int:
        return 0  # one broker leads everything: there is never an election

    @property
    def unclean_leader_elections(self) -> int:
        return 0
    image: MetadataImage
    _listeners: list[Listener]

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def _commit(self, records: list[Record], *, durable_now: bool = False) -> None:
        """Make `records` durable and apply them to the image, in order, all or none."""
        raise NotImplementedError

    async def _commit_topic_records(self, records: list[Record], recheck: Callable[[], None],
                                    existing: TopicState | None = None) -> None:
        """Commit records that create a topic or add partitions to `existing` (`recheck`
        raises when a commit prepared apart is no longer valid)."""
        raise NotImplementedError

    async def wait_until(self, predicate: Callable[[MetadataImage], bool],
                         timeout_s: float) -> bool:
        raise NotImplementedError

    def _assignable(self) -> list[int]:
        """Brokers an explicit replica assignment may name: the live ones here; a KRaft
        cluster's controller also takes registered brokers that are fenced for now."""
        return sorted(self.image.brokers)

    def _racks(self) -> dict[int, str | None]:
        """broker.rack of each live broker: replicas are spread over racks (placement.py)."""
        return {b: info.rack for b, info in self.image.brokers.items()}

    async def _off_loop(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args), in a worker thread when `size` makes it a large commit's work."""
        if size <= LARGE_COMMIT or must_complete_now():
            return fn(*args)
        return await asyncio.to_thread(fn, *args)

    # -- topics ---------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Mapping[int, list[int]] | None,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
    ) -> TopicState:
        size = len(assignments) if assignments else num_partitions
        with _collections_held_if(size > LARGE_COMMIT):
            return await self._create_topic(name, num_partitions, replication_factor,
                                            assignments, configs, size, validate_only)

    async def _create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Mapping[int, list[int]] | None,
        configs: Mapping[str, str],
        size: int,
        validate_only: bool,
    ) -> TopicState:
        check_new_topic(self.image, name, [])
        live = sorted(self.image.brokers)
        plan = await self._off_loop(size, plan_topic, num_partitions, replication_factor,
                                    assignments, self._assignable() if assignments else live,
                                    self._racks())
        topic, records = await self._off_loop(len(plan), _new_topic, name, uuid.uuid4(), plan,
                                              dict(configs), set(live))
        if validate_only:
            return topic
        await self._commit_topic_records(records, lambda: check_new_topic(self.image, name, []))
        log.info("created topic %s (%s) with %d partitions", name, topic.topic_id, len(plan))
        return self.image.topics[name]

    async def delete_topic(self, topic: TopicState) -> None:
        await self._commit([rec.remove_topic_record(topic.topic_id)])
        log.info("deleted topic %s (%s)", topic.name, topic.topic_id)

    async def create_partitions(
        self, topic: TopicState, total: int, assignments: list[list[int]] | None, *,
        validate_only: bool = False,
    ) -> None:
        with _collections_held_if(total - len(topic.partitions) > LARGE_COMMIT):
            await self._create_partitions(topic, total, assignments, validate_only)

    async def _create_partitions(
        self, topic: TopicState, total: int, assignments: list[list[int]] | None,
        validate_only: bool,
    ) -> None:
        current = {p: s.replicas for p, s in topic.partitions.items()}
        plan = await self._off_loop(total - len(current), plan_partitions, current, total,
                                    assignments, self._assignable() if assignments
                                    else sorted(self.image.brokers), self._racks())
        if validate_only:
            return
        records = await self._off_loop(len(plan), _partition_records, topic.topic_id, plan,
                                       set(self.image.brokers))

        def recheck() -> None:
            now = self.image.topics_by_id.get(topic.topic_id)
            if now is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{topic.name}' was deleted meanwhile.")
            if len(now.partitions) != len(current):
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 f"Topic '{topic.name}' went from {len(current)} to "
                                 f"{len(now.partitions)} partitions meanwhile.")

        await self._commit_topic_records(records, recheck, topic)

    # -- configs, ids and ISR -------------------------------------------------------------

    async def alter_configs(self, resource: str, name: str,
                            changes: Mapping[str, str | None]) -> None:
        if changes:
            await self._commit([rec.config_record(resource, name, k, v) for k, v in changes.items()])

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        records = [rec.client_quota_record(entity, key, value)
                   for entity, quotas in changes.items() for key, value in quotas.items()]
        if records:
            await self._commit(records)

    async def alter_acls(self, create: Sequence[AclBinding], delete: Sequence[AclBinding]) -> None:
        records = [rec.remove_acl_record(a) for a in delete if a in self.image.acls]
        records += [rec.acl_record(a) for a in create if a not in self.image.acls]
        if records:
            await self._commit(records)

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        first = self.image.next_producer_id
        await self._commit([rec.producer_ids_record(first + PRODUCER_ID_BLOCK)], durable_now=True)
        return first, PRODUCER_ID_BLOCK

    async def elect_leaders(self, election_type: int,
                            partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
        """One broker leads everything already: no election is ever needed."""
        wanted = partitions if partitions is not None else [
            (t.name, p) for t in self.image.topics.values() for p in t.partitions]
        return {(t, p): (ErrorCode.ELECTION_NOT_NEEDED
                         if t in self.image.topics and p in self.image.topics[t].partitions
                         else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for t, p in wanted}

    async def alter_partition_reassignments(
        self, wanted: Mapping[tuple[str, int], list[int] | None], allow_rf_change: bool,
    ) -> dict[tuple[str, int], tuple[int, str | None, Assignment | None]]:
        """With one broker the only possible target is this broker: such a request completes
        at once, anything else names a broker that is not live."""
        out: dict[tuple[str, int], tuple[int, str | None, Assignment | None]] = {}
        records = []
        for (topic, p), target in sorted(wanted.items()):
            t = self.image.topics.get(topic)
            state = t.partitions.get(p) if t is not None else None
            outcome, _ = reassign_state(state, topic, p, target, set(self.image.brokers),
                                        allow_rf_change=allow_rf_change)
            out[(topic, p)] = outcome
            new = outcome[2]
            if t is None or state is None or new is None:
                continue
            final = list(new.target)
            if final != state.replicas or state.reassigning:
                records.append(rec.partition_record(t.topic_id, dataclasses.replace(
                    state, replicas=final, isr=[r for r in state.isr if r in final],
                    adding_replicas=[], removing_replicas=[])))
        if records:
            await self._commit(records)
        return out

    async def alter_isr(self, topic: str, partition: int, leader_epoch: int,
                        partition_epoch: int, isr: list[int]) -> PartitionState:
        t = self.image.topics.get(topic)
        state = t.partitions.get(partition) if t is not None else None
        if t is None or state is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"{topic}-{partition} does not exist")
        check_isr_update(state, leader_epoch, partition_epoch, isr)
        new = dataclasses.replace(state, isr=list(isr), partition_epoch=partition_epoch + 1)
        await self._commit([rec.partition_record(t.topic_id, new)])
        return t.partitions[partition]


class LocalController(PlanningController):
    """Single-node controller: this broker leads every partition; changes go to the metadata log.

    A commit is normally synchronous: log, fsync, image, listeners, all before the call returns
    (callers on synchronous paths rely on it, see common/immediate.py). Creating thousands of
    partitions would stall every client for seconds that way, so a large commit is prepared
    in a worker thread (records built, encoded and applied to a private image), then written
    and merged into the image in one step on the loop, and fsynced in a worker thread.
    Small commits that arrive meanwhile are simply ordered before it: the large one checks
    again, at that step, that it is still valid, so the log and the image see every commit
    whole and in the same order. Large commits run one at a time.
    """

    immediate = True  # every change is in the image when the call returns (nothing is awaited)

    def __init__(self, metadata_log: MetadataLog, image: MetadataImage, broker: BrokerInfo) -> None:
        self._log = metadata_log
        self.image = image
        self._broker = broker
        self._listeners: list[Listener] = []
        self._large = asyncio.Lock()
        self._syncing: set[asyncio.Task[None]] = set()  # background fsyncs of sync callers
        image.brokers = {broker.broker_id: broker}
        image.controller_id = broker.broker_id

    async def _commit(self, records: list[Record], *, durable_now: bool = False) -> None:
        """Log `records` and apply them to the image at once (the change is there when the
        call returns), then make them durable with an fsync in a worker thread, which the
        caller waits for: an admin request is answered only once its change is on disk. A
        synchronous caller (`run_now`: auto-creation inside a Metadata request) cannot wait;
        its commit is fsynced in the background, unless `durable_now` (a block of producer ids,
        once per thousand producers, must never be handed out twice) fsyncs it on the spot."""
        now_ms = int(time.time() * 1000)
        try:
            end = self._log.write(encode_batch(records, now_ms), now_ms)
        except StorageError as exc:  # e.g. a full disk: refused, the image is untouched
            raise KafkaError(exc.error_code, f"cannot write the metadata log: {exc}") from exc
        changes = [c for c in (rec.apply(self.image, r) for r in records) if c is not None]
        self._log.applied(self.image, len(records))
        for listener in self._listeners:
            listener(changes)
        if must_complete_now() and durable_now:
            self._log.sync_now(end)
        elif must_complete_now():
            self._sync_in_background(end)
        else:
            await self._log.sync(end)

    def _sync_in_background(self, end: int) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop yet (start-up): nothing else waits, sync here
            asyncio.run(self._log.sync(end))
            return
        task = loop.create_task(self._log.sync(end), name="metadata-sync")
        self._syncing.add(task)
        task.add_done_callback(self._syncing.discard)

    async def _commit_topic_records(self, records: list[Record], recheck: Callable[[], None],
                                    existing: TopicState | None = None) -> None:
        """Commit records that create a topic or add partitions to `existing`: synchronously
        when few, else as a large commit (`recheck` raises if it is no longer valid)."""
        if len(records) <= LARGE_COMMIT or must_complete_now():
            await self._commit(records)
            return
        async with self._large:
            shadow = MetadataImage(cluster_id=self.image.cluster_id)
            if existing is not None:  # the new partitions are applied to a stand-in
                stand_in = TopicState(existing.name, existing.topic_id,
                                      configs=dict(existing.configs))
                shadow.topics[stand_in.name] = stand_in
                shadow.topics_by_id[stand_in.topic_id] = stand_in
            now_ms = int(time.time() * 1000)
            batch, changes = await asyncio.to_thread(_prepare, shadow, records, now_ms)
            recheck()
            try:
                end = self._log.write(batch, now_ms)
            except StorageError as exc:  # e.g. a full disk: refused, the image is untouched
                raise KafkaError(exc.error_code, f"cannot write the metadata log: {exc}") from exc
            merged = self._merge(shadow, changes, len(records))
            self._log.applied(self.image, len(records))
            for listener in self._listeners:
                listener(merged)
            await self._log.sync(end)

    def _merge(self, shadow: MetadataImage, changes: list[Change], count: int) -> list[Change]:
        """Move what `_prepare` applied to `shadow` into the image: a new topic as it is, new
        partitions into the existing topic; the changes (grouped by `_prepare`, one per kind
        and topic) are made to name the image's topics."""
        image = self.image
        real: dict[uuid.UUID, TopicState] = {}
        for topic in shadow.topics_by_id.values():
            current = image.topics_by_id.get(topic.topic_id)
            if current is None:
                image.topics[topic.name] = topic
                image.topics_by_id[topic.topic_id] = topic
                current = topic
            else:
                current.partitions.update(topic.partitions)
            real[topic.topic_id] = current
        image.version += count
        return [Change(c.kind, real[c.topic.topic_id] if c.topic is not None else None,
                       c.partitions) for c in changes]

    async def wait_until(self, predicate: Callable[[MetadataImage], bool],
                         timeout_s: float) -> bool:
        # every change is applied before the call that made it returns
        return bool(predicate(self.image))


def _new_topic(name: str, topic_id: uuid.UUID, plan: Mapping[int, list[int]],
               configs: dict[str, str], live: Collection[int]) -> tuple[TopicState, list[Record]]:
    """The planned topic and the records that create it (pure: may run in a worker thread)."""
    topic = TopicState(name, topic_id, configs=configs)
    for p, replicas in plan.items():
        topic.partitions[p] = _first_state(p, replicas, live)
    records = [rec.topic_record(name, topic_id)]
    records += [rec.config_record("topic", name, k, v) for k, v in configs.items()]
    records += [rec.partition_record(topic_id, p) for p in topic.partitions.values()]
    return topic, records


def _partition_records(topic_id: uuid.UUID, plan: Mapping[int, list[int]],
                       live: Collection[int]) -> list[Record]:
    """The records of partitions added to a topic (pure: may run in a worker thread)."""
    return [rec.partition_record(topic_id, _first_state(p, r, live)) for p, r in plan.items()]


def _first_state(partition: int, replicas: list[int], live: Collection[int]) -> PartitionState:
    """A new partition: its first live replica leads, its live replicas are in sync."""
    alive = [r for r in replicas if r in live]
    if not alive:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"All brokers specified in the manual partition assignment for "
                         f"partition {partition} are fenced or in controlled shutdown.")
    return PartitionState(partition, list(replicas), alive, alive[0])


def _collections_held_if(large: bool) -> AbstractContextManager[None]:
    """Large creations allocate hundreds of thousands of objects, in worker threads too: no
    automatic collection may run meanwhile (see `strom.common.collections_held`)."""
    return collections_held() if large else nullcontext()


def _prepare(shadow: MetadataImage, records: list[Record],
             now_ms: int) -> tuple[bytes, list[Change]]:
    """A large commit's work off the loop: its batch, and its records applied to `shadow`, an
    image of its own (nothing here touches the broker's image); the changes come grouped, one
    per kind and topic in a row, so the loop handles a few instead of one per partition."""
    batch = encode_batch(records, now_ms)
    grouped: list[tuple[str, TopicState | None, list[int]]] = []
    for record in records:
        change = rec.apply(shadow, record)
        if change is None:
            continue
        if grouped and grouped[-1][0] == change.kind and grouped[-1][1] is change.topic:
            grouped[-1][2].extend(change.partitions)
        else:
            grouped.append((change.kind, change.topic, list(change.partitions)))
    return batch, [Change(kind, topic, tuple(ps)) for kind, topic, ps in grouped]


def check_isr_update(state: PartitionState, leader_epoch: int, partition_epoch: int,
                     isr: list[int], live: Collection[int] | None = None) -> None:
    """Kafka's AlterPartition checks: the leader's view must be current, the new ISR must
    hold the leader and only replicas, and a replica joining it must be a live broker."""
    if leader_epoch < state.leader_epoch:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                         f"leader epoch {leader_epoch} is older than {state.leader_epoch}")
    if leader_epoch > state.leader_epoch or partition_epoch != state.partition_epoch:
        raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION,
                         f"partition epoch {partition_epoch} is not {state.partition_epoch}")
    if state.leader not in isr or any(r not in state.replicas for r in isr):
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"ISR {isr} must hold the leader {state.leader} and only replicas")
    if live is not None:
        joining = [r for r in isr if r not in state.isr and r not in live]
        if joining:
            raise KafkaError(ErrorCode.INELIGIBLE_REPLICA,
                             f"replicas {joining} are not live brokers and cannot join the ISR")
