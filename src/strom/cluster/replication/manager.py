"""Replication on one broker: which local partitions it leads or follows, and what follows.

- Leading: keeps a `LeaderState` per partition, moves the high watermark as followers fetch,
  shrinks and expands the ISR through the controller (a compare-and-set on the partition state),
  and lets acks=all produce requests wait for the high watermark without polling.
- Following: hands the partition to the fetcher of its leader.

The roles come from the metadata image only (leader, replicas, ISR, leader epoch), so a broker
converges on whatever the controller decided, whichever way the image was updated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from strom.cluster.image import METADATA_TOPIC, MetadataImage, PartitionState
from strom.cluster.records import Change
from strom.cluster.replication.fetcher import (
    FetcherSettings,
    FollowedPartition,
    LogLookup,
    ReplicaFetcher,
)
from strom.cluster.replication.leader import UNKNOWN_OFFSET, LeaderState
from strom.cluster.replication.throttle import FOLLOWER, LEADER, UNLIMITED, ReplicationThrottle
from strom.common.tasks import cancel_all
from strom.common.waiters import WaiterRegistry
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.log import PartitionLog

log = logging.getLogger(__name__)

Key = tuple[str, int]

# A metadata change moving more partitions than this logs one summary line for them instead of
# a line each (1,000 lines are ~15 ms of the event loop); each stays at DEBUG.
LOG_EACH_UP_TO = 32


def _now_ms() -> int:
    return int(time.time() * 1000)


def _unlimited() -> int:
    return UNLIMITED


class ReplicaManager:
    def __init__(self, broker_id: int, image: MetadataImage, controller: Any,
                 get_log: LogLookup, waiters: WaiterRegistry, settings: FetcherSettings, *,
                 lag_max_ms: int, min_isr_for: Callable[[str], int],
                 leader_throttle: ReplicationThrottle | None = None,
                 follower_throttle: ReplicationThrottle | None = None,
                 ready_log: LogLookup | None = None) -> None:
        self.broker_id = broker_id
        self.image = image
        self.controller = controller
        self._get_log = get_log
        # roles are taken only for logs that exist: one still being created (in slices, a
        # large topic's) calls on_log_created when it is there, so a metadata change never
        # creates 1,000 logs in one go on the loop (issue 28)
        self._ready_log = ready_log or get_log
        self.waiters = waiters
        self.settings = settings
        self.lag_max_ms = lag_max_ms
        self._min_isr_for = min_isr_for
        # replication throttles (leader.replication.throttled.rate and the follower's)
        self.leader_throttle = leader_throttle or ReplicationThrottle(
            LEADER, broker_id, image, _unlimited)
        self.follower_throttle = follower_throttle or ReplicationThrottle(
            FOLLOWER, broker_id, image, _unlimited)
        # ISR changes this leader made (Kafka's IsrShrinksPerSec and IsrExpandsPerSec)
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.leaders: dict[Key, LeaderState] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._followed: dict[Key, int] = {}  # partition -> leader id we fetch it from
        self._isr_in_flight: set[Key] = set()
        # Replicas this leader asked to add to an ISR, counted for the high watermark until the
        # image shows a partition epoch of at least the first number (Kafka's "maximal ISR",
        # KIP-497): the controller may already have them in the ISR, and may elect one of them.
        self._isr_maximal: dict[Key, tuple[int, frozenset[int]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retired: set[ReplicaFetcher] = set()  # stopping in the background
        self._started = False
        self._role_level = logging.INFO  # DEBUG while a large change is applied (summarised)
        self._roles_taken = {"leading": 0, "following": 0}

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Take the roles the image gives and start fetching (needs the running loop)."""
        self._started = True
        self.sync_all()

    async def shutdown(self) -> None:
        self._started = False
        await cancel_all(list(self._tasks))
        # every fetcher, including retired ones whose background stop was just cancelled
        for fetcher in [*self.fetchers.values(), *self._retired]:
            await fetcher.stop()
        self.fetchers.clear()
        self._retired.clear()

    # -- roles --------------------------------------------------------------------------------

    def sync_all(self) -> None:
        wanted: set[Key] = set()
        with self._summarised(sum(len(t.partitions) for t in self.image.topics.values())):
            for topic in list(self.image.topics.values()):
                for p in topic.partitions:
                    wanted.add((topic.name, p))
                    self._reconcile(topic.name, p)
        for key in list(self.leaders.keys() | self._followed.keys()):
            if key not in wanted:
                self._stop_all_roles(key)

    @contextlib.contextmanager
    def _summarised(self, partitions: int) -> Iterator[None]:
        """Role changes of a large batch are logged as one line (each at DEBUG)."""
        if partitions <= LOG_EACH_UP_TO or self._role_level != logging.INFO:
            yield
            return
        self._role_level = logging.DEBUG
        self._roles_taken = {"leading": 0, "following": 0}
        try:
            yield
        finally:
            self._role_level = logging.INFO
            taken = self._roles_taken
            if taken["leading"] or taken["following"]:
                log.info("now leading %d and following %d more partitions (one metadata "
                         "change; each at DEBUG)", taken["leading"], taken["following"])

    def on_changes(self, changes: list[Change]) -> None:
        if not self._started:
            return
        with self._summarised(sum(len(c.partitions) for c in changes)):
            self._apply_changes(changes)

    def _apply_changes(self, changes: list[Change]) -> None:
        for change in changes:
            topic = change.topic
            if change.kind in ("topic_deleted", "partitions_deleted") and topic is not None:
                for p in change.partitions:
                    self._stop_all_roles((topic.name, p))
            elif change.kind in ("partitions_created", "partition_changed") and topic is not None:
                for p in change.partitions:
                    self._reconcile(topic.name, p)
            elif change.kind == "brokers_changed":
                self._refresh_fetchers()

    def _state(self, key: Key) -> PartitionState | None:
        t = self.image.topics.get(key[0])
        return t.partitions.get(key[1]) if t is not None else None

    def on_log_created(self, topic: str, partition: int) -> None:
        """A deferred log now exists: take the role the image gives it."""
        if self._started:
            self._reconcile(topic, partition)

    def _reconcile(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        if topic == METADATA_TOPIC:
            return
        state = self._state(key)
        plog = self._ready_log(topic, partition)
        if state is None or plog is None or self.broker_id not in state.replicas:
            self._stop_all_roles(key)
            return
        if state.leader == self.broker_id:
            self._become_leader(key, state, plog)
        else:
            self._become_follower(key, state, plog)

    def _stop_all_roles(self, key: Key) -> None:
        self._isr_maximal.pop(key, None)
        if self.leaders.pop(key, None) is not None:
            plog = self._get_log(*key)
            if plog is not None:
                plog.on_append = None
        self._stop_following(key)
        self.waiters.notify(key)

    def _become_leader(self, key: Key, state: PartitionState, plog: PartitionLog) -> None:
        self._stop_following(key)
        now = _now_ms()
        current = self.leaders.get(key)
        if current is None or current.leader_epoch != state.leader_epoch:
            # Record the new epoch at our log end now, so a follower that diverged from us
            # learns where (Kafka's leader epoch start offset).
            if state.leader_epoch > plog.latest_epoch:
                plog.epochs.assign(state.leader_epoch, plog.log_end_offset)
            self._isr_maximal.pop(key, None)  # a previous term's expansion
            current = LeaderState(self.broker_id, state.replicas, state.leader_epoch,
                                  plog.log_end_offset, now)
            self.leaders[key] = current
            plog.on_append = lambda: self._after_append(key)
            self._roles_taken["leading"] += 1
            log.log(self._role_level, "leading %s-%d at epoch %d from offset %d (ISR %s)",
                    key[0], key[1], state.leader_epoch, plog.log_end_offset, state.isr)
        else:
            current.set_replicas(state.replicas, now)
        self._maybe_advance_hw(key, plog, state)
        self.waiters.notify(key)

    def _after_append(self, key: Key) -> None:
        """Any append to a partition we lead (producers, coordinators, markers): wake the
        followers' long-polling fetches now rather than at their max wait."""
        self.waiters.notify(key)

    def _become_follower(self, key: Key, state: PartitionState, plog: PartitionLog) -> None:
        plog.on_append = None
        self._isr_maximal.pop(key, None)
        if key in self.leaders:
            del self.leaders[key]
            self.waiters.notify(key)  # delayed produces learn they lost leadership
        plog.hw_follows_leo = False
        if state.leader < 0 or state.leader == self.broker_id:
            self._stop_following(key)
            return
        topic = self.image.topics[key[0]]
        followed = FollowedPartition(key[0], topic.topic_id, key[1], state.leader_epoch)
        previous = self._followed.get(key)
        if previous is not None and previous != state.leader:
            self._stop_following(key)
        fetcher = self._fetcher_for(state.leader)
        if fetcher is None:  # the leader is not live: wait for the controller's election
            self._stop_following(key)
            return
        existing = fetcher.partitions.get(key)
        if existing is None or existing.leader_epoch != state.leader_epoch \
                or existing.topic_id != topic.topic_id:
            fetcher.add(followed)
            self._roles_taken["following"] += 1
            log.log(self._role_level, "following %s-%d on broker %d at epoch %d", key[0], key[1],
                    state.leader, state.leader_epoch)
        self._followed[key] = state.leader

    def _stop_following(self, key: Key) -> None:
        leader = self._followed.pop(key, None)
        if leader is None:
            return
        fetcher = self.fetchers.get(leader)
        if fetcher is not None:
            fetcher.remove(*key)
            if not fetcher.partitions:
                self._retire(fetcher)

    def _fetcher_for(self, leader: int) -> ReplicaFetcher | None:
        info = self.image.brokers.get(leader)
        if info is None:
            return None  # not live: the controller will elect someone else or it comes back
        fetcher = self.fetchers.get(leader)
        if fetcher is not None and fetcher.address != (info.host, info.port):
            self._retire(fetcher)
            fetcher = None
        if fetcher is None:
            fetcher = ReplicaFetcher(leader, info.host, info.port, self.settings, self._get_log,
                                     self._on_follower_progress, self.follower_throttle)
            self.fetchers[leader] = fetcher
            fetcher.start()
        return fetcher

    def _retire(self, fetcher: ReplicaFetcher) -> None:
        self.fetchers.pop(fetcher.leader_id, None)
        self._retired.add(fetcher)

        async def stop() -> None:
            await fetcher.stop()
            self._retired.discard(fetcher)

        self._spawn(stop())

    def _refresh_fetchers(self) -> None:
        """A broker came or went: re-home every followed partition (and restart fetchers)."""
        for key in list(self._followed.keys()):
            self._reconcile(*key)
        for t in list(self.image.topics.values()):
            for p, state in t.partitions.items():
                if state.leader != self.broker_id and self.broker_id in state.replicas \
                        and (t.name, p) not in self._followed:
                    self._reconcile(t.name, p)
        for leader_id, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions and leader_id not in self._followed.values():
                self._retire(fetcher)

    def _on_follower_progress(self, topic: str, partition: int) -> None:
        self.waiters.notify((topic, partition))

    # -- leader side --------------------------------------------------------------------------

    def is_leader(self, key: Key) -> bool:
        return key in self.leaders

    def on_replica_fetch(self, key: Key, replica_id: int, fetch_offset: int,
                         plog: PartitionLog) -> int:
        """A follower fetched ``fetch_offset``: returns an error code for the follower."""
        leader = self.leaders.get(key)
        state = self._state(key)
        if leader is None or state is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if not leader.record_fetch(replica_id, fetch_offset, plog.log_end_offset, _now_ms()):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER  # not one of the replicas (Kafka's answer)
        self._maybe_advance_hw(key, plog, state)
        # Only a registered (live) broker may join: one whose ZooKeeper session ended would be
        # taken out again by the controller at once, and one in a controlled shutdown would be
        # refused (INELIGIBLE_REPLICA) at every fetch (Kafka's ISR eligibility, KIP-841).
        # A replica a reassignment is removing stays out (the controller is taking it out),
        # and so does one its broker keeps in a log dir that is offline (KIP-858: the
        # controller would refuse it, INELIGIBLE_REPLICA, at every fetch).
        if replica_id not in state.isr and self.image.isr_eligible(replica_id) and \
                replica_id not in state.removing_replicas and \
                replica_id in leader.ready_to_join(state.isr, plog.high_watermark) and \
                replica_id not in self.image.in_offline_dirs(state):
            self._alter_isr(key, state, sorted(set(state.isr) | {replica_id}))
        return ErrorCode.NONE

    def _maybe_advance_hw(self, key: Key, plog: PartitionLog, state: PartitionState) -> None:
        leader = self.leaders.get(key)
        if leader is None:
            return
        isr = self._hw_isr(key, state)
        alone = all(r == self.broker_id for r in isr)
        plog.hw_follows_leo = alone
        hw = plog.log_end_offset if alone else leader.high_watermark(isr, plog.log_end_offset)
        if hw != UNKNOWN_OFFSET and hw > plog.high_watermark:
            plog.high_watermark = hw
            self.waiters.notify(key)

    def _hw_isr(self, key: Key, state: PartitionState) -> list[int]:
        """The replicas the high watermark waits for: the ISR the image shows, this leader, and
        replicas an expansion sent or committed but not yet in the image. Without the last, a
        leader could count a record committed that an added replica lacks, and the controller
        could elect that replica (an acknowledged record lost after a reassignment)."""
        isr = state.isr if self.broker_id in state.isr else [*state.isr, self.broker_id]
        maximal = self._isr_maximal.get(key)
        if maximal is None:
            return isr
        if state.partition_epoch >= maximal[0]:
            del self._isr_maximal[key]  # the image has caught up with the change
            return isr
        extra = [r for r in maximal[1] if r not in isr and r in state.replicas]
        return [*isr, *extra] if extra else isr

    def check_isr(self) -> None:
        """Periodic: drop followers that have lagged for longer than replica.lag.time.max.ms."""
        now = _now_ms()
        for key, leader in list(self.leaders.items()):
            state = self._state(key)
            if state is None:
                continue
            late = leader.out_of_sync(state.isr, now, self.lag_max_ms)
            if late:
                log.info("shrinking the ISR of %s-%d from %s: %s out of sync", key[0], key[1],
                         state.isr, late)
                self._alter_isr(key, state, [r for r in state.isr if r not in late])

    def _alter_isr(self, key: Key, state: PartitionState, isr: list[int]) -> None:
        if key in self._isr_in_flight or not isr:
            return
        alter = getattr(self.controller, "alter_isr", None)
        if alter is None:
            return
        self._isr_in_flight.add(key)
        added = frozenset(isr) - set(state.isr)
        if added:  # counted at once: the write may commit before its answer arrives
            self._isr_maximal[key] = (state.partition_epoch + 1, added)

        async def run() -> None:
            try:
                result = alter(key[0], key[1], state.leader_epoch, state.partition_epoch, isr)
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    result = await result
                lead = self.leaders.get(key)
                if added and isinstance(result, PartitionState) and lead is not None and \
                        lead.leader_epoch == state.leader_epoch:
                    self._isr_maximal[key] = (result.partition_epoch, added)
                if len(isr) < len(state.isr):
                    self.isr_shrinks += 1
                elif len(isr) > len(state.isr):
                    self.isr_expands += 1
            except KafkaError as exc:
                # refused: nothing was written, so the replicas it would have added do not count
                if added and self._isr_maximal.get(key, (0, None))[1] is added:
                    del self._isr_maximal[key]
                log.info("ISR change of %s-%d to %s refused: %s", key[0], key[1], isr, exc)
            except Exception:
                log.exception("ISR change of %s-%d to %s failed", key[0], key[1], isr)
            finally:
                self._isr_in_flight.discard(key)
            plog = self._get_log(*key)
            new_state = self._state(key)
            if plog is not None and new_state is not None:
                self._maybe_advance_hw(key, plog, new_state)
            self.waiters.notify(key)

        self._spawn(run())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- acks=all -------------------------------------------------------------------------------

    def min_isr_error(self, key: Key) -> int:
        """What an acks=all append to a partition this broker leads is refused with before
        anything is written: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (ISR below
        min.insync.replicas), or 0."""
        state = self._state(key)
        if state is None or key not in self.leaders:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if len(state.isr) < self._min_isr_for(key[0]):
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    async def wait_for_replication(self, key: Key, required_offset: int,
                                   timeout_s: float) -> int:
        """Wait until the high watermark passes ``required_offset`` (acks=all)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            plog = self._get_log(*key)
            state = self._state(key)
            if plog is None or state is None or key not in self.leaders:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            if plog.high_watermark >= required_offset:
                if len(state.isr) < self._min_isr_for(key[0]):
                    return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                return ErrorCode.NONE
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self.waiters.wait_any([key], remaining)
