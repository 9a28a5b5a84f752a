"""What a scrape reads, copied on the event loop in slices: the loop owns the broker's state,
so the scrape thread never walks it while it changes, and a broker of 10,000 partitions holds
its clients for no more than a slice at a time (`strom.common.slices`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from strom.broker.core import Broker
from strom.broker.metrics.leader_ends import LeaderEnds
from strom.common.slices import Slicer
from strom.controller.loader import MetadataProgress
from strom.metrics.primitives import HistogramSnapshot
from strom.storage.errors import StorageError

NO_LEADER = -1


class Listening(Protocol):
    """A listener as the metrics see it (`strom.broker.server.BrokerServer`)."""

    @property
    def connection_count(self) -> int: ...

    @property
    def listener_name(self) -> str: ...

    def waiting_requests(self) -> dict[int, int]: ...


@dataclass(frozen=True)
class ApiSnapshot:
    requests: dict[int, int]  # per version
    phases: tuple[HistogramSnapshot, ...]  # as stats.PHASES
    waiting: int


@dataclass(frozen=True)
class LogRow:
    topic: str
    partition: int
    size: int
    start_offset: int
    end_offset: int
    segments: int


@dataclass(frozen=True)
class LagRow:
    group: str
    topic: str
    partition: int
    committed: int
    end_offset: int  # the high watermark: what a read_uncommitted consumer can reach
    lag_seconds: float | None  # from the timestamp of the first record not consumed

    @property
    def lag(self) -> int:
        return max(self.end_offset - self.committed, 0)


@dataclass(frozen=True)
class QuotaRow:
    kind: str  # Kafka's quota type: Produce, Fetch, Request, ControllerMutation
    user: str
    client_id: str
    bound: float
    rate: float  # measured, in the quota's unit
    throttle_ms: float  # average throttle time of the window's requests


@dataclass
class Snapshot:
    broker_id: int
    topics: dict[str, dict[str, int]] = field(default_factory=dict)
    apis: dict[int, ApiSnapshot] = field(default_factory=dict)
    connections: dict[str, tuple[int, int]] = field(default_factory=dict)  # open, created
    logs: list[LogRow] = field(default_factory=list)
    flush: HistogramSnapshot | None = None
    leaders: int = 0
    replicas: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0
    leader_replication_rate: float = 0.0  # bytes/s sent to throttled replicas
    follower_replication_rate: float = 0.0  # bytes/s fetched for throttled replicas
    active_controller: bool = False
    offline_partitions: int = 0
    global_partitions: int = 0
    global_topics: int = 0
    leader_elections: int = 0
    unclean_leader_elections: int = 0
    lag: list[LagRow] = field(default_factory=list)
    quotas: list[QuotaRow] = field(default_factory=list)
    # a KRaft node's metadata (KIP-835): None without KRaft
    metadata: MetadataProgress | None = None
    metadata_lag_ms: int = 0
    controller_role: bool = False


_QUOTA_KINDS = ("Produce", "Fetch", "Request", "ControllerMutation")


async def take(broker: Broker, listeners: Sequence[Listening],
               leaders: LeaderEnds | None = None) -> Snapshot:
    """Copy what the metrics need, yielding every few milliseconds."""
    slicer = Slicer()
    snap = Snapshot(broker.broker_id)
    stats = broker.stats
    if stats is not None:
        for name, t in list(stats.topics.items()):
            snap.topics[name] = t.as_dict()
        waiting: dict[int, int] = {}  # per API key, over all listeners
        for server in listeners:
            for key, count in server.waiting_requests().items():
                waiting[key] = waiting.get(key, 0) + count
        for key in waiting.keys() - stats.apis.keys():  # waiting before any was answered
            stats.api(key)
        for key, api in list(stats.apis.items()):
            snap.apis[key] = ApiSnapshot(dict(api.requests),
                                         tuple(h.snapshot() for h in api.phases),
                                         waiting.get(key, 0))
        for server in listeners:
            name = server.listener_name
            opened, created = snap.connections.get(name, (0, 0))
            snap.connections[name] = (opened + server.connection_count,
                                      created + stats.connections_created.get(name, 0))
    await slicer.tick()
    for plog in list(broker.logs.logs()):
        snap.logs.append(LogRow(plog.topic, plog.partition, plog.size_bytes(),
                                plog.log_start_offset, plog.log_end_offset, len(plog.segments)))
        await slicer.tick()
    snap.flush = broker.logs.flush_times.snapshot()
    await _partitions(broker, snap, slicer)
    snap.lag = await lag_rows(broker, slicer, leaders)
    now = time.monotonic()
    for kind, manager in zip(_QUOTA_KINDS, broker.quotas.managers, strict=True):
        for (user, client_id), client in list(manager.rates.items()):
            snap.quotas.append(QuotaRow(kind, user, client_id, client.bound,
                                        client.rate.measure(now), client.average_throttle_ms(now)))
    return snap


async def _partitions(broker: Broker, snap: Snapshot, slicer: Slicer) -> None:
    """Kafka's ReplicaManager gauges (this broker's replicas) and the controller's (all)."""
    me = broker.broker_id
    image = broker.image
    controller = broker.controller
    snap.active_controller = image.controller_id == me
    snap.global_topics = len(image.topics)
    for topic in list(image.topics.values()):
        min_isr: int | None = None
        for state in list(topic.partitions.values()):
            snap.global_partitions += 1
            if state.leader == NO_LEADER:
                snap.offline_partitions += 1
            if me in state.replicas:
                snap.replicas += 1
            if state.leader != me:
                continue
            snap.leaders += 1
            if len(state.isr) < len(state.replicas):
                snap.under_replicated += 1
            if min_isr is None:
                plog = broker.logs.get(topic.name, state.partition)
                min_isr = plog.config.min_insync_replicas if plog is not None else 1
            if len(state.isr) < min_isr:
                snap.under_min_isr += 1
        await slicer.tick()
    if not snap.active_controller:
        snap.offline_partitions = 0  # Kafka reports it on the active controller only
    if broker.metadata_progress is not None:
        snap.metadata = broker.metadata_progress()
        snap.metadata_lag_ms = snap.metadata.lag_ms(int(time.time() * 1000))
        snap.controller_role = broker.controller_role
    snap.leader_elections = controller.leader_elections
    snap.unclean_leader_elections = controller.unclean_leader_elections
    if broker.replicas is not None:
        snap.isr_shrinks = broker.replicas.isr_shrinks
        snap.isr_expands = broker.replicas.isr_expands
        snap.leader_replication_rate = broker.replicas.leader_throttle.byte_rate()
        snap.follower_replication_rate = broker.replicas.follower_throttle.byte_rate()


