"""The metadata image of a KRaft node, replayed from what its Raft log has committed.

`MetadataLoader` is the Raft client's listener (`strom.raft.base.RaftListener`). The client
calls it in the Raft thread with committed batches, snapshots to load and leader changes; the
loader decodes the values there and hands each step to the event loop in order
(`call_soon_threadsafe`), where it changes the image that handlers read, `APPLY_SLICE` records
at a time. Nothing above the
high watermark ever reaches the image: a change is visible once a majority has it.

Values are Strom's JSON metadata records (`strom.cluster.records`), except the
FeatureLevelRecords and UserScramCredentialRecords of the bootstrap snapshot `strom storage
format` writes, which use Kafka's own encoding (`strom.cluster.features`,
`strom.cluster.scram_records`); the levels are kept in `features`, a SCRAM credential becomes
the user config the other ways of adding one commit.

A snapshot replaces the image in place (the broker's parts hold the image object) and is
reported to `on_reset` callbacks; commits are reported as `Change`s to subscribers, as the
single node's controller reports them. The loader also decides when the image is snapshotted:
after `metadata.log.max.record.bytes.between.snapshots` bytes of records, or
`metadata.log.max.snapshot.interval.ms` after the first record since the last one.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from strom.cluster import records as rec
from strom.cluster.features import feature_level_record, parse_feature_level_record
from strom.cluster.image import MetadataImage
from strom.cluster.records import Change
from strom.cluster.scram_records import parse_user_scram_credential_record
from strom.raft.log import SnapshotContent
from strom.raft.types import DataRecord, LeaderAndEpoch, RaftBatch
from strom.security.scram_store import credential_to_config

log = logging.getLogger("strom.controller.loader")

Record = dict[str, Any]
ChangeListener = Callable[[list[Change]], None]
# the image's live state, which no record sets (the single node registers itself): kept
# when a snapshot replaces the rest
_LIVE_FIELDS = frozenset({"cluster_id", "controller_id", "controller_epoch", "brokers"})
def slice_deletions(changes: list[Change], budget: int) -> tuple[list[Change], list[Change]]:
    """`changes` cut after `budget` deleted partitions: what to report now, and the rest (a
    deleted topic's further partitions as `partitions_deleted`, then every later change, in
    order). Deleting a topic of 1,000 partitions closes and renames 1,000 logs: reported at
    once it held the event loop some 30 ms (issue 28)."""
    now: list[Change] = []
    for i, change in enumerate(changes):
        if change.kind in ("topic_deleted", "partitions_deleted") and \
                len(change.partitions) > budget:
            now.append(dataclasses.replace(change, partitions=change.partitions[:budget]))
            rest = dataclasses.replace(change, kind="partitions_deleted",
                                       partitions=change.partitions[budget:])
            return now, [rest, *changes[i + 1:]]
        if change.kind in ("topic_deleted", "partitions_deleted"):
            budget -= len(change.partitions)
        now.append(change)
    return now, []


# committed records applied in one go on the event loop: a slice takes a few ms (100 partitions
# changing leader, with their listeners: about 15 ms on this machine), and requests are served
# between slices
APPLY_SLICE = 100


def decode_value(value: bytes) -> tuple[Record | None, tuple[str, int] | None]:
    """A committed value: a JSON metadata record, or a Kafka FeatureLevelRecord (name,
    level); anything else is reported and skipped (a newer version's record)."""
    if value[:1] == b"{":
        return json.loads(value), None
    try:
        return None, parse_feature_level_record(value)
    except ValueError:
        pass
    try:  # a SCRAM user of `strom storage format --add-scram`: its user config
        user = parse_user_scram_credential_record(value)
    except ValueError:
        log.warning("skipping a metadata record this version does not know: %s",
                    value[:32].hex())
        return None, None
    return rec.config_record("user", user.name, user.mechanism,
                             credential_to_config(user.credential)), None


@dataclasses.dataclass(frozen=True)
class MetadataProgress:
    """KIP-835's view of a node's metadata: the offset of the last record in its image, when
    the quorum's leader appended it (0: nothing applied yet), the offset of the last record
    the quorum has committed (-1: none), and how many committed steps failed to apply."""

    last_applied_offset: int
    last_applied_timestamp_ms: int
    last_committed_offset: int
    apply_errors: int = 0

    def lag_ms(self, now_ms: int) -> int:
        """How old the last applied record is: with the active controller's no-op records
        every metadata.max.idle.interval.ms, a node that keeps up stays under about that."""
        return max(0, now_ms - self.last_applied_timestamp_ms) \
            if self.last_applied_timestamp_ms else 0


@dataclasses.dataclass
class SnapshotPolicy:
    """When the image is snapshotted (Kafka's metadata.log.max.* settings)."""

    max_bytes: int = 20 * 1024 * 1024
    max_interval_ms: int = 3_600_000


class MetadataLoader:
    """Applies committed metadata to `image` on `loop` (see the module doc)."""

    def __init__(self, image: MetadataImage, loop: asyncio.AbstractEventLoop, *,
                 policy: SnapshotPolicy | None = None) -> None:
        self.image = image
        self.loop = loop
        self.features: dict[str, int] = {}
        self.applied_offset = 0  # the next offset to apply: everything below is in the image
        # when the leader appended the last record applied (KIP-835's last-applied-record-
        # timestamp): with the active controller's no-op records, now minus this says how far
        # behind the quorum this node's metadata is; 0 until a committed batch is applied
        self.last_applied_timestamp_ms = 0
        # the end of what the quorum has committed and handed over (set in the Raft thread)
        self.committed_offset = 0
        # committed steps whose records could not all be applied (KIP-835's
        # metadata-apply-error-count: each one is logged with its offset)
        self.apply_errors = 0
        self.leader = LeaderAndEpoch(None, 0)
        self.policy = policy or SnapshotPolicy()
        # set by the owner: takes a snapshot of the image as of `applied_offset`
        self.snapshot: Callable[[int, list[bytes]], Awaitable[object]] | None = None
        self._listeners: list[ChangeListener] = []
        self._resets: list[Callable[[], None]] = []
        self._changed = asyncio.Event()
        self._bytes_since_snapshot = 0
        self._first_since_snapshot_ms: int | None = None
        self._snapshotting = False
        # in a cluster the image names the quorum's leader as its controller (a single
        # node's image names this broker: it leads everything)
        self.track_controller = False
        # partitions this broker led before it restarted, shown leaderless until the
        # controller decides them again (`hold_inherited_leaderships`)
        self._inherited: set[tuple[str, int]] = set()
        # what the Raft thread handed over, not applied yet: ("step", a commit step) or
        # ("call", (function, args)) for a snapshot or a leader change, in order
        self._queue: collections.deque[tuple[str, Any]] = collections.deque()
        self._position = 0  # records of the first queued step already applied
        self._draining = False

    # -- what the rest of the node uses -----------------------------------------------------

    def progress(self) -> MetadataProgress:
        """Where this node's metadata stands, for KIP-835's metrics."""
        committed = max(self.committed_offset, self.applied_offset)
        return MetadataProgress(self.applied_offset - 1, self.last_applied_timestamp_ms,
                                committed - 1, self.apply_errors)

    def subscribe(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def on_reset(self, callback: Callable[[], None]) -> None:
        """`callback()` after a snapshot replaced the image (a replica that fell behind)."""
        self._resets.append(callback)

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """True once predicate() holds (checked after every applied step), else False after
        timeout_s."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return bool(predicate())
        return True

    async def wait_applied(self, offset: int, timeout_s: float) -> bool:
        """True once every record below `offset` is in the image."""
        return await self.wait_for(lambda: self.applied_offset >= offset, timeout_s)

    def hold_inherited_leaderships(self, broker_id: int) -> int:
        """Show every partition the image says `broker_id` leads as leaderless, until a
        newer state of it is committed. A broker starting again finds its previous process's
        leaderships in the metadata; the controller fences the new registration and elects
        again, but until then this process must not act as a leader it does not know it is
        (it may have lost what its previous process acknowledged). Returns how many."""
        for topic in self.image.topics.values():
            for p, state in list(topic.partitions.items()):
                if state.leader == broker_id:
                    topic.partitions[p] = dataclasses.replace(state, leader=-1)
                    self._inherited.add((str(topic.topic_id), p))
        return len(self._inherited)

    # -- RaftListener: called in the Raft thread --------------------------------------------

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        steps: list[tuple[list[Record], list[tuple[str, int]], int, int, int]] = []
        for batch in batches:
            records: list[Record] = []
            features: list[tuple[str, int]] = []
            size = 0
            for entry in batch.records:
                if not isinstance(entry, DataRecord):
                    continue  # control records: the Raft client's own
                size += len(entry.value)
                record, feature = decode_value(entry.value)
                if record is not None:
                    records.append(record)
                elif feature is not None:
                    features.append(feature)
            steps.append((records, features, batch.base_offset + len(batch.records), size,
                          batch.append_time_ms))
        if steps:
            self.committed_offset = max(self.committed_offset, steps[-1][2])
        self.loop.call_soon_threadsafe(self._enqueue, [("step", step) for step in steps])

    def handle_load_snapshot(self, snapshot: SnapshotContent) -> None:
        records: list[Record] = []
        features: dict[str, int] = {}
        for value in snapshot.values:
            record, feature = decode_value(value)
            if record is not None:
                records.append(record)
            elif feature is not None:
                features[feature[0]] = feature[1]
        fresh = MetadataImage(cluster_id=self.image.cluster_id)
        for record in records:
            rec.apply(fresh, record)
        fresh.finalized_features = dict(features)
        fresh.features_epoch = snapshot.snapshot_id.offset - 1 if features else -1
        self.loop.call_soon_threadsafe(self._enqueue, [("call", (
            self._apply_snapshot, (fresh, features, snapshot.snapshot_id.offset,
                                   snapshot.last_contained_log_timestamp)))])

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.loop.call_soon_threadsafe(self._enqueue, [("call", (self._apply_leader, (leader,)))])

    # -- on the event loop ------------------------------------------------------------------

    def _enqueue(self, items: list[tuple[str, Any]]) -> None:
        """Everything the Raft thread hands over, applied in its order (`_drain`)."""
        self._queue.extend(items)
        if not self._draining:
            self._draining = True
            self._drain()

    def _drain(self) -> None:
        """Apply at most APPLY_SLICE committed records, then let the loop serve before the
        rest: a failover moving 1,000 partitions would otherwise hold it for tens of ms
        (issue 28). A step's offset counts as applied once all its records are."""
        changes: list[Change] = []
        budget = APPLY_SLICE
        try:
            while self._queue and budget > 0:
                kind, payload = self._queue[0]
                if kind == "report":  # the rest of a large deletion, reported in slices
                    self._queue.popleft()
                    changes.extend(payload)
                    break
                if kind == "call":
                    changes, later = slice_deletions(changes, APPLY_SLICE)
                    if later:  # the call waits for the rest, in order
                        self._queue.appendleft(("report", later))
                        break
                    self._report(changes)
                    changes = []
                    self._queue.popleft()
                    function, args = payload
                    function(*args)
                    continue
                records, features, end, size, appended_ms = payload
                start = self._position
                stop = min(len(records), start + budget)
                budget -= stop - start
                try:
                    for record in records[start:stop]:
                        change = rec.apply(self.image, record)
                        if change is not None:
                            changes.append(change)
                        if self._inherited and record.get("type") == "partition":
                            self._inherited.discard((record["topic_id"], record["partition"]))
                except Exception:
                    self.apply_errors += 1
                    log.exception("applying committed metadata at offset %d failed", end - 1)
                    stop = len(records)  # as before slicing: the step is not applied again
                if stop < len(records):
                    self._position = stop
                    break
                self._position = 0
                self._queue.popleft()
                if features:
                    self.features.update(features)
                    self.image.finalized_features.update(features)
                    self.image.features_epoch = end - 1
                self.applied_offset = end
                self.last_applied_timestamp_ms = appended_ms
                if records:
                    self._bytes_since_snapshot += size
                    if self._first_since_snapshot_ms is None:
                        self._first_since_snapshot_ms = int(time.time() * 1000)
            changes, later = slice_deletions(changes, APPLY_SLICE)
            if later:  # reported before anything applied after it, in order
                self._queue.appendleft(("report", later))
            self._report(changes)
        finally:
            if self._queue:
                self.loop.call_soon(self._drain)  # after the callbacks waiting meanwhile
            else:
                self._draining = False

    def _report(self, changes: list[Change]) -> None:
        if self.track_controller and any(c.kind == "brokers_changed" for c in changes):
            self._name_controller()
        if changes:
            for listener in self._listeners:
                listener(changes)
        self._changed.set()
        self._maybe_snapshot()

    def _apply_snapshot(self, fresh: MetadataImage, features: dict[str, int], end: int,
                        appended_ms: int = 0) -> None:
        image = self.image
        for f in dataclasses.fields(MetadataImage):
            if f.name not in _LIVE_FIELDS and f.name != "version":
                setattr(image, f.name, getattr(fresh, f.name))
        image.version += fresh.version + 1
        if image.registrations:  # a cluster's live brokers are its unfenced registrations
            image.brokers = {b: r.info for b, r in image.registrations.items() if not r.fenced}
        if self.track_controller:
            self._name_controller()
        self.features = features
        self.applied_offset = end
        self.last_applied_timestamp_ms = appended_ms
        self._bytes_since_snapshot = 0
        self._first_since_snapshot_ms = None
        log.info("metadata image loaded from the snapshot at offset %d: %d topics", end,
                 len(image.topics))
        for callback in self._resets:
            callback()
        self._changed.set()

    def _apply_leader(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader
        if self.track_controller:
            self.image.controller_epoch = leader.epoch
            self._name_controller()
        self._changed.set()

    def _name_controller(self) -> None:
        """The controller Metadata names: the quorum's leader when it is a broker, else a live
        broker (clients send controller-bound admin requests there, and every broker forwards
        them to the active controller), as Kafka's KRaft brokers answer."""
        leader = self.leader.leader_id
        brokers = self.image.brokers
        if leader is not None and leader in brokers:
            self.image.controller_id = leader
        elif self.image.controller_id not in brokers:
            self.image.controller_id = min(brokers, default=-1)

    # -- snapshots --------------------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        if self.snapshot is None or self._snapshotting or self._first_since_snapshot_ms is None:
            return
        age = int(time.time() * 1000) - self._first_since_snapshot_ms
        by_time = 0 < self.policy.max_interval_ms <= age  # 0: never by time (Kafka's meaning)
        if self._bytes_since_snapshot < self.policy.max_bytes and not by_time:
            return
        self._snapshotting = True
        self._bytes_since_snapshot = 0
        self._first_since_snapshot_ms = None
        offset = self.applied_offset
        features = dict(self.features)
        records = rec.image_records(self.image)  # taken on the loop: the image as of `offset`
        task = self.loop.create_task(self._take_snapshot(offset, features, records),
                                     name="metadata-snapshot")
        task.add_done_callback(lambda _t: setattr(self, "_snapshotting", False))

    async def _take_snapshot(self, offset: int, features: dict[str, int],
                             records: list[Record]) -> None:
        assert self.snapshot is not None
        try:
            values = await asyncio.to_thread(snapshot_values, features, records)
            await self.snapshot(offset, values)
        except Exception:  # the log keeps everything: the next snapshot will try again
            log.exception("could not snapshot the metadata image at offset %d", offset)


def snapshot_values(features: dict[str, int], records: list[Record]) -> list[bytes]:
    """A snapshot's values: the feature levels (Kafka's encoding), then the image's records."""
    values = [feature_level_record(name, level) for name, level in sorted(features.items())]
    values += [json.dumps(r, separators=(",", ":")).encode() for r in records]
    return values
