"""Moving a running ZooKeeper-mode cluster to KRaft, one broker at a time (Strom's own: Kafka 4
removed KIP-866's migration).

The controllers of the new quorum run with ``zookeeper.metadata.migration.enable=true`` and the
old cluster's ``zookeeper.connect``. While the move lasts, ZooKeeper stays the cluster's truth
and the ZooKeeper-mode brokers run unchanged; the active controller links the two worlds
(`ZkBridge`):

- it mirrors ZooKeeper into the metadata log, record for record (the same records a ZooKeeper
  broker's mirror applies to its image), so a broker restarted in KRaft mode finds every topic,
  assignment, leader and ISR, config, ACL, SCRAM user, quota and the producer-id high water;
- it stands for the KRaft brokers in ZooKeeper: a live one has a (persistent) ``/brokers/ids``
  registration there, so the ZooKeeper-mode brokers fetch from it and their controller counts
  it; a controlled shutdown is asked for under ``/strom/controlled_shutdown``;
- what a KRaft broker asks of its controller that changes the cluster (AlterPartition,
  producer-id blocks, forwarded admin requests) becomes the ZooKeeper write a ZooKeeper broker
  would make, through the same `ZkController`; it also competes for ``/controller``, so the
  cluster keeps a controller once the last ZooKeeper-mode broker is gone.

Registrations, heartbeats, fencing and session expiry stay the KRaft controller's own
(`ClusterQuorumController`), as do features and controller registrations. Once every broker
runs in KRaft mode, the controllers restart without the flag: the first to lead writes the
``finalized`` state (refusing while a ZooKeeper-mode broker is still live) and from then on
decides alone; ZooKeeper is no longer read or written.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from strom.cluster import records as rec
from strom.cluster.decisions import reelected_after_restart
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState, TopicState
from strom.cluster.quotas import QuotaEntity
from strom.cluster.reassignment import Assignment
from strom.cluster.zk import znodes as zn
from strom.cluster.zk.client import ZkClient
from strom.cluster.zk.controller import ZkController
from strom.cluster.zk.mirror import ZkMirror
from strom.common.tasks import cancel_all
from strom.controller.cluster_controller import RECONCILE_INTERVAL_S, ClusterQuorumController
from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.acl import AclBinding

log = logging.getLogger(__name__)

# the records a ZooKeeper broker's mirror applies that are not the metadata log's to keep: the
# log's controller is the quorum's leader, not /controller's
_NOT_MIRRORED = frozenset({"controller"})
RETRY_S = 2.0  # before linking to ZooKeeper again after a failure


class MigrationError(Exception):
    """The quorum cannot link to the ZooKeeper cluster (named in the message)."""


@dataclass(frozen=True)
class MigrationSettings:
    connect: str
    session_timeout_ms: int
    inter_broker_listener: str
    listener_protocols: Mapping[str, str]
    rebalance_interval_s: float | None
    imbalance_percentage: int


class ZkBridge:
    """The active controller's link to the ZooKeeper cluster (see the module doc)."""

    def __init__(self, settings: MigrationSettings, node_id: int, cluster_id: str,
                 sink: Callable[[list[dict[str, Any]]], None],
                 unclean_for: Callable[[TopicState], bool]) -> None:
        self.settings = settings
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._sink = sink
        self._unclean_for = unclean_for
        self.zk: ZkClient | None = None
        self.image: MetadataImage | None = None  # ZooKeeper's view, as its brokers see it
        self.controller: ZkController | None = None
        self.mirror: ZkMirror | None = None

    async def start(self, log_image: MetadataImage, live: Mapping[int, BrokerInfo]) -> None:
        """Connect, check the cluster id, register the live KRaft brokers, read the whole
        tree (its records go to the sink: what differs from the metadata log's image) and
        take part in the ZooKeeper controller election."""
        s = self.settings
        zk = ZkClient(s.connect, session_timeout_ms=s.session_timeout_ms,
                      connection_timeout_ms=s.session_timeout_ms)
        try:
            await zk.start()
        except Exception as exc:  # kazoo's timeouts and connection errors
            raise MigrationError(f"cannot reach ZooKeeper at {s.connect}: "
                                 f"{type(exc).__name__}: {exc}") from None
        self.zk = zk
        got = await zk.get(zn.CLUSTER_ID)
        if got is None:
            raise MigrationError(f"ZooKeeper at {s.connect} holds no cluster ({zn.CLUSTER_ID} "
                                 "is missing): check zookeeper.connect and its chroot")
        zk_cluster = zn.decode_cluster_id(got[0])
        if zk_cluster != self.cluster_id:
            raise MigrationError(f"ZooKeeper at {s.connect} holds cluster {zk_cluster}, but this "
                                 f"quorum was formatted for cluster {self.cluster_id}: format the "
                                 f"controllers with --cluster-id {zk_cluster}")
        # the mirror's diffs are taken against the log's image: the first read writes what
        # ZooKeeper changed while no controller mirrored it (everything, the first time)
        self.image = copy.deepcopy(log_image)
        self.mirror = ZkMirror(zk, self.image, inter_broker=s.inter_broker_listener,
                               record_sink=self._sink)
        self.controller = ZkController(
            zk, self.mirror, self.image, BrokerInfo(self.node_id, "", 0),
            unclean_for=self._unclean_for, rebalance_interval_s=s.rebalance_interval_s,
            imbalance_percentage=s.imbalance_percentage,
            listener_protocols=s.listener_protocols)
        await self.sync_brokers(live, set())
        await self.mirror.start()
        self.controller.start()

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        if self.mirror is not None:
            await self.mirror.stop()
        if self.zk is not None:
            await self.zk.stop()  # the /controller znode goes with the session
        self.controller = self.mirror = self.zk = None

    async def sync_brokers(self, live: Mapping[int, BrokerInfo], shutting_down: set[int]) -> None:
        """ZooKeeper's view of the KRaft brokers: a persistent ``/brokers/ids/<id>`` for each
        live one (kept across controller failovers; a ZooKeeper broker's own is ephemeral and
        never touched here), and a controlled-shutdown request for each one stopping."""
        zk = self.zk
        assert zk is not None
        now_ms = int(time.time() * 1000)
        for parent, wanted, data in (
                (zn.BROKER_IDS, set(live),
                 lambda b: zn.encode_broker(live[b], now_ms, self.settings.listener_protocols)),
                (zn.CONTROLLED_SHUTDOWN, shutting_down, lambda b: b"")):
            present = {int(c) for c in await zk.children(parent) or [] if c.isdigit()}
            for b in sorted(present - wanted):
                stat = await zk.exists(f"{parent}/{b}")
                if stat is not None and stat.ephemeralOwner == 0:  # ours, not a ZooKeeper broker's
                    with contextlib.suppress(NoNodeError):
                        await zk.delete(f"{parent}/{b}")
            for b in sorted(wanted - present):
                await zk.ensure_path(parent)
                with contextlib.suppress(NodeExistsError):
                    await zk.create(f"{parent}/{b}", data(b))
                    if parent == zn.BROKER_IDS:
                        log.info("broker %d (KRaft) is registered in ZooKeeper for its "
                                 "ZooKeeper-mode peers", b)

    async def new_process(self, broker_id: int) -> None:
        """A new process of a broker registered: a ZooKeeper registration left by its previous
        one (a ZooKeeper-mode process killed before its session expired, or ours) goes, and
        every partition it led is elected again with the next leader epoch, as a ZooKeeper
        broker does for itself on start."""
        zk, image = self.zk, self.image
        assert zk is not None and image is not None
        path = zn.broker_path(broker_id)
        stat = await zk.exists(path)
        if stat is not None:
            with contextlib.suppress(NoNodeError):
                await zk.delete(path)
        live = set(image.brokers) - {broker_id}
        moved = 0
        for topic in list(image.topics.values()):
            for p, state in list(topic.partitions.items()):
                if state.leader != broker_id:
                    continue
                write = reelected_after_restart(state, broker_id, live)
                data = zn.encode_state(zn.LeaderAndIsr(write.leader, write.leader_epoch,
                                                       write.isr, max(image.controller_epoch, 0)))
                with contextlib.suppress(BadVersionError, NoNodeError):
                    await zk.set(zn.state_path(topic.name, p), data, state.partition_epoch)
                    moved += 1
        if moved:
            log.info("electing again %d partition(s) that broker %d led before it restarted",
                     moved, broker_id)