async def lag_rows(broker: Broker, slicer: Slicer | None = None,
                   leaders: LeaderEnds | None = None) -> list[LagRow]:
    """Consumer lag of every group this broker coordinates: the high watermark minus the
    committed offset, and how old the first record not yet consumed is. The high watermark of
    a partition this broker holds no replica of is asked of its leader (``leaders``); its age
    is not known here."""
    slicer = slicer if slicer is not None else Slicer()
    now_ms = time.time() * 1000
    rows = []
    remote: list[tuple[str, str, int, int]] = []
    for group, offsets in broker.groups.committed_offsets().items():
        for (topic, partition), committed in sorted(offsets.items()):
            plog = broker.logs.get(topic, partition)
            if committed < 0:
                continue
            if plog is None:
                remote.append((group, topic, partition, committed))
                continue
            end = plog.high_watermark
            seconds: float | None = 0.0
            if committed < end:
                try:
                    stamp = plog.batch_timestamp_at(max(committed, plog.log_start_offset))
                except (StorageError, OSError):
                    stamp = None
                seconds = max(now_ms - stamp, 0) / 1000 if stamp is not None and stamp >= 0 else None
            rows.append(LagRow(group, topic, partition, committed, end, seconds))
            await slicer.tick()
    if remote and leaders is not None:
        ends = await leaders.high_watermarks({(t, p) for _, t, p, _ in remote})
        rows += [LagRow(g, t, p, c, ends[(t, p)], None) for g, t, p, c in remote
                 if (t, p) in ends]
    return rows


def take_from_thread(loop: asyncio.AbstractEventLoop, broker: Broker,
                     listeners: Sequence[Listening], timeout_s: float,
                     leaders: LeaderEnds | None = None) -> Snapshot:
    """From the scrape thread: have the loop take a snapshot, and wait for it."""
    return asyncio.run_coroutine_threadsafe(take(broker, listeners, leaders),
                                            loop).result(timeout_s)
