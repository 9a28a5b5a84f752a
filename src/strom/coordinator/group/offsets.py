"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, TxnOffsetCommit and expiry.

Kafka's OffsetMetadataManager. Offsets live in the shared `Shard` of their group's partition
(`offsets`, and `pending_txn` for transactional commits waiting for their marker) and are
written to `__consumer_offsets` before a commit is answered. A commit is validated against the
group (classic generation and member, or consumer member epoch); a commit into a group that does
not exist creates a "simple" classic group of offsets only. Offsets of groups that no longer use
them age out after offsets.retention.minutes (Kafka's cleanupGroupMetadata), which also removes
empty groups left with no offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from strom.coordinator.group import records as rec
from strom.coordinator.group.classic_groups import ClassicGroupManager, validate_member
from strom.coordinator.group.shards import (
    Group,
    GroupShards,
    LogEntry,
    Offsets,
    Shard,
    group_tombstones,
)
from strom.coordinator.group.share_state import ShareGroup
from strom.coordinator.group.state import (
    ClassicGroup,
    ClassicState,
    ConsumerGroup,
    OffsetAndMetadata,
)
from strom.coordinator.group.streams_state import StreamsGroup
from strom.coordinator.runtime.store import TxnMarkerRecord
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

OFFSET_RECORDS = (rec.OFFSET_COMMIT, rec.OFFSET_COMMIT_LEGACY)
TopicPartition = tuple[str, int]
# (partition, offset, leader epoch, metadata) per topic, as OffsetCommit/TxnOffsetCommit carry
CommitTopics = list[tuple[str, list[tuple[int, int, int, str | None]]]]
PartitionErrors = list[tuple[str, list[tuple[int, int]]]]


def is_offset_record(r: LogEntry) -> bool:
    """What the offsets manager replays: commits and their tombstones, transaction markers,
    and anything written in a transaction (only TxnOffsetCommit writes transactionally)."""
    return isinstance(r, TxnMarkerRecord) or r.producer_id >= 0 or r.type in OFFSET_RECORDS


def _offset_from(v: dict[str, Any]) -> OffsetAndMetadata:
    return OffsetAndMetadata(v["offset"], v["leader_epoch"], v["metadata"],
                             v["commit_timestamp"], v["expire_timestamp"])


@dataclass
class _Commit:
    """The records and offsets of one commit request, and its per-partition answer."""

    records: list[rec.KeyValue] = field(default_factory=list)
    accepted: list[tuple[TopicPartition, OffsetAndMetadata]] = field(default_factory=list)
    results: PartitionErrors = field(default_factory=list)


def _validate_classic_commit(group: ClassicGroup, member_id: str, instance_id: str | None,
                             generation: int) -> None:
    if group.is_state(ClassicState.DEAD):
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if generation < 0 and group.is_state(ClassicState.EMPTY):
        return  # admin clients and assign() consumers commit into an empty group
    if generation >= 0 or member_id or instance_id is not None:
        error = validate_member(group, member_id, instance_id)
        if error:
            raise KafkaError(error)
        if generation != group.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION)
    elif not group.is_state(ClassicState.EMPTY):
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                         "Offsets without a member id can only be committed to an empty group.")
    if group.is_state(ClassicState.COMPLETING_REBALANCE):
        raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)


def _validate_consumer_commit(group: ConsumerGroup, member_id: str, epoch: int,
                              api_version: int) -> None:
    if epoch < 0 and not group.members:
        return
    member = group.members.get(member_id)
    if member is None:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                         f"Member {member_id} is not a member of group {group.group_id}.")
    if member.classic is not None:  # a classic member's generation is its member epoch
        if epoch != member.member_epoch:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                             f"The received generation id {epoch} does not match the expected "
                             f"member epoch {member.member_epoch}.")
        return
    if api_version < 9:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                         "OffsetCommit version 9 or above must be used by members using the "
                         "consumer group protocol")
    if epoch != member.member_epoch:
        raise KafkaError(ErrorCode.STALE_MEMBER_EPOCH,
                         f"The received member epoch {epoch} does not match the expected "
                         f"member epoch {member.member_epoch}.")


