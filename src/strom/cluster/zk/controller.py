"""The `Controller` seam over ZooKeeper, and the active-controller role.

Every broker has a `ZkController`: handler calls (create a topic, alter configs, take producer
ids, change an ISR) become ZooKeeper writes, each a compare-and-set or a create that fails when
someone else got there first; the image follows when the mirror reads the change back.

One broker at a time is the *active* controller (the ephemeral `/controller` znode). It gives new
partitions their first state, elects leaders when brokers die or return, removes dead brokers from
ISRs, deletes topics queued in `/admin/delete_topics`, moves leadership off brokers asking for
a controlled shutdown, and completes partition reassignments whose new replicas caught up. Its decisions are pure functions (`decisions.py`) over the image; a lost
compare-and-set only means deciding again on fresher state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from strom.cluster.controller import (
    Listener,
    check_isr_update,
    check_new_topic,
    plan_partitions,
    plan_topic,
)
from strom.cluster.decisions import (
    NO_LEADER,
    NO_STATE,
    PREFERRED,
    Decision,
    ElectionCount,
    RebalanceSchedule,
    decide,
    elected_state,
    reassignment_done,
    reassignment_state,
    reelected_after_restart,
    shutdown_move,
)
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState, TopicState
from strom.cluster.quotas import QuotaEntity
from strom.cluster.reassignment import Assignment, reassign
from strom.cluster.records import Change
from strom.cluster.zk import znodes as zn
from strom.cluster.zk.client import TransactionFailed, ZkClient
from strom.cluster.zk.mirror import ZkMirror
from strom.common.tasks import cancel_all
from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.acl import AclBinding

log = logging.getLogger(__name__)

RECONCILE_INTERVAL_S = 2.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class ZkController:
    immediate = False  # changes reach the image when the mirror reads them back
    single_broker = False

    def __init__(self, zk: ZkClient, mirror: ZkMirror, image: MetadataImage, broker: BrokerInfo,
                 *, unclean_for: Callable[[TopicState], bool],
                 rebalance_interval_s: float | None = None, imbalance_percentage: int = 10,
                 listener_protocols: Mapping[str, str] | None = None) -> None:
        self.zk = zk
        self.listener_protocols = dict(listener_protocols or {})  # for the registration
        self.mirror = mirror
        self.image = image
        self.broker = broker
        self._unclean_for = unclean_for
        self.active = False
        # leader elections this controller made: all, and those outside the ISR (unclean)
        self.elections = ElectionCount()
        self._rebalance = RebalanceSchedule(rebalance_interval_s, imbalance_percentage)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        # the session our /brokers/ids node belongs to; None until the broker registers
        self._registered_session: int | None = None
        # inherited leaderships (see ZkMirror.own_view) already asked to move: key -> version
        self._moved_inherited: dict[tuple[str, int], int] = {}
        mirror.subscribe(self._on_changes)
        zk.add_watch_listener(self._on_watch)
        zk.add_state_listener(self._on_state)

    # -- the seam ---------------------------------------------------------------------------

    def _racks(self) -> dict[int, str | None]:
        return {b: info.rack for b, info in self.image.brokers.items()}

    def subscribe(self, listener: Listener) -> None:
        self.mirror.subscribe(listener)

    async def wait_until(self, predicate: Callable[[MetadataImage], bool],
                         timeout_s: float) -> bool:
        return await self.mirror.wait_until(predicate, timeout_s)

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
        names = await self.zk.children(zn.TOPICS) or []
        check_new_topic(self.image, name, names)
        plan = plan_topic(num_partitions, replication_factor, assignments,
                          sorted(self.image.brokers), self._racks())
        topic_id = zn.new_topic_id()
        topic = TopicState(name, topic_id, configs=dict(configs))
        for p, replicas in plan.items():
            topic.partitions[p] = PartitionState(p, list(replicas), list(replicas), replicas[0])
        if validate_only:
            return topic
        txn = self.zk.transaction()
        config_path = zn.topic_config_path(name)
        if await self.zk.exists(config_path) is not None:  # left by an earlier incarnation
            txn.set(config_path, zn.encode_config(configs))
        else:
            txn.create(config_path, zn.encode_config(configs))
        txn.create(zn.topic_path(name), zn.encode_topic(zn.TopicAssignment(topic_id, plan)))
        try:
            await txn.commit()
        except TransactionFailed as exc:
            if exc.has(NodeExistsError):
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                 f"Topic '{name}' already exists.") from None
            raise
        log.info("created topic %s (%s) with %d partitions", name, topic_id, len(plan))
        return topic

    async def delete_topic(self, topic: TopicState) -> None:
        with contextlib.suppress(NodeExistsError):
            await self.zk.create(zn.delete_topic_path(topic.name))
        log.info("topic %s (%s) queued for deletion", topic.name, topic.topic_id)

    async def create_partitions(
        self, topic: TopicState, total: int, assignments: list[list[int]] | None, *,
        validate_only: bool = False,
    ) -> None:
        got = await self.zk.get(zn.topic_path(topic.name))
        if got is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name}")
        current = zn.decode_topic(got[0])
        plan = plan_partitions(current.partitions, total, assignments,
                               sorted(self.image.brokers), self._racks())
        if validate_only:
            return
        current.partitions.update(plan)
        try:
            await self.zk.set(zn.topic_path(topic.name), zn.encode_topic(current), got[1].version)
        except BadVersionError:
            raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                             f"{topic.name} changed meanwhile; retry") from None

    async def alter_configs(self, resource: str, name: str,
                            changes: Mapping[str, str | None]) -> None:
        if not changes:
            return
        if resource == "topic":
            path = zn.topic_config_path(name)
        elif resource == "user":
            path = zn.user_config_path(name)
        elif resource == "group":
            path = zn.group_config_path(name)
        else:
            path = zn.broker_config_path(name or zn.DEFAULT_ENTITY)
        await self._update_config(path, changes)

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        """One znode per entity, in Kafka's layout (quotas and a user's SCRAM credentials
        share its znode); the values as Kafka wrote them, whole numbers without a fraction."""
        for entity, quotas in changes.items():
            await self._update_config(
                zn.quota_entity_path(dict(entity)),
                {k: None if v is None else zn.encode_quota(v) for k, v in quotas.items()})

    async def _update_config(self, path: str, changes: Mapping[str, str | None]) -> None:
        """Read, change and compare-and-set the config znode at path (created if missing)."""
        while True:
            got = await self.zk.get(path)
            current = zn.decode_config(got[0]) if got else {}
            for k, v in changes.items():
                if v is None:
                    current.pop(k, None)
                else:
                    current[k] = v
            try:
                if got is None:
                    await self.zk.ensure_path(path.rsplit("/", 1)[0])
                    await self.zk.create(path, zn.encode_config(current))
                else:
                    await self.zk.set(path, zn.encode_config(current), got[1].version)
                return
            except (BadVersionError, NodeExistsError):
                continue  # someone else changed it: apply ours on top of theirs

    async def alter_acls(self, create: Sequence[AclBinding], delete: Sequence[AclBinding]) -> None:
        if not create and not delete:
            return
        while True:
            got = await self.zk.get(zn.ACLS)
            current = [AclBinding.from_record(r) for r in zn.decode_acls(got[0])] if got else []
            gone = set(delete)
            wanted = list(dict.fromkeys([a for a in current if a not in gone] + list(create)))
            data = zn.encode_acls([a.to_record() for a in wanted])
            try:
                if got is None:
                    await self.zk.ensure_path(zn.ACLS.rsplit("/", 1)[0])
                    await self.zk.create(zn.ACLS, data)
                else:
                    await self.zk.set(zn.ACLS, data, got[1].version)
                return
            except (BadVersionError, NodeExistsError):
                continue  # changed meanwhile: apply ours on top

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        while True:
            got = await self.zk.get(zn.PRODUCER_ID_BLOCK)
            current = zn.decode_producer_id_block(got[0]) if got else None
            block = zn.next_producer_id_block(current, broker_id)
            try:
                if got is None:
                    await self.zk.create(zn.PRODUCER_ID_BLOCK,
                                         zn.encode_producer_id_block(block))
                else:
                    await self.zk.set(zn.PRODUCER_ID_BLOCK, zn.encode_producer_id_block(block),
                                      got[1].version)
                return block.start, block.size
            except (BadVersionError, NodeExistsError):
                continue

    async def alter_isr(self, topic: str, partition: int, leader_epoch: int,
                        partition_epoch: int, isr: list[int]) -> PartitionState:
        t = self.image.topics.get(topic)
        state = t.partitions.get(partition) if t is not None else None
        if t is None or state is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
        check_isr_update(state, leader_epoch, partition_epoch, isr, self.image.brokers)
        write = zn.LeaderAndIsr(state.leader, leader_epoch, tuple(isr),
                                max(self.image.controller_epoch, 0))
        try:
            stat = await self.zk.set(zn.state_path(topic, partition), zn.encode_state(write),
                                     partition_epoch)
        except (BadVersionError, NoNodeError):
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION,
                             f"the state of {topic}-{partition} changed meanwhile") from None
        log.info("ISR of %s-%d is now %s", topic, partition, isr)
        return PartitionState(partition, list(state.replicas), list(isr), state.leader,
                              leader_epoch, stat.version)

    async def elect_leaders(self, election_type: int,
                            partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
        """ElectLeaders: a Kafka error code per partition (preferred or unclean election),
        each change a compare-and-set on the partition's state."""
        wanted = partitions if partitions is not None else [
            (t.name, p) for t in self.image.topics.values() for p in t.partitions]
        live = set(self.image.brokers)
        out: dict[tuple[str, int], int] = {}
        for topic, p in wanted:
            t = self.image.topics.get(topic)
            state = t.partitions.get(p) if t is not None else None
            if state is None:
                out[(topic, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            write, why = elected_state(state, live, election_type)
            if write is None:
                out[(topic, p)] = (ErrorCode.ELECTION_NOT_NEEDED if why == "not needed" else
                                   ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                                   if election_type == PREFERRED
                                   else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
                continue
            data = zn.encode_state(zn.LeaderAndIsr(write.leader, write.leader_epoch, write.isr,
                                                   max(self.image.controller_epoch, 0)))
            try:
                await self.zk.set(zn.state_path(topic, p), data, state.partition_epoch)
                out[(topic, p)] = ErrorCode.NONE
                self.elections.count(state, write.leader)
                log.info("%s-%d: leader %d elected (%s)", topic, p, write.leader,
                         "preferred" if election_type == PREFERRED else "unclean")
            except (BadVersionError, NoNodeError):
                out[(topic, p)] = ErrorCode.NOT_CONTROLLER  # changed meanwhile: retriable
        return out

    async def alter_partition_reassignments(
            self, wanted: Mapping[tuple[str, int], list[int] | None], allow_rf_change: bool,
    ) -> dict[tuple[str, int], tuple[int, str | None, Assignment | None]]:
        """AlterPartitionReassignments: start, change or cancel reassignments. Each topic's
        new assignment is one compare-and-set on its znode; the active controller completes
        them. Per partition: (error code, message, the assignment written)."""
        out: dict[tuple[str, int], tuple[int, str | None, Assignment | None]] = {}
        by_topic: dict[str, dict[int, list[int] | None]] = {}
        for (topic, p), target in wanted.items():
            by_topic.setdefault(topic, {})[p] = target
        for name, parts in sorted(by_topic.items()):
            out.update(await self._reassign_topic(name, parts, allow_rf_change))
        return out

    async def _reassign_topic(self, name: str, parts: dict[int, list[int] | None],
                              allow_rf_change: bool,
                              ) -> dict[tuple[str, int], tuple[int, str | None, Assignment | None]]:
        unknown = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no such partition of topic {name}",
                   None)
        for _ in range(10):  # lost races: someone else changed the topic meanwhile
            got = await self.zk.get(zn.topic_path(name))
            if got is None or await self.zk.exists(zn.delete_topic_path(name)) is not None:
                return {(name, p): unknown for p in parts}
            znode = zn.decode_topic(got[0])
            out: dict[tuple[str, int], tuple[int, str | None, Assignment | None]] = {}
            for p, target in sorted(parts.items()):
                replicas = znode.partitions.get(p)
                if replicas is None:
                    out[(name, p)] = unknown
                    continue
                current = Assignment(tuple(replicas), tuple(znode.adding_replicas.get(p, ())),
                                     tuple(znode.removing_replicas.get(p, ())))
                try:
                    new = reassign(current, target, set(self.image.brokers),
                                   allow_rf_change=allow_rf_change)
                except KafkaError as exc:
                    out[(name, p)] = (exc.code, exc.message, None)
                    continue
                out[(name, p)] = (ErrorCode.NONE, None, new)
                _put(znode, p, new)
            if all(r[2] is None for r in out.values()):
                return out
            try:
                await self.zk.set(zn.topic_path(name), zn.encode_topic(znode), got[1].version)
            except BadVersionError:
                continue
            for (_, p), (_, _, moved) in sorted(out.items()):
                if moved is not None:
                    log.info("%s-%d: reassigning to %s (replicas %s, adding %s, removing %s)",
                             name, p, list(moved.target), list(moved.replicas),
                             list(moved.adding), list(moved.removing))
            return out
        busy = (ErrorCode.REASSIGNMENT_IN_PROGRESS, f"{name} kept changing; try again", None)
        return {(name, p): busy for p in parts}

    # -- registration and election -----------------------------------------------------------

    async def register(self) -> None:
        """Create /brokers/ids/<id> (ephemeral). A registration left by our own previous
        process (killed before its session expired) is replaced."""
        path = zn.broker_path(self.broker.broker_id)
        data = zn.encode_broker(self.broker, _now_ms(), self.listener_protocols)
        while True:
            session = self.zk.session_id
            try:
                await self.zk.create(path, data, ephemeral=True)
                self._registered_session = session
                await self._note_registration(path)
                return
            except NodeExistsError:
                stat = await self.zk.exists(path)
                if stat is not None and stat.ephemeralOwner != self.zk.session_id:
                    log.warning("replacing a stale registration of broker %d (session %x)",
                                self.broker.broker_id, stat.ephemeralOwner)
                    with contextlib.suppress(NoNodeError, BadVersionError):
                        await self.zk.delete(path, stat.version)
                elif stat is not None:
                    self._registered_session = stat.ephemeralOwner
                    self.mirror.note_registration(stat.czxid)
                    self._wake.set()
                    return

    async def _note_registration(self, path: str) -> None:
        """Tell the mirror when this process registered: partition states written before
        then that name this broker as leader were its previous process's."""
        stat = await self.zk.exists(path)
        if stat is not None and stat.ephemeralOwner == self.zk.session_id:
            self.mirror.note_registration(stat.czxid)
            self._wake.set()

    async def _move_inherited(self) -> None:
        """Elect again every partition whose leadership this process inherited from its
        previous one (a compare-and-set on the state the mirror saw), so that no leadership
        survives a restart the controller did not notice: the image shows them leaderless
        meanwhile. Any broker does this for its own partitions, as it changes ISRs."""
        mirror = self.mirror
        if mirror.registration_zxid is None or not mirror.inherited:
            return
        live = set(self.image.brokers)
        writes = []
        for key, version in list(mirror.inherited.items()):
            t = self.image.topics.get(key[0])
            state = t.partitions.get(key[1]) if t is not None else None
            if state is None:
                mirror.inherited.pop(key, None)
                continue
            if state.partition_epoch != version or state.leader != NO_LEADER \
                    or self._moved_inherited.get(key) == version:
                continue  # not applied yet, or asked already: the mirror reads the outcome
            self._moved_inherited[key] = version
            writes.append(self._write_inherited(key, state, live))
        if writes:
            log.info("electing again %d partition(s) that broker %d led before it restarted "
                     "(not served meanwhile)", len(writes), self.broker.broker_id)
            await asyncio.gather(*writes)

    async def _write_inherited(self, key: tuple[str, int], state: PartitionState,
                               live: set[int]) -> None:
        write = reelected_after_restart(state, self.broker.broker_id, live)
        data = zn.encode_state(zn.LeaderAndIsr(write.leader, write.leader_epoch, write.isr,
                                               max(self.image.controller_epoch, 0)))
        try:
            await self.zk.set(zn.state_path(*key), data, state.partition_epoch)
        except (BadVersionError, NoNodeError):
            return  # changed meanwhile: whatever is there now was written after we registered
        log.debug("%s-%d: leader %d, epoch %d, ISR %s (its leadership was this broker's "
                  "before a restart)", key[0], key[1], write.leader, write.leader_epoch,
                  list(write.isr))

    def start(self) -> None:
        self._tasks = [asyncio.get_running_loop().create_task(self._run(), name="zk-controller")]

    async def stop(self) -> None:
        self._stopping = True
        await cancel_all(self._tasks)
        self._tasks = []

    def _on_changes(self, changes: list[Change]) -> None:
        self._wake.set()

    def _on_state(self, state: str) -> None:
        if state == "CONNECTED":  # maybe a new session: registration and election to redo
            self._wake.set()

    async def _reregister_if_expired(self) -> None:
        """After our session expired, ZooKeeper removed our registration with it: the other
        brokers see us as dead (the controller takes us out of every ISR) until we register
        again on the new session, as Kafka's brokers do."""
        registered = self._registered_session
        if registered is None or not self.zk.connected or self.zk.session_id == registered:
            return
        log.warning("ZooKeeper session %x expired: registering broker %d again",
                    registered, self.broker.broker_id)
        await self.register()

    def _on_watch(self, kind: str, path: str) -> None:
        if path.startswith(("/admin", zn.CONTROLLED_SHUTDOWN, zn.CONTROLLER)):
            self._wake.set()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._reregister_if_expired()
                await self._move_inherited()
                if not self.active:
                    await self._try_to_become_controller()
                if self.active:
                    await self._act()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("controller loop: %s: %s", type(exc).__name__, exc)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RECONCILE_INTERVAL_S)

    async def _try_to_become_controller(self) -> None:
        """Create the ephemeral /controller znode, then take the next controller epoch. A
        /controller this session owns is ours too: a create whose answer a dropped connection
        lost, or an attempt that failed before it took the epoch. Treating it as another
        broker's would leave the cluster without a controller while this session lives."""
        got = await self.zk.get_or_watch(zn.CONTROLLER)
        if got is not None and not self._owns(got[1]):
            return
        if got is None:
            try:
                await self.zk.create(zn.CONTROLLER, zn.encode_controller(self.broker.broker_id,
                                                                       _now_ms()), ephemeral=True)
            except NodeExistsError:
                got = await self.zk.get(zn.CONTROLLER, watch=True)
                if got is None or not self._owns(got[1]):
                    return
        while True:
            current = await self.zk.get(zn.CONTROLLER_EPOCH)
            try:
                if current is None:
                    await self.zk.create(zn.CONTROLLER_EPOCH, zn.encode_controller_epoch(1))
                    epoch = 1
                else:
                    epoch = zn.decode_controller_epoch(current[0]) + 1
                    await self.zk.set(zn.CONTROLLER_EPOCH, zn.encode_controller_epoch(epoch),
                                      current[1].version)
                break
            except (BadVersionError, NodeExistsError):
                continue
        self.active = True
        self.epoch = epoch
        log.info("broker %d is the controller (epoch %d)", self.broker.broker_id, epoch)

    def _owns(self, stat: ZnodeStat) -> bool:
        return bool(stat.ephemeralOwner == self.zk.session_id)

    async def _still_controller(self) -> bool:
        got = await self.zk.get(zn.CONTROLLER, watch=True)
        mine = got is not None and self._owns(got[1])
        if not mine and self.active:
            log.info("broker %d is no longer the controller", self.broker.broker_id)
            self.active = False
        return mine

    # -- the active controller's duties -------------------------------------------------------

    async def _act(self) -> None:
        if not await self._still_controller():
            return
        await self._delete_topics()
        await self._controlled_shutdowns()
        live = set(self.image.brokers)
        decisions = decide(list(self.image.topics.values()), live, self._unclean_for)
        for d in decisions:
            topic = self.image.topics.get(d.topic)
            before = topic.partitions.get(d.partition) if topic is not None else None
            if await self._write(d) and before is not None:
                self.elections.count(before, d.write.leader)
        await self._reassignments(live)
        await self._maybe_rebalance()

    async def _reassignments(self, live: set[int]) -> None:
        """Move every reassignment on whose target replicas have all caught up: first the
        partition state (leader in the target, leaving replicas out of the ISR), then, once
        the mirror shows that state, the assignment in the topic znode."""
        for topic in list(self.image.topics.values()):
            done: dict[int, PartitionState] = {}
            for p, state in list(topic.partitions.items()):
                if not state.reassigning:
                    continue
                write = reassignment_state(state, live)
                if write is not None:
                    await self._write(Decision(topic.name, p, write, state.partition_epoch))
                elif reassignment_done(state):
                    done[p] = state
            if done:
                await self._finish_reassignments(topic, done)

    async def _finish_reassignments(self, topic: TopicState,
                                    done: dict[int, PartitionState]) -> None:
        got = await self.zk.get(zn.topic_path(topic.name))
        if got is None:
            return
        znode = zn.decode_topic(got[0])
        if znode.topic_id != topic.topic_id:
            return
        finished = []
        for p, state in sorted(done.items()):
            # only the reassignment the image showed: a newer request wins
            if (znode.partitions.get(p) != state.replicas
                    or znode.adding_replicas.get(p, []) != state.adding_replicas
                    or znode.removing_replicas.get(p, []) != state.removing_replicas):
                continue
            _put(znode, p, Assignment(tuple(state.target_replicas)))
            finished.append(p)
        if not finished:
            return
        try:
            await self.zk.set(zn.topic_path(topic.name), zn.encode_topic(znode), got[1].version)
        except BadVersionError:
            return  # changed meanwhile: decide again on the next pass
        for p in finished:
            log.info("%s-%d: reassignment to %s completed", topic.name, p,
                     done[p].target_replicas)

    async def _maybe_rebalance(self) -> None:
        moves = self._rebalance.due(time.monotonic(), list(self.image.topics.values()),
                                    set(self.image.brokers))
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

    async def _write(self, d: Decision) -> bool:
        """Write a decided partition state; False when a newer one won meanwhile."""
        data = zn.encode_state(zn.LeaderAndIsr(d.write.leader, d.write.leader_epoch,
                                               d.write.isr, self.epoch))
        path = zn.state_path(d.topic, d.partition)
        try:
            if d.expected_version == NO_STATE:
                await self.zk.ensure_path(zn.partition_path(d.topic, d.partition))
                await self.zk.create(path, data)
            else:
                await self.zk.set(path, data, d.expected_version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False  # a newer state or a deleted topic: the mirror catches up, we decide again
        log.info("%s-%d: leader %d, epoch %d, ISR %s", d.topic, d.partition, d.write.leader,
                 d.write.leader_epoch, list(d.write.isr))
        return True

    async def _delete_topics(self) -> None:
        names = await self.zk.children(zn.DELETE_TOPICS, watch=True) or []
        for name in names:
            for path in await self.zk.subtree(zn.topic_path(name)):
                with contextlib.suppress(NoNodeError):
                    await self.zk.delete(path)
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(zn.topic_config_path(name))
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(zn.delete_topic_path(name))
            log.info("deleted topic %s", name)

    async def _controlled_shutdowns(self) -> None:
        """Brokers that asked to stop lose their leaderships to other in-sync replicas and
        leave every ISR they are in (with another member left), as Kafka's controlled
        shutdown does."""
        ids = await self.zk.children(zn.CONTROLLED_SHUTDOWN, watch=True) or []
        leaving = {int(i) for i in ids if i.isdigit()}
        if not leaving:
            return
        for topic in list(self.image.topics.values()):
            for p, state in list(topic.partitions.items()):
                write = shutdown_move(state, leaving, set(self.image.brokers))
                if write is not None:
                    await self._write(Decision(topic.name, p, write, state.partition_epoch))

    # -- for the stopping broker -------------------------------------------------------------

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move our leaderships away; True once we lead nothing that
        another in-sync replica could lead."""
        path = f"{zn.CONTROLLED_SHUTDOWN}/{self.broker.broker_id}"
        with contextlib.suppress(NodeExistsError):
            await self.zk.create(path, b"", ephemeral=True)
        me = self.broker.broker_id

        def done(image: MetadataImage) -> bool:
            return not any(s.leader == me and any(r != me and r in image.brokers for r in s.isr)
                           for t in image.topics.values() for s in t.partitions.values())

        return await self.mirror.wait_until(done, timeout_s)


def _put(znode: zn.TopicAssignment, partition: int, assignment: Assignment) -> None:
    """Write one partition's assignment into a topic znode's content (Kafka's layout)."""
    znode.partitions[partition] = list(assignment.replicas)
    for field, value in ((znode.adding_replicas, assignment.adding),
                         (znode.removing_replicas, assignment.removing)):
        if value:
            field[partition] = list(value)
        else:
            field.pop(partition, None)


def unclean_from(resolve: Callable[[TopicState, str], Any]) -> Callable[[TopicState], bool]:
    def unclean(topic: TopicState) -> bool:
        return bool(resolve(topic, "unclean.leader.election.enable").value)

    return unclean
