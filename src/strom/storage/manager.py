"""LogManager: all partition logs of the broker across its log directories.

Per log dir it keeps Kafka's checkpoint files (recovery points, log start offsets, high
watermarks) and a clean-shutdown marker; ``load`` uses the marker to decide whether logs must be
recovered. Partition directories are ``<topic>-<partition>``; a deleted partition is first
renamed to ``<topic>-<partition>.<uuidhex>-delete`` (cheap, on the event loop, so the name is
free for a re-created topic at once) and then removed by a worker thread; a crash mid-delete
never resurrects it, the next start removes what is left. A directory the metadata does not
know is never deleted: it is renamed ``<topic>-<partition>.<uuidhex>-stray`` (Kafka's names)
and every later start leaves it alone.

Moving a partition to another log dir (`alter_log_dir`, AlterReplicaLogDirs) copies its
directory to ``<target>/<topic>-<partition>.<uuid>-future`` on a worker thread while the log
serves (`strom.storage.move`), then, on the event loop: closes the log, copies what remains,
fsyncs the copy and the target log dir, renames the original ``<topic>-<partition>.<uuid>-delete``
(the same uuid) and fsyncs its log dir -- that rename commits the move --, renames the copy
``<topic>-<partition>`` and reopens the log from it; a worker thread fsyncs the target log dir
and then removes the original.
A crash at any point loses nothing; the next start (`_settle_moves`, before anything is loaded
or removed) looks at each ``-future`` directory:

- a ``-delete`` directory with its uuid exists, so the move had committed and the copy was
  complete and synced before (the commit comes after `DirCopy.finish`), and no log dir holds
  the partition's ``<topic>-<partition>``: the copy takes that name now; the original goes as
  any ``-delete`` directory does;
- no such ``-delete`` directory, and ``<topic>-<partition>`` is in some log dir: the move had
  not committed, and that directory is the original, untouched by the move (only the commit
  renames it): the copy is removed;
- anything else (the partition was deleted during the move; a committed copy whose partition
  has a directory again): the copy is kept as ``-stray``, never removed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from strom.common.background import background_executor
from strom.common.slices import Slicer
from strom.metrics.primitives import Histogram
from strom.protocol.errors import ErrorCode
from strom.storage import files
from strom.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    read_partition_metadata,
    write_offset_checkpoint,
    write_partition_metadata,
)
from strom.storage.config import LogConfig
from strom.storage.errors import KafkaStorageError, StorageError
from strom.storage.files import FileBudget
from strom.storage.health import RateLimitedLog, describe, io_cause, is_fd_exhaustion, probe_dir
from strom.storage.log import PartitionLog, sync_directory
from strom.storage.move import (
    FUTURE_DIR_SUFFIX,
    DirCopy,
    MoveCancelled,
    moved_dir_name,
    parse_moved_dir,
    sync_tree,
)
from strom.storage.producer_state import DEFAULT_EXPIRATION_MS

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".strom_cleanshutdown"
OFFLINE_CHECK_INTERVAL_S = 5.0  # how often an offline log dir is checked for recovery
# background flushes the periodic flush keeps running at once (Kafka's background.threads is 10)
FLUSHES_IN_FLIGHT = 8
RETENTION_SLICE = 500  # logs a retention pass checks between yields to the event loop

Offsets = dict[tuple[str, int], int]
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
MAX_DIR_NAME = 255  # a longer topic name is cut so the renamed directory still fits (as Kafka)
# a move closes the log for its last copy once a round leaves at most this much to copy
MOVE_FINAL_BYTES = 4 << 20


def suffixed_dir_name(topic: str, partition: int, suffix: str) -> str:
    """Kafka's name for a partition directory set aside: ``<topic>-<partition>.<uuid hex
    without dashes><suffix>``, the topic cut short when the whole would pass 255 bytes."""
    tail = f"-{partition}.{uuid.uuid4().hex}{suffix}"
    room = MAX_DIR_NAME - len(tail.encode())
    head = topic.encode()[:room].decode(errors="ignore")
    return head + tail


def has_records(path: Path) -> bool:
    """Whether a partition directory holds any non-empty segment file (scandir: cheap)."""
    try:
        with os.scandir(path) as it:
            return any(e.name.endswith(".log") and e.stat().st_size > 0 for e in it)
    except OSError:
        return True  # cannot tell: treat it as data


@dataclass(eq=False)
class Move:
    """A partition's log on its way to log dir ``target`` (`LogManager.alter_log_dir`)."""

    topic: str
    partition: int
    target: Path
    uid: str  # of the ``-future`` copy and of the original's ``-delete`` name at the commit
    copy: DirCopy
    task: asyncio.Task[None] | None = None
    committed: bool = False

    def lag(self, plog: PartitionLog) -> int:
        """Offsets the copy lacks, as Kafka's future replica lag (from the first segment not
        copied whole)."""
        for seg in plog.segments:
            if not self.copy.holds(seg.log_path.name, seg.size):
                return max(plog.log_end_offset - seg.base_offset, 0)
        return 0


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``<topic>-<partition>`` -> (topic, partition); None for anything else."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or "." in part:
        return None
    return topic, int(part)


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        *,
        max_open_files: int = 1000,
        clock: Callable[[], float] = time.time,
        config_for: Callable[[str], LogConfig] | None = None,
        producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
        replicated: bool = False,
        owned_elsewhere: frozenset[str] = frozenset(),
    ) -> None:
        """``config_for(topic)`` gives the config used when loading existing logs.

        ``replicated``: logs belong to a cluster, where the high watermark is moved by
        replication (and kept in the checkpoint across restarts), not set to the log end.
        ``owned_elsewhere``: topics whose directories another part opens (a KRaft node's
        metadata log, owned by its Raft client): never loaded here, never judged stray."""
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.budget = FileBudget(max_open_files)
        self._clock = clock
        self._config_for = config_for or (lambda _topic: LogConfig())
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_of: dict[tuple[str, int], Path] = {}
        self._dir_counts: dict[Path, int] = {}
        self.loaded_clean: dict[Path, bool] = {}
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.replicated = replicated
        self.owned_elsewhere = owned_elsewhere
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_version = 0  # taken on the loop for each checkpoint's contents
        self._checkpoint_written = 0  # the newest version in the files
        self._offline: dict[Path, str] = {}  # offline log dirs -> why
        self.offline_check_interval_s = OFFLINE_CHECK_INTERVAL_S
        self._recovery_task: asyncio.Task[None] | None = None
        self._online_listeners: list[Callable[[Path], None]] = []
        # told (on the loop) when a log is placed in a dir: created, or moved to another
        self._placed_listeners: list[Callable[[], None]] = []
        self._fd_log = RateLimitedLog(log)
        self._reload_log = RateLimitedLog(log, 60.0)  # a reload failing at every check
        self.flush_times = Histogram()  # ms per log flushed in the background (metrics)
        self.stray_dirs: list[Path] = []  # ``-stray`` directories found by ``load``
        self._removals: set[asyncio.Future[None]] = set()  # directory removals under way
        self._renames: dict[Path, Path] = {}  # deleted log dirs not renamed yet -> -delete name
        self._renames_lock = threading.Lock()
        # deletions' renames and removals, one job after another on one thread: a large
        # deletion reported in slices would otherwise run several Python threads at once,
        # each taking the GIL from the event loop (issue 28); at a low priority, as its work
        # can wait and the loop's cannot
        self._removal_thread = background_executor(1, "strom-log-removal")
        self._moves: dict[tuple[str, int], Move] = {}  # partitions moving to another log dir

    # --- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Open every partition in every log dir, recovering those of uncleanly shut dirs."""
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise KafkaStorageError(f"cannot create log dir {d}: {e}") from e
        self._settle_moves()
        for d in self.log_dirs:
            marker = d / CLEAN_SHUTDOWN_MARKER
            clean = marker.exists()
            self.loaded_clean[d] = clean
            rps = read_offset_checkpoint(d / RECOVERY_POINT_CHECKPOINT)
            lsos = read_offset_checkpoint(d / LOG_START_OFFSET_CHECKPOINT)
            hws = read_offset_checkpoint(d / REPLICATION_OFFSET_CHECKPOINT)
            with os.scandir(d) as it:
                entries = [e for e in it if e.is_dir()]
            leftovers: list[Path] = []
            strays: list[Path] = []
            for entry in entries:
                name = entry.name
                if name.endswith(DELETE_DIR_SUFFIX):
                    leftovers.append(Path(entry.path))  # a deletion a crash interrupted
                    continue
                if name.endswith(STRAY_DIR_SUFFIX):
                    strays.append(Path(entry.path))  # kept on purpose: never loaded, never removed
                    continue
                tp = parse_partition_dir(name)
                if tp is None or tp[0] in self.owned_elsewhere:
                    continue
                if tp in self._logs:
                    raise KafkaStorageError(
                        f"partition {tp[0]}-{tp[1]} is in both {self._dir_of[tp]} and {d}"
                    )
                plog = PartitionLog(
                    Path(entry.path), tp[0], tp[1], None, self._config_for(tp[0]),
                    budget=self.budget, clock=self._clock, clean_shutdown=clean,
                    recovery_point=rps.get(tp, 0), log_start_offset=lsos.get(tp, 0),
                    high_watermark=hws.get(tp), hw_follows_leo=not self.replicated,
                    producer_id_expiration_ms=self.producer_id_expiration_ms,
                )  # fmt: skip
                self._register(tp, plog, d)
            if clean:
                marker.unlink(missing_ok=True)
            if strays:
                self.stray_dirs += sorted(strays)
                log.warning("log dir %s holds %d stray partition directories (%s): kept as they "
                            "are, neither served nor ever removed automatically; see \"Stray "
                            "partition directories\" in docs/operations.md", d, len(strays),
                            _names(sorted(strays)))  # fmt: skip
            if leftovers:
                log.info("removing %d partition directories of deletions interrupted before the "
                         "last shutdown: %s", len(leftovers), _names(sorted(leftovers)))
                self._remove_later(sorted(leftovers))
        self.checkpoint()

    def _settle_moves(self) -> None:
        """Finish or undo the moves a crash interrupted (the module's doc says why each choice
        loses nothing); runs before any directory is loaded or removed."""
        names = {d: os.listdir(d) for d in self.log_dirs}
        present = {parse_partition_dir(n) for ns in names.values() for n in ns}
        set_aside = {n for ns in names.values() for n in ns if n.endswith(DELETE_DIR_SUFFIX)}
        futures = [(d, n, parsed) for d, ns in names.items() for n in sorted(ns)
                   if (parsed := parse_moved_dir(n, FUTURE_DIR_SUFFIX)) is not None]
        # committed moves first: their copy is the partition now, any other copy goes
        futures.sort(key=lambda f: f"{f[1][: -len(FUTURE_DIR_SUFFIX)]}{DELETE_DIR_SUFFIX}"
                     not in set_aside)
        for d, name, (topic, partition, uid) in futures:
            path = d / name
            committed = moved_dir_name(topic, partition, uid, DELETE_DIR_SUFFIX) in set_aside
            if committed and (topic, partition) not in present:
                os.rename(path, d / f"{topic}-{partition}")
                sync_directory(d)
                present.add((topic, partition))
                log.warning("completing the move of %s-%d to %s that a crash interrupted after "
                            "it committed: %s takes the partition's name", topic, partition, d,
                            name)  # fmt: skip
            elif not committed and (topic, partition) in present:
                doomed = d / suffixed_dir_name(topic, partition, DELETE_DIR_SUFFIX)
                os.rename(path, doomed)  # removed with the other -delete directories below
                log.info("removing %s, the copy of a move of %s-%d to %s that a crash "
                         "interrupted before it completed; the partition stays where it was",
                         name, topic, partition, d)  # fmt: skip
            else:  # nothing else holds its data for sure: never removed
                stray = d / suffixed_dir_name(topic, partition, STRAY_DIR_SUFFIX)
                os.rename(path, stray)
                log.warning("%s is the copy of an interrupted move of %s-%d that is neither "
                            "complete nor backed by its original: kept as %s (see \"Stray "
                            "partition directories\" in docs/operations.md)", path, topic,
                            partition, stray.name)  # fmt: skip

    # --- partitions ----------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> Iterable[PartitionLog]:
        return list(self._logs.values())

    def _pick_dir(self) -> Path:
        """The online log dir holding the fewest partitions (Kafka's placement rule)."""
        counts = self._dir_counts
        online = [d for d in self.log_dirs if d not in self._offline]
        if not online:
            raise KafkaStorageError("no log dir is online: " + "; ".join(self._offline.values()))
        return min(online, key=lambda d: counts.get(d, 0))

    def _register(self, tp: tuple[str, int], log: PartitionLog, d: Path) -> None:
        log.on_io_error = self._on_io_error
        self._logs[tp] = log
        self._dir_of[tp] = d
        self._dir_counts[d] = self._dir_counts.get(d, 0) + 1
        self._placed()

    def on_placed(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever a log is placed in a log dir (created there, or moved)."""
        self._placed_listeners.append(listener)

    def _placed(self) -> None:
        for listener in self._placed_listeners:
            listener()

    def _unregister(self, tp: tuple[str, int]) -> PartitionLog | None:
        self._cancel_move(tp)
        log = self._logs.pop(tp, None)
        d = self._dir_of.pop(tp, None)
        if d is not None:
            self._dir_counts[d] -= 1
        return log

    def plan_dirs(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Path]:
        """Directories for new logs, spread over the log dirs as `create` spreads them: what
        `prepare_dirs` makes ahead (call on the loop; the plan is only a hint to `create`)."""
        online = [d for d in self.log_dirs if d not in self._offline]
        counts = dict(self._dir_counts)
        plan: dict[tuple[str, int], Path] = {}
        for topic, partition in partitions:
            if not online or (topic, partition) in self._logs:
                continue
            d = min(online, key=lambda d: counts.get(d, 0))
            counts[d] = counts.get(d, 0) + 1
            plan[(topic, partition)] = d / f"{topic}-{partition}"
        return plan

    @staticmethod
    def prepare_dirs(dirs: list[tuple[Path, uuid.UUID]]) -> set[Path]:
        """Make new partition directories with their partition.metadata, for a worker thread:
        mkdir and file creation can wait behind the filesystem's journal (seen: 100-180 ms on
        the event loop while thousands of partitions were created). Returns those made; one
        that exists already is left alone (`create` then checks it as it always does), and
        one of a partition no longer wanted stays until the next start removes it as stray."""
        made: set[Path] = set()
        for path, topic_id in dirs:
            try:
                os.mkdir(path)
                write_partition_metadata(path / PARTITION_METADATA, topic_id, fresh=True)
            except OSError:
                continue
            made.add(path)
        return made

    def create(
        self, topic: str, partition: int, topic_id: uuid.UUID, config: LogConfig,
        *, prepared: Path | None = None,
    ) -> PartitionLog:
        """Return the partition's log, creating it; a log of another topic id is replaced.
        ``prepared``: its directory, made by `prepare_dirs` for this topic id and untouched
        since, in an online log dir."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            if log.topic_id == topic_id or log.topic_id.int == 0:
                if log.topic_id != topic_id:
                    log.topic_id = topic_id
                    write_partition_metadata(log.dir / PARTITION_METADATA, topic_id)
                log.update_config(config)
                return log
            # another incarnation's data: kept aside, not deleted (a deletion of its topic
            # would have removed it first)
            self.mark_stray(topic, partition, f"topic id {log.topic_id} is not the topic's "
                                              f"current id {topic_id}")  # fmt: skip
        ready = (prepared is not None and prepared.parent in self.log_dirs
                 and prepared.parent not in self._offline)
        if ready:
            assert prepared is not None
            d, path = prepared.parent, prepared
        else:
            d = self._pick_dir()
            path = d / f"{topic}-{partition}"
            if self._renames:
                self._rename_pending(path)  # a deleted incarnation's: its name is needed now
            if path.exists():  # not loaded: keep it only if it is the same incarnation
                stored = read_partition_metadata(path / PARTITION_METADATA)
                if stored != topic_id:
                    self._clear_path(path, topic, partition, stored)
        log = PartitionLog(path, topic, partition, topic_id, config, budget=self.budget,
                           clock=self._clock, clean_shutdown=False,
                           hw_follows_leo=not self.replicated,
                           producer_id_expiration_ms=self.producer_id_expiration_ms,
                           prepared=ready)  # fmt: skip
        self._register(tp, log, d)
        return log

    def _clear_path(self, path: Path, topic: str, partition: int,
                    stored: uuid.UUID | None) -> None:
        """Free the name of an unloaded directory of another incarnation: one holding records
        is kept as stray (e.g. set aside while the metadata could not be trusted), an empty one
        (made ahead by `prepare_dirs` for a creation that did not happen) is removed."""
        if has_records(path):
            self._rename_stray(path, topic, partition, f"it holds topic id {stored}")
        else:
            self._remove_later([self._rename_for_deletion(path, topic, partition)])

    # --- deletion and stray directories --------------------------------------------------------

    def _rename_for_deletion(self, path: Path, topic: str, partition: int) -> Path:
        doomed = path.with_name(suffixed_dir_name(topic, partition, DELETE_DIR_SUFFIX))
        try:
            os.rename(path, doomed)
        except OSError as e:
            raise KafkaStorageError(f"cannot delete {path}: {e}") from e
        return doomed

    def delete_partition(self, topic: str, partition: int) -> None:
        """`delete_partitions` of one partition."""
        self.delete_partitions([(topic, partition)])

    def delete_partitions(self, tps: Iterable[tuple[str, int]]) -> list[Path]:
        """Take the partitions' logs out of service now, then rename their directories to
        ``-delete`` and remove them with one worker-thread job (inline when no loop runs):
        1,000 renames on the loop held every client 100 ms (issue 28). A name still waiting
        for its rename is freed on the spot if a re-created partition wants it (`create`).
        Returns the ``-delete`` directories. A partition whose rename fails is logged and
        skipped: the others still go."""
        moves: list[tuple[Path, Path]] = []
        for topic, partition in tps:
            plog = self._unregister((topic, partition))
            if plog is None:
                continue
            plog.discard()  # its data is going: nothing to write or make durable
            doomed = plog.dir.with_name(suffixed_dir_name(topic, partition, DELETE_DIR_SUFFIX))
            moves.append((plog.dir, doomed))
        if not moves:
            return []
        with self._renames_lock:
            self._renames.update(moves)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # tools, tests, start-up without a loop
            self._rename_and_remove(moves)
            return [d for src, d in moves if not src.exists()]
        job = loop.run_in_executor(self._removal_thread, self._rename_and_remove, moves)
        self._removals.add(job)
        job.add_done_callback(self._removals.discard)
        return [d for _, d in moves]

    def _rename_pending(self, path: Path) -> bool:
        """Rename ``path`` to its ``-delete`` name if a deletion still owes it that (either
        thread; once only). False: nothing was owed or the rename failed (logged)."""
        with self._renames_lock:
            doomed = self._renames.pop(path, None)
            if doomed is None:
                return False
            try:
                os.rename(path, doomed)
            except OSError as e:
                log.error("cannot delete %s: %s; the directory stays and is not served", path, e)
                return False
        return True

    def _rename_and_remove(self, moves: list[tuple[Path, Path]]) -> None:
        """A deletion's worker-thread job: its renames (those `create` did not take first),
        then the removal of every ``-delete`` directory that exists."""
        for src, _ in moves:
            self._rename_pending(src)
        self._remove_dirs([d for _, d in moves if d.exists()])

    def _remove_later(self, doomed: list[Path]) -> None:
        if not doomed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # tools, tests, start-up without a loop
            self._remove_dirs(doomed)
            return
        # a plain executor future: a shutdown cancelling every task does not cut it short
        job = loop.run_in_executor(self._removal_thread, self._remove_dirs, doomed)
        self._removals.add(job)
        job.add_done_callback(self._removals.discard)

    @staticmethod
    def _remove_dirs(doomed: list[Path]) -> None:
        """Remove renamed ``-delete`` directories (a worker thread's job); one that fails stays
        and is removed at the next start."""
        removed = 0
        for path in doomed:
            try:
                shutil.rmtree(path)
                removed += 1
            except FileNotFoundError:
                removed += 1
            except OSError as e:
                log.error("cannot remove %s (%s); the next start removes it", path, e)
        if removed:
            log.info("removed %d deleted partition directories: %s", removed, _names(doomed))

    async def removals_done(self) -> None:
        """Wait until every directory removal begun so far has finished."""
        while self._removals:
            await asyncio.wait(list(self._removals))

    def mark_stray(self, topic: str, partition: int, why: str) -> Path | None:
        """Take a partition's log out of service and keep its directory under Kafka's stray
        name, never to be loaded or removed automatically (the metadata does not know it, so
        its data may still be wanted). Returns the new path (None: no such log)."""
        plog = self._unregister((topic, partition))
        if plog is None:
            return None
        plog.close()
        return self._rename_stray(plog.dir, topic, partition, why)

    def _rename_stray(self, path: Path, topic: str, partition: int, why: str) -> Path:
        stray = path.with_name(suffixed_dir_name(topic, partition, STRAY_DIR_SUFFIX))
        try:
            os.rename(path, stray)
        except OSError as e:
            raise KafkaStorageError(f"cannot rename stray log {path}: {e}") from e
        self.stray_dirs.append(stray)
        log.warning("stray log %s-%d (%s): renamed %s to %s; it is kept, never removed "
                    "automatically (see \"Stray partition directories\" in docs/operations.md)",
                    topic, partition, why, path, stray.name)  # fmt: skip
        return stray

    def set_aside(self, topic: str, partition: int) -> bool:
        """Stop managing a partition's log without touching its directory: it is closed and
        no longer served, retained, cleaned or checkpointed (metadata that cannot be trusted
        does not know it: its topic config, hence its retention, is unknown). The next start
        loads it again. Returns whether there was such a log."""
        plog = self._unregister((topic, partition))
        if plog is None:
            return False
        plog.close()
        return True

    # --- moving a partition to another log dir -------------------------------------------------

    def log_dir_named(self, path: str) -> Path | None:
        """The configured log dir whose absolute path is ``path`` (compared as Kafka does)."""
        return next((d for d in self.log_dirs if str(d.absolute()) == path), None)

    def moves(self) -> dict[tuple[str, int], Move]:
        """The moves under way (DescribeLogDirs shows their copies as future replicas)."""
        return dict(self._moves)

    def alter_log_dir(self, topic: str, partition: int, path: str) -> bool:
        """AlterReplicaLogDirs for one partition: start moving its log to the log dir named
        ``path``; the copy runs in the background (`moves_done` waits for it). Nothing to do
        when the log is there or on its way there; a move elsewhere is cancelled first.
        Returns False when this broker holds no log of the partition. Raises `StorageError`
        with Kafka's code: INVALID_TOPIC_EXCEPTION (the future directory's name would pass
        255 bytes), LOG_DIR_NOT_FOUND (not a configured log dir), KAFKA_STORAGE_ERROR (the
        log dir or the partition is offline)."""
        uid = uuid.uuid4().hex
        future = moved_dir_name(topic, partition, uid, FUTURE_DIR_SUFFIX)
        if len(future.encode()) > MAX_DIR_NAME:
            raise StorageError("The topic name is too long.", ErrorCode.INVALID_TOPIC_EXCEPTION)
        target = self.log_dir_named(path)
        if target is None:
            raise StorageError(f"Log dir {path} is not found in the config.",
                               ErrorCode.LOG_DIR_NOT_FOUND)
        if target in self._offline:
            raise KafkaStorageError(f"Log directory {path} is offline")
        tp = (topic, partition)
        plog = self._logs.get(tp)
        if plog is None:
            return False
        if plog.offline is not None or plog.closed:
            raise KafkaStorageError(f"Partition {topic}-{partition} is offline")
        under_way = self._moves.get(tp)
        if under_way is not None and under_way.target == target:
            return True
        self._cancel_move(tp)
        if self._dir_of[tp] == target:
            return True
        mv = Move(topic, partition, target, uid, DirCopy(plog.dir, target / future))
        self._moves[tp] = mv
        mv.task = asyncio.get_running_loop().create_task(
            self._move(mv, plog), name=f"move-{topic}-{partition}")
        log.info("moving %s-%d from %s to %s", topic, partition, self._dir_of[tp], target)
        return True

    async def moves_done(self) -> None:
        """Wait until every move begun so far has ended (tests)."""
        while tasks := [m.task for m in self._moves.values() if m.task is not None]:
            await asyncio.wait(tasks)

    def _cancel_move(self, tp: tuple[str, int], *, remove: bool = True) -> None:
        """Stop a move; its copy is removed by a worker thread (``remove=False``: left for
        the next start to remove, as at shutdown)."""
        mv = self._moves.pop(tp, None)
        if mv is None:
            return
        mv.copy.cancelled.set()  # a round under way stops at its next chunk
        if mv.task is not None:
            mv.task.cancel()
        if remove and not mv.committed:
            self._discard_copy(mv)

    def _discard_copy(self, mv: Move) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            mv.copy.discard()
            return
        job = loop.run_in_executor(None, mv.copy.discard)
        self._removals.add(job)
        job.add_done_callback(self._removals.discard)

    def _end_move(self, mv: Move) -> None:
        """The move is over (done, failed or cancelled); an uncommitted copy goes."""
        tp = (mv.topic, mv.partition)
        if self._moves.get(tp) is mv:
            del self._moves[tp]
            if not mv.committed:
                self._discard_copy(mv)

    def _check_move(self, mv: Move, plog: PartitionLog) -> None:
        tp = (mv.topic, mv.partition)
        if self._moves.get(tp) is not mv or self._logs.get(tp) is not plog:
            raise MoveCancelled("cancelled")
        if plog.closed or plog.offline is not None:
            raise MoveCancelled("its log went offline")
        if mv.target in self._offline:
            raise MoveCancelled(f"log dir {mv.target} went offline")

    async def _move(self, mv: Move, plog: PartitionLog) -> None:
        """Copy in rounds off the loop until little is left, then swap on the loop."""
        name = f"{mv.topic}-{mv.partition}"
        try:
            await asyncio.to_thread(os.mkdir, mv.copy.dst)
            while True:
                self._check_move(mv, plog)
                copied = await asyncio.to_thread(mv.copy.catch_up, plog.generation)
                self._check_move(mv, plog)
                if plog.flushing:  # a flush thread may still write the log's files
                    running = plog.flush_in_background()
                    if running is not None:
                        await running
                    continue
                if copied <= MOVE_FINAL_BYTES and \
                        mv.copy.pending(plog.generation) <= MOVE_FINAL_BYTES:  # fmt: skip
                    break
            failed = self._commit_move(mv, plog)
        except MoveCancelled as e:
            log.info("move of %s to %s stopped: %s", name, mv.target, e)
            self._end_move(mv)
            return
        except asyncio.CancelledError:
            self._end_move(mv)
            raise
        except Exception as e:  # an I/O failure of the copy: the log never stopped serving
            log.error("moving %s to %s failed; it stays in %s: %s", name, mv.target,
                      plog.dir.parent, e)  # fmt: skip
            self._end_move(mv)
            return
        self._end_move(mv)
        if failed is not None:
            await self._reopen_original(plog, failed)
        else:
            await self.checkpoint_in_background()  # its offsets under its new log dir

    def _commit_move(self, mv: Move, plog: PartitionLog) -> BaseException | None:
        """The swap, on the loop: close, last copy, commit by renames, reopen. Returns the
        failure that left the log closed in its original directory (None: moved)."""
        tp = (mv.topic, mv.partition)
        source = self._dir_of[tp]
        original = plog.dir
        doomed = original.with_name(moved_dir_name(*tp, mv.uid, DELETE_DIR_SUFFIX))
        final = mv.target / original.name
        started = time.monotonic()
        try:
            plog.close(sync=False)  # the copy is fsynced instead
            mv.copy.finish(plog.generation)
            os.rename(original, doomed)
        except Exception as e:  # nothing is committed: the original serves again
            return e
        mv.committed = True  # the copy is complete and synced: it is the partition now
        try:
            # durable before the copy takes the name: a crash never finds the partition twice
            sync_directory(source)
            os.rename(mv.copy.dst, final)
        except OSError as e:
            return self._undo_commit(mv, plog, doomed, e)
        self._rehome(tp, mv.target)
        try:
            plog.relocate(final)
        except Exception as e:  # the move stands; the log is offline until it loads
            self._failed_after_move(plog, e)
            return None
        self._remove_original_later(mv.target, doomed)
        log.info("moved %s-%d from %s to %s: %d bytes; the log was closed for %.0f ms",
                 mv.topic, mv.partition, source, mv.target, mv.copy.size,
                 (time.monotonic() - started) * 1000)  # fmt: skip
        return None

    def _remove_original_later(self, target: Path, doomed: Path) -> None:
        """Sync the copy's new name, then remove the set-aside original (a worker thread). Until
        the name is durable a crash leaves the commit for the next start to complete, which
        needs the original's ``-delete`` name: so it stays should the sync fail."""

        def work() -> None:
            try:
                sync_directory(target)
            except OSError as e:
                log.error("cannot sync %s after a move (%s); %s stays until the next start",
                          target, e, doomed)  # fmt: skip
                return
            self._remove_dirs([doomed])

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            work()
            return
        job = loop.run_in_executor(None, work)
        self._removals.add(job)
        job.add_done_callback(self._removals.discard)

    def _undo_commit(self, mv: Move, plog: PartitionLog, doomed: Path,
                     error: OSError) -> BaseException | None:
        """The commit cannot be completed: the original takes its name back and serves (a
        crash meanwhile finds either the original, so the copy goes, or the commit)."""
        try:
            os.rename(doomed, plog.dir)
        except OSError as e:  # the next start completes the move (_settle_moves)
            plog.take_offline(f"moving {plog.topic_partition} to {mv.target} failed half-way "
                              f"({error}; {e}): restart the broker to complete it")  # fmt: skip
            log.error("moving %s to %s failed half-way: %s; putting the original back failed "
                      "too: %s. The partition is offline until the broker restarts, which "
                      "completes the move", plog.topic_partition, mv.target, error, e)  # fmt: skip
            return None
        mv.committed = False
        return error

    def _failed_after_move(self, plog: PartitionLog, e: BaseException) -> None:
        cause = io_cause(e)
        d = self._dir_of.get((plog.topic, plog.partition))
        if cause is not None and d is not None:
            self._dir_failed(d, f"Error while opening {plog.topic_partition} in dir {d}", cause)
            return
        plog.take_offline(f"cannot open {plog.topic_partition} in {plog.dir}: {e}")
        log.error("cannot open %s in %s: %s; it is offline until the broker restarts",
                  plog.topic_partition, plog.dir, e)  # fmt: skip

    async def _reopen_original(self, plog: PartitionLog, failure: BaseException) -> None:
        """A swap failed before it committed: the log serves again from its own directory,
        once the files its close wrote are synced (a worker thread; the log answers
        KAFKA_STORAGE_ERROR meanwhile)."""
        log.error("moving %s failed; it stays in %s: %s", plog.topic_partition, plog.dir.parent,
                  failure)  # fmt: skip
        try:
            await asyncio.to_thread(sync_tree, plog.dir)
            tp = (plog.topic, plog.partition)
            if self._logs.get(tp) is plog and plog.closed and plog.offline is None:
                plog.relocate(plog.dir)
        except Exception as e:
            self._failed_after_move(plog, e)

    def _rehome(self, tp: tuple[str, int], d: Path) -> None:
        old = self._dir_of[tp]
        self._dir_counts[old] -= 1
        self._dir_of[tp] = d
        self._dir_counts[d] = self._dir_counts.get(d, 0) + 1
        self._placed()

    # --- periodic work -------------------------------------------------------------------------

    def run_retention(self, now_ms: int) -> int:
        """One retention pass over every log, blocking (tests); a broker awaits
        ``run_retention_in_slices``."""
        return sum(log.apply_retention(now_ms) for log in list(self._logs.values())
                   if not log.closed)  # fmt: skip

    async def run_retention_in_slices(self, now_ms: int) -> int:
        """The retention pass, giving the event loop back after every log that deleted
        segments (each costs a few renames on the loop; the unlinks run in a worker thread)
        and every ``RETENTION_SLICE`` logs, so a pass that deletes thousands of segments
        does not hold up requests meanwhile. Returns the bytes deleted."""
        freed = 0
        for i, plog in enumerate(list(self._logs.values()), 1):
            if plog.closed:  # deleted, closed or offline meanwhile
                continue
            n = plog.apply_retention(now_ms)
            freed += n
            if n or i % RETENTION_SLICE == 0:
                await asyncio.sleep(0)
        return freed

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producer ids idle longer than producer.id.expiration.ms from every log."""
        return sum(log.remove_expired_producers(now_ms) for log in list(self._logs.values())
                   if not log.closed)  # fmt: skip

    async def remove_expired_producers_in_slices(self, now_ms: int) -> int:
        """`remove_expired_producers`, yielding to the loop between slices (a broker's
        periodic pass over every log)."""
        removed = 0
        slicer = Slicer()
        for log in list(self._logs.values()):
            if not log.closed:
                removed += log.remove_expired_producers(now_ms)
            await slicer.tick()
        return removed

    def dir_of(self, topic: str, partition: int) -> Path | None:
        """The log dir holding a partition (the cleaner keeps its checkpoint there)."""
        return self._dir_of.get((topic, partition))

    def flush_if_due(self, now_ms: int) -> None:
        """The periodic flush, blocking (tests); a broker awaits ``flush_in_background``."""
        for log in list(self._logs.values()):
            log.flush_if_due(now_ms)

    async def flush_in_background(self, now_ms: int) -> None:
        """The periodic flush (rolled segments; everything once log.flush.interval.ms has
        passed) with the fsyncs in worker threads, at most ``FLUSHES_IN_FLIGHT`` logs at a time
        so ten thousand rolled partitions do not pin ten thousand descriptors at once."""
        running: set[asyncio.Future[None]] = set()
        slicer = Slicer()  # a pass over 10,000 logs would otherwise hold the loop ~50 ms
        for log in list(self._logs.values()):
            done = log.flush_if_due_in_background(now_ms)
            if done is None:
                await slicer.tick()
                continue
            done.add_done_callback(self._timer(time.monotonic()))
            running.add(done)
            if len(running) >= FLUSHES_IN_FLIGHT:
                _, pending = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                running = set(pending)
        if running:
            await asyncio.wait(running)

    def _timer(self, started: float) -> Callable[[asyncio.Future[None]], None]:
        def done(_: asyncio.Future[None]) -> None:
            self.flush_times.observe((time.monotonic() - started) * 1000)

        return done

    def checkpoint(self) -> None:
        """Write the three offset checkpoint files of every online log dir (blocking: fsyncs);
        a dir where that fails goes offline."""
        self._checkpoints_failed(self._write_checkpoints(self._checkpoint_contents()))

    async def checkpoint_in_background(self) -> None:
        """``checkpoint`` with the file writes and fsyncs in a worker thread; the offsets are
        read on the loop first, so the files hold one consistent moment."""
        failed = await asyncio.to_thread(self._write_checkpoints, self._checkpoint_contents())
        self._checkpoints_failed(failed)

    def _checkpoints_failed(self, failed: list[tuple[Path, Exception]]) -> None:
        for d, e in failed:
            cause = io_cause(e)
            if cause is None:
                raise e
            self._dir_failed(d, f"Error while writing offset checkpoints in dir {d}", cause)

    def _checkpoint_contents(self) -> tuple[int, list[tuple[Path, list[Offsets]]]]:
        """(version, per log dir: recovery points, log start offsets, high watermarks)."""
        per_dir: dict[Path, list[Offsets]] = {d: [{}, {}, {}] for d in self.log_dirs
                                              if d not in self._offline}  # fmt: skip
        dir_of = self._dir_of
        for tp, log in self._logs.items():
            d = dir_of.get(tp)
            maps = per_dir.get(d) if d is not None else None
            if maps is None:
                continue
            maps[0][tp] = log.recovery_point
            maps[1][tp] = log.log_start_offset
            maps[2][tp] = log.high_watermark
        self._checkpoint_version += 1
        return self._checkpoint_version, list(per_dir.items())

    def _write_checkpoints(
        self, contents: tuple[int, list[tuple[Path, list[Offsets]]]]
    ) -> list[tuple[Path, Exception]]:
        """Write one version of the checkpoints (any thread); returns the dirs where that
        failed. A slow background write that finishes after a newer one (e.g. shutdown's) must
        not replace it: older versions are skipped."""
        version, per_dir = contents
        failed: list[tuple[Path, Exception]] = []
        with self._checkpoint_lock:
            if version <= self._checkpoint_written:
                return failed
            for d, (rps, lsos, hws) in per_dir:
                try:
                    write_offset_checkpoint(d / RECOVERY_POINT_CHECKPOINT, rps)
                    write_offset_checkpoint(d / LOG_START_OFFSET_CHECKPOINT, lsos)
                    write_offset_checkpoint(d / REPLICATION_OFFSET_CHECKPOINT, hws)
                except (OSError, StorageError) as e:
                    failed.append((d, e))
            self._checkpoint_written = version
        return failed

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown markers.

        The logs are written without an fsync each, then every log directory's filesystem is
        synced at once: with thousands of partitions, five fsyncs a partition (log, epochs,
        producer snapshot, and the file creations they stall behind) took 15-25 s for 10,000
        partitions; one syncfs takes well under a second. Only after it succeeds do the
        recovery points and the clean-shutdown markers claim the data is on disk."""
        if self._recovery_task is not None:
            self._recovery_task.cancel()
        for tp in list(self._moves):  # their copies are removed at the next start
            self._cancel_move(tp, remove=False)
        for log in self._logs.values():
            if not log.closed:
                log.flush(sync=False)
                log.close(sync=False)
        online = [d for d in self.log_dirs if d not in self._offline]
        self._removal_thread.shutdown(wait=True)  # deletions under way finish first
        files.sync_filesystems(online)
        self.checkpoint()
        for d in online:  # an offline dir is recovered on the next start, as after a crash
            if d not in self._offline:
                (d / CLEAN_SHUTDOWN_MARKER).write_text("")
        self.budget.close_all()

    # --- offline log dirs ----------------------------------------------------------------------

    @property
    def offline_dirs(self) -> dict[Path, str]:
        """Offline log dirs and why they went offline."""
        return dict(self._offline)

    def add_online_listener(self, listener: Callable[[Path], None]) -> None:
        """Call ``listener(dir)`` when an offline log dir is back online."""
        self._online_listeners.append(listener)

    def _on_io_error(self, plog: PartitionLog, what: str, cause: OSError) -> None:
        """A log met an I/O failure. Out of file descriptors: the request fails (a rate-limited
        ERROR names the partition), the dir is fine. Anything else: its dir goes offline."""
        if is_fd_exhaustion(cause):
            self._fd_log.error(
                "fd", "%s: %s; the broker is out of file descriptors (raise `ulimit -n`, or "
                "lower max.open.files or the number of connections); requests that need to "
                "open files answer KAFKA_STORAGE_ERROR meanwhile", what, describe(cause))  # fmt: skip
            return
        d = self._dir_of.get((plog.topic, plog.partition))
        if d is None:  # deleted meanwhile
            log.error("%s: %s", what, describe(cause))
            return
        self._dir_failed(d, what, cause)

    def _dir_failed(self, d: Path, what: str, cause: OSError) -> None:
        """Take log dir ``d`` offline (Kafka's LogDirFailureChannel and handleLogDirFailure):
        one ERROR naming the dir, the cause and the partitions; each of them answers
        KAFKA_STORAGE_ERROR until the background check brings the dir back."""
        if d in self._offline:
            return
        reason = f"log dir {d} is offline: {describe(cause)}"
        self._offline[d] = reason
        tps = sorted(tp for tp, dd in self._dir_of.items() if dd == d)
        names = ", ".join(f"{t}-{p}" for t, p in tps[:10]) + (", ..." if len(tps) > 10 else "")
        log.error("%s: %s. Log dir %s is offline: its %d partitions (%s) answer "
                  "KAFKA_STORAGE_ERROR until it has free space and takes writes again (checked "
                  "every %.0f s)", what, describe(cause), d, len(tps), names,
                  self.offline_check_interval_s)  # fmt: skip
        for tp in tps:
            self._logs[tp].take_offline(reason)
        self._start_recovery_checks()

    def _start_recovery_checks(self) -> None:
        task = self._recovery_task
        if task is not None and not task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tools, tests): check_offline_dirs is called directly
            return
        self._recovery_task = loop.create_task(self._check_periodically(), name="log-dir-recovery")

    async def _check_periodically(self) -> None:
        while self._offline:
            await asyncio.sleep(self.offline_check_interval_s)
            try:
                await self.check_offline_dirs()
            except Exception:
                log.exception("checking the offline log dirs failed")

    async def check_offline_dirs(self) -> list[Path]:
        """Bring back every offline dir that has free space and takes a test write (the probe
        runs in a worker thread); returns the dirs now online."""
        back = []
        for d in list(self._offline):
            problem = await asyncio.to_thread(probe_dir, d)
            if problem is not None:
                log.debug("log dir %s stays offline: %s", d, problem)
            elif d in self._offline and self.bring_online(d):
                back.append(d)
        return back

    def bring_online(self, d: Path) -> bool:
        """Reload every partition of offline dir ``d`` from its files, as after a crash, and
        serve them again; all or none (a failure leaves the dir offline for the next check)."""
        logs = [self._logs[tp] for tp, dd in sorted(self._dir_of.items()) if dd == d]
        if any(plog.flushing for plog in logs):
            return False  # a flush begun before the failure is still in its thread
        reloaded: list[PartitionLog] = []
        try:
            for plog in logs:
                plog.reload()
                reloaded.append(plog)
        except (OSError, StorageError) as e:
            for plog in reloaded:
                plog.take_offline(self._offline[d])
            self._reload_log.error(str(d), "log dir %s takes writes again, but reloading its "
                                   "partitions failed; it stays offline: %s", d, e)  # fmt: skip
            return False
        del self._offline[d]
        log.info("log dir %s is back online: %d partitions reloaded", d, len(logs))
        for listener in list(self._online_listeners):
            listener(d)
        return True


def _names(paths: list[Path], limit: int = 10) -> str:
    shown = ", ".join(p.name for p in paths[:limit])
    return shown + (f", ... ({len(paths) - limit} more)" if len(paths) > limit else "")
