"""The transaction coordinator: InitProducerId, AddPartitionsToTxn, EndTxn, markers, timeouts.

Kafka's TransactionCoordinator and TransactionStateManager in one event-loop-bound object. A
transactional id belongs to partition `abs(hash(id)) % n` of `__transaction_state`; this
coordinator serves the ids of the partitions this broker leads (`on_leadership`), rebuilding
them from the log first (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and answering NOT_COORDINATOR
for the others.

Every transition is appended to the partition's log before it takes effect, so a restart (even
`kill -9`) finds each transaction where it was: PrepareCommit/PrepareAbort are completed on load
by writing their markers again; Ongoing ones are aborted when their timeout passes. Aborts from
the coordinator itself (a timeout, or a new producer with the same transactional id) bump the
producer epoch first, which fences the old producer everywhere the marker lands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from strom.common.regex import RegexError, compile_regex
from strom.coordinator.partitioning import partition_for
from strom.coordinator.runtime.commits import Commits
from strom.coordinator.runtime.loader import ShardedCoordinator
from strom.coordinator.runtime.timers import Scheduler, TimerKey, Timers
from strom.coordinator.transaction import records as rec
from strom.coordinator.transaction.markers import (
    DONE_CODES,
    GIVE_UP_CODES,
    MarkerResults,
    MarkerWriter,
    TopicPartition,
    TxnMarker,
)
from strom.coordinator.transaction.state import (
    COMPLETED,
    EXPIRATION_ALLOWED,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
)
from strom.coordinator.transaction.store import TRANSACTION_STATE_TOPIC, InternalTopic, TxnStore
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

MAX_MARKER_BACKOFF_MS = 5000


@dataclass
class TxnConfig:
    """The broker configs the coordinator uses (Kafka's names in comments)."""

    state_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900000  # transaction.max.timeout.ms
    abort_interval_ms: int = 10000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    id_expiration_ms: int = 604800000  # transactional.id.expiration.ms
    expire_interval_ms: int = 3600000  # transaction.remove.expired.transaction.cleanup.interval.ms
    marker_retry_backoff_ms: int = 100  # Strom: first retry of a failed marker write
    write_timeout_ms: int = 30000  # request.timeout.ms: a state write waits for its replicas

    @classmethod
    def from_config(cls, get: Callable[[str], Any]) -> TxnConfig:
        def opt(name: str) -> int:
            return int(get(name))  # the registry holds Kafka's default

        return cls(
            state_partitions=opt("transaction.state.log.num.partitions"),
            max_timeout_ms=opt("transaction.max.timeout.ms"),
            abort_interval_ms=opt("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            id_expiration_ms=opt("transactional.id.expiration.ms"),
            expire_interval_ms=opt("transaction.remove.expired.transaction.cleanup.interval.ms"),
            write_timeout_ms=opt("request.timeout.ms"),
        )


class Shard:
    """The transactional ids of one `__transaction_state` partition this broker leads."""

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition = partition
        self.epoch = epoch  # the coordinator epoch written into markers
        self.loading = True
        self.txns: dict[str, TxnMetadata] = {}
        self.loader: Iterator[list[rec.TxnLogEntry]] | None = None


def _pid_result(code: int, producer_id: int = -1, epoch: int = -1) -> dict[str, Any]:
    return {"error_code": int(code), "producer_id": producer_id, "producer_epoch": epoch}


class TransactionCoordinator(ShardedCoordinator):
    store: TxnStore

    def __init__(self, config: TxnConfig, topic: InternalTopic, markers: MarkerWriter,
                 allocate_producer_id: Callable[[], int], scheduler: Scheduler,
                 now_ms: Callable[[], int], commits: Commits | None = None) -> None:
        self.config = config
        self.topic = topic
        self.markers = markers
        self.allocate_producer_id = allocate_producer_id
        self.store = TxnStore(topic, now_ms, commits)
        self.store.commits.register(TRANSACTION_STATE_TOPIC, config.write_timeout_ms)
        self.timers = Timers(scheduler)
        self.scheduler = scheduler
        self.now_ms = now_ms
        self.shards: dict[int, Shard] = {}
        self._failed_fence: set[str] = set()  # ids whose epoch-bumping abort failed to write
        self._started = False

    # ========================================================================================
    # Lifecycle, partitioning and leadership
    # ========================================================================================

    def start(self) -> None:
        """Arm the periodic timed-out-transaction abort and transactional-id expiration."""
        if not self._started:
            self._started = True
            self._schedule(("abort-scan", ""), self.config.abort_interval_ms,
                           self.abort_timed_out_transactions)
            self._schedule(("expire-scan", ""), self.config.expire_interval_ms,
                           self.expire_transactional_ids)

    def _schedule(self, key: TimerKey, interval_ms: int, fn: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator task %s failed", key[0])
            if self._started:
                self._schedule(key, interval_ms, fn)

        self.timers.schedule(key, interval_ms, run)

    def shutdown(self) -> None:
        self._started = False
        self.timers.cancel_all()
        self.shards.clear()

    def num_partitions(self) -> int:
        n = self.topic.num_partitions()
        return n if n else self.config.state_partitions

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions())

    def ensure_topic(self) -> int:
        """Create `__transaction_state` on first need; returns its partition count."""
        n = self.topic.num_partitions()
        return n if n else self.topic.create()

    state_topic = TRANSACTION_STATE_TOPIC

    def _new_shard(self, partition: int, epoch: int) -> Shard:
        return Shard(partition, epoch)

    def _replay_chunk(self, shard: Shard, chunk: list[rec.TxnLogEntry]) -> None:
        for entry in chunk:
            if entry.value is None:
                shard.txns.pop(entry.transactional_id, None)
                continue
            try:
                shard.txns[entry.transactional_id] = TxnMetadata.from_value(
                    entry.transactional_id, entry.value)
            except (KeyError, ValueError) as exc:
                log.warning("skipping unreadable state of transactional id %s: %s",
                            entry.transactional_id, exc)

    def _loaded(self, shard: Shard) -> None:
        """Finish what the previous coordinator logged but did not complete."""
        shard.loading = False
        unfinished = 0
        for md in list(shard.txns.values()):
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                unfinished += 1
                md.pending = (TxnState.COMPLETE_COMMIT if md.state == TxnState.PREPARE_COMMIT
                              else TxnState.COMPLETE_ABORT)
                self._markers_once_committed(shard, md, self.store.log_end_offset(shard.partition))
        if shard.txns:
            log.info("loaded %d transactional ids from %s-%d (%d to complete)", len(shard.txns),
                     TRANSACTION_STATE_TOPIC, shard.partition, unfinished)

    def _unload(self, shard: Shard) -> None:
        for tid in shard.txns:
            self.timers.cancel_group(tid)
        shard.txns.clear()
        shard.loader = None

    def is_loading(self, partition: int) -> bool:
        shard = self.shards.get(partition)
        return shard is not None and shard.loading

    # ========================================================================================
    # Lookups
    # ========================================================================================

    def _shard(self, transactional_id: str) -> Shard:
        shard = self.shards.get(self.partition_for(transactional_id))
        if shard is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"This broker is not the coordinator of {transactional_id}.")
        if shard.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"The coordinator is loading the state of {transactional_id}.")
        self.store.touch(shard.partition)  # the answer waits for what it read to be committed
        return shard

    def transaction(self, transactional_id: str) -> TxnMetadata | None:
        """The metadata of a transactional id this broker coordinates (tests and tools)."""
        shard = self.shards.get(self.partition_for(transactional_id))
        if shard is None or shard.loading:
            return None
        return shard.txns.get(transactional_id)

    def is_local(self, transactional_id: str) -> bool:
        """True when this broker serves (or is loading) the transactional id."""
        return self.partition_for(transactional_id) in self.shards

    def _write(self, shard: Shard, new: TxnMetadata) -> int:
        """Append the new state of a transactional id, then make it current; the offset after
        the record (committed once the high watermark reaches it)."""
        version = rec.TV2_VALUE_VERSION if new.bumps_epoch else rec.VALUE_VERSION
        offset = self.store.append(shard.partition, [(rec.encode_key(new.transactional_id),
                                                      rec.encode_value(new.to_value(), version))])
        shard.txns[new.transactional_id] = new
        return offset + 1

    # ========================================================================================
    # InitProducerId
    # ========================================================================================

    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         expected_producer_id: int | None = None,
                         expected_epoch: int = NO_PRODUCER_EPOCH) -> dict[str, Any]:
        """InitProducerId for a transactional id: {error_code, producer_id, producer_epoch}."""
        if not transactional_id:
            return _pid_result(ErrorCode.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return _pid_result(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        try:
            return self._init_producer_id(transactional_id, timeout_ms, expected_producer_id,
                                          expected_epoch)
        except KafkaError as exc:
            return _pid_result(exc.code)

    def _new_producer_id(self) -> int:
        try:
            return self.allocate_producer_id()
        except KafkaError:
            raise
        except Exception as exc:
            log.exception("cannot allocate a producer id")
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from None

    def _init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int | None,
                          expected_epoch: int) -> dict[str, Any]:
        shard = self._shard(tid)
        now = self.now_ms()
        md = shard.txns.get(tid)
        if md is None:
            md = TxnMetadata(tid, self._new_producer_id(), timeout_ms=timeout_ms,
                             last_update_ms=now)
        if md.pending is not None:
            return _pid_result(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected_pid is not None and not (
                md.producer_epoch == NO_PRODUCER_EPOCH or expected_pid == md.producer_id
                or (expected_pid == md.previous_producer_id and epoch_exhausted(expected_epoch))):
            return _pid_result(ErrorCode.PRODUCER_FENCED)
        state = md.state
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return _pid_result(ErrorCode.CONCURRENT_TRANSACTIONS)
        if state == TxnState.ONGOING:
            # Abort the open transaction under a bumped epoch (fencing its producer) and let the
            # client retry: the retry bumps the epoch once more and returns it.
            fenced = md.producer_epoch if (tid in self._failed_fence
                                           or md.producer_epoch >= SHORT_MAX) \
                else md.producer_epoch + 1
            log.info("transactional id %s: fencing producer %d epoch %d and aborting its open "
                     "transaction before a new producer takes over", tid, md.producer_id,
                     md.producer_epoch)
            code = self._end(shard, md, md.producer_id, fenced, commit=False, from_client=False)
            return _pid_result(code or ErrorCode.CONCURRENT_TRANSACTIONS)
        if state not in COMPLETED:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                             f"transactional id {tid} is in state {state.display}")
        new = md.copy()
        expected = expected_epoch if expected_pid is not None else None
        if epoch_exhausted(md.producer_epoch) and (expected is None
                                                   or expected == md.producer_epoch):
            new.previous_producer_id = md.producer_id
            new.producer_id = self._new_producer_id()
            new.producer_epoch = 0
            new.last_producer_epoch = md.producer_epoch if expected is not None \
                else NO_PRODUCER_EPOCH
        elif expected is None:
            new.producer_epoch = md.producer_epoch + 1
            new.last_producer_epoch = NO_PRODUCER_EPOCH
        elif md.producer_epoch == NO_PRODUCER_EPOCH or expected == md.producer_epoch:
            new.producer_epoch = md.producer_epoch + 1
            new.last_producer_epoch = md.producer_epoch
        elif expected == md.last_producer_epoch:
            pass  # a retry of a bump that already happened: answer with the current epoch
        else:
            return _pid_result(ErrorCode.PRODUCER_FENCED)
        new.check_transition(TxnState.EMPTY)
        new.state = TxnState.EMPTY
        new.timeout_ms = timeout_ms
        new.partitions = set()
        new.start_ms = -1
        new.last_update_ms = now
        self._write(shard, new)
        log.info("initialized transactional id %s with producer id %d and epoch %d on %s-%d",
                 tid, new.producer_id, new.producer_epoch, TRANSACTION_STATE_TOPIC,
                 shard.partition)
        return _pid_result(ErrorCode.NONE, new.producer_id, new.producer_epoch)

    # ========================================================================================
    # AddPartitionsToTxn / AddOffsetsToTxn (and KIP-890 verification)
    # ========================================================================================

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], client_tv: int = 1) -> int:
        """Add partitions to the open (or a new) transaction; one error code for all.

        `client_tv` 2 is a transaction-version-2 add: a partition leader (or the group
        coordinator) adding the partition a transaction first wrote to, on the producer's
        behalf; the transaction remembers it, so its EndTxn bumps the epoch."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        try:
            shard = self._shard(transactional_id)
            md = shard.txns.get(transactional_id)
            wanted = set(partitions)
            if md is None or md.producer_id != producer_id:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if md.producer_epoch != producer_epoch:
                return ErrorCode.PRODUCER_FENCED
            if md.pending is not None or md.state in (TxnState.PREPARE_COMMIT,
                                                      TxnState.PREPARE_ABORT):
                return ErrorCode.CONCURRENT_TRANSACTIONS
            if md.state == TxnState.ONGOING and wanted <= md.partitions:
                return ErrorCode.NONE
            md.check_transition(TxnState.ONGOING)
            now = self.now_ms()
            new = md.copy()
            if md.state != TxnState.ONGOING:
                new.start_ms = now
            new.state = TxnState.ONGOING
            new.partitions |= wanted
            new.last_update_ms = now
            new.client_tv = client_tv
            self._write(shard, new)
            return ErrorCode.NONE
        except KafkaError as exc:
            return exc.code

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn with verify_only (KIP-890): is each partition in the transaction?
        Partitions that are not get TRANSACTION_ABORTABLE."""
        wanted = list(partitions)
        if not transactional_id:
            return dict.fromkeys(wanted, ErrorCode.INVALID_REQUEST)
        try:
            md = self._shard(transactional_id).txns.get(transactional_id)
        except KafkaError as exc:
            return dict.fromkeys(wanted, exc.code)
        if md is None or md.producer_id != producer_id:
            return dict.fromkeys(wanted, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != producer_epoch:
            return dict.fromkeys(wanted, ErrorCode.PRODUCER_FENCED)
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return dict.fromkeys(wanted, ErrorCode.CONCURRENT_TRANSACTIONS)
        return {tp: (ErrorCode.NONE if tp in md.partitions and md.state == TxnState.ONGOING
                     else ErrorCode.TRANSACTION_ABORTABLE) for tp in wanted}

    # ========================================================================================
    # EndTxn
    # ========================================================================================

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        commit: bool, client_tv: int = 1) -> int:
        """EndTxn from a client: log PrepareCommit/PrepareAbort, answer, write the markers."""
        return self.end_transaction_result(transactional_id, producer_id, producer_epoch,
                                           commit, client_tv)[0]

    def end_transaction_result(self, transactional_id: str, producer_id: int,
                               producer_epoch: int, commit: bool, client_tv: int = 1
                               ) -> tuple[int, int, int]:
        """EndTxn: (error code, producer id, producer epoch). EndTxn v5 returns the id and
        epoch because on transaction version 2 (`client_tv` 2) every EndTxn bumps the epoch
        (and, when it is exhausted, moves to a new producer id), so the producer's next
        transaction cannot be confused with a late write of the last one."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        try:
            shard = self._shard(transactional_id)
            md = shard.txns.get(transactional_id)
            if md is None:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
            if client_tv >= 2:
                code = self._end_v2(shard, md, producer_id, producer_epoch, commit)
            else:
                code = self._end(shard, md, producer_id, producer_epoch, commit,
                                 from_client=True)
        except KafkaError as exc:
            return exc.code, -1, -1
        if code != ErrorCode.NONE:
            return code, -1, -1
        current = shard.txns.get(transactional_id, md)
        return ErrorCode.NONE, current.producer_id, current.producer_epoch

    def _end(self, shard: Shard, md: TxnMetadata, producer_id: int, epoch: int, commit: bool,
             *, from_client: bool) -> int:
        tid = md.transactional_id
        if md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if (from_client and epoch != md.producer_epoch) or epoch < md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = md.state
        if state == TxnState.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        if state == TxnState.COMPLETE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE
        if state == TxnState.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
        if state != TxnState.ONGOING:
            log.warning("transactional id %s is %s but received EndTxn(%s)", tid, state.display,
                        "commit" if commit else "abort")
            return ErrorCode.INVALID_TXN_STATE
        new = md.copy()
        fencing = not from_client and epoch != md.producer_epoch
        if fencing:
            new.producer_epoch = epoch
            new.last_producer_epoch = NO_PRODUCER_EPOCH
        return self._prepare_end(shard, new, commit, fencing=fencing)

    def _end_v2(self, shard: Shard, md: TxnMetadata, producer_id: int, epoch: int,
                commit: bool) -> int:
        """EndTxn v5 (transaction version 2), as Kafka's: the epoch is bumped at
        PrepareCommit/PrepareAbort, so a retry arrives with the epoch one below the current
        one (or, after an exhausted epoch, with the previous producer id); an abort is also
        allowed when nothing was added (the producer cannot know whether a write landed)."""
        tid = md.transactional_id
        v2 = md.bumps_epoch
        retry_on_bump = v2 and md.producer_epoch == epoch + 1 and md.producer_id == producer_id
        retry_on_overflow = (v2 and md.previous_producer_id == producer_id
                             and epoch == SHORT_MAX - 1 and md.producer_epoch == 0)
        retry = retry_on_bump or retry_on_overflow
        state = md.state
        if md.producer_id != producer_id and not retry_on_overflow:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid = retry_on_bump if v2 else epoch == md.producer_epoch
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry or epoch == md.producer_epoch
        else:
            valid = epoch == md.producer_epoch
        if not valid:
            return ErrorCode.PRODUCER_FENCED
        if md.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        wanted = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state == TxnState.ONGOING:
            return self._prepare_end(shard, self._bumped(md), commit, fencing=False)
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            mine = (state == TxnState.PREPARE_COMMIT) == commit
            return ErrorCode.CONCURRENT_TRANSACTIONS if mine else ErrorCode.INVALID_TXN_STATE
        if retry and state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return ErrorCode.NONE if state == wanted else ErrorCode.INVALID_TXN_STATE
        if not commit and state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                    TxnState.COMPLETE_ABORT):
            # an abort of a transaction that added nothing: still bump the epoch, as Kafka
            new = self._bumped(md)
            new.partitions = set()
            new.start_ms = self.now_ms()
            return self._prepare_end(shard, new, commit, fencing=False)
        log.warning("transactional id %s is %s but received EndTxn(%s)", tid, state.display,
                    "commit" if commit else "abort")
        return ErrorCode.INVALID_TXN_STATE

    def _bumped(self, md: TxnMetadata) -> TxnMetadata:
        """A copy with the epoch bumped for an EndTxn of transaction version 2 (a new producer
        id is drawn when the epoch is exhausted; it takes over when the markers are written)."""
        new = md.copy()
        new.client_tv = max(md.client_tv, 2)
        if epoch_exhausted(md.producer_epoch):
            new.next_producer_id = self._new_producer_id()
        new.last_producer_epoch = md.producer_epoch
        new.producer_epoch = md.producer_epoch + 1
        return new

    def _prepare_end(self, shard: Shard, new: TxnMetadata, commit: bool, *,
                     fencing: bool) -> int:
        """Log PrepareCommit/PrepareAbort for `new` (already carrying its epoch), then write
        the markers."""
        tid = new.transactional_id
        new.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        new.last_update_ms = self.now_ms()
        try:
            end = self._write(shard, new)
        except KafkaError:
            if fencing:
                self._failed_fence.add(tid)  # never bump twice for a fence that did not land
            raise
        self._failed_fence.discard(tid)
        new.pending = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        self._markers_once_committed(shard, new, end)
        return ErrorCode.NONE

    def _markers_once_committed(self, shard: Shard, md: TxnMetadata, end: int,
                                attempt: int = 0) -> None:
        """Send the markers once PrepareCommit/PrepareAbort (the log below `end`) is committed.
        Markers sent earlier could commit partitions of a transaction that a successor
        coordinator, which never saw the Prepare record, then aborts: a torn transaction."""
        tid = md.transactional_id

        def then(code: ErrorCode) -> None:
            if self.shards.get(shard.partition) is not shard or shard.txns.get(tid) is not md:
                return  # leadership or the transaction moved on: whoever holds it finishes
            if code == ErrorCode.NONE:
                self._send_markers(shard, md)
            elif code != ErrorCode.NOT_COORDINATOR:  # a new leader finishes it on load
                delay = min(self.config.marker_retry_backoff_ms * (2 ** min(attempt, 10)),
                            MAX_MARKER_BACKOFF_MS)
                log.warning("transactional id %s: %s is not replicated yet (%s), waiting again "
                            "in %d ms before writing markers", tid, md.state.display, code.name,
                            delay)
                self.timers.schedule(("prepare", tid), delay, lambda: self._markers_once_committed(
                    shard, md, end, attempt + 1))

        self.store.commits.after_commit(TRANSACTION_STATE_TOPIC, shard.partition, end, then)

    # ========================================================================================
    # Markers and completion
    # ========================================================================================

    def _send_markers(self, shard: Shard, md: TxnMetadata, attempt: int = 0) -> None:
        if not md.partitions:
            self._complete(shard, md)
            return
        marker = TxnMarker(md.producer_id, md.producer_epoch, shard.epoch,
                           md.state == TxnState.PREPARE_COMMIT, tuple(sorted(md.partitions)),
                           md.transactional_id)
        fired = False

        def done(results: MarkerResults) -> None:
            nonlocal fired
            if fired:
                return
            fired = True
            self._on_markers(shard, marker, results, attempt)

        try:
            self.markers.write(marker, done)
        except Exception as exc:
            log.exception("writing markers of transactional id %s failed", md.transactional_id)
            done(dict.fromkeys(marker.partitions, getattr(exc, "code",
                                                          ErrorCode.UNKNOWN_SERVER_ERROR)))

    def _current(self, shard: Shard, marker: TxnMarker) -> TxnMetadata | None:
        """The metadata the marker belongs to, if nothing moved on since it was sent."""
        if self.shards.get(shard.partition) is not shard:
            return None
        md = shard.txns.get(marker.transactional_id)
        if md is None or md.producer_id != marker.producer_id or \
                md.producer_epoch != marker.producer_epoch or md.pending is None or \
                md.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return None
        return md

    def _on_markers(self, shard: Shard, marker: TxnMarker, results: MarkerResults,
                    attempt: int) -> None:
        md = self._current(shard, marker)
        if md is None:
            return
        retry = False
        for tp in marker.partitions:
            code = results.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
            if code in DONE_CODES:
                md.partitions.discard(tp)
            elif code in GIVE_UP_CODES:
                log.error("transactional id %s: marker for %s-%d refused (%s); treating it as "
                          "written", md.transactional_id, tp[0], tp[1], ErrorCode(code).name)
                md.partitions.discard(tp)
            else:
                retry = True
        if retry:
            delay = min(self.config.marker_retry_backoff_ms * (2 ** min(attempt, 10)),
                        MAX_MARKER_BACKOFF_MS)
            log.warning("transactional id %s: %d markers not written yet, retrying in %d ms",
                        md.transactional_id, len(md.partitions), delay)
            self.timers.schedule(("markers", md.transactional_id), delay,
                                 lambda: self._retry_markers(shard, marker, attempt + 1))
            return
        self._complete(shard, md)

    def _retry_markers(self, shard: Shard, marker: TxnMarker, attempt: int) -> None:
        md = self._current(shard, marker)
        if md is not None:
            self._send_markers(shard, md, attempt)

    def _complete(self, shard: Shard, md: TxnMetadata, attempt: int = 0) -> None:
        """Every marker is written: log CompleteCommit/CompleteAbort."""
        target = md.pending or (TxnState.COMPLETE_COMMIT if md.state == TxnState.PREPARE_COMMIT
                                else TxnState.COMPLETE_ABORT)
        new = md.copy()
        new.state = target
        new.pending = None
        new.partitions = set()
        new.last_update_ms = self.now_ms()
        if md.bumps_epoch and md.next_producer_id != NO_PRODUCER_ID:
            # the exhausted epoch's markers are written: the new producer id takes over
            new.previous_producer_id = md.producer_id
            new.producer_id = md.next_producer_id
            new.next_producer_id = NO_PRODUCER_ID
            new.last_producer_epoch = md.producer_epoch
            new.producer_epoch = 0
        try:
            self._write(shard, new)
        except KafkaError as exc:
            if exc.code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                return  # the next coordinator completes it when it loads the partition
            delay = min(self.config.marker_retry_backoff_ms * (2 ** min(attempt, 10)),
                        MAX_MARKER_BACKOFF_MS)
            log.warning("transactional id %s: cannot log %s (%s), retrying in %d ms",
                        md.transactional_id, target.display, exc, delay)
            self.timers.schedule(("complete", md.transactional_id), delay,
                                 lambda: self._retry_complete(shard, md, attempt + 1))
            return
        log.debug("transactional id %s: %s", md.transactional_id, target.display)

    def _retry_complete(self, shard: Shard, md: TxnMetadata, attempt: int) -> None:
        if self.shards.get(shard.partition) is shard and \
                shard.txns.get(md.transactional_id) is md:
            self._complete(shard, md, attempt)

    # ========================================================================================
    # Timeouts and expiration
    # ========================================================================================

    def abort_timed_out_transactions(self) -> int:
        """Abort (fencing the producer) every Ongoing transaction older than its timeout."""
        now = self.now_ms()
        aborted = 0
        for shard in list(self.shards.values()):
            if shard.loading:
                continue
            for md in list(shard.txns.values()):
                if md.state != TxnState.ONGOING or md.pending is not None or \
                        md.start_ms + md.timeout_ms >= now:
                    continue
                tid = md.transactional_id
                fenced = md.producer_epoch if (tid in self._failed_fence
                                               or md.producer_epoch >= SHORT_MAX) \
                    else md.producer_epoch + 1
                log.info("aborting transaction of %s (producer %d epoch %d): open for %d ms, "
                         "timeout %d ms", tid, md.producer_id, md.producer_epoch,
                         now - md.start_ms, md.timeout_ms)
                try:
                    code = self._end(shard, md, md.producer_id, fenced, commit=False,
                                     from_client=False)
                except KafkaError as exc:
                    code = exc.code
                if code == ErrorCode.NONE:
                    aborted += 1
                else:
                    log.warning("cannot abort the timed-out transaction of %s: %s", tid,
                                ErrorCode(code).name)
        return aborted

    def expire_transactional_ids(self) -> int:
        """Forget ids idle for transactional.id.expiration.ms (tombstones in the log)."""
        now = self.now_ms()
        removed = 0
        for shard in list(self.shards.values()):
            if shard.loading:
                continue
            doomed = [md for md in shard.txns.values()
                      if md.state in EXPIRATION_ALLOWED and md.pending is None
                      and md.last_update_ms <= now - self.config.id_expiration_ms]
            if not doomed:
                continue
            try:
                self.store.append(shard.partition,
                                  [(rec.encode_key(md.transactional_id), None) for md in doomed])
            except KafkaError as exc:
                log.warning("cannot expire transactional ids of %s-%d: %s",
                            TRANSACTION_STATE_TOPIC, shard.partition, exc)
                continue
            for md in doomed:
                if shard.txns.get(md.transactional_id) is md:
                    del shard.txns[md.transactional_id]
                    self.timers.cancel_group(md.transactional_id)
            removed += len(doomed)
            log.info("expired %d transactional ids of %s-%d", len(doomed),
                     TRANSACTION_STATE_TOPIC, shard.partition)
        return removed

    # ========================================================================================
    # DescribeTransactions, ListTransactions
    # ========================================================================================

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[dict[str, Any]]:
        out = []
        for tid in transactional_ids:
            entry: dict[str, Any] = {"transactional_id": tid, "error_code": 0,
                                     "transaction_state": "", "transaction_timeout": 0,
                                     "transaction_start_time": -1, "producer_id": -1,
                                     "producer_epoch": -1, "topics": []}
            out.append(entry)
            if not tid:
                entry["error_code"] = int(ErrorCode.INVALID_REQUEST)
                continue
            try:
                md = self._shard(tid).txns.get(tid)
            except KafkaError as exc:
                entry["error_code"] = int(exc.code)
                continue
            if md is None or md.state == TxnState.DEAD:
                entry["error_code"] = int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(md.partitions):
                by_topic.setdefault(topic, []).append(partition)
            entry.update(transaction_state=md.state.display, transaction_timeout=md.timeout_ms,
                         transaction_start_time=md.start_ms, producer_id=md.producer_id,
                         producer_epoch=md.producer_epoch,
                         topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
        return out

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1, pattern: str | None = None) -> dict[str, Any]:
        """{error_code, unknown_state_filters, transaction_states} over the ids served here."""
        if any(s.loading for s in self.shards.values()):
            return {"error_code": int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                    "unknown_state_filters": [], "transaction_states": []}
        wanted_states: set[TxnState] = set()
        unknown = []
        state_names = list(states or ())
        for name in state_names:
            state = TxnState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted_states.add(state)
        pids = set(producer_ids or ())
        try:
            regex = compile_regex(pattern) if pattern else None
        except RegexError:
            return {"error_code": int(ErrorCode.INVALID_REQUEST), "unknown_state_filters": [],
                    "transaction_states": []}
        now = self.now_ms()
        rows: list[dict[str, Any]] = []
        for shard in self.shards.values():
            for md in shard.txns.values():
                if md.state == TxnState.DEAD:
                    continue
                if pids and md.producer_id not in pids:
                    continue
                if state_names and md.state not in wanted_states:
                    continue
                if duration_ms >= 0 and now - md.start_ms <= duration_ms:
                    continue
                if regex is not None and not regex.fullmatch(md.transactional_id):
                    continue
                rows.append({"transactional_id": md.transactional_id,
                             "producer_id": md.producer_id,
                             "transaction_state": md.state.display})
        rows.sort(key=lambda r: r["transactional_id"])
        return {"error_code": 0, "unknown_state_filters": unknown, "transaction_states": rows}
