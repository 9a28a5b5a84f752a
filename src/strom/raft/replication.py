"""Replication: Fetch on the leader (validation, divergence, long poll, the HW) and on the
follower (append, truncate, follow the HW), plus DescribeQuorum, and snapshots (KIP-630).

Snapshots: the owner of the state machine makes one at a committed offset (`create_snapshot`)
and may then drop the log below the latest snapshot (`trim_log`). A leader answers a Fetch
below its log start (or from an empty replica) with the latest snapshot's id; the follower
then downloads it with FetchSnapshot, chunk by chunk from the position it has, installs it
(the log restarts at its end offset, which becomes the HW) and has its listeners load it
before any further commit. SNAPSHOT_NOT_FOUND (the leader dropped that snapshot meanwhile)
ends the download, and the next Fetch names the leader's newer snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sized
from typing import Any

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

from . import messages as m
from .base import ClientBase, E, ListenerContext, Pending, _error_name, logger
from .leader import LeaderState
from .log import (
    BOOTSTRAP_SNAPSHOT_ID,
    load_snapshot,
    snapshot_chunks,
    snapshot_header,
    truncation_offset,
    validate_offset_and_epoch,
)
from .messages import Message
from .states import FollowerState
from .types import (
    METADATA_PARTITION,
    METADATA_TOPIC,
    FatalRaftError,
    KRaftVersion,
    OffsetAndEpoch,
    ReplicaKey,
    ValidKind,
)
from .voter_history import voters_record_of


class ReplicationHandlers(ClientBase):
    def _handle_fetch_request(self, now: int, source: int,
                              req: Mapping[str, Any]) -> Message | Pending:
        if not self._cluster_ok(req.get("cluster_id")):
            return m.top_level_error(E.INCONSISTENT_CLUSTER_ID)
        part = m.fetch_partition(req)
        if part is None:
            return m.top_level_error(E.INVALID_REQUEST)
        max_wait = int(req.get("max_wait", 0))
        fetch_offset = int(part.get("fetch_offset", -1))
        last_epoch = int(part.get("last_fetched_epoch", -1))
        if max_wait < 0 or fetch_offset < 0 or last_epoch < 0 \
                or last_epoch > int(part.get("current_leader_epoch", -1)):
            return self._empty_fetch_response(E.INVALID_REQUEST)
        replica = ReplicaKey.of(m.fetch_replica_id(req), part.get("replica_directory_id"))
        max_bytes = _fetch_max_bytes(req, part, self.settings.fetch_max_bytes)
        response, immediate = self._try_complete_fetch(now, replica, part, max_bytes)
        st = self.quorum.state
        # Fetch v18+: a follower whose HW is behind hears the new one at once (an unknown HW
        # is sent as i64 max, and older versions do not carry the field).
        follower_hw = int(part.get("high_watermark", m.I64_MAX))
        hw_behind = (isinstance(st, LeaderState) and st.high_watermark is not None
                     and follower_hw < st.high_watermark)
        if immediate or max_wait == 0 or hw_behind:
            return response
        pending = Pending(source, replica, part, max_bytes, self.quorum.epoch, now + max_wait)
        self._parked.append(pending)
        return pending

    def _empty_fetch_response(self, error: ErrorCode) -> Message:
        return m.fetch_response(
            error=error, leader_id=self.quorum.leader_id, epoch=self.quorum.epoch,
            high_watermark=None, log_start_offset=self.log.start_offset(), records=None,
            nodes=self._nodes(with_rack=True))

    def _try_complete_fetch(self, now: int, replica: ReplicaKey, part: Mapping[str, Any],
                            max_bytes: int) -> tuple[Message, bool]:
        """The Fetch answer as of now, and whether it must go out without waiting."""
        error = self._validate_leader_only(int(part.get("current_leader_epoch", -1)))
        st = self.quorum.state
        if error is not None or not isinstance(st, LeaderState):
            return self._empty_fetch_response(error or E.NOT_LEADER_OR_FOLLOWER), True
        fetch_offset = int(part["fetch_offset"])
        latest = self.log.latest_snapshot_id()
        if fetch_offset == 0 and latest is not None and latest != BOOTSTRAP_SNAPSHOT_ID:
            kind, where = ValidKind.SNAPSHOT, latest  # an empty replica starts from a snapshot
        else:
            valid = validate_offset_and_epoch(self.log, fetch_offset,
                                              int(part["last_fetched_epoch"]))
            kind, where = valid.kind, valid.offset_and_epoch
        records: object = None
        size = 0
        if kind is ValidKind.VALID:
            info = self.log.read(fetch_offset, max_bytes)
            if st.update_replica_state(replica, now, fetch_offset):
                self._on_leader_high_watermark(st)
            if info.size_bytes > 0:
                records, size = info.records, info.size_bytes
        response = m.fetch_response(
            error=E.NONE, leader_id=self.local.id, epoch=st.epoch,
            high_watermark=st.high_watermark, log_start_offset=self.log.start_offset(),
            records=records,
            diverging=where if kind is ValidKind.DIVERGING else None,
            snapshot_id=where if kind is ValidKind.SNAPSHOT else None,
            nodes=self._nodes(with_rack=True))
        return response, size > 0 or kind is not ValidKind.VALID

    def _complete_parked(self, now: int) -> None:
        if not self._parked:
            return
        st = self.quorum.state
        keep: list[Pending] = []
        for p in self._parked:
            leading = isinstance(st, LeaderState) and st.epoch == p.epoch
            if leading and not p.woken and now < p.deadline_ms:
                keep.append(p)
                continue
            p.response, _ = self._try_complete_fetch(now, p.replica, p.partition, p.max_bytes)
            self._completed.append(p)
        self._parked = keep

    def _send_fetch(self, now: int, destination: int) -> None:
        self._send(now, destination, ApiKey.FETCH, m.fetch_request(
            cluster_id=self.cluster_id, replica=self.local, epoch=self.quorum.epoch,
            fetch_offset=self.log.end_offset(), last_fetched_epoch=self.log.last_fetched_epoch(),
            high_watermark=self.quorum.state.high_watermark,
            max_wait_ms=self.settings.fetch_max_wait_ms, max_bytes=self.settings.fetch_max_bytes))

    def _fetch_any_bootstrap(self, now: int, exclude: set[int] | None = None) -> None:
        """Ask some voter: whoever it is, its answer names the current leader and epoch."""
        if self.requests.has_any_inflight():
            return
        node = self.requests.ready_bootstrap(now, (exclude or set()) | {self.local.id})
        if node is not None:
            self._send_fetch(now, node)

    def _fetch_from_leader(self, now: int, st: FollowerState) -> None:
        if self.requests.has_any_inflight():
            return
        if self.requests.is_ready(st.leader, now):
            download = self._snapshot_download
            if st.fetching_snapshot is not None and download is not None:
                self._send(now, st.leader, ApiKey.FETCH_SNAPSHOT, _fetch_snapshot_request(
                    cluster_id=self.cluster_id, replica=self.local, epoch=st.epoch,
                    snapshot_id=download.snapshot_id, position=download.size(),
                    max_bytes=self.settings.fetch_snapshot_max_bytes))
            else:
                self._send_fetch(now, st.leader)
        elif self.requests.is_backing_off(st.leader, now):
            self._fetch_any_bootstrap(now, {st.leader})

    def _current_leader_outcome(self, now: int, resp: Mapping[str, Any],
                                part: Mapping[str, Any], source: int) -> tuple[bool | None, int]:
        """What Fetch and FetchSnapshot answers share: the partition's error and the leader it
        names (`current_leader`) through the common response path. Returns that path's outcome
        (None: go on with the answer) and the error code."""
        current = part.get("current_leader") or {}
        leader = m.opt_id(int(current.get("leader_id", -1)))
        epoch = int(current.get("leader_epoch", -1))
        error = int(part.get("error_code", 0))
        endpoints = self._leader_endpoints(resp.get("node_endpoints"), leader)
        if not endpoints and error == E.NONE and leader is not None:
            # only the leader answers without an error: it is where the request went (an
            # observer of a dynamic quorum may know no voter's address, and answers before
            # Fetch v17 name no endpoints)
            endpoints = self._endpoints_of(source)
        handled = self._common_response(now, error, leader, epoch, endpoints)
        return handled, error

    def _handle_fetch_response(self, now: int, source: int, resp: Mapping[str, Any]) -> bool:
        top = int(resp.get("error_code", 0))
        if top != 0:
            return self._top_level_error(top)
        part = m.fetch_response_partition(resp)
        if part is None:
            return False
        handled, error = self._current_leader_outcome(now, resp, part, source)
        if handled is not None:
            # An error answer from a non-leader: pause before asking that peer again.
            return handled and error == E.NONE
        if error != E.NONE:
            return self._unexpected_error(error)
        st = self.quorum.state
        if not isinstance(st, FollowerState):
            return True
        diverging = part.get("diverging_epoch") or {}
        snapshot = part.get("snapshot_id") or {}
        snapshot_named = int(snapshot.get("epoch", -1)) >= 0 \
            or int(snapshot.get("end_offset", -1)) >= 0
        if st.fetching_snapshot is not None and not snapshot_named:
            # A Fetch sent while downloading (an observer asking around for the leader) got
            # the log instead: the download is no longer needed.
            self._end_download(st)
        if int(diverging.get("epoch", -1)) >= 0:
            self._truncate(st, OffsetAndEpoch(int(diverging["end_offset"]),
                                              int(diverging["epoch"])))
        elif snapshot_named:
            if not self._snapshot_needed(st, snapshot):
                return False
        else:
            records = part.get("records")
            if isinstance(records, Sized) and len(records) > 0:  # bytes, or a memory log's tuple
                info = self.log.append_as_follower(records)
                self._appended(info)
                if info is not None and self.quorum.is_voter():
                    # A voter's next fetch offset counts toward the HW: it must be durable.
                    self.log.flush()
            hw = int(part.get("high_watermark", -1))
            if hw >= 0:
                self._update_follower_high_watermark(st, hw)
        st.fetch_deadline = now + self.settings.fetch_timeout_ms
        st.has_fetched_from_leader = True
        return True

    def _truncate(self, st: FollowerState, diverging: OffsetAndEpoch) -> None:
        hw = st.high_watermark
        offset = truncation_offset(self.log, diverging)
        if hw is not None and min(offset, diverging.offset) < hw:
            raise FatalRaftError(
                f"node {self.local.id}: leader {st.leader} asks to truncate to "
                f"{min(offset, diverging.offset)}, below the high watermark {hw}")
        logger.info("raft %d: truncating to %d (diverging epoch %d ends at %d)",
                    self.local.id, offset, diverging.epoch, diverging.offset)
        self.log.truncate_to(offset)
        self._truncated(offset)

    def _snapshot_needed(self, st: FollowerState, snapshot: Mapping[str, Any]) -> bool:
        """The leader named a snapshot instead of records: start downloading it."""
        end, epoch = int(snapshot.get("end_offset", -1)), int(snapshot.get("epoch", -1))
        if end < 0 or epoch < 0:
            logger.error("raft %d: the leader sent an invalid snapshot id %s", self.local.id,
                         snapshot)
            return False
        # Not checked against the local log: the snapshot is past its end, or the log diverged.
        sid = OffsetAndEpoch(end, epoch)
        if st.fetching_snapshot == sid and self._snapshot_download is not None:
            return True  # downloading it already (this answered a Fetch sent meanwhile)
        self._end_download(st)
        writer = self.log.new_snapshot(sid)
        if writer is None:  # frozen here already (say, downloaded just before a crash)
            logger.info("raft %d: leader %d names snapshot %s, which is stored here",
                        self.local.id, st.leader, sid)
            self._install_snapshot(st, sid)
            return True
        logger.info("raft %d: downloading snapshot %s from leader %d", self.local.id, sid,
                    st.leader)
        st.fetching_snapshot = sid
        self._snapshot_download = writer
        return True

    def _end_download(self, st: FollowerState) -> None:
        if self._snapshot_download is not None:
            self._snapshot_download.abort()
            self._snapshot_download = None
        st.fetching_snapshot = None

    def _install_snapshot(self, st: FollowerState, sid: OffsetAndEpoch) -> None:
        hw = max(st.high_watermark or 0, self.log.high_watermark())
        if hw > sid.offset:
            raise FatalRaftError(
                f"node {self.local.id}: snapshot {sid} from leader {st.leader} ends below the "
                f"high watermark {hw}")
        self.log.install_snapshot(sid)
        logger.info("raft %d: the log restarts at snapshot %s", self.local.id, sid)
        self._reset_voters_to_snapshot(sid)
        self._voters_changed()
        # The listeners load it at the next poll (they are now behind the log start).
        self._update_follower_high_watermark(st, sid.offset)

    def _update_follower_high_watermark(self, st: FollowerState, leader_hw: int) -> None:
        if st.update_high_watermark(min(leader_hw, self.log.end_offset())):
            assert st.high_watermark is not None
            self.log.update_high_watermark(st.high_watermark)

    def _handle_describe_quorum_request(self, now: int, source: int,
                                        req: Mapping[str, Any]) -> Message:
        if m.vote_like_partition(req) is None:
            return m.describe_quorum_error(E.UNKNOWN_TOPIC_OR_PARTITION, req)
        st = self.quorum.state
        if not isinstance(st, LeaderState):
            return m.describe_quorum_error(E.NOT_LEADER_OR_FOLLOWER)
        voters = []
        for node_id, s in st.voter_states.items():
            if node_id == self.local.id:  # the leader is caught up with itself, now
                voters.append(m.replica_state(s.key, s.end_offset, now, now))
            else:
                voters.append(m.replica_state(s.key, s.end_offset, s.last_fetch_ms,
                                              s.last_caught_up_ms))
        observers = [m.replica_state(s.key, s.end_offset, s.last_fetch_ms, s.last_caught_up_ms)
                     for s in st.observers(now)]
        nodes = [{"node_id": n.key.id, "listeners": m.leader_endpoint_list(n.endpoints)}
                 for n in self.quorum.voters if n.endpoints]
        return m.describe_quorum_response(leader_id=self.local.id, epoch=st.epoch,
                                          high_watermark=st.high_watermark, voters=voters,
                                          observers=observers, nodes=nodes)

    def _snapshot_response(self, error: ErrorCode, **kwargs: Any) -> Message:
        return m.fetch_snapshot_response(error=error, leader_id=self.quorum.leader_id,
                                         epoch=self.quorum.epoch, nodes=self._nodes(), **kwargs)

    def _handle_fetch_snapshot_request(self, now: int, source: int,
                                       req: Mapping[str, Any]) -> Message:
        if not self._cluster_ok(req.get("cluster_id")):
            return m.top_level_error(E.INCONSISTENT_CLUSTER_ID)
        topics = req.get("topics") or []
        if len(topics) != 1 or len(topics[0].get("partitions") or []) != 1:
            return m.top_level_error(E.INVALID_REQUEST)
        part = m.fetch_snapshot_partition(req)
        if part is None:
            asked = topics[0]
            # Like Kafka: the partition names no leader here, but node_endpoints still do.
            return m.fetch_snapshot_response(
                error=E.UNKNOWN_TOPIC_OR_PARTITION, leader_id=None, epoch=-1,
                nodes=self._nodes(), topic=str(asked.get("name", "")),
                partition=int(asked["partitions"][0].get("partition", 0)))
        error = self._validate_leader_only(int(part.get("current_leader_epoch", -1)))
        st = self.quorum.state
        if error is not None or not isinstance(st, LeaderState):
            return self._snapshot_response(error or E.NOT_LEADER_OR_FOLLOWER)
        sid_field = part.get("snapshot_id") or {}
        snapshot_id = OffsetAndEpoch(int(sid_field.get("end_offset", -1)),
                                     int(sid_field.get("epoch", -1)))
        snapshot = self.log.read_snapshot(snapshot_id)
        if snapshot is None or snapshot_id == BOOTSTRAP_SNAPSHOT_ID:
            return self._snapshot_response(E.SNAPSHOT_NOT_FOUND)  # (0, 0) is never served
        size = snapshot.size()
        position = int(part.get("position", -1))
        if position < 0 or position >= size:
            return self._snapshot_response(E.POSITION_OUT_OF_RANGE)
        chunk = snapshot.read(position, min(int(req.get("max_bytes", size)), size))
        st.update_check_quorum(
            ReplicaKey.of(int(req.get("replica_id", -1)), part.get("replica_directory_id")), now)
        return self._snapshot_response(E.NONE, snapshot_id=snapshot_id, size=size,
                                       position=position, chunk=chunk)

    def _handle_fetch_snapshot_response(self, now: int, source: int,
                                        resp: Mapping[str, Any]) -> bool:
        top = int(resp.get("error_code", 0))
        if top != 0:
            return self._top_level_error(top)
        part = _fetch_snapshot_response_partition(resp)
        if part is None:
            return False
        handled, error = self._current_leader_outcome(now, resp, part, source)
        if handled is not None:
            return handled and error == E.NONE
        st = self.quorum.state
        writer = self._snapshot_download
        if not isinstance(st, FollowerState) or st.fetching_snapshot is None or writer is None:
            return True  # no download in this state (a response only ever answers one)
        sid_field = part.get("snapshot_id") or {}
        sid = OffsetAndEpoch(int(sid_field.get("end_offset", -1)),
                             int(sid_field.get("epoch", -1)))
        if error != E.NONE or sid.offset < 0 or sid.epoch < 0:
            # SNAPSHOT_NOT_FOUND: the leader dropped it meanwhile. Any other error leaves no
            # way on either (POSITION_OUT_OF_RANGE ...). Fetch again: the answer names the
            # snapshot to download now.
            report = logger.info if error == E.SNAPSHOT_NOT_FOUND else logger.warning
            report("raft %d: leader %d answered %s for snapshot %s: fetching again",
                   self.local.id, st.leader, _error_name(error), writer.snapshot_id)
            self._end_download(st)
            st.fetch_deadline = now + self.settings.fetch_timeout_ms
            return error == E.SNAPSHOT_NOT_FOUND
        position = int(part.get("position", -1))
        size = int(part.get("size", -1))
        if sid != writer.snapshot_id or position != writer.size():
            raise FatalRaftError(
                f"node {self.local.id}: FetchSnapshot answered snapshot {sid} at position "
                f"{position}, expected {writer.snapshot_id} at {writer.size()}")
        chunk = bytes(part.get("unaligned_records") or b"")
        if position + len(chunk) > size or (not chunk and position < size):
            raise FatalRaftError(
                f"node {self.local.id}: FetchSnapshot of {sid} sent {len(chunk)} bytes at "
                f"position {position} of {size}")
        writer.append(chunk)
        if writer.size() == size:
            writer.freeze()
            self._snapshot_download = None
            st.fetching_snapshot = None
            self._install_snapshot(st, sid)
        st.fetch_deadline = now + self.settings.fetch_timeout_ms
        st.has_fetched_from_leader = True
        return True

    # -------------------------------------------------------------- snapshots of the owner

    def create_snapshot(self, end_offset: int, values: Iterable[bytes], *,
                        now_ms: int | None = None) -> OffsetAndEpoch | None:
        """Snapshot the state machine as of `end_offset` (its listener's next offset: the first
        offset not in `values`), which must be committed and end a batch. Returns the id, or
        None when the log already starts there or has that snapshot. The snapshot's epoch and
        last contained timestamp are those of the batch before `end_offset`."""
        start = self.log.start_offset()
        if end_offset <= start:
            return None
        hw = self.log.high_watermark()
        if end_offset > hw:
            raise ValueError(f"snapshot at {end_offset} is above the high watermark {hw}")
        before = self.log.read_batches(end_offset - 1, end_offset)
        if not before:
            raise ValueError(f"no record at offset {end_offset - 1} for a snapshot")
        sid = OffsetAndEpoch(end_offset, before[-1].epoch)
        writer = self.log.new_snapshot(sid)
        if writer is None:
            return None
        try:
            dynamic = self.voter_history.kraft_version() == KRaftVersion.DYNAMIC
            voters = voters_record_of(self.voter_history.committed(end_offset)) if dynamic else None
            for chunk in snapshot_chunks(
                    sid, values, last_contained_log_timestamp=before[-1].append_time_ms,
                    timestamp=self._now if now_ms is None else now_ms, voters=voters):
                writer.append(chunk)
            writer.freeze()
        except BaseException:
            writer.abort()
            raise
        logger.info("raft %d: created snapshot %s", self.local.id, sid)
        return sid

    def trim_log(self, snapshot_id: OffsetAndEpoch | None = None) -> bool:
        """Start the log at a snapshot (default: the latest), dropping the records and the
        snapshots below it; True if the log start moved. A replica still fetching below the
        new start is sent the latest snapshot when it asks (the leader's rule, not a wait)."""
        sid = snapshot_id or self.log.latest_snapshot_id()
        if sid is None or sid == BOOTSTRAP_SNAPSHOT_ID:
            return False
        moved = self.log.delete_before_snapshot(sid)
        if moved:
            logger.info("raft %d: the log starts at snapshot %s", self.local.id, sid)
        return moved

    def enforce_retention(self, max_bytes: int, max_ms: int, now_ms: int | None = None) -> int:
        """Kafka's metadata.max.retention.bytes/.ms: while the log and its snapshots hold more
        than `max_bytes`, or the oldest snapshot's last record is older than `max_ms`, that
        snapshot goes with the log below the next one. The latest snapshot always stays (and
        with it everything after it); a negative limit is no limit. Returns how many went."""
        now = self._now if now_ms is None else now_ms
        dropped = 0
        while True:
            ids = self.log.snapshot_ids()
            if len(ids) < 2:
                return dropped
            header = snapshot_header(self.log, ids[0])
            stamp = header.last_contained_log_timestamp if header is not None else -1
            too_big = max_bytes >= 0 and self.log.size_bytes() > max_bytes
            too_old = max_ms >= 0 and stamp >= 0 and now - stamp > max_ms
            if not (too_big or too_old) or not self.trim_log(ids[1]):
                return dropped
            dropped += 1
            logger.info("raft %d: metadata retention (%s): snapshot %s and the log below "
                        "%s deleted", self.local.id,
                        "metadata.max.retention.bytes" if too_big else "metadata.max.retention.ms",
                        ids[0], ids[1])

    def _maybe_load_snapshot(self, ctx: ListenerContext) -> None:
        """Before a commit: a new listener starts from the latest snapshot, and one behind the
        log start (nothing left to read there) must load it."""
        start = self.log.start_offset()
        fresh, ctx.fresh = ctx.fresh, False
        if not fresh and ctx.next_offset >= start:
            return
        latest = self.log.latest_snapshot_id()
        content = load_snapshot(self.log, latest) if latest is not None else None
        if content is None:
            if ctx.next_offset < start:
                raise FatalRaftError(f"node {self.local.id}: a listener at {ctx.next_offset} is "
                                     f"behind the log start {start}, and there is no snapshot")
            return
        ctx.next_offset = content.snapshot_id.offset
        ctx.listener.handle_load_snapshot(content)


def _fetch_snapshot_request(*, cluster_id: str | None, replica: ReplicaKey, epoch: int,
                            snapshot_id: OffsetAndEpoch, position: int,
                            max_bytes: int) -> Message:
    return {
        "cluster_id": cluster_id,
        "replica_id": replica.id,
        "max_bytes": max_bytes,
        "topics": [{"name": METADATA_TOPIC, "partitions": [{
            "partition": METADATA_PARTITION,
            "current_leader_epoch": epoch,
            "snapshot_id": {"end_offset": snapshot_id.offset, "epoch": snapshot_id.epoch},
            "position": position,
            "replica_directory_id": replica.wire_directory_id(),
        }]}],
    }


def _fetch_snapshot_response_partition(resp: Mapping[str, Any]) -> Mapping[str, Any] | None:
    topics = resp.get("topics") or []
    if len(topics) != 1 or topics[0].get("name") != METADATA_TOPIC:
        return None
    parts = topics[0].get("partitions") or []
    if len(parts) != 1 or parts[0].get("index") != METADATA_PARTITION:
        return None
    part: Mapping[str, Any] = parts[0]
    return part


def _fetch_max_bytes(req: Mapping[str, Any], part: Mapping[str, Any], default: int) -> int:
    limits = [int(v) for v in (req.get("max_bytes"), part.get("partition_max_bytes"))
              if isinstance(v, int) and v > 0]
    return min(limits) if limits else default


