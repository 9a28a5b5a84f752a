"""The lake writer's process: `python -m strom.lake`, started by the broker (never by hand).

It reads the broker's `Handoff` from its first stdin line, then loops: every few seconds, and
at once when the broker nudges it (another line on stdin), it reads the topics' `iceberg.*`
configs again (AdminClient), it reads the Iceberg topics' records
with one consumer (assign(), no group, read_committed) and every `iceberg.commit.interval.ms`
appends what a topic gave to its table (strom.lake.writer). When stdin closes (the broker
stopped, or died) it commits what it holds and exits: it never outlives its broker.
"""

from __future__ import annotations

import importlib.abc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from strom.common.dead_letters import DLQ_TOPIC_CONFIG
from strom.common.helper_child import start_child, watch_parent
from strom.lake.dead_letters import DeadLetterSender
from strom.lake.mapping import Batch, Row
from strom.lake.settings import Handoff, LakeSettings

log = logging.getLogger("strom.lake")

POLL_S = 0.2
REPORT_S = 1.0  # how often the lag is reported to the broker (a line on stdout)
MAX_BACKOFF_S = 60.0
MAX_POLL = 2_000  # records per consume(): a batch passes MAX_BATCH_BYTES by less than this
MAX_BATCH_ROWS = 500_000  # a commit comes before the interval ends beyond these
# A commit's memory: the batch as Python bytes, then as Arrow, then pyiceberg's copy (its
# partition filter) and the Parquet writer's buffers. Measured (docs/benchmarks.md, iceberg-1k,
# 200k records of 1 KiB into a key_value table): 64 MiB batches peaked at 780 MB of RSS, 16 MiB
# at 475 MB; with the rest below, 16 MiB at 240 MB and 8 MiB at 200 MB (a third more CPU per
# record, in more commits, and no slower). Values to decode (value_schema) take more: 235 MB.
MAX_BATCH_BYTES = 8 << 20
# librdkafka reads ahead up to this much (its default, 64 MiB, was the largest single part of
# the writer's peak), and fetches a partition again this soon after the read-ahead was full
# (its default, 1 s: the queue ran dry meanwhile, 18,000 records/s against 65,000)
PREFETCH_KBYTES = MAX_BATCH_BYTES >> 10
FETCH_QUEUE_BACKOFF_MS = 10
# installed, imported by pyarrow whenever present, and never used here: 45 MB of RSS
UNUSED_MODULES = ("pandas", "numpy")
MODES = ("key_value", "value_schema")
NICE = 19  # added to the broker's nice value: the lowest priority there is
INTERNAL = ("__consumer_offsets", "__transaction_state", "__share_group_state", "_schemas")


@dataclass
class TopicConfig:
    mode: str
    interval_ms: int
    leaders: dict[int, int]  # partition -> its leader's id
    dlq: str = ""  # errors.deadletterqueue.topic.name: where undecodable values go


def owned(config: TopicConfig, broker_id: int | None) -> frozenset[int]:
    """The partitions this broker's writer writes: those it leads (each broker of a cluster
    writes its own; the table's offsets are per partition)."""
    return frozenset(p for p, leader in config.leaders.items()
                     if broker_id is None or leader == broker_id)


@dataclass
class TopicState:
    table: Any  # strom.lake.writer.TopicTable
    interval_s: float
    partitions: frozenset[int]  # the ones this writer writes
    due: float
    batch: Batch = field(default_factory=Batch)
    failed: bool = False  # the last commit failed: read again from the table's offsets
    mode: str = "key_value"
    decoder: Any = None  # strom.lake.value_schema.ValueSchema in value_schema mode
    dlq: str = ""
    failures: int = 0  # commits (or reopenings) that failed, for the broker's metrics
    backoff_s: float = 0.0  # after a failure: the wait before the next try, doubling
    last_commit_s: float | None = None  # Unix time of the last commit
    lag: int | None = None  # records not in the table yet (None: not known yet)


def row_of(message: Message) -> Row:
    """(Hot: once per record.)"""
    found: Any = message.headers()  # librdkafka's (name, value) pairs, or None
    headers = tuple((name, value.encode() if isinstance(value, str) else value)
                    for name, value in found) if found else ()
    return Row(message.partition(), message.offset(),  # type: ignore[arg-type]  # (set: read)
               max(message.timestamp()[1], 0), message.key(), message.value(), headers)