def _validate_streams_commit(group: StreamsGroup, member_id: str, epoch: int,
                             api_version: int) -> None:
    """Kafka's StreamsGroup.validateOffsetCommit: the member's current epoch, OffsetCommit v9+."""
    if epoch < 0 and not group.members:
        return
    member = group.members.get(member_id)
    if member is None:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                         f"Member {member_id} is not a member of group {group.group_id}.")
    if api_version < 9:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                         "OffsetCommit version 9 or above must be used by members using the "
                         "streams group protocol")
    if epoch != member.member_epoch:
        raise KafkaError(ErrorCode.STALE_MEMBER_EPOCH,
                         f"The received member epoch {epoch} does not match the expected "
                         f"member epoch {member.member_epoch}.")


def _validate_streams_fetch(group: StreamsGroup, member_id: str | None, epoch: int) -> None:
    if member_id is None and epoch < 0:
        return
    member = group.members.get(member_id or "")
    if member is None:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                         f"Member {member_id} is not a member of group {group.group_id}.")
    if epoch != member.member_epoch:
        raise KafkaError(ErrorCode.STALE_MEMBER_EPOCH,
                         f"The received member epoch {epoch} does not match the expected "
                         f"member epoch {member.member_epoch}.")


def _validate_consumer_fetch(group: ConsumerGroup, member_id: str | None, epoch: int) -> None:
    if member_id is None and epoch < 0:
        return
    member = group.members.get(member_id or "")
    if member is None:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                         f"Member {member_id} is not a member of group {group.group_id}.")
    if epoch != member.member_epoch and member.classic is not None:
        raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                         f"The received generation id {epoch} does not match the expected "
                         f"member epoch {member.member_epoch}.")
    if epoch != member.member_epoch:
        raise KafkaError(ErrorCode.STALE_MEMBER_EPOCH,
                         f"The received member epoch {epoch} does not match the expected "
                         f"member epoch {member.member_epoch}.")


def _validate_txn_commit(group: Group | None, group_id: str, member_id: str, generation: int,
                         instance_id: str | None) -> None:
    """TxnOffsetCommit's checks: looser than OffsetCommit's (the member and generation are
    only checked when the producer gave them)."""
    if group is None:
        if generation >= 0:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"Group {group_id} does not exist.")
    elif isinstance(group, ClassicGroup):
        if group.is_state(ClassicState.DEAD):
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if instance_id is not None:
            error = validate_member(group, member_id, instance_id)
            if error:
                raise KafkaError(error)
        elif member_id and member_id not in group.members:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation >= 0 and generation != group.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION)
    elif member_id or generation >= 0:  # consumer and streams groups: the member epoch
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {group_id}.")
        if generation != member.member_epoch:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                             f"The received member epoch {generation} does not match the "
                             f"expected member epoch {member.member_epoch}.")


def expiration_base(group: Group | None) -> int | str | None:
    """When a group's offsets start ageing: the commit time, the time the group became empty,
    or never (None) while a classic group is mid-rebalance."""
    if group is None or isinstance(group, ConsumerGroup | StreamsGroup | ShareGroup):
        return "commit"
    if group.protocol_type is None:
        return "commit"  # simple group: offsets only
    if group.is_empty:
        return group.state_ts
    if group.protocol_type == "consumer" and group.subscribed_topics is not None and \
            group.is_state(ClassicState.STABLE):
        return "commit"
    return None


