"""LogManager: all partition logs of the broker across its log directories.

Per log dir it keeps Kafka's checkpoint files (recovery points, log start offsets, high
watermarks) and a clean-shutdown marker; ``load`` uses the marker to decide whether logs must be
recovered. Partition directories are ``<topic>-<partition>``; a deleted partition is first
renamed to ``<topic>-<partition>.<uuidhex>-delete`` (cheap, on the event loop, so the name is
free for a re-created topic at once) and then removed by a worker thread; a crash mid-delete
never resurrects it, the next start removes what is left. A directory the metadata does not
know is never deleted: it is renamed ``<topic>-<partition>.<uuidhex>-stray`` (Kafka's names)
and every later start leaves it alone.
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
from pathlib import Path

from strom.common.slices import Slicer
from strom.metrics.primitives import Histogram
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
from strom.storage.log import PartitionLog
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
    ) -> None:
        """``config_for(topic)`` gives the config used when loading existing logs.

        ``replicated``: logs belong to a cluster, where the high watermark is moved by
        replication (and kept in the checkpoint across restarts), not set to the log end."""
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
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_version = 0  # taken on the loop for each checkpoint's contents
        self._checkpoint_written = 0  # the newest version in the files
        self._offline: dict[Path, str] = {}  # offline log dirs -> why
        self.offline_check_interval_s = OFFLINE_CHECK_INTERVAL_S
        self._recovery_task: asyncio.Task[None] | None = None
        self._online_listeners: list[Callable[[Path], None]] = []
        self._fd_log = RateLimitedLog(log)
        self._reload_log = RateLimitedLog(log, 60.0)  # a reload failing at every check
        self.flush_times = Histogram()  # ms per log flushed in the background (metrics)
        self.stray_dirs: list[Path] = []  # ``-stray`` directories found by ``load``
        self._removals: set[asyncio.Future[None]] = set()  # directory removals under way
        self._renames: dict[Path, Path] = {}  # deleted log dirs not renamed yet -> -delete name
        self._renames_lock = threading.Lock()

    # --- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Open every partition in every log dir, recovering those of uncleanly shut dirs."""
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise KafkaStorageError(f"cannot create log dir {d}: {e}") from e
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
                if tp is None:
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

    def _unregister(self, tp: tuple[str, int]) -> PartitionLog | None:
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
            plog.close(sync=False)  # its data is going: nothing to make durable
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
        job = loop.run_in_executor(None, self._rename_and_remove, moves)
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
        job = loop.run_in_executor(None, self._remove_dirs, doomed)
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
            maps = per_dir.get(dir_of.get(tp))  # type: ignore[arg-type]
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
        for log in self._logs.values():
            if not log.closed:
                log.flush(sync=False)
                log.close(sync=False)
        online = [d for d in self.log_dirs if d not in self._offline]
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