class LakeWriter:
    def __init__(self, settings: LakeSettings, stop: threading.Event, catalog: Any,
                 admin: Any, consumer: Any, look_again: threading.Event | None = None) -> None:
        self.settings = settings
        self.stop = stop
        self.catalog = catalog  # pyiceberg's
        self.admin = admin
        self.consumer = consumer
        self.topics: dict[str, TopicState] = {}
        self.warned: set[str] = set()
        self.dead_letters = DeadLetterSender(settings.client_base(), settings.dlq_prefix, admin)
        # set by the broker's nudge (a partition it leads now): look at the topics at once
        self.look_again = look_again if look_again is not None else threading.Event()

    @classmethod
    def connect(cls, settings: LakeSettings, stop: threading.Event,
                look_again: threading.Event | None = None) -> LakeWriter:
        from strom.lake.writer import open_catalog

        base = settings.client_base()
        consumer = Consumer({**base, "group.id": "strom-lake", "enable.auto.commit": False,
                             "enable.auto.offset.store": False,
                             "isolation.level": "read_committed",
                             "auto.offset.reset": "earliest",
                             "queued.max.messages.kbytes": PREFETCH_KBYTES,
                             "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
        return cls(settings, stop, open_catalog(settings), AdminClient(base), consumer,
                   look_again)

    # -- which topics ---------------------------------------------------------------------

    def discover(self) -> dict[str, TopicConfig]:
        metadata = self.admin.list_topics(timeout=10)
        partitions = {name: {p: m.leader for p, m in t.partitions.items()}
                      for name, t in metadata.topics.items()
                      if t.error is None and name not in INTERNAL}
        if not partitions:
            return {}
        futures = self.admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, name) for name in partitions],
            request_timeout=10)
        found = {}
        for resource, future in futures.items():
            try:
                entries = future.result()
            except KafkaException:
                continue  # deleted meanwhile
            mode = entries["iceberg.mode"].value if "iceberg.mode" in entries else "disabled"
            interval = entries.get("iceberg.commit.interval.ms")
            dlq = entries.get(DLQ_TOPIC_CONFIG)
            found[resource.name] = TopicConfig(
                mode or "disabled", int(interval.value) if interval is not None else 60000,
                partitions[resource.name], dlq.value or "" if dlq is not None else "")
        return found

    def refresh(self) -> None:
        found = self.discover()
        for topic in list(self.topics):
            config = found.get(topic)
            if config is None or config.mode != self.topics[topic].mode:
                log.info("topic %s is no longer an Iceberg topic in %s mode", topic,
                         self.topics[topic].mode)
                self.flush(topic)
                self._unassign(topic)
                del self.topics[topic]
        for topic, config in found.items():
            if config.mode not in MODES:
                continue
            state = self.topics.get(topic)
            if state is None:
                self.start(topic, config)
                continue
            state.interval_s = config.interval_ms / 1000
            state.dlq = config.dlq
            mine = owned(config, self.settings.broker_id)
            if mine != state.partitions:  # leaders moved, or partitions were added
                log.info("topic %s: this writer now writes partitions %s", topic, sorted(mine))
                self.flush(topic)
                state.partitions = mine
                if not state.failed:
                    self._unassign(topic)
                    state.failed = True  # read again from the table's offsets
                    self.flush(topic)

    def start(self, topic: str, config: TopicConfig) -> None:
        from strom.lake.writer import TopicTable

        decoder = None
        if config.mode == "value_schema":
            decoder = self.value_schema(topic)
            if decoder is None:
                return  # tried again at the next refresh
        table = TopicTable(self.catalog, self.settings.namespace, topic,
                           decoder.type if decoder is not None else None)
        state = TopicState(table, config.interval_ms / 1000,
                           owned(config, self.settings.broker_id),
                           time.monotonic() + config.interval_ms / 1000, mode=config.mode,
                           decoder=decoder, dlq=config.dlq)
        self.topics[topic] = state
        try:
            offsets = table.open()
        except Exception:
            log.exception("topic %s: cannot open its Iceberg table %s: trying again", topic,
                          table.name)
            state.failed = True
            return
        log.info("topic %s -> Iceberg table %s, from offsets %s", topic, table.name,
                 offsets or "the start")
        self._assign(topic, state, offsets)

    def value_schema(self, topic: str) -> Any:
        """The topic's value schema from the registry (None, and an ERROR line once, if
        there is none that makes a table)."""
        from strom.lake.value_schema import Unsupported, ValueSchema

        url = self.settings.handoff.registry_url
        try:
            if url is None:
                raise Unsupported("the broker serves no schema registry "
                                  "(schema.registry.listeners)")
            decoder = ValueSchema(url, f"{topic}-value")
        except (Unsupported, OSError, ValueError, KeyError) as exc:
            if topic not in self.warned:
                self.warned.add(topic)
                log.error("topic %s: iceberg.mode=value_schema needs a schema (Avro, JSON Schema "
                          "or Protobuf) registered under %s-value that makes a table: %s (its "
                          "table waits for one)", topic, topic, exc)
            return None
        self.warned.discard(topic)
        return decoder

    def evolve(self, topic: str, state: TopicState) -> None:
        """Follows a new version of the topic's value schema: the table is widened to it (new
        optional columns) and values are then decoded into its shape. A version the table
        cannot take (a changed type, a shape without a column type) is refused: its values
        wait, with an ERROR line, and nothing is dropped silently."""
        from pyiceberg.exceptions import CommitFailedException

        decoder = state.decoder
        try:
            latest, version = decoder.latest_now()
        except (OSError, ValueError, KeyError):
            return  # the registry is out of reach: values that need it wait in decode
        if latest == decoder.latest_id or latest in decoder.held:
            return
        subject = f"{topic}-value"
        why = None
        new = self.value_schema(topic)
        if new is None:
            why = "it has no table type (see the line above)"
        else:
            try:
                state.table.evolve(new.type)
            except CommitFailedException:
                return  # another writer committed meanwhile: next time
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            decoder.held[latest] = (f"version {version} of {subject} (schema id {latest}) does "
                                    f"not fit the table {state.table.name}: {why}")
            log.error("topic %s: the table %s cannot take version %s of %s (schema id %d): %s; "
                      "values written with it wait (not written, not skipped) until the table "
                      "or the subject changes", topic, state.table.name, version, subject,
                      latest, why)
            return
        log.info("topic %s: the table %s now follows version %s of %s (schema id %d)", topic,
                 state.table.name, version, subject, latest)
        state.decoder = new

    def decode(self, topic: str, state: TopicState) -> dict[int, int]:
        """Decodes the batch's values. Those that do not decode go to the topic's dead-letter
        topic when it has one; a partition's first value that neither decodes nor reaches a
        dead-letter topic ends what the batch takes of that partition (it is read again, and
        reported, after the commit: never skipped). The offsets of those values."""
        from strom.lake.value_schema import RegistryUnavailable, Undecodable

        undecoded: list[tuple[Row, str]] = []
        stopped: dict[int, int] = {}  # partition -> the offset whose value waits
        rows = []
        for row in state.batch.rows:
            if row.partition in stopped:
                continue
            try:
                rows.append(row._replace(decoded=state.decoder.decode(row.value)))
            except RegistryUnavailable as exc:
                stopped[row.partition] = row.offset
                log.error("topic %s: the value at partition %d offset %d cannot be decoded now "
                          "(%s): that partition's records wait from there", topic,
                          row.partition, row.offset, exc)
            except Undecodable as exc:
                undecoded.append((row, f"the value does not decode with its value schema: "
                                       f"{exc}"))
                if not state.dlq:
                    stopped[row.partition] = row.offset
                    log.error("topic %s: the value at partition %d offset %d does not decode "
                              "with its value schema (%s), and the topic has no %s: that "
                              "partition's records wait from there (not written, not skipped)",
                              topic, row.partition, row.offset, exc, DLQ_TOPIC_CONFIG)
        bad = dict(stopped)
        if state.dlq:  # (without one, each partition's first undecodable value is in stopped)
            for partition, offset in self.dead_letters.send(topic, state.dlq,
                                                            undecoded).items():
                bad[partition] = min(offset, bad.get(partition, offset))
        state.batch.rows = rows
        for partition, offset in bad.items():
            state.batch.cut(partition, offset)
        return bad

    def _assign(self, topic: str, state: TopicState, offsets: dict[int, int]) -> None:
        state.batch.owned = state.partitions
        state.batch.clear(offsets)
        if state.partitions:
            self.consumer.incremental_assign([
                TopicPartition(topic, p, offsets.get(p, OFFSET_BEGINNING))
                for p in sorted(state.partitions)])

    def _unassign(self, topic: str) -> None:
        mine = [tp for tp in self.consumer.assignment() if tp.topic == topic]
        if mine:
            self.consumer.incremental_unassign(mine)

    # -- commits --------------------------------------------------------------------------

    def flush(self, topic: str) -> None:
        from strom.lake.writer import Fenced, release_memory

        state = self.topics[topic]
        if state.failed:  # read again from what the table holds
            try:
                offsets = state.table.open() if state.table.table is None else \
                    state.table.offsets()
            except Exception as exc:
                self._back_off(state)
                log.error("topic %s: the Iceberg table %s is still out of reach: %s (next try "
                          "in %.0f s)", topic, state.table.name, exc, state.backoff_s)
                return
            state.failed = False
            self._assign(topic, state, offsets)
            return
        if not state.batch:
            return
        if state.decoder is not None:
            self.evolve(topic, state)
        bad = self.decode(topic, state) if state.decoder is not None else {}
        if not state.batch and not state.batch.moved():  # nothing decoded nor dead-lettered:
            # read again from where the batch started
            self._unassign(topic)
            self._assign(topic, state, state.batch.base)
            return
        count = len(state.batch)
        try:
            covered = state.table.commit(state.batch)
        except Fenced as fenced:
            log.warning("topic %s: the Iceberg table %s was written by another writer (it "
                        "covers %s, this batch started from %s): reading again from there",
                        topic, state.table.name, fenced.offsets, state.batch.base)
            self._unassign(topic)
            self._assign(topic, state, fenced.offsets)
            return
        except Exception:
            self._back_off(state)
            log.exception("topic %s: committing %d records to the Iceberg table %s failed: "
                          "they are read again (next try in %.0f s)", topic, count,
                          state.table.name, state.backoff_s)
            self._unassign(topic)
            state.batch.clear(state.batch.base)
            state.failed = True
            return
        finally:
            release_memory()  # what the commit used, back to the system
        state.backoff_s = 0.0
        state.last_commit_s = time.time()
        state.batch.clear(covered)
        if bad:  # read the undecodable values again (and report them) next time
            self._unassign(topic)
            self._assign(topic, state, covered)
        log.debug("topic %s: %d records committed to %s", topic, count, state.table.name)

    def _back_off(self, state: TopicState) -> None:
        """A failed commit or reopening: the next try waits longer each time (up to a minute;
        never less than the topic's interval)."""
        state.failures += 1
        state.backoff_s = min(max(state.backoff_s * 2, state.interval_s, 1.0), MAX_BACKOFF_S)
        state.due = time.monotonic() + state.backoff_s

    # -- the broker's metrics -----------------------------------------------------------------

    def measure_lag(self, topic: str, state: TopicState) -> None:
        """Records not in the table yet: each written partition's high watermark minus what
        the table covers. The consumer's cached high watermarks while it reads the topic; the
        broker is asked while it does not (the table is out of reach)."""
        total = 0
        for partition in state.partitions:
            tp = TopicPartition(topic, partition)
            try:
                low, high = self.consumer.get_watermark_offsets(
                    tp, timeout=1.0, cached=not state.failed)
            except (KafkaException, AttributeError):
                return
            if high is None or high < 0:
                return  # not known yet
            total += max(high - state.batch.base.get(partition, max(low, 0)), 0)
        state.lag = total

    def report(self) -> None:
        """One line on stdout for the broker: each Iceberg topic's lag, failures, last commit."""
        topics = {}
        for topic, state in self.topics.items():
            self.measure_lag(topic, state)
            topics[topic] = {"lag_records": state.lag, "commit_failures": state.failures,
                             "last_commit_s": state.last_commit_s}
        sys.stdout.write(json.dumps({"lake": topics}) + "\n")
        sys.stdout.flush()

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        next_refresh = next_report = 0.0
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if now >= next_report:
                    next_report = now + REPORT_S
                    try:
                        self.report()
                    except (OSError, ValueError) as exc:  # the broker's end is gone: stopping
                        log.debug("no report: %s", exc)
                if now >= next_refresh or self.look_again.is_set():
                    self.look_again.clear()
                    next_refresh = now + self.settings.refresh_s
                    try:
                        self.refresh()
                    except Exception as exc:
                        log.error("reading the topics' iceberg.* configs failed: %s", exc)
                for message in self.consumer.consume(MAX_POLL, POLL_S):
                    if message.error() is not None:
                        log.warning("reading %s: %s", message.topic(), message.error())
                        continue
                    state = self.topics.get(message.topic() or "")
                    if state is not None and not state.failed:
                        state.batch.add(row_of(message))
                now = time.monotonic()
                for topic, state in list(self.topics.items()):
                    if now >= state.due or len(state.batch) >= MAX_BATCH_ROWS \
                            or state.batch.size >= MAX_BATCH_BYTES:  # a bound on memory
                        state.due = now + state.interval_s
                        self.flush(topic)
            for topic in list(self.topics):  # stopping: commit what was read
                self.flush(topic)
        finally:
            self.consumer.close()
            self.dead_letters.close()


class WithoutModules(importlib.abc.MetaPathFinder):
    """Makes modules look not installed (pyarrow then does without them)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (not in the lake writer)",
                                      name=fullname)
        return None


def main() -> None:
    sys.meta_path.insert(0, WithoutModules(UNUSED_MODULES))
    # read once, when Arrow first allocates: its C++ default pool (the Parquet writer's, the
    # compute kernels'), which pyarrow.set_memory_pool does not change
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    line = start_child("strom.lake", "iceberg.enable=true")
    # A background writer: below the broker's CPU priority, so that when the cores are busy
    # the broker's producers and consumers come first and the tables' lag grows instead
    # (docs/lakehouse.md; iceberg-1k in docs/benchmarks.md measures both)
    os.nice(NICE)
    settings = LakeSettings.of(Handoff.from_line(line))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    look_again = threading.Event()
    watch_parent(stop.set, look_again.set)  # from the start: connecting may hang
    from strom.lake.writer import lean_memory

    lean_memory()
    LakeWriter.connect(settings, stop, look_again).run()