class MigratingController(ClusterQuorumController):
    """The controller of a quorum with ``zookeeper.metadata.migration.enable``: while it leads
    and the move is not finalized, the ZooKeeper cluster decides (see the module doc)."""

    def __init__(self, *args: Any, migration: MigrationSettings, cluster_id: str,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._migration = migration
        self._cluster_id = cluster_id
        self.bridge: ZkBridge | None = None
        self._ready = False  # the bridge's first read is in the log
        self._pending: list[dict[str, Any]] = []
        self._pending_event = asyncio.Event()
        self._flushed = asyncio.Event()
        self._bridge_tasks: list[asyncio.Task[None]] = []

    # -- the loop ---------------------------------------------------------------------------

    def _writes_while_migrating(self) -> bool:
        return True

    async def stop(self) -> None:
        await self._stop_bridge()
        await super().stop()

    async def _run(self) -> None:
        while self.image.zk_migration != rec.ZK_FINALIZED:
            try:
                if self.active:
                    if self.bridge is None:
                        await self._start_bridge()
                    await self._bridge_duties()
                else:
                    self._was_leader = False
                    await self._stop_bridge()
            except asyncio.CancelledError:
                raise
            except (MigrationError, KafkaError) as exc:
                log.error("migration from ZooKeeper: %s", exc)
                await self._stop_bridge()
                await asyncio.sleep(RETRY_S)  # a back-off before linking again
            except Exception:
                log.exception("migration from ZooKeeper: the link failed; linking again")
                await self._stop_bridge()
                await asyncio.sleep(RETRY_S)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RECONCILE_INTERVAL_S)
        await self._stop_bridge()
        log.warning("the move from ZooKeeper is finalized: this controller no longer reads "
                    "ZooKeeper (remove zookeeper.metadata.migration.enable and "
                    "zookeeper.connect from its config)")
        await super()._run()

    async def _start_bridge(self) -> None:
        bridge = ZkBridge(self._migration, self.node_id, self._cluster_id, self._collect,
                          self._unclean_for)
        self.bridge = bridge
        self._flushed.set()
        self._bridge_tasks = [asyncio.get_running_loop().create_task(
            self._pump(), name="zk-migration-pump")]
        live = {b: reg.info for b, reg in self.image.registrations.items() if not reg.fenced}
        await bridge.start(self.image, live)
        await self._flush()
        if self.image.zk_migration != rec.ZK_MIGRATING:
            await self._commit([rec.zk_migration_record(rec.ZK_MIGRATING)])
            log.info("migration from ZooKeeper: the metadata log now holds cluster %s as "
                     "ZooKeeper does; brokers may restart in KRaft mode, one at a time",
                     self._cluster_id)
        self._ready = True
        log.info("migration from ZooKeeper: linked to %s; the ZooKeeper cluster decides until "
                 "the controllers restart without zookeeper.metadata.migration.enable",
                 self._migration.connect)

    async def _stop_bridge(self) -> None:
        self._ready = False
        await cancel_all(self._bridge_tasks)
        self._bridge_tasks = []
        self._pending.clear()
        if self.bridge is not None:
            bridge, self.bridge = self.bridge, None
            await bridge.stop()

    def _collect(self, records: list[dict[str, Any]]) -> None:
        """The mirror's records, kept in order for the metadata log."""
        kept = [r for r in records if r.get("type") not in _NOT_MIRRORED
                and not self._fenced_in_kraft(r)]
        if kept:
            self._pending.extend(kept)
            self._flushed.clear()
            self._pending_event.set()

    def _fenced_in_kraft(self, record: dict[str, Any]) -> bool:
        """A ZooKeeper registration of a broker the quorum has fenced (read just before the
        bridge removed it) does not make it live again."""
        if record.get("type") != "broker":
            return False
        reg = self.image.registrations.get(record["broker_id"])
        return reg is not None and reg.fenced

    async def _pump(self) -> None:
        """Commit the mirrored records in order. A failed commit (leadership lost, or a
        timeout) drops the link: the next one reads ZooKeeper whole against the log again."""
        while True:
            if not self._pending:
                self._flushed.set()
                self._pending_event.clear()
                await self._pending_event.wait()
                continue
            batch, self._pending = self._pending, []
            try:
                await self._commit(batch)
            except Exception as exc:
                log.warning("migration from ZooKeeper: %d mirrored records not committed "
                            "(%s): linking again", len(batch), exc)
                self._ready = False
                self._wake.set()
                return

    async def _flush(self) -> None:
        """Wait until every record mirrored so far is committed."""
        await asyncio.wait_for(self._flushed.wait(), self._timeout_s)

    async def _bridge_duties(self) -> None:
        if not self._ready:
            raise MigrationError("the link to ZooKeeper was lost")
        if not self._was_leader:  # every broker gets a fresh session, as in `_run`
            now = time.monotonic()
            self._last_seen = {b: now for b in self.image.registrations}
            self._shutting_down.clear()
            self._was_leader = True
        await self._expire_sessions()
        live = {b: reg.info for b, reg in self.image.registrations.items() if not reg.fenced}
        assert self.bridge is not None
        await self.bridge.sync_brokers(live, self._shutting_down & set(live))

    # -- what ZooKeeper decides while the move lasts ------------------------------------------

    @property
    def migrating(self) -> bool:
        return self.image.zk_migration != rec.ZK_FINALIZED

    def _zk(self) -> ZkController:
        if not (self._ready and self.active and self.bridge is not None
                and self.bridge.controller is not None):
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"controller {self.node_id} is not "
                             "linked to the ZooKeeper cluster (yet)")
        return self.bridge.controller

    async def register_broker(self, info: BrokerInfo, incarnation: str,
                              features: Mapping[str, tuple[int, int]] | None = None,
                              log_dirs: Sequence[str] = ()) -> int:
        if not self.migrating:
            return await super().register_broker(info, incarnation, features, log_dirs)
        self._zk()
        before = self.image.registrations.get(info.broker_id)
        epoch = await super().register_broker(info, incarnation, features, log_dirs)
        if before is None or before.epoch != epoch:
            assert self.bridge is not None
            await self.bridge.new_process(info.broker_id)
        return epoch

    async def heartbeat(self, broker_id: int, epoch: int, metadata_offset: int, *,
                        want_fence: bool, want_shut_down: bool,
                        offline_dirs: Sequence[str] = ()) -> Any:
        answer = await super().heartbeat(broker_id, epoch, metadata_offset,
                                         want_fence=want_fence, want_shut_down=want_shut_down,
                                         offline_dirs=offline_dirs)
        if self.migrating:
            self._wake.set()  # ZooKeeper's view of the brokers follows (`_bridge_duties`)
        return answer

    async def assign_replicas_to_dirs(
        self, broker_id: int, epoch: int, assignments: Sequence[tuple[str, uuid.UUID, int]],
    ) -> list[ErrorCode]:
        if not self.migrating:
            return await super().assign_replicas_to_dirs(broker_id, epoch, assignments)
        # ZooKeeper keeps no directories; each broker reports them again after the move
        self._registration(broker_id, epoch)
        return [ErrorCode.NONE] * len(assignments)

    async def alter_isr(self, topic: str, partition: int, leader_epoch: int,
                        partition_epoch: int, isr: list[int]) -> PartitionState:
        if not self.migrating:
            return await super().alter_isr(topic, partition, leader_epoch, partition_epoch, isr)
        return await self._zk().alter_isr(topic, partition, leader_epoch, partition_epoch, isr)

    async def alter_isrs(self, changes: Sequence[tuple[str, int, int, int, list[int]]]
                         ) -> list[PartitionState | KafkaError]:
        if not self.migrating:
            return await super().alter_isrs(changes)
        out: list[PartitionState | KafkaError] = []
        for change in changes:  # ZooKeeper takes them one compare-and-set at a time
            try:
                out.append(await self._zk().alter_isr(*change))
            except KafkaError as exc:
                out.append(exc)
        return out

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        if not self.migrating:
            return await super().allocate_producer_ids(broker_id)
        return await self._zk().allocate_producer_ids(broker_id)

    async def elect_leaders(self, election_type: int,
                            partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
        if not self.migrating:
            return await super().elect_leaders(election_type, partitions)
        return await self._zk().elect_leaders(election_type, partitions)

    async def alter_partition_reassignments(
            self, wanted: Mapping[tuple[str, int], list[int] | None], allow_rf_change: bool,
    ) -> dict[tuple[str, int], tuple[int, str | None, Assignment | None]]:
        if not self.migrating:
            return await super().alter_partition_reassignments(wanted, allow_rf_change)
        return await self._zk().alter_partition_reassignments(wanted, allow_rf_change)

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           assignments: Mapping[int, list[int]] | None,
                           configs: Mapping[str, str], *, validate_only: bool = False,
                           ) -> TopicState:
        if not self.migrating:
            return await super().create_topic(name, num_partitions, replication_factor,
                                              assignments, configs, validate_only=validate_only)
        return await self._zk().create_topic(name, num_partitions, replication_factor,
                                             assignments, configs, validate_only=validate_only)

    async def delete_topic(self, topic: TopicState) -> None:
        if not self.migrating:
            return await super().delete_topic(topic)
        return await self._zk().delete_topic(topic)

    async def create_partitions(self, topic: TopicState, total: int,
                                assignments: list[list[int]] | None, *,
                                validate_only: bool = False) -> None:
        if not self.migrating:
            return await super().create_partitions(topic, total, assignments,
                                                   validate_only=validate_only)
        return await self._zk().create_partitions(topic, total, assignments,
                                                  validate_only=validate_only)

    async def alter_configs(self, resource: str, name: str,
                            changes: Mapping[str, str | None]) -> None:
        if not self.migrating:
            return await super().alter_configs(resource, name, changes)
        return await self._zk().alter_configs(resource, name, changes)

    async def alter_client_quotas(
            self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        if not self.migrating:
            return await super().alter_client_quotas(changes)
        return await self._zk().alter_client_quotas(changes)

    async def alter_acls(self, create: Sequence[AclBinding], delete: Sequence[AclBinding]) -> None:
        if not self.migrating:
            return await super().alter_acls(create, delete)
        return await self._zk().alter_acls(create, delete)

    async def wait_until(self, predicate: Callable[[MetadataImage], bool],
                         timeout_s: float) -> bool:
        if not self.migrating or not self._ready or self.bridge is None \
                or self.bridge.controller is None:
            return await super().wait_until(predicate, timeout_s)
        return await self.bridge.controller.wait_until(predicate, timeout_s)
