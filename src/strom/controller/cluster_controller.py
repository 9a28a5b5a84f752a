"""The active controller of a KRaft cluster of several brokers.

Where `QuorumController` decides for a cluster of one broker, this one decides as Kafka's
quorum controller does for many, with the same partition rules the ZooKeeper-mode controller
uses (`strom.cluster.decisions`, pure functions over the image):

- **Brokers register and heartbeat** (BrokerRegistration, BrokerHeartbeat: Kafka's
  ClusterControlManager and BrokerHeartbeatManager). A registration is a record; a new process
  of a broker gets a new broker epoch and starts *fenced*: it leads nothing and joins no ISR
  until its heartbeat shows it has replayed the metadata up to its registration. A broker
  whose heartbeats stop for ``broker.session.timeout.ms`` is fenced. The heartbeat times are
  the active controller's own memory: a new active controller gives every broker a fresh
  session, as Kafka's does.
- **Fenced brokers leave leaderships and ISRs** (`decide`): every partition led by a fenced
  broker gets a new leader from its ISR, a fenced broker leaves every ISR (never the last
  member), a partition with nobody left goes offline until a replica returns.
- **Controlled shutdown**: a heartbeat asking to shut down moves the broker's leaderships to
  other in-sync replicas; once it leads nothing another replica could lead, it is fenced and
  told it may stop.
- **Controllers register too** (ControllerRegistration, KIP-919): their listeners and feature
  ranges, which DescribeCluster on a CONTROLLER listener and UpdateFeatures read;
  UnregisterController (KIP-1312) removes the registration of one that is gone.
- **ISR changes** (AlterPartition) are compare-and-sets on the partition epoch; only live
  brokers join an ISR. **Reassignments** complete once their target replicas are in sync, as in
  ZooKeeper mode; **preferred leaders** come back by ElectLeaders or the auto rebalance.

Every change is a record committed by a majority of the voters before anyone is answered, and
operations run one at a time against the committed image (`QuorumController._serial`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from strom.cluster import records as rec
from strom.cluster.controller import check_isr_update
from strom.cluster.decisions import (
    PREFERRED,
    ElectionCount,
    RebalanceSchedule,
    StateWrite,
    decide,
    elected_state,
    reassignment_done,
    reassignment_state,
    shutdown_move,
)
from strom.cluster.features import finalized_levels
from strom.cluster.image import (
    BrokerInfo,
    ControllerRegistration,
    PartitionState,
    Registration,
    TopicState,
)
from strom.cluster.reassignment import Assignment, reassign_state
from strom.common.tasks import cancel_all
from strom.controller.loader import MetadataLoader
from strom.controller.quorum_controller import QuorumController, Record
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("strom.controller")

Key = tuple[str, int]
# How often the active controller looks for expired sessions and decisions to make when
# nothing changed (a change wakes it at once).
RECONCILE_INTERVAL_S = 0.5
# the metadata.version UnregisterController needs (Kafka's 4.4-IV2): its record is new there
UNREGISTER_CONTROLLER_MV = 33
# how often a controller that cannot finalize a move from ZooKeeper says why
FINALIZE_REFUSAL_LOG_S = 30.0
# what a controller not migrating writes while a move from ZooKeeper waits to be finalized
KRAFT_ONLY_RECORDS = frozenset({"register_broker", "broker_state", "unregister_broker",
                                "broker_dirs", "register_controller", "unregister_controller",
                                "zk_migration"})


@dataclass(frozen=True)
class HeartbeatAnswer:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


@dataclass
class _Write:
    topic: TopicState
    partition: int
    write: StateWrite
    expected_epoch: int  # the partition epoch the write was decided on


class ClusterQuorumController(QuorumController):
    """`Controller` of a KRaft node in a cluster of several brokers (see the module doc)."""

    single_broker = False

    def __init__(self, loader: MetadataLoader, append: Callable[[list[bytes]], Awaitable[int]],
                 *, node_id: int, is_leader: Callable[[], bool], session_timeout_ms: int,
                 unclean_for: Callable[[TopicState], bool],
                 rebalance_interval_s: float | None = None, imbalance_percentage: int = 10,
                 local_incarnation: str | None = None,
                 heartbeat_interval_ms: int = 2000) -> None:
        super().__init__(loader, append, None)
        self.node_id = node_id
        # the incarnation of the broker in this very process (a combined node), if any: a
        # registration of this node id under another one is its previous process's, dead
        self._local_incarnation = local_incarnation
        self.elections = ElectionCount()
        self._is_leader = is_leader
        self._session_s = session_timeout_ms / 1000
        # a registration under a new incarnation is refused while the current one heartbeats:
        # it has been heard from within two heartbeat intervals (see `register_broker`)
        self._duplicate_s = min(self._session_s, 2 * heartbeat_interval_ms / 1000)
        self._unclean_for = unclean_for
        self._rebalance = RebalanceSchedule(rebalance_interval_s, imbalance_percentage)
        self._last_seen: dict[int, float] = {}  # broker id -> monotonic time of its heartbeat
        # the same, only what this controller heard itself (not the fresh session a new active
        # controller gives every broker): the duplicate-registration check's
        self._heard: dict[int, float] = {}
        # broker id -> the offset of its registration record, as this controller wrote it
        self._registered_at: dict[int, int] = {}
        self._shutting_down: set[int] = set()
        self._stopped: set[int] = set()  # brokers told they may shut down (their process ends)
        # what the last full reconcile pass decided from: (applied offset, live, shutting down)
        self._reconciled: tuple[int, frozenset[int], frozenset[int]] | None = None
        self._was_leader = False
        self._finalize_refused_at = -FINALIZE_REFUSAL_LOG_S
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        loader.subscribe(lambda _changes: self._wake.set())

    @property
    def active(self) -> bool:
        return self._is_leader()

    def start(self) -> None:
        self._tasks = [asyncio.get_running_loop().create_task(self._run(),
                                                              name="kraft-controller")]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self._tasks = []

    def _require_active(self) -> None:
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER,
                             f"node {self.node_id} is not the active controller")

    # -- brokers ----------------------------------------------------------------------------

    async def register_broker(self, info: BrokerInfo, incarnation: str,
                              features: Mapping[str, tuple[int, int]] | None = None,
                              log_dirs: Sequence[str] = ()) -> int:
        """A broker's registration: its broker epoch. The same process registering again (a
        lost answer) keeps its epoch; a new process gets a new one and starts fenced, once the
        previous one has fallen silent (else DUPLICATE_BROKER_REGISTRATION: two processes with
        one node.id, or a restart quicker than two heartbeat intervals). A broker
        that does not support a finalized feature level is refused (UNSUPPORTED_VERSION); so
        is one naming a log dir twice, or another broker's (INVALID_REGISTRATION)."""
        async with self._serial:
            self._require_active()
            features = dict(features or {})
            if len(set(log_dirs)) != len(log_dirs):
                raise KafkaError(ErrorCode.INVALID_REGISTRATION,
                                 f"broker {info.broker_id} names a log dir twice: {log_dirs}")
            for other, reg in self.image.registrations.items():
                taken = set(reg.log_dirs) & set(log_dirs) if other != info.broker_id else ()
                if taken:
                    raise KafkaError(ErrorCode.INVALID_REGISTRATION,
                                     f"log dir {sorted(taken)[0]} is registered by broker "
                                     f"{other}")
            levels = finalized_levels(self.image.finalized_features)
            for name, (lo, hi) in sorted(features.items()):
                level = levels.get(name)
                if level is not None and not lo <= level <= hi:
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                     f"Unable to register because the broker does not support "
                                     f"finalized version {level} of {name}. The broker wants a "
                                     f"version between {lo} and {hi}, inclusive.")
            current = self.image.registrations.get(info.broker_id)
            if current is not None and current.incarnation == incarnation:
                self._last_seen[info.broker_id] = self._heard[info.broker_id] = time.monotonic()
                return current.epoch
            if current is not None and info.broker_id not in self._stopped \
                    and incarnation != self._local_incarnation:  # (this process's own broker)
                silent = time.monotonic() - self._heard.get(info.broker_id, float("-inf"))
                if silent < self._duplicate_s:
                    log.info("broker %d's registration under a new incarnation is refused: "
                             "its registration (epoch %d) sent a heartbeat %.1f s ago",
                             info.broker_id, current.epoch, silent)
                    raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                                     f"Another broker is registered with that broker id: "
                                     f"broker {info.broker_id}'s registration (epoch "
                                     f"{current.epoch}) sent a heartbeat {silent:.1f} s ago")
            epoch = max(self._loader.applied_offset,
                        max((r.epoch for r in self.image.registrations.values()), default=0)) + 1
            # (while a move from ZooKeeper is not finalized, ZooKeeper decides: zk_migration)
            moves = [] if self.image.zk_migration == rec.ZK_MIGRATING else \
                self._state_records(self._restart_moves(info.broker_id))
            self._registered_at[info.broker_id] = await self._commit_at(
                [rec.register_broker_record(Registration(
                    info, epoch, incarnation, fenced=True, features=features,
                    log_dirs=list(log_dirs))), *moves])
            self._last_seen[info.broker_id] = self._heard[info.broker_id] = time.monotonic()
            self._shutting_down.discard(info.broker_id)
            self._stopped.discard(info.broker_id)
            log.info("broker %d registered (epoch %d, incarnation %s)%s%s", info.broker_id,
                     epoch, incarnation,
                     "" if current is None else f"; its previous process had epoch {current.epoch}",
                     f"; {len(moves)} partition(s) it led or was in sync for move on without it"
                     if moves else "")
            self._wake.set()
            return epoch

    def _restart_moves(self, broker_id: int) -> list[_Write]:
        """What a new process of a broker changes, committed with its registration (Kafka's
        unclean-shutdown handling): the partitions it leads get another leader from their ISR
        and it leaves every ISR (never the last member), as if its old process had been fenced.
        In the same commit, so no heartbeat can unfence the new process while the metadata
        still names it the leader its previous process was."""
        def involved(state: PartitionState) -> bool:
            return state.leader == broker_id or broker_id in state.isr

        live = self._live() - {broker_id}
        affected = [t for t in self.image.topics.values()
                    if any(map(involved, t.partitions.values()))]
        return [_Write(self.image.topics[d.topic], d.partition, d.write, d.expected_version)
                for d in decide(affected, live, self._unclean_for,
                                self.image.offline_dirs_check())
                if involved(self.image.topics[d.topic].partitions[d.partition])]

    def _live(self) -> set[int]:
        """The brokers that may lead and join ISRs: the unfenced ones, less this node's own
        broker id when its registration is an earlier process's (this process is the only one
        with that id, so that one is dead; until the new one registers, its partitions, shown
        leaderless to this process's broker, must not be handed back to it)."""
        live = set(self.image.brokers)
        if self._local_incarnation is not None:
            reg = self.image.registrations.get(self.node_id)
            if reg is not None and reg.incarnation != self._local_incarnation:
                live.discard(self.node_id)
        return live

    def _registration(self, broker_id: int, epoch: int) -> Registration:
        reg = self.image.registrations.get(broker_id)
        if reg is None:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                             f"broker {broker_id} is not registered")
        if reg.epoch != epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                             f"broker {broker_id} has epoch {reg.epoch}, not {epoch}")
        return reg

    async def heartbeat(self, broker_id: int, epoch: int, metadata_offset: int, *,
                        want_fence: bool, want_shut_down: bool,
                        offline_dirs: Sequence[str] = ()) -> HeartbeatAnswer:
        self._require_active()
        reg = self._registration(broker_id, epoch)
        self._last_seen[broker_id] = self._heard[broker_id] = time.monotonic()
        if sorted(offline_dirs) != sorted(reg.offline_dirs):
            await self._set_offline_dirs(reg, sorted(offline_dirs))
            reg = self.image.registrations.get(broker_id, reg)
        # caught up: it has applied its own registration (Kafka's rule). A controller that did
        # not write it knows the epoch only: the log's next offset when the registration began,
        # plus one, so at or below the record's offset (more would leave a lone broker fenced
        # until some other record came)
        caught_up = metadata_offset >= self._registered_at.get(broker_id, reg.epoch - 1)
        if want_shut_down and not reg.fenced:
            if broker_id not in self._shutting_down:
                log.info("broker %d asks for a controlled shutdown", broker_id)
                self._shutting_down.add(broker_id)
                self._wake.set()
            if not reg.in_controlled_shutdown:  # leaders stop adding it to ISRs (KIP-841)
                await self._set_state(reg, fenced=False, in_controlled_shutdown=True)
                reg = self.image.registrations.get(broker_id, reg)
            if not self._leads_movable(broker_id):
                await self._set_state(reg, fenced=True, in_controlled_shutdown=True)
        elif want_fence and not reg.fenced:
            await self._set_state(reg, fenced=True)
        elif reg.fenced and caught_up and not want_fence and not want_shut_down \
                and not reg.in_controlled_shutdown:
            await self._set_state(reg, fenced=False)
        reg = self.image.registrations.get(broker_id, reg)
        may_stop = want_shut_down and reg.fenced and reg.epoch == epoch
        if may_stop:  # its next process need not wait for this one to fall silent
            self._stopped.add(broker_id)
        return HeartbeatAnswer(caught_up, reg.fenced, may_stop)

    async def _set_offline_dirs(self, reg: Registration, offline: list[str]) -> None:
        """A broker's log dirs went offline (or came back): the replicas the metadata places in
        an offline one are unavailable, so their leaderships move and they leave the ISRs
        (`_reconcile`), as Kafka's controller handles a failed JBOD disk."""
        async with self._serial:
            self._require_active()
            broker_id = reg.info.broker_id
            current = self.image.registrations.get(broker_id)
            if current is None or current.epoch != reg.epoch or current.offline_dirs == offline:
                return
            before = set(current.offline_dirs)  # the record changes the registration in place
            await self._commit([rec.broker_dirs_record(broker_id, reg.epoch, offline)])
            gone = sorted(set(offline) - before)
            back = sorted(before - set(offline))
            if gone:
                log.warning("broker %d reports log dir(s) %s offline: the replicas there are "
                            "unavailable, their leaderships move", broker_id, ", ".join(gone))
            if back:
                log.info("broker %d reports log dir(s) %s back online", broker_id,
                         ", ".join(back))
            self._wake.set()

    async def unregister_broker(self, broker_id: int) -> None:
        """Remove a broker's registration (UnregisterBroker), as Kafka's controller does, live
        or not: it leads nothing and leaves every ISR (`_reconcile`); one still running is told
        so by its next heartbeat and registers again, fenced until caught up."""
        async with self._serial:
            self._require_active()
            reg = self.image.registrations.get(broker_id)
            if reg is None:
                raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                 f"Broker ID {broker_id} is not currently registered")
            await self._commit([rec.unregister_broker_record(broker_id, reg.epoch)])
            self._last_seen.pop(broker_id, None)
            log.info("broker %d unregistered%s", broker_id,
                     "" if reg.fenced else " while live: it will register again if it runs")
            self._wake.set()

    async def assign_replicas_to_dirs(
        self, broker_id: int, epoch: int,
        assignments: Sequence[tuple[str, uuid.UUID, int]],
    ) -> list[ErrorCode]:
        """AssignReplicasToDirs (KIP-858): the broker keeps each (directory id, topic id,
        partition) in that log dir; the answer per item, as Kafka's controller gives it:
        UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (the broker is not
        a replica). The directory is kept in the partition's record; the partition epoch
        stays (a directory is not a change AlterPartition's compare-and-set should fail on)."""
        async with self._serial:
            self._require_active()
            self._registration(broker_id, epoch)
            errors: list[ErrorCode] = []
            changed: dict[tuple[uuid.UUID, int], PartitionState] = {}
            for directory, topic_id, partition in assignments:
                topic = self.image.topics_by_id.get(topic_id)
                state = topic.partitions.get(partition) if topic is not None else None
                if topic is None:
                    errors.append(ErrorCode.UNKNOWN_TOPIC_ID)
                elif state is None:
                    errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif broker_id not in state.replicas:
                    errors.append(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                else:
                    errors.append(ErrorCode.NONE)
                    current = changed.get((topic_id, partition), state)
                    if current.directories.get(broker_id) != directory:
                        changed[(topic_id, partition)] = dataclasses.replace(
                            current, directories={**current.directories, broker_id: directory})
            if changed:
                await self._commit([rec.partition_record(topic_id, state)
                                    for (topic_id, _p), state in changed.items()])
            return errors

    # -- controllers (KIP-919, KIP-1312) -------------------------------------------------------

    async def register_controller(self, registration: ControllerRegistration) -> None:
        """Record a controller's registration (a registration it already has is not written
        again)."""
        async with self._serial:
            self._require_active()
            if self.image.controllers.get(registration.controller_id) == registration:
                return
            await self._commit([rec.register_controller_record(registration)])
            log.info("controller %d registered (incarnation %s)", registration.controller_id,
                     registration.incarnation)

    async def unregister_controller(self, controller_id: int) -> None:
        """Remove a controller's registration, as Kafka 4.4's: not the active one's own
        (INVALID_REQUEST), only a registered one (CONTROLLER_ID_NOT_REGISTERED). A controller
        still running registers again (what KIP-1312 wants: remove it from the voters and
        stop it first)."""
        async with self._serial:
            self._require_active()
            if controller_id == self.node_id:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Controller cannot unregister itself while it is active.")
            if finalized_levels(self.image.finalized_features)["metadata.version"] \
                    < UNREGISTER_CONTROLLER_MV:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "The current MetadataVersion "
                                 "is too old to support controller unregistration.")
            if controller_id not in self.image.controllers:
                raise KafkaError(ErrorCode.CONTROLLER_ID_NOT_REGISTERED,
                                 f"Controller ID {controller_id} is not currently registered.")
            await self._commit([rec.unregister_controller_record(controller_id)])
            log.info("controller %d unregistered", controller_id)

    async def _set_state(self, reg: Registration, *, fenced: bool,
                         in_controlled_shutdown: bool = False) -> None:
        async with self._serial:
            self._require_active()
            now = self.image.registrations.get(reg.info.broker_id)
            if now is None or now.epoch != reg.epoch or (
                    now.fenced == fenced and now.in_controlled_shutdown == in_controlled_shutdown):
                return
            await self._commit([rec.broker_state_record(reg.info.broker_id, reg.epoch,
                                                        fenced=fenced,
                                                        in_controlled_shutdown=in_controlled_shutdown)])
        if not fenced and in_controlled_shutdown:
            log.info("broker %d (epoch %d) is in a controlled shutdown: it joins no ISR",
                     reg.info.broker_id, reg.epoch)
        else:
            log.info("broker %d (epoch %d) %s", reg.info.broker_id, reg.epoch,
                     "fenced" + (" after a controlled shutdown" if in_controlled_shutdown
                                 else "") if fenced else "unfenced: it may lead and join ISRs")
        if not fenced and not in_controlled_shutdown:
            self._shutting_down.discard(reg.info.broker_id)
        self._wake.set()

    def _leads_movable(self, broker_id: int) -> bool:
        """True while the broker leads a partition another live in-sync replica, not shutting
        down itself, could lead."""
        eligible = self._live() - self._shutting_down
        return any(s.leader == broker_id and any(r != broker_id and r in eligible for r in s.isr)
                   for t in self.image.topics.values() for s in t.partitions.values())

    # -- the active controller's loop -------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                if self.active and self.image.zk_migration == rec.ZK_MIGRATING \
                        and not await self._finalize_zk_migration():
                    pass  # a ZooKeeper-mode broker is still live: ZooKeeper must decide
                elif self.active:
                    if not self._was_leader:  # every broker gets a fresh session
                        now = time.monotonic()
                        self._last_seen = {b: now for b in self.image.registrations}
                        self._shutting_down.clear()
                        self._stopped.clear()
                        self._reconciled = None
                        self._was_leader = True
                    await self._expire_sessions()
                    await self._reconcile()
                else:
                    self._was_leader = False
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                log.info("controller: %s", exc.message)
            except Exception:
                log.exception("controller loop failed; trying again")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RECONCILE_INTERVAL_S)

    async def _commit_at(self, records: list[Record]) -> int:
        """Every write goes through here: while a move from ZooKeeper is not finalized, only a
        migrating controller changes the cluster (ZooKeeper decides; it mirrors); another
        keeps registrations and heartbeats going, nothing else (NOT_CONTROLLER: retriable)."""
        if self.image.zk_migration == rec.ZK_MIGRATING and not self._writes_while_migrating() \
                and any(r.get("type") not in KRAFT_ONLY_RECORDS for r in records):
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "the move from ZooKeeper is not "
                             "finalized: a broker still runs in ZooKeeper mode")
        return await super()._commit_at(records)

    def _writes_while_migrating(self) -> bool:
        return False  # a MigratingController's are the ZooKeeper cluster's own

    async def _finalize_zk_migration(self) -> bool:
        """The first leader without zookeeper.metadata.migration.enable after a move from
        ZooKeeper (strom.controller.zk_migration) ends it, unless a broker the metadata knows
        only from ZooKeeper is still live: deciding here while it follows ZooKeeper would give
        a partition two leaders. Then it decides nothing and says why, every 30 s."""
        zk_only = sorted(set(self.image.brokers) - set(self.image.registrations))
        if zk_only:
            now = time.monotonic()
            if now - self._finalize_refused_at >= FINALIZE_REFUSAL_LOG_S:
                self._finalize_refused_at = now
                log.error("cannot finalize the move from ZooKeeper: broker(s) %s still run in "
                          "ZooKeeper mode; restart them as KRaft brokers first, and keep "
                          "zookeeper.metadata.migration.enable on a controller until then. "
                          "This controller decides nothing meanwhile",
                          ", ".join(map(str, zk_only)))
            return False
        async with self._serial:
            self._require_active()
            await self._commit([rec.zk_migration_record(rec.ZK_FINALIZED)])
        log.info("the move from ZooKeeper is finalized: the KRaft controller decides alone")
        return True

    async def _expire_sessions(self) -> None:
        now = time.monotonic()
        for broker_id, reg in list(self.image.registrations.items()):
            seen = self._last_seen.setdefault(broker_id, now)
            if not reg.fenced and now - seen > self._session_s:
                log.warning("broker %d sent no heartbeat for %.1f s (broker.session.timeout.ms):"
                            " fencing it", broker_id, now - seen)
                await self._set_state(reg, fenced=True)

    async def _reconcile(self) -> None:
        """Every partition write the image calls for now: elections and ISR shrinks for fenced
        brokers, controlled shutdowns, completed reassignments, the preferred-leader rebalance.

        What it decides depends on the image, the live brokers and those shutting down only:
        while none of them changed since a pass, the next (every RECONCILE_INTERVAL_S) skips
        the walk over every partition (10 ms per 10,000 on the event loop)."""
        live = self._live()
        inputs = (self._loader.applied_offset, frozenset(live), frozenset(self._shutting_down))
        if inputs != self._reconciled:
            await self._decide_writes(live)
            self._reconciled = inputs  # a write made moved the offset: decided again next time
        await self._maybe_rebalance()

    async def _decide_writes(self, live: set[int]) -> None:
        decisions = decide(list(self.image.topics.values()), live, self._unclean_for,
                           self.image.offline_dirs_check())
        writes = [_Write(self.image.topics[d.topic], d.partition, d.write, d.expected_version)
                  for d in decisions if d.topic in self.image.topics]
        leaving = self._shutting_down & live
        decided = {(id(w.topic), w.partition) for w in writes}  # (a set: many fail over at once)
        for topic in list(self.image.topics.values()):
            for p, state in topic.partitions.items():
                if (id(topic), p) in decided:
                    continue
                write = shutdown_move(state, leaving, live) if leaving else None
                if write is None and state.reassigning:
                    write = reassignment_state(state, live)
                if write is not None:
                    writes.append(_Write(topic, p, write, state.partition_epoch))
        if writes:
            await self._write_states(writes)
        await self._finish_reassignments()

    async def _write_states(self, writes: list[_Write]) -> None:
        async with self._serial:
            self._require_active()
            records = self._state_records(writes)
            if records:
                await self._commit(records)

    def _state_records(self, writes: list[_Write]) -> list[Record]:
        """The partition records of decided writes (under `_serial`), each checked against
        the partition epoch it was decided on."""
        records: list[Record] = []
        # one line per partition only for a few (each at DEBUG when a broker's failure
        # moves a thousand: their log writes on the event loop would stall every client)
        level = logging.INFO if len(writes) <= 3 else logging.DEBUG
        for w in writes:
            topic = self.image.topics_by_id.get(w.topic.topic_id)
            state = topic.partitions.get(w.partition) if topic is not None else None
            if state is None or state.partition_epoch != w.expected_epoch:
                continue  # changed meanwhile: decided again on the next pass
            self.elections.count(state, w.write.leader)
            new = dataclasses.replace(state, leader=w.write.leader,
                                      leader_epoch=w.write.leader_epoch,
                                      isr=list(w.write.isr),
                                      partition_epoch=state.partition_epoch + 1)
            records.append(rec.partition_record(w.topic.topic_id, new))
            log.log(level, "%s-%d: leader %d, epoch %d, ISR %s", w.topic.name, w.partition,
                    new.leader, new.leader_epoch, new.isr)
        if records and level == logging.DEBUG:
            leaders = Counter(int(r["leader"]) for r in records)
            log.info("%d partitions change leader or ISR (each at DEBUG); leaders now: %s",
                     len(records), ", ".join(f"{'none' if b < 0 else f'broker {b}'} x{n}"
                                             for b, n in sorted(leaders.items())))
        return records

    async def _finish_reassignments(self) -> None:
        records: list[Record] = []
        async with self._serial:
            self._require_active()
            for topic in self.image.topics.values():
                for p, state in topic.partitions.items():
                    if reassignment_done(state):
                        target = list(state.target_replicas)
                        records.append(rec.partition_record(topic.topic_id, dataclasses.replace(
                            state, replicas=target, adding_replicas=[], removing_replicas=[],
                            partition_epoch=state.partition_epoch + 1)))
                        log.info("%s-%d: reassignment to %s completed", topic.name, p, target)
            if records:
                await self._commit(records)

    async def _maybe_rebalance(self) -> None:
        moves = self._rebalance.due(time.monotonic(), list(self.image.topics.values()),
                                    self._live())
        if moves:
            log.info("leader rebalance: moving %d partitions to their preferred replica",
                     len(moves))
            await self.elect_leaders(PREFERRED, moves)

    @property
    def leader_elections(self) -> int:
        return self.elections.leader_elections

    @property
    def unclean_leader_elections(self) -> int:
        return self.elections.unclean_leader_elections

    # -- the Controller seam, for a cluster -------------------------------------------------

    def _assignable(self) -> list[int]:
        """An explicit assignment may name any registered broker, fenced ones too (they lead
        nothing and join no ISR until unfenced), as Kafka's controller allows."""
        return sorted(self.image.registrations)

    async def alter_isr(self, topic: str, partition: int, leader_epoch: int,
                        partition_epoch: int, isr: list[int]) -> PartitionState:
        async with self._serial:
            self._require_active()
            t = self.image.topics.get(topic)
            state = t.partitions.get(partition) if t is not None else None
            if t is None or state is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"{topic}-{partition} does not exist")
            # a broker in a controlled shutdown may not join an ISR (Kafka's
            # INELIGIBLE_REPLICA): it would only have to leave it again
            # nor may a replica kept in a log dir that is offline
            eligible = self._live() - self._shutting_down \
                - self.image.in_offline_dirs(state)
            check_isr_update(state, leader_epoch, partition_epoch, isr, eligible)
            new = dataclasses.replace(state, isr=list(isr), partition_epoch=partition_epoch + 1)
            await self._commit([rec.partition_record(t.topic_id, new)])
            log.info("ISR of %s-%d is now %s", topic, partition, list(isr))
            return t.partitions[partition]

    async def alter_isrs(self, changes: Sequence[tuple[str, int, int, int, list[int]]]
                         ) -> list[PartitionState | KafkaError]:
        """AlterPartition's partitions, each (topic, partition, leader epoch, partition epoch,
        ISR) checked as `alter_isr` checks it, the accepted ones committed together: a
        failover's hundreds of ISR changes cost one commit, not one each. A partition named
        twice is refused the second time (INVALID_REQUEST)."""
        async with self._serial:
            self._require_active()
            outcomes: list[tuple[TopicState, int] | KafkaError] = []
            records: list[Record] = []
            seen: set[Key] = set()
            for topic, partition, leader_epoch, partition_epoch, isr in changes:
                t = self.image.topics.get(topic)
                state = t.partitions.get(partition) if t is not None else None
                try:
                    if t is None or state is None:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"{topic}-{partition} does not exist")
                    if (topic, partition) in seen:
                        raise KafkaError(ErrorCode.INVALID_REQUEST,
                                         f"{topic}-{partition} is named twice")
                    eligible = self._live() - self._shutting_down \
                        - self.image.in_offline_dirs(state)
                    check_isr_update(state, leader_epoch, partition_epoch, isr, eligible)
                except KafkaError as exc:
                    outcomes.append(exc)
                    continue
                seen.add((topic, partition))
                records.append(rec.partition_record(t.topic_id, dataclasses.replace(
                    state, isr=list(isr), partition_epoch=partition_epoch + 1)))
                outcomes.append((t, partition))
            if records:
                await self._commit(records)
                accepted = [o for o in outcomes if not isinstance(o, KafkaError)]
                level = logging.INFO if len(accepted) <= 3 else logging.DEBUG
                if level == logging.DEBUG:
                    log.info("ISRs of %d partitions changed (one AlterPartition; each at "
                             "DEBUG)", len(accepted))
                for t, p in accepted:
                    log.log(level, "ISR of %s-%d is now %s", t.name, p, t.partitions[p].isr)
            return [o if isinstance(o, KafkaError) else o[0].partitions[o[1]] for o in outcomes]

    async def elect_leaders(self, election_type: int,
                            partitions: list[Key] | None) -> dict[Key, int]:
        async with self._serial:
            self._require_active()
            wanted = partitions if partitions is not None else [
                (t.name, p) for t in self.image.topics.values() for p in t.partitions]
            live = self._live()
            out: dict[Key, int] = {}
            records: list[Record] = []
            elected: list[tuple[str, int, int]] = []
            for name, p in wanted:
                t = self.image.topics.get(name)
                state = t.partitions.get(p) if t is not None else None
                if t is None or state is None:
                    out[(name, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                write, why = elected_state(state, live, election_type)
                if write is None:
                    out[(name, p)] = (ErrorCode.ELECTION_NOT_NEEDED if why == "not needed" else
                                      ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                                      if election_type == PREFERRED
                                      else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
                    continue
                self.elections.count(state, write.leader)
                records.append(rec.partition_record(t.topic_id, dataclasses.replace(
                    state, leader=write.leader, leader_epoch=write.leader_epoch,
                    isr=list(write.isr), partition_epoch=state.partition_epoch + 1)))
                out[(name, p)] = ErrorCode.NONE
                elected.append((name, p, write.leader))
            if records:
                await self._commit(records)
                kind = "preferred" if election_type == PREFERRED else "unclean"
                # one line per partition only for a few: a thousand log writes on the event
                # loop would stall every client (each at DEBUG then)
                level = logging.INFO if len(elected) <= 3 else logging.DEBUG
                if level == logging.DEBUG:
                    log.info("%d %s leaders elected (each at DEBUG)", len(elected), kind)
                for name, p, leader in elected:
                    log.log(level, "%s-%d: leader %d elected (%s)", name, p, leader, kind)
            return out

    async def alter_partition_reassignments(
        self, wanted: Mapping[Key, list[int] | None], allow_rf_change: bool,
    ) -> dict[Key, tuple[int, str | None, Assignment | None]]:
        async with self._serial:
            self._require_active()
            out: dict[Key, tuple[int, str | None, Assignment | None]] = {}
            records: list[Record] = []
            for (name, p), target in sorted(wanted.items()):
                t = self.image.topics.get(name)
                outcome, moved = reassign_state(
                    t.partitions.get(p) if t is not None else None, name, p, target,
                    self._live(), allow_rf_change=allow_rf_change)
                out[(name, p)] = outcome
                if t is None or moved is None:
                    continue
                records.append(rec.partition_record(t.topic_id, moved))
                log.info("%s-%d: reassigning to %s (replicas %s, adding %s, removing %s)", name,
                         p, [r for r in moved.replicas if r not in moved.removing_replicas],
                         moved.replicas, moved.adding_replicas, moved.removing_replicas)
            if records:
                await self._commit(records)
        self._wake.set()
        return out
