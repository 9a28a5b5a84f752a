"""Follower side of replication: one fetcher task per leader broker.

A fetcher sends Fetch requests with this broker's id as `replica_id` for every partition it
follows on that leader, appends what comes back as it is (offsets, leader epochs and producer
state kept), and takes the leader's high watermark and log start offset. Divergence is found by
the leader (Fetch v12+ `last_fetched_epoch` → `diverging_epoch`) and the follower truncates to
the end of the last epoch both logs share, then fetches again: replicas never diverge.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.cluster.client import BrokerClient, BrokerConnectionError
from strom.cluster.replication.throttle import ReplicationThrottle
from strom.common.tasks import cancel_and_wait
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, ProtocolError
from strom.security.client import PLAINTEXT, ClientSecurity
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog
from strom.storage.validator import ORIGIN_REPLICATION

log = logging.getLogger(__name__)

FETCH_VERSION = 13  # topic ids, diverging epochs, replica_id as a plain field
LIST_OFFSETS_VERSION = 7
LATEST, EARLIEST = -1, -2
HANDLED_PER_SLICE = 200  # partitions of one response appended before the loop runs others

LogLookup = Callable[[str, int], PartitionLog | None]


@dataclass(slots=True)
class FollowedPartition:
    topic: str
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    delayed_until: float = 0.0  # monotonic; backoff after an error


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    broker_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    security: ClientSecurity = PLAINTEXT  # the inter-broker listener's TLS and SASL


class ReplicaFetcher:
    """Fetches every partition this broker follows on one leader."""

    def __init__(self, leader_id: int, host: str, port: int, settings: FetcherSettings,
                 get_log: LogLookup, on_progress: Callable[[str, int], None],
                 throttle: ReplicationThrottle | None = None) -> None:
        self.leader_id = leader_id
        self._throttle = throttle  # follower.replication.throttled.rate
        self.settings = settings
        self._get_log = get_log
        self._on_progress = on_progress
        self.partitions: dict[tuple[str, int], FollowedPartition] = {}
        self._client = BrokerClient(host, port, client_id=f"strom-replica-{settings.broker_id}",
                                    timeout_s=settings.socket_timeout_ms / 1000,
                                    security=settings.security)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False  # ends the loop even if a cancellation gets lost
        self._failures = 0  # consecutive failed fetches (logged once, then at DEBUG)
        # partitions truncated whose leader-epoch checkpoint is still being written: fetched
        # again only once it is (see DeferredEpochCache on why a crash is then safe)
        self._persisting: set[tuple[str, int]] = set()

    @property
    def address(self) -> tuple[str, int]:
        return self._client.host, self._client.port

    # -- membership ---------------------------------------------------------------------------

    def add(self, p: FollowedPartition) -> None:
        self.partitions[(p.topic, p.partition)] = p
        self._wake.set()

    def remove(self, topic: str, partition: int) -> None:
        self.partitions.pop((topic, partition), None)
        self._persisting.discard((topic, partition))

    def start(self) -> None:
        if self._task is None or (self._task.done() and not self._stopping):
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The loop catches every error of a fetch; should it still end while wanted, its
        partitions would never be fetched again: log it and start it anew."""
        if self._stopping or task.cancelled():
            return
        log.error("replica fetcher for leader %d ended unexpectedly (%r): restarting it",
                  self.leader_id, task.exception())
        asyncio.get_running_loop().call_later(self.settings.backoff_ms / 1000, self.start)

    async def stop(self) -> None:
        """Stop fetching; safe to call again (e.g. when a first call was itself cancelled)."""
        self._stopping = True
        await cancel_and_wait(self._task)
        self._client.close()

    # -- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            now = loop.time()
            held = self._persisting
            ready = [p for p in self.partitions.values()
                     if p.delayed_until <= now and (p.topic, p.partition) not in held]
            if not ready:
                self._wake.clear()
                delays = [p.delayed_until - now for p in self.partitions.values()
                          if (p.topic, p.partition) not in held]
                timeout = min(delays) if delays else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            try:
                await self._fetch_once(ready)
                if self._failures:
                    log.info("fetching from leader %d again after %d failed attempts",
                             self.leader_id, self._failures)
                    self._failures = 0
            except (BrokerConnectionError, ProtocolError) as exc:
                # one line when a leader becomes unreachable, not one per retry
                self._failures += 1
                log.log(logging.INFO if self._failures == 1 else logging.DEBUG,
                        "fetch from leader %d failed: %s; retrying every %d ms",
                        self.leader_id, exc, self.settings.backoff_ms)
                self._delay(ready, loop.time())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for leader %d failed", self.leader_id)
                self._delay(ready, loop.time())

    def _delay(self, parts: list[FollowedPartition], now: float) -> None:
        for p in parts:
            p.delayed_until = now + self.settings.backoff_ms / 1000

    def _request(self, ready: list[FollowedPartition]) -> dict[str, Any]:
        s = self.settings
        topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
        throttle = self._throttle
        held = throttle if throttle is not None and throttle.exceeded() else None
        for p in ready:
            plog = self._get_log(p.topic, p.partition)
            if plog is None:
                continue
            if held is not None and held.throttled(p.topic, p.partition, s.broker_id):
                continue  # a throttled replica waits until the follower's rate allows more
            latest = plog.latest_epoch
            topics.setdefault(p.topic_id, []).append({
                "partition": p.partition,
                "current_leader_epoch": p.leader_epoch,
                "fetch_offset": plog.log_end_offset,
                "last_fetched_epoch": latest if latest >= 0 else -1,
                "log_start_offset": plog.log_start_offset,
                "partition_max_bytes": s.partition_max_bytes,
            })
        return {
            "replica_id": s.broker_id, "max_wait": s.max_wait_ms, "min_bytes": s.min_bytes,
            "max_bytes": s.max_bytes, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()],
            "forgotten_topics_data": [], "rack_id": "",
        }

    async def _fetch_once(self, ready: list[FollowedPartition]) -> None:
        request = self._request(ready)
        if not request["topics"]:
            self._delay(ready, asyncio.get_running_loop().time())
            return
        timeout = (self.settings.max_wait_ms + self.settings.socket_timeout_ms) / 1000
        response = await self._client.request(ApiKey.FETCH, FETCH_VERSION, request, timeout)
        if response.error_code:
            raise BrokerConnectionError(f"fetch error {ErrorCode(response.error_code).name}")
        by_id = {p.topic_id: p.topic for p in ready}
        handled = 0
        for t in response.responses:
            topic = by_id.get(t.topic_id)
            if topic is None:
                continue
            for r in t.partitions:
                followed = self.partitions.get((topic, r.partition_index))
                if followed is None or followed.topic_id != t.topic_id:
                    continue  # removed or re-created while the fetch was in flight
                await self._handle(followed, r)
                handled += 1
                if handled % HANDLED_PER_SLICE == 0:
                    await asyncio.sleep(0)  # a response for 1,000 partitions: let others run

    async def _handle(self, p: FollowedPartition, r: Any) -> None:
        plog = self._get_log(p.topic, p.partition)
        if plog is None or plog.closed:
            return
        code = r.error_code
        if code == ErrorCode.NONE:
            diverging = r.diverging_epoch
            if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0:
                self._truncate_diverging(p, plog, diverging.epoch, diverging.end_offset)
                return
            records = r.records
            if records is not None and len(records):
                throttle = self._throttle
                if throttle is not None and throttle.throttled(p.topic, p.partition,
                                                               self.settings.broker_id):
                    throttle.record(len(records))
                try:
                    plog.append(records, leader_epoch=p.leader_epoch,
                                now_ms=_now_ms(), origin=ORIGIN_REPLICATION)
                except StorageError as exc:
                    log.warning("cannot append replicated data to %s-%d: %s", p.topic,
                                p.partition, exc)
                    self._delay([p], asyncio.get_running_loop().time())
                    return
            self._follow_watermarks(plog, r.high_watermark, r.log_start_offset)
            self._on_progress(p.topic, p.partition)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._reset_out_of_range(p, plog)
        else:
            # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_*: the leader
            # and we disagree about who leads; metadata will catch up, so back off meanwhile.
            log.debug("fetch of %s-%d from %d: %s", p.topic, p.partition, self.leader_id,
                      ErrorCode(code).name)
            self._delay([p], asyncio.get_running_loop().time())

    def _follow_watermarks(self, plog: PartitionLog, leader_hw: int, leader_lso: int) -> None:
        hw = min(leader_hw, plog.log_end_offset)
        if hw >= 0:
            plog.high_watermark = hw
        if leader_lso > plog.log_start_offset:
            target = min(leader_lso, plog.high_watermark)
            if target > plog.log_start_offset:
                plog.delete_records_before(target)

    def _truncate_diverging(self, p: FollowedPartition, plog: PartitionLog, leader_epoch: int,
                            leader_end: int) -> None:
        """Cut our log at the end of the last epoch we share with the leader."""
        epoch, own_end = plog.end_offset_for_epoch(leader_epoch)
        target = leader_end if epoch < 0 else min(leader_end, own_end)
        target = max(target, 0)
        if target < plog.log_end_offset:
            log.info("truncating %s-%d from %d to %d (diverged from leader %d at epoch %d)",
                     p.topic, p.partition, plog.log_end_offset, target, self.leader_id,
                     leader_epoch)
        # Also with nothing to cut: our epochs past the target (one we led without writing in
        # it, unknown to this leader) go, or the next fetch would diverge the same way again.
        plog.truncate_to(target)
        plog.epochs.truncate_from_end(target)
        self._hold_until_persisted(p, plog)

    async def _reset_out_of_range(self, p: FollowedPartition, plog: PartitionLog) -> None:
        """Our log end is outside the leader's log: behind its start (retention) or past its
        end (an unclean leader). Ask the leader for both ends and move there."""
        leader_end = await self._list_offset(p, LATEST)
        if leader_end is not None and leader_end < plog.log_end_offset:
            log.warning("truncating %s-%d from %d to the leader's end %d", p.topic, p.partition,
                        plog.log_end_offset, leader_end)
            plog.truncate_to(leader_end)
            self._hold_until_persisted(p, plog)
            return
        leader_start = await self._list_offset(p, EARLIEST)
        if leader_start is not None and leader_start > plog.log_end_offset:
            log.info("%s-%d is behind the leader's log start %d: restarting the log there",
                     p.topic, p.partition, leader_start)
            plog.truncate_fully_and_start_at(leader_start)
            self._hold_until_persisted(p, plog)
            return
        self._delay([p], asyncio.get_running_loop().time())

    def _hold_until_persisted(self, p: FollowedPartition, plog: PartitionLog) -> None:
        """After a truncation, fetch the partition again only once its leader-epoch checkpoint
        has the truncation (written in a worker thread): then a crash can only leave a log
        that ends where the file's epochs do, never newer records under stale epochs."""
        waiting = plog.epochs.persisted()
        if waiting is None:
            return
        key = (p.topic, p.partition)
        self._persisting.add(key)

        def landed(_f: asyncio.Future[None]) -> None:
            if key not in self._persisting:
                return  # no longer followed here
            if plog.epochs.current or plog.closed:
                self._persisting.discard(key)
                self._wake.set()
            else:  # the write failed (logged): try again after the backoff
                asyncio.get_running_loop().call_later(
                    self.settings.backoff_ms / 1000, self._retry_persist, p, plog)

        waiting.add_done_callback(landed)

    def _retry_persist(self, p: FollowedPartition, plog: PartitionLog) -> None:
        if (p.topic, p.partition) in self._persisting:
            self._persisting.discard((p.topic, p.partition))
            self._hold_until_persisted(p, plog)
            self._wake.set()

    async def _list_offset(self, p: FollowedPartition, timestamp: int) -> int | None:
        request = {
            "replica_id": self.settings.broker_id, "isolation_level": 0,
            "topics": [{"name": p.topic, "partitions": [{
                "partition_index": p.partition, "current_leader_epoch": p.leader_epoch,
                "timestamp": timestamp}]}],
        }
        response = await self._client.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
        for t in response.topics:
            for r in t.partitions:
                if r.error_code == ErrorCode.NONE:
                    return int(r.offset)
        return None


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
