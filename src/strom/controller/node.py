"""A controller-only KRaft node (``process.roles=controller``): one voter of the metadata quorum.

It holds the node's identity (``node.id``, the cluster id from its formatted log dirs), the
metadata log (``metadata.log.dir``, default the first of ``log.dirs``:
``__cluster_metadata-0`` with its ``quorum-state``), the sans-IO `RaftClient` over them with
the static voter set of ``controller.quorum.voters`` (kraft.version 0), and the `RaftDriver`
that runs it. `strom.broker.app` serves its CONTROLLER listener with `ControllerRouter`.

What a controller does with the quorum (metadata records, broker registrations) comes in the
later stages of issue 30; so far the quorum elects a leader, replicates and commits its
control records, and answers DescribeQuorum.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strom.broker.wiring import StartupError, cluster_id_for, read_meta_properties
from strom.cluster import records as rec
from strom.cluster.image import MetadataImage
from strom.common.tasks import cancel_all
from strom.config.broker import BrokerConfig
from strom.controller.apis import ControllerRouter
from strom.controller.broker_apis import ForwardedHandler
from strom.controller.cluster_controller import ClusterQuorumController
from strom.controller.loader import MetadataLoader
from strom.controller.quorum_controller import encode_values
from strom.controller.registration import ControllerRegistrationManager
from strom.controller.upgrade import upgrade_single_node_metadata
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.raft import messages as m
from strom.raft.base import RaftListener
from strom.raft.client import RaftClient
from strom.raft.config import QuorumConfig
from strom.raft.driver import RaftDriver
from strom.raft.messages import Message
from strom.raft.quorum_state import FileQuorumStateStore
from strom.raft.storage import (
    METADATA_DIR_NAME,
    QUORUM_STATE_FILE,
    PartitionRaftLog,
    metadata_log_config,
)
from strom.raft.types import (
    Endpoint,
    KRaftVersion,
    NotLeaderError,
    RaftError,
    RaftSettings,
    ReplicaKey,
    VoterNode,
    VoterSet,
)
from strom.security.acl import Authorizer
from strom.security.client import controller_security
from strom.storage.checkpoints import topic_id_from_str

log = logging.getLogger("strom.controller")

# How long a stopping leader waits for a successor after it resigned (EndQuorumEpoch), and a
# stopping candidate for the election it started; within the shutdown step's bound.
SHUTDOWN_TIMEOUT_MS = 2000


def metadata_log_dir(config: BrokerConfig) -> Path:
    """metadata.log.dir, else the first of log.dirs (Kafka's rule)."""
    configured = config.get("metadata.log.dir")
    return Path(configured) if configured else config.log_dirs[0]


def formatted_cluster_id(dirs: list[Path], node_id: int) -> str:
    """The cluster id of a KRaft node's formatted log dirs (Kafka's ``kafka-storage format``
    writes ``meta.properties``). A KRaft node never makes one up: voters with different ids
    would refuse each other's requests (INCONSISTENT_CLUSTER_ID)."""
    if not any((d / "meta.properties").is_file() for d in dirs):
        shown = ", ".join(str(d) for d in dirs)
        raise StartupError(
            f"no meta.properties in {shown}: the log dirs of a KRaft node must be formatted "
            f"with the cluster's id first (kafka-storage format, or a meta.properties holding "
            f"version=1, cluster.id=<the cluster's id> and node.id={node_id})")
    return cluster_id_for(dirs, node_id)


def voter_set(quorum: QuorumConfig, listener: str) -> VoterSet:
    """The static voters (controller.quorum.voters); none for a dynamic quorum, whose voters
    come from its metadata log (voter_history.py)."""
    if not quorum.voters:
        return VoterSet.none()
    return VoterSet.of(VoterNode(ReplicaKey(v.node_id), (Endpoint(listener, v.host, v.port),))
                       for v in quorum.voters)


# controller.quorum.bootstrap.servers as the Raft client's peers: ids no node has (Kafka numbers
# them the same way), mapped to their addresses
FIRST_BOOTSTRAP_ID = -2


def bootstrap_endpoints(quorum: QuorumConfig, listener: str) -> dict[int, Endpoint]:
    return {FIRST_BOOTSTRAP_ID - i: Endpoint(listener, hp.host, hp.port)
            for i, hp in enumerate(quorum.bootstrap_servers)}


def optional_directory_id(metadata_dir: Path) -> uuid.UUID | None:
    try:
        return metadata_directory_id(metadata_dir)
    except StartupError:
        return None


def metadata_directory_id(metadata_dir: Path) -> uuid.UUID:
    """The directory.id `strom storage format` wrote in the metadata log dir's meta.properties:
    the replica's half of its voter key in a dynamic quorum (a wiped and reformatted disk gets
    a new one, so it can never vote as the replica it replaced)."""
    meta = metadata_dir / "meta.properties"
    try:
        return topic_id_from_str(read_meta_properties(meta)["directory.id"].strip())
    except (StartupError, KeyError, ValueError) as e:
        raise StartupError(f"{meta} has no valid directory.id ({e}): a controller of a dynamic "
                           "quorum (controller.quorum.bootstrap.servers) needs its metadata log "
                           "dir formatted by `strom storage format`") from None


def raft_settings(quorum: QuorumConfig, listener: str) -> RaftSettings:
    return RaftSettings(
        election_timeout_ms=quorum.election_timeout_ms,
        fetch_timeout_ms=quorum.fetch_timeout_ms,
        election_backoff_max_ms=quorum.election_backoff_max_ms,
        request_timeout_ms=quorum.request_timeout_ms,
        retry_backoff_ms=quorum.retry_backoff_ms,
        append_linger_ms=quorum.append_linger_ms,
        fetch_max_bytes=quorum.fetch_max_bytes,
        fetch_snapshot_max_bytes=quorum.fetch_snapshot_max_bytes,
        listener=listener,
    )


class ControllerNode:
    """One controller: build it, `start` it, serve `router()`, `stop` it."""

    stats = None  # no request metrics on a controller yet (the servers read this)

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.quorum = QuorumConfig.from_config(config.get)
        if self.quorum.node_id is None or not self.quorum.controller_listener_names:
            raise StartupError("a controller needs node.id and controller.listener.names")
        self.node_id: int = self.quorum.node_id
        self.listener = self.quorum.controller_listener_names[0].upper()
        self.metadata_dir = metadata_log_dir(config)
        dirs = list(dict.fromkeys([self.metadata_dir, *config.log_dirs]))
        self.cluster_id = formatted_cluster_id(dirs, self.node_id)
        self.static_voters = voter_set(self.quorum, self.listener)
        # a dynamic quorum (KIP-853): no controller.quorum.voters; the voters are in the log
        self.dynamic = not self.quorum.voters
        # the replica's directory id: a dynamic quorum's voters need one; a static voter sends
        # its own when formatted with one (the kraft.version upgrade needs every voter's)
        self.directory_id = (metadata_directory_id(self.metadata_dir) if self.dynamic
                             else optional_directory_id(self.metadata_dir))
        self.settings = raft_settings(self.quorum, self.listener)
        self.raft_log: PartitionRaftLog | None = None
        self.raft: RaftClient | None = None
        self.driver: RaftDriver | None = None
        self.fatal: BaseException | None = None
        self.failed = asyncio.Event()  # set when the Raft client hit a broken invariant
        # in a cluster: the controller brokers register with, and the handler of the admin
        # requests they forward (strom.controller.broker_apis); set by the node's builder
        self.cluster: ClusterQuorumController | None = None
        self.forwarded: ForwardedHandler | None = None
        # the node's metadata loader (its image gives ApiVersions' finalized features), and
        # what commits feature levels (UpdateFeatures on the CONTROLLER listener); set by the
        # node's builder
        self.loader: MetadataLoader | None = None
        self.feature_controller: object | None = None
        # a node with the controller role in a cluster keeps itself registered (KIP-919); set
        # and started by the node's builder, stopped here
        self.registration: ControllerRegistrationManager | None = None
        # the ACLs the CONTROLLER listener checks (Kafka's: CLUSTER_ACTION for what nodes
        # ask of each other, ALTER or DESCRIBE for the admin requests): the node's authorizer,
        # set by its builder; None: everything allowed
        self.authorizer: Authorizer | None = None
        self._noops: asyncio.Task[None] | None = None

    @property
    def log_dir(self) -> Path:
        return self.metadata_dir / METADATA_DIR_NAME

    @property
    def image(self) -> MetadataImage | None:
        return self.loader.image if self.loader is not None else None

    @property
    def voters(self) -> VoterSet:
        """The voters in force (a dynamic quorum's change as the log does)."""
        return self.raft.quorum.voters if self.raft is not None else self.static_voters

    @property
    def is_controller(self) -> bool:
        return "controller" in (self.config.get("process.roles") or [])

    def router(self) -> ControllerRouter:
        """The CONTROLLER listener's: the quorum's APIs, SASL (a SASL_PLAINTEXT or SASL_SSL
        controller listener authenticates as any listener does), and in a cluster the
        brokers' and controllers' requests to the active controller."""
        from strom.broker.handlers import sasl
        from strom.controller import broker_apis

        in_cluster = self.dynamic or len(self.voters) > 1 \
            or "broker" not in (self.config.get("process.roles") or [])
        return ControllerRouter(self, extra=[sasl, broker_apis] if in_cluster else [sasl])

    def _local_endpoints(self) -> tuple[Endpoint, ...]:
        """This controller's listeners as its voter entry holds them (a dynamic quorum's)."""
        from strom.config.listeners import controller_endpoints

        if not self.dynamic or not self.is_controller:
            return ()
        names = self.quorum.controller_listener_names
        return tuple(Endpoint(n, h, p) for n, h, p in controller_endpoints(self.config, names))

    async def start(self, listeners: Sequence[RaftListener] = ()) -> None:
        """Open the metadata log (an old single node's is upgraded first: upgrade.py) and start
        the Raft client, with `listeners` registered before its first poll."""
        config = self.config
        await asyncio.to_thread(upgrade_single_node_metadata, self.log_dir)
        log_config = metadata_log_config(segment_bytes=config.get("metadata.log.segment.bytes"),
                                         segment_ms=config.get("metadata.log.segment.ms"))
        # Opening recovers the log: off the event loop (the Raft thread takes it over).
        self.raft_log = await asyncio.to_thread(PartitionRaftLog.open, self.metadata_dir,
                                                config=log_config)
        bootstrap = bootstrap_endpoints(self.quorum, self.listener) if self.dynamic else {}
        self.raft = RaftClient(
            node_id=self.node_id, voters=self.static_voters, log=self.raft_log,
            store=FileQuorumStateStore(self.log_dir / QUORUM_STATE_FILE),
            rng=random.Random(), cluster_id=self.cluster_id, settings=self.settings,
            directory_id=self.directory_id,
            bootstrap=list(bootstrap) if self.dynamic else None,
            bootstrap_endpoints=bootstrap, local_endpoints=self._local_endpoints(),
            kraft_version=KRaftVersion.DYNAMIC if self.dynamic else KRaftVersion.STATIC,
            auto_join=self.dynamic and self.is_controller and self.quorum.auto_join)
        for listener in listeners:
            self.raft.register(listener)
        self.driver = RaftDriver(self.raft, client_id=f"raft-client-{self.node_id}",
                                 request_timeout_ms=self.settings.request_timeout_ms,
                                 security=controller_security(config),
                                 on_fatal=self._on_fatal)
        await self.driver.start()
        idle_ms = config.get("metadata.max.idle.interval.ms")
        if idle_ms > 0 and self.is_controller:
            self._noops = asyncio.get_running_loop().create_task(
                self._write_noops(idle_ms / 1000), name="metadata-noops")

    async def _write_noops(self, interval_s: float) -> None:
        """As Kafka's active controller does, a no-op record every metadata.max.idle.interval.ms
        while this node leads the quorum: the metadata log moves while nothing changes, so a
        node can tell its metadata is current (KIP-835's last-applied-record-lag-ms grows on a
        node cut off from the quorum instead of staying flat), and every voter's fetch
        returns records, as in Kafka."""
        value = encode_values([rec.noop_record()])
        while True:
            await asyncio.sleep(interval_s)
            loader = self.loader
            if loader is None or loader.leader.leader_id != self.node_id:
                continue
            try:
                await self.append(value)
            except NotLeaderError:
                continue  # lost the leadership meanwhile: the new leader writes them
            except RaftError as exc:
                log.debug("no-op record not appended: %s", exc)

    def _on_fatal(self, exc: BaseException) -> None:
        self.fatal = exc
        self.failed.set()

    async def stop(self) -> None:
        """Hand leadership over (bounded), then close the metadata log."""
        if self._noops is not None:
            await cancel_all([self._noops])
            self._noops = None
        if self.registration is not None:
            await self.registration.stop()
        driver = self.driver
        if driver is None:
            if self.raft_log is not None:
                self.raft_log.close()
            return
        try:
            await driver.stop(SHUTDOWN_TIMEOUT_MS)
        finally:
            if self.raft_log is not None:
                await driver.call(self.raft_log.close)
            driver.close_executor()

    # -- what the CONTROLLER listener's handlers ask -----------------------------------------

    async def raft_request(self, api_key: ApiKey, request: Mapping[str, Any]) -> Message:
        if self.driver is None:
            return {"error_code": int(ErrorCode.BROKER_NOT_AVAILABLE)}
        source = m.fetch_replica_id(request) if api_key == ApiKey.FETCH else -1
        return await self.driver.handle_request(source, api_key, request)

    async def append(self, values: list[bytes]) -> int:
        """Records for the leader to commit, as one atomic group: the offset of the last one
        (`NotLeaderError` when this node does not lead the quorum)."""
        if self.driver is None:
            raise NotLeaderError(f"node {self.node_id} is not running")
        return await self.driver.append(values)

    async def snapshot(self, end_offset: int, values: list[bytes]) -> object:
        """Snapshot the state machine as of `end_offset` (written in the Raft thread), then
        apply metadata.max.retention.bytes/.ms to the older snapshots and the log."""
        if self.driver is None or self.raft is None:
            return None
        sid = await self.driver.call(self.raft.create_snapshot, end_offset, values)
        await self.driver.call(self.raft.enforce_retention,
                               self.config.get("metadata.max.retention.bytes"),
                               self.config.get("metadata.max.retention.ms"), int(time.time() * 1000))
        return sid

    def kraft_version(self) -> int:
        """The quorum's kraft.version (0: static voters, 1: dynamic)."""
        return int(self.raft.quorum.kraft_version) if self.raft is not None else 0

    async def upgrade_kraft_version(self, level: int) -> None:
        """kraft.version to `level` (0 -> 1: the static voters become a dynamic voter set),
        once committed and applied here. KafkaError: not the leader (NOT_CONTROLLER), or why
        not (INVALID_UPDATE_VERSION)."""
        if self.driver is None or self.raft is None or self.image is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} is not running")
        try:
            offset = await self.driver.call(self.raft.upgrade_kraft_version, level)
        except NotLeaderError as exc:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
        except RaftError as exc:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, str(exc)) from exc
        self.driver.wake()
        loader = self.loader
        if offset is None or loader is None:
            return
        # committed once this node's loader has applied past it, as every controller change
        if not await loader.wait_for(lambda: loader.applied_offset > offset,
                                     self.settings.request_timeout_ms / 1000 * 5):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the kraft.version upgrade did not "
                             "commit in time (it may still commit)")

    def leader_id(self) -> int | None:
        return self.raft.quorum.leader_id if self.raft is not None else None

    def controller_endpoints(self) -> dict[int, tuple[str, int]]:
        """Each voter's address on the controller listener."""
        out = {}
        for node in self.voters:
            ep = node.endpoint(self.listener)
            if ep is not None:
                out[node.key.id] = (ep.host, ep.port)
        return out

    def describe(self) -> str:
        if self.dynamic:
            servers = ",".join(f"{hp.host}:{hp.port}" for hp in self.quorum.bootstrap_servers)
            quorum = (f"a dynamic quorum (bootstrap servers {servers}, directory id "
                      f"{self.directory_id})")
        else:
            voters = ",".join(f"{i}@{h}:{p}"
                              for i, (h, p) in sorted(self.controller_endpoints().items()))
            quorum = f"voters {voters}"
        return (f"controller {self.node_id} of {quorum}, metadata log in {self.log_dir}, "
                f"cluster id {self.cluster_id}")