class OffsetManager:
    """The committed offsets of the shards in `state`. Uses the classic manager only to count
    a member's commit as a heartbeat, as Kafka's OffsetMetadataManager does."""

    def __init__(self, state: GroupShards, classic: ClassicGroupManager) -> None:
        self.state = state
        self.classic = classic
        self.config = state.config
        self.store = state.store
        self.timers = state.timers
        self.now_ms = state.now_ms
        self._started = False

    # -- load ----------------------------------------------------------------------------------

    def replay(self, shard: Shard, r: LogEntry) -> None:
        """An offset commit, its tombstone, a transactional commit or a transaction marker."""
        if isinstance(r, TxnMarkerRecord):
            self._complete_txn_offsets(shard, r.producer_id, r.commit)
            return
        if r.producer_id >= 0:  # pending until its marker
            if r.type in OFFSET_RECORDS and r.value is not None:
                shard.pending_txn.setdefault(r.producer_id, {}).setdefault(
                    r.key["group"], {})[(r.key["topic"], r.key["partition"])] = \
                    _offset_from(r.value)
            return
        if r.type not in OFFSET_RECORDS:
            return
        gid = r.key["group"]
        tp = (r.key["topic"], r.key["partition"])
        if r.value is None:
            self._drop(shard, gid, [tp])
            return
        shard.offsets.setdefault(gid, {})[tp] = _offset_from(r.value)
        if gid not in shard.groups:  # a "simple" group: offsets without membership
            shard.groups[gid] = ClassicGroup(gid, self.now_ms())

    @staticmethod
    def _drop(shard: Shard, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        offsets = shard.offsets.get(group_id)
        if offsets is None:
            return
        for tp in partitions:
            offsets.pop(tp, None)
        if not offsets:
            del shard.offsets[group_id]

    # -- OffsetCommit, OffsetFetch -------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation: int, member_id: str,
                       instance_id: str | None, retention_ms: int, topics: CommitTopics,
                       api_version: int) -> PartitionErrors:
        """Commit (partition, offset, leader epoch, metadata) per topic; returns per-partition
        error codes. Group-level failures raise KafkaError (the handler applies them to all)."""
        shard = self.state.serving(group_id)
        group = shard.groups.get(group_id)
        created = False
        if group is None:
            if generation >= 0:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9
                                 else ErrorCode.ILLEGAL_GENERATION,
                                 f"Group {group_id} does not exist.")
            log.info("group %s: created as a simple group by a manual offset commit", group_id)
            group = self.state.new_classic_group(shard, group_id)
            created = True
        if isinstance(group, ShareGroup):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                             f"Group {group_id} is a share group; share groups commit no offsets.")
        if isinstance(group, ClassicGroup):
            _validate_classic_commit(group, member_id, instance_id, generation)
            self.classic.touch_member(group, member_id)
        elif isinstance(group, StreamsGroup):
            _validate_streams_commit(group, member_id, generation, api_version)
        else:
            _validate_consumer_commit(group, member_id, generation, api_version)
        now = self.now_ms()
        expire = now + retention_ms if retention_ms is not None and retention_ms >= 0 else -1
        commit = self._prepare(group_id, topics, now, expire)
        try:
            self.store.append(shard.partition, commit.records)
        except KafkaError as exc:
            if created:
                shard.groups.pop(group_id, None)
            code = exc.code
            if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
            raise KafkaError(code, str(exc)) from None
        if commit.accepted:
            shard.offsets.setdefault(group_id, {}).update(commit.accepted)
        return commit.results

    def _prepare(self, group_id: str, topics: CommitTopics, now: int, expire: int) -> _Commit:
        """Records for the partitions whose metadata fits offset.metadata.max.bytes."""
        commit = _Commit()
        limit = self.config.offset_metadata_max_bytes
        for topic, partitions in topics:
            out: list[tuple[int, int]] = []
            for partition, offset, leader_epoch, metadata in partitions:
                if metadata is not None and len(metadata) > limit:
                    out.append((partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                    continue
                oam = OffsetAndMetadata(offset, leader_epoch, metadata or "", now, expire)
                commit.records.append(rec.offset_commit(group_id, topic, partition, offset,
                                                        leader_epoch, oam.metadata, now, expire))
                commit.accepted.append(((topic, partition), oam))
                out.append((partition, ErrorCode.NONE))
            commit.results.append((topic, out))
        return commit

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> list[tuple[str, list[tuple[int, int, int, str]]]]:
        """Committed (partition, offset, leader epoch, metadata) per topic; -1 when none.
        topics None means every committed offset of the group."""
        shard = self.state.serving(group_id)
        group = shard.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            _validate_consumer_fetch(group, member_id, member_epoch)
        elif isinstance(group, StreamsGroup):
            _validate_streams_fetch(group, member_id, member_epoch)
        elif isinstance(group, ShareGroup):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                             f"Group {group_id} is a share group; share groups have no "
                             "committed offsets.")
        offsets = shard.offsets.get(group_id, {})
        if isinstance(group, ClassicGroup) and group.is_state(ClassicState.DEAD):
            offsets = {}
        if topics is None:
            by_topic: dict[str, list[tuple[int, int, int, str]]] = {}
            for (topic, partition), oam in sorted(offsets.items()):
                by_topic.setdefault(topic, []).append(
                    (partition, oam.offset, oam.leader_epoch, oam.metadata))
            return list(by_topic.items())
        out = []
        for topic, partitions in topics:
            rows = []
            for partition in partitions:
                found = offsets.get((topic, partition))
                rows.append((partition, -1, -1, "") if found is None
                            else (partition, found.offset, found.leader_epoch, found.metadata))
            out.append((topic, rows))
        return out

    # -- TxnOffsetCommit -----------------------------------------------------------------------

    def commit_transactional_offsets(
            self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
            generation: int, instance_id: str | None, topics: CommitTopics) -> PartitionErrors:
        """TxnOffsetCommit: log the offsets in a transactional batch of the producer; they count
        (OffsetFetch sees them) once its COMMIT marker lands, and vanish on ABORT. Group-level
        failures raise KafkaError; per-partition errors are returned."""
        shard = self.state.serving(group_id)
        _validate_txn_commit(shard.groups.get(group_id), group_id, member_id, generation,
                             instance_id)
        commit = self._prepare(group_id, topics, self.now_ms(), -1)
        self.store.append(shard.partition, commit.records, producer_id=producer_id,
                          producer_epoch=producer_epoch)
        if commit.accepted:
            pending = shard.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
            pending.update(commit.accepted)
        return commit.results

    def on_transaction_completed(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` was written to `__consumer_offsets-<partition>`
        (Kafka's onTransactionCompleted). While the partition loads, its replay sees the marker."""
        shard = self.state.shards.get(partition)
        if shard is not None and not shard.loading:
            self._complete_txn_offsets(shard, producer_id, commit)

    def _complete_txn_offsets(self, shard: Shard, producer_id: int, commit: bool) -> None:
        pending = shard.pending_txn.pop(producer_id, None)
        if not pending or not commit:
            return
        for gid, offsets in pending.items():
            if gid not in shard.groups:  # a "simple" group: offsets without membership
                shard.groups[gid] = ClassicGroup(gid, self.now_ms())
            shard.offsets.setdefault(gid, {}).update(offsets)

    def unstable_offsets(self, group_id: str) -> set[TopicPartition]:
        """Partitions of the group with a transactional commit still waiting for its marker
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        shard = self.state.shard_of(group_id)
        if shard is None:
            return set()
        return {tp for by_group in shard.pending_txn.values()
                for tp in by_group.get(group_id, {})}

    # -- OffsetDelete, DeleteGroups, deleted topics --------------------------------------------

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]
                       ) -> PartitionErrors:
        """OffsetDelete: per-partition errors; group-level failures raise KafkaError."""
        shard = self.state.serving(group_id)
        group = shard.groups.get(group_id)
        if group is None or (isinstance(group, ClassicGroup)
                             and group.is_state(ClassicState.DEAD)):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if isinstance(group, ClassicGroup) and not group.is_empty and \
                group.protocol_type != "consumer":
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP)
        offsets = shard.offsets.get(group_id, {})
        records = []
        doomed = []
        results: list[tuple[str, list[tuple[int, int]]]] = []
        for topic, partitions in topics:
            if group.is_subscribed_to(topic):
                results.append((topic, [(p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                                        for p in partitions]))
                continue
            for p in partitions:
                if (topic, p) in offsets:
                    records.append(rec.offset_tombstone(group_id, topic, p))
                    doomed.append((topic, p))
            results.append((topic, [(p, ErrorCode.NONE) for p in partitions]))
        self.store.append(shard.partition, records)
        for tp in doomed:
            offsets.pop(tp, None)
        if not offsets:
            shard.offsets.pop(group_id, None)
        return results

    def tombstones(self, shard: Shard, group_id: str) -> list[rec.KeyValue]:
        """Tombstones of every committed offset of a group (DeleteGroups)."""
        return [rec.offset_tombstone(group_id, t, p) for (t, p) in shard.offsets.get(group_id, {})]

    def forget(self, shard: Shard, group_id: str) -> None:
        """Drop a deleted group's offsets (its tombstones are written)."""
        shard.offsets.pop(group_id, None)

    def on_topics_deleted(self, topics: set[str]) -> None:
        """Drop the committed offsets of deleted topics (Kafka's onPartitionsDeleted), so a
        topic created again under the same name starts without stale offsets."""
        for shard in self.state.loaded_shards():
            for gid, offsets in list(shard.offsets.items()):
                doomed = [tp for tp in offsets if tp[0] in topics]
                if not doomed:
                    continue
                try:
                    self.store.append(shard.partition,
                                      [rec.offset_tombstone(gid, t, p) for t, p in doomed])
                except KafkaError as exc:
                    log.warning("group %s: cannot delete offsets of deleted topics: %s", gid, exc)
                    continue
                self._drop(shard, gid, doomed)

    # -- expiration (offsets.retention.minutes) ------------------------------------------------

    def start(self) -> None:
        """Arm the periodic offset-expiration check."""
        if not self._started:
            self._started = True
            self._schedule_expiration()

    def stop(self) -> None:
        self._started = False
        self.timers.cancel(("expire", ""))

    def _schedule_expiration(self) -> None:
        self.timers.schedule(("expire", ""), self.config.offsets_retention_check_interval,
                             self._run_expiration)

    def _run_expiration(self) -> None:
        try:
            self.expire_offsets()
        except Exception:
            log.exception("offset expiration failed")
        if self._started:
            self._schedule_expiration()

    def expire_offsets(self) -> int:
        """Drop expired offsets of groups that no longer use them, and empty groups with no
        offsets left (Kafka's cleanupGroupMetadata). Returns the number of offsets removed."""
        now = self.now_ms()
        removed = 0
        for shard in self.state.loaded_shards():
            for gid in list(set(shard.groups) | set(shard.offsets)):
                removed += self._expire_group(shard, gid, now)
        return removed

    def _expired(self, group: Group | None, offsets: Offsets, now: int) -> list[TopicPartition]:
        base = expiration_base(group)
        if base is None:
            return []
        doomed = []
        for (topic, partition), oam in offsets.items():
            if group is not None and group.is_subscribed_to(topic) and not group.is_empty:
                continue
            if oam.expire_ts >= 0:
                expired = now >= oam.expire_ts
            else:
                start = oam.commit_ts if isinstance(base, str) else base  # str: "commit"
                expired = now - start >= self.config.offsets_retention_ms
            if expired:
                doomed.append((topic, partition))
        return doomed

    def _expire_group(self, shard: Shard, gid: str, now: int) -> int:
        """Expire one group's offsets (and the group, if empty and left without offsets)."""
        group = shard.groups.get(gid)
        offsets = shard.offsets.get(gid, {})
        doomed = self._expired(group, offsets, now)
        records = [rec.offset_tombstone(gid, topic, partition) for topic, partition in doomed]
        delete_group = group is not None and group.is_empty and \
            len(doomed) == len(offsets) and \
            not (isinstance(group, ClassicGroup) and group.pending_members)
        if delete_group:
            assert group is not None
            records += group_tombstones(group)
        if not records:
            return 0
        try:
            self.store.append(shard.partition, records)
        except KafkaError as exc:
            log.warning("group %s: cannot write expired offsets: %s", gid, exc)
            return 0
        self._drop(shard, gid, doomed)
        if delete_group:
            self.state.remove_group(shard, gid)
        if doomed:
            log.info("group %s: expired %d offsets%s", gid, len(doomed),
                     " and removed the empty group" if delete_group else "")
        return len(doomed)
