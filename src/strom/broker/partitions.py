"""Local replicas: keeps the partition logs on this broker in step with the metadata image.

Kafka's ReplicaManager in miniature: it creates a log for every partition this broker hosts,
removes logs of deleted topics, pushes config changes into the logs, and wakes fetch waiters on
every append. Handlers go through it, never to the LogManager directly.

Creating a log costs a directory and a few files (~0.2 ms); a topic of ten thousand partitions
would stall every client for seconds. So when a metadata change brings more than
`INLINE_CREATES` new local partitions, their logs are created by a background task in slices
of at most `SLICE_S` of work, yielding to the loop in between. Until then a partition is
pending: Fetch and Produce create the logs they name first (`create_now`, their directories made
in a worker thread), any other lookup (`get`) on the spot, so clients see no difference, and its
leadership is announced when its log exists, as for any partition. `settled()` waits for the
logs pending when it is called (CreateTopics answers once they exist).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from strom.cluster.image import METADATA_TOPIC, MetadataImage, PartitionState, TopicState
from strom.cluster.records import Change
from strom.common import collections_held as gc_hold
from strom.common.waiters import WaiterRegistry
from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigSource
from strom.config.topic import TOPIC_CONFIGS, ResolvedValue
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog
from strom.storage.manager import LogManager

log = logging.getLogger(__name__)

ZERO_TOPIC_ID = uuid.UUID(int=0)  # a log written before topic ids (adopted by its topic)

# (topic, partition, is_leader, leader_epoch): called when this broker starts or stops leading
LeadershipListener = Callable[[str, int, bool, int], None]

_LOG_CONFIG_FIELDS = [f.name for f in dataclasses.fields(LogConfig)]
INLINE_CREATES = 32  # a change bringing more new local partitions creates their logs in slices
SLICE_S = 0.005  # work per slice of background log creation before yielding to the loop
PREPARE_AHEAD = 256  # logs whose directories a worker thread makes before they are created


class PartitionManager:
    def __init__(self, broker_id: int, config: BrokerConfig, image: MetadataImage,
                 logs: LogManager) -> None:
        self.broker_id = broker_id
        self.config = config
        self.image = image
        self.logs = logs
        self.waiters = WaiterRegistry()
        self._local: dict[tuple[str, int], PartitionLog] = {}
        self._leading: dict[tuple[str, int], int] = {}  # partitions we lead -> leader epoch
        self._leadership_listeners: list[LeadershipListener] = []
        self._created_listeners: list[Callable[[str, int], None]] = []
        # partitions whose log is still to be created -> (topic, sequence number), oldest first
        self._pending: dict[tuple[str, int], tuple[TopicState, int]] = {}
        self._sequence = 0
        self._settle_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._creator: asyncio.Task[None] | None = None
        logs.add_online_listener(self._on_dir_online)

    # -- configs --------------------------------------------------------------------------

    def resolve(self, topic: TopicState, name: str) -> ResolvedValue:
        """Effective value of a topic config: the topic's override, else the broker default."""
        if name in topic.configs:
            return ResolvedValue(TOPIC_CONFIGS.parse(name, topic.configs[name]),
                                 ConfigSource.DYNAMIC_TOPIC_CONFIG, name)
        return self.config.topic_default(name)

    def log_config(self, topic: TopicState) -> LogConfig:
        values: dict[str, Any] = {}
        for field in _LOG_CONFIG_FIELDS:
            name = field.replace("_", ".")
            if name not in TOPIC_CONFIGS:
                continue
            value = self.resolve(topic, name).value
            if isinstance(value, list):
                value = ",".join(value)
            values[field] = value
        return LogConfig(**values)

    # -- reconciliation -------------------------------------------------------------------

    def sync_all(self, *, unverified: str | None = None) -> None:
        """Bring local logs in line with the whole image (start-up).

        A log the image does not know (or knows under another topic id) is stray: its directory
        is renamed ``-stray`` and kept, never deleted, since missing metadata is no proof the
        data is unwanted. ``unverified`` says why the image may lack topics this broker holds
        (loaded from a fallback snapshot, an unreadable ZooKeeper node): then nothing is judged
        stray; such logs are only set aside (closed, not served, their directories untouched)
        until a start with a complete image."""
        wanted: dict[tuple[str, int], tuple[TopicState, PartitionState]] = {}
        for topic in self.image.topics.values():
            for p in topic.partitions.values():
                if self.broker_id in p.replicas:
                    wanted[(topic.name, p.partition)] = (topic, p)
        self._settle_strays(wanted, unverified)
        configs: dict[str, LogConfig] = {}
        for key, (topic, p) in wanted.items():
            self._pending.pop(key, None)
            config = configs.get(topic.name)
            if config is None:
                config = configs[topic.name] = self.log_config(topic)
            self._ensure(topic, p, config)
        for key in list(self._leading.keys() | self._local.keys()):
            self._update_leadership(*key)
        self._wake_settled()

    def _settle_strays(self, wanted: dict[tuple[str, int], tuple[TopicState, PartitionState]],
                       unverified: str | None) -> None:
        """Rename the loaded logs the image does not want to Kafka's stray names (or, with an
        unverified image, only set them aside; a wanted partition whose directory holds another
        incarnation is then not created)."""
        aside: list[str] = []
        for partition_log in list(self.logs.logs()):
            key = (partition_log.topic, partition_log.partition)
            if partition_log.topic == METADATA_TOPIC:
                continue
            entry = wanted.get(key)
            known_id = partition_log.topic_id
            if entry is not None and (known_id == entry[0].topic_id or known_id.int == 0):
                continue
            self._local.pop(key, None)
            if unverified is not None:
                self.logs.set_aside(*key)
                aside.append(f"{key[0]}-{key[1]}")
                if entry is not None:
                    del wanted[key]  # its name holds data of another topic id: not replaced
                continue
            why = ("the metadata does not know it" if entry is None else
                   f"its topic id {known_id} is not the topic's id {entry[0].topic_id}")
            try:  # even an empty one: metadata missing is never a reason to remove anything
                self.logs.mark_stray(*key, why)
            except StorageError as exc:
                log.error("%s; it is not served", exc)
        if unverified is not None:
            log.warning("stray detection skipped: %s. %d local logs the metadata does not "
                        "confirm are set aside, not served, their directories untouched%s",
                        unverified, len(aside),
                        f" ({', '.join(aside[:10])}{', ...' if len(aside) > 10 else ''})"
                        if aside else "")  # fmt: skip

    def on_changes(self, changes: list[Change]) -> None:
        configs: dict[str, LogConfig] = {}  # a new topic brings one change per partition
        first_new = self._sequence
        for change in changes:
            topic = change.topic
            if change.kind in ("topic_deleted", "partitions_deleted") and topic is not None:
                self._delete_topic(topic, change.partitions)
            elif (change.kind == "partitions_created" and topic is not None
                  and len(change.partitions) > INLINE_CREATES):
                self._defer_new(topic, change.partitions)
            elif change.kind in ("partitions_created", "partition_changed") and topic is not None:
                for p in change.partitions:
                    self._defer_or_update((topic.name, p), topic)
            elif change.kind == "topic_configs" and topic is not None:
                config = configs[topic.name] = self.log_config(topic)
                for p in topic.partitions:
                    partition_log = self._local.get((topic.name, p))
                    if partition_log is not None:
                        partition_log.update_config(config)
            elif change.kind == "broker_configs":
                self.refresh_dynamic_broker_configs()
                configs.clear()
        self._create_new(first_new)

    def _delete_topic(self, topic: TopicState, partitions: tuple[int, ...]) -> None:
        """A deleted topic's logs stop serving and their directories are renamed ``-delete``
        now (so a re-created topic of the same name finds them free), then removed by one
        worker-thread job for the whole topic. A log of another topic id under the same name is
        not this topic's data and stays."""
        doomed: list[tuple[str, int]] = []
        for p in partitions:
            key = (topic.name, p)
            self._pending.pop(key, None)
            self._local.pop(key, None)
            self._update_leadership(*key)
            partition_log = self.logs.get(*key)
            if partition_log is not None:
                if partition_log.topic_id in (topic.topic_id, ZERO_TOPIC_ID):
                    doomed.append(key)
                else:
                    log.warning("%s-%d: its log holds topic id %s, not the deleted topic's %s: "
                                "kept", *key, partition_log.topic_id, topic.topic_id)
            self.waiters.notify(key)
        if doomed:
            log.info("deleting the logs of %d partitions of deleted topic %s", len(doomed),
                     topic.name)
            self.logs.delete_partitions(doomed)

    def _defer_new(self, topic: TopicState, partitions: tuple[int, ...]) -> None:
        """Many new partitions at once (a large creation): `_defer` in one tight loop, since
        this runs on the event loop for every partition of a 10,000-partition request."""
        me, name, states = self.broker_id, topic.name, topic.partitions
        local, pending = self._local, self._pending
        for p in partitions:
            key = (name, p)
            if me in states[p].replicas and key not in local and key not in pending:
                self._sequence += 1
                pending[key] = (topic, self._sequence)
            else:
                self._defer_or_update(key, topic)

    def _defer_or_update(self, key: tuple[str, int], topic: TopicState) -> None:
        """One partition of a partitions_created/partition_changed change."""
        if self.broker_id in topic.partitions[key[1]].replicas:
            existing = self._local.get(key)
            if existing is None or existing.topic_id != topic.topic_id:
                self._defer(key, topic)
                return
        elif key in self._local or key in self._pending:
            self._drop(topic, key[1])  # reassigned away from this broker
        self._update_leadership(*key)

    def _defer(self, key: tuple[str, int], topic: TopicState) -> None:
        """Mark a partition's log as to be created (a log of an older incarnation stops
        serving now; creating the new one replaces it)."""
        if key in self._local:
            del self._local[key]
            self._update_leadership(*key)
        queued = self._pending.get(key)
        if queued is not None and queued[0].topic_id == topic.topic_id:
            self._pending[key] = (topic, queued[1])  # keeps its place in the queue
            return
        self._pending.pop(key, None)
        self._sequence += 1
        self._pending[key] = (topic, self._sequence)

    def _create_new(self, first_new: int) -> None:
        """Create the logs deferred since sequence `first_new`: now when few or when no loop
        runs (tests, start-up), else in the background."""
        if not self._pending:
            self._wake_settled()  # e.g. a deletion took the last pending ones
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None and self._sequence - first_new > INLINE_CREATES:
            self._start_creator(loop)
            return
        new = []
        for key, (_topic, seq) in reversed(self._pending.items()):
            if seq <= first_new:
                break
            new.append(key)
        configs: dict[str, LogConfig] = {}
        for key in reversed(new):
            self._create_pending(key, configs)
        self._wake_settled()

    def _start_creator(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._creator is None or self._creator.done():  # done: cancelled before it ran
            self._creator = loop.create_task(self._create_in_slices(),
                                             name="create-partition-logs")

    async def _create_in_slices(self) -> None:
        """Create pending logs, oldest first, yielding to the loop every SLICE_S. The next
        PREPARE_AHEAD logs' directories are made in a worker thread first: mkdir and file
        creation can wait behind the filesystem's journal, 100-180 ms at a time.

        CPython's automatic full collections walk every tracked object, and each log adds about
        30: while thousands are made the heap keeps growing by a quarter, and each time a full
        collection (150-210 ms with 20,000 logs) would run inside a slice. So collections wait
        until the logs exist, and the logs, which live as long as their topic, are then frozen
        out of later ones (`gc.freeze`). A deleted log is still freed: logs hold no reference
        cycles, reference counting frees them (a storage test checks)."""
        gc_hold.hold()
        try:
            while self._pending:
                ahead = list(itertools.islice(self._pending.items(), PREPARE_AHEAD))
                plan = self.logs.plan_dirs(key for key, _ in ahead)
                wanted = [(plan[key], topic.topic_id) for key, (topic, _) in ahead if key in plan]
                # a plain executor future, not a task: a shutdown that cancels every task must
                # not cut this wait short while the thread still makes directories
                preparing = asyncio.get_running_loop().run_in_executor(
                    None, LogManager.prepare_dirs, wanted)
                try:
                    made = await asyncio.shield(preparing)
                except asyncio.CancelledError:  # let the thread finish before this task ends,
                    await asyncio.wait([preparing])  # so nothing is made after a shutdown
                    raise
                prepared = {key: (plan[key], topic.topic_id) for key, (topic, _) in ahead
                            if plan.get(key) in made}
                deadline = time.perf_counter() + SLICE_S
                configs: dict[str, LogConfig] = {}
                for key, _ in ahead:  # oldest first; those created or dropped meanwhile go
                    if key in self._pending:
                        self._create_pending(key, configs, prepared.get(key))
                    if time.perf_counter() >= deadline:
                        self._wake_settled()
                        await asyncio.sleep(0)
                        deadline = time.perf_counter() + SLICE_S
                        configs = {}
                self._wake_settled()
                await asyncio.sleep(0)
        finally:
            self._creator = None
            gc_hold.release(freeze=True)
            self._wake_settled()

    def _create_pending(self, key: tuple[str, int],
                        configs: dict[str, LogConfig] | None = None,
                        prepared: tuple[Path, uuid.UUID] | None = None) -> PartitionLog | None:
        """Create a pending partition's log now and announce its leadership. A storage error
        is logged: the partition stays without a local log (clients are told it is not here)."""
        entry = self._pending.pop(key, None)
        if entry is None:  # a listener's change meanwhile created or dropped it
            return self._local.get(key)
        topic = entry[0]
        config = configs.get(topic.name) if configs is not None else None
        if config is None:
            config = self.log_config(topic)
            if configs is not None:
                configs[topic.name] = config
        try:
            ready = prepared[0] if prepared and prepared[1] == topic.topic_id else None
            self._local[key] = self.logs.create(topic.name, key[1], topic.topic_id, config,
                                                prepared=ready)
        except (OSError, StorageError) as exc:
            log.error("cannot create the log of %s-%d: %s", *key, exc)
            return None
        for listener in list(self._created_listeners):
            listener(*key)
        self._update_leadership(*key)
        return self._local.get(key)

    @property
    def has_pending(self) -> bool:
        """Whether some logs are still to be created (the background creator is behind)."""
        return bool(self._pending)

    def pending_among(self, keys: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """Those of `keys` whose logs are still pending."""
        pending = self._pending
        return [key for key in keys if key in pending]

    async def create_now(self, keys: list[tuple[str, int]]) -> None:
        """Create these pending logs now, for a request that names them (a follower's fetch
        right after a large creation): their directories are made in a worker thread, as the
        background creator makes them, not on the loop (measured: 73 ms for the 1,000
        partitions of one follower fetch). A log created meanwhile is left as it is."""
        plan = self.logs.plan_dirs(key for key in keys if key in self._pending)
        ids = {key: self._pending[key][0].topic_id for key in plan}
        wanted = [(path, ids[key]) for key, path in plan.items()]
        made = await asyncio.get_running_loop().run_in_executor(
            None, LogManager.prepare_dirs, wanted) if wanted else set()
        configs: dict[str, LogConfig] = {}
        for key in keys:
            if key not in self._pending:
                continue
            path = plan.get(key)
            # made for the topic id of then: `_create_pending` uses it only if still the same
            ready = (path, ids[key]) if path is not None and path in made else None
            self._create_pending(key, configs, ready)
        self._wake_settled()

    def _on_dir_online(self, _dir: object) -> None:
        """A log dir is back: its logs reloaded themselves; create those that failed while no
        dir could take them (each failure was logged)."""
        first_new = self._sequence
        for topic in self.image.topics.values():
            for p in topic.partitions.values():
                key = (topic.name, p.partition)
                if self.broker_id in p.replicas and key not in self._local \
                        and key not in self._pending:  # fmt: skip
                    self._defer(key, topic)
        self._create_new(first_new)

    async def settled(self) -> None:
        """Return once every log pending now has been created (or is no longer wanted)."""
        if not self._pending:
            return
        loop = asyncio.get_running_loop()
        self._start_creator(loop)  # e.g. after one was cancelled
        waiter = loop.create_future()
        self._settle_waiters.append((self._sequence, waiter))
        await waiter

    def _wake_settled(self) -> None:
        if not self._settle_waiters:
            return
        oldest = next(iter(self._pending.values()))[1] if self._pending else self._sequence + 1
        still = []
        for upto, waiter in self._settle_waiters:
            if upto < oldest:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                still.append((upto, waiter))
        self._settle_waiters = still

    def refresh_dynamic_broker_configs(self) -> None:
        from strom.config.broker import BROKER_CONFIGS

        def parsed(layer: dict[str, str]) -> dict[str, Any]:
            return {k: BROKER_CONFIGS.parse(k, v) for k, v in layer.items() if k in BROKER_CONFIGS}

        self.config.dynamic_default = parsed(self.image.broker_configs.get("", {}))
        self.config.dynamic_broker = parsed(self.image.broker_configs.get(str(self.broker_id), {}))
        for topic in self.image.topics.values():
            config = self.log_config(topic)
            for p in topic.partitions:
                partition_log = self._local.get((topic.name, p))
                if partition_log is not None:
                    partition_log.update_config(config)

    def _drop(self, topic: TopicState, partition: int) -> None:
        """This broker is no longer a replica: delete its copy (Kafka's StopReplica with
        deletion); readers waiting on it wake and find it gone."""
        key = (topic.name, partition)
        self._pending.pop(key, None)
        partition_log = self._local.pop(key, None)
        if partition_log is None:  # its log was never created
            return
        if partition_log.topic_id == topic.topic_id:
            log.info("%s-%d is no longer assigned to broker %d: deleting its log", *key,
                     self.broker_id)
        self.logs.delete_partition(*key)
        self.waiters.notify(key)

    def _ensure(self, topic: TopicState, state: PartitionState, config: LogConfig) -> None:
        key = (topic.name, state.partition)
        existing = self._local.get(key)
        if existing is not None and existing.topic_id == topic.topic_id:
            return
        self._local[key] = self.logs.create(topic.name, state.partition, topic.topic_id, config)

    # -- leadership (for coordinators) -------------------------------------------------------

    def add_leadership_listener(self, listener: LeadershipListener, *, replay: bool = True) -> None:
        """Tell `listener` whenever this broker starts or stops leading a local partition.

        With `replay`, it first hears about every partition led right now (on one broker: all
        local partitions). A replicated cluster calls the same listeners from its leader changes.
        """
        self._leadership_listeners.append(listener)
        if replay:
            for (topic, partition), epoch in list(self._leading.items()):
                listener(topic, partition, True, epoch)

    def _update_leadership(self, topic_name: str, partition: int) -> None:
        key = (topic_name, partition)
        t = self.image.topics.get(topic_name)
        state = t.partitions.get(partition) if t is not None else None
        leads = (state is not None and state.leader == self.broker_id and key in self._local)
        was = self._leading.get(key)
        if leads:
            assert state is not None
            if was == state.leader_epoch:
                return
            self._leading[key] = state.leader_epoch
            for listener in list(self._leadership_listeners):
                listener(topic_name, partition, True, state.leader_epoch)
        elif was is not None:
            del self._leading[key]
            for listener in list(self._leadership_listeners):
                listener(topic_name, partition, False, was)

    # -- lookups --------------------------------------------------------------------------

    def add_created_listener(self, listener: Callable[[str, int], None]) -> None:
        """Tell `listener` whenever a deferred log has been created (before leadership
        listeners hear of it): replication takes its role then, not by forcing creation."""
        self._created_listeners.append(listener)

    def ready(self, topic: str, partition: int) -> PartitionLog | None:
        """The local log of a partition if it exists already (one still pending is not created:
        see `add_created_listener`)."""
        return self._local.get((topic, partition))

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        """The local log of a partition; one still pending is created now."""
        key = (topic, partition)
        if self._pending and key in self._pending:
            return self._create_pending(key)
        return self._local.get(key)

    def leader_epoch(self, topic: str, partition: int) -> int:
        t = self.image.topics.get(topic)
        p = t.partitions.get(partition) if t else None
        return p.leader_epoch if p else -1
