"""``spark.read.format("strom")`` / ``spark.readStream.format("strom")`` and the sink's entry.

A Python data source (pyspark.sql.datasource) that reads any Kafka-compatible cluster through
confluent-kafka and behaves like Spark's Kafka connector: the same schema, option names,
defaults, offset JSON, admission control and data-loss rules.

Process layout (what runs where):
- the driver's long-lived Python process of a streaming query runs ``initialOffset``,
  ``latestOffset``, ``partitions`` and ``commit`` on one :class:`StromStreamReader`; it keeps
  an admin client and metadata cache;
- executors' Python workers get a pickled copy of the reader and call ``read`` on one
  :class:`RangePartition` each; clients are created there, never pickled.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # PySpark 4.1: no admission control for Python stream sources yet
    from strom.spark.compat41 import (  # type: ignore[assignment]
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

from strom.spark.admin import OffsetReader
from strom.spark.arrow import arrow_schema, schema_ddl
from strom.spark.consumer import ReadSettings, read_range, report_data_loss
from strom.spark.offsets import (
    OffsetRange,
    PartitionOffsets,
    backlog,
    from_json_dict,
    plan_stream_ranges,
    rate_limit,
    split_ranges,
    to_json_dict,
    tp_text,
)
from strom.spark.options import (
    INCLUDE_HEADERS,
    SourceOptions,
    StromOptionError,
    native_reader_unsupported,
    parse_bool,
    parse_source_options,
)

log = logging.getLogger("strom.spark")

FORMAT_NAME = "strom"
IDLE_REQUERY_S = 0.1  # an idle stream asks the broker for end offsets at most this often


class RangePartition(InputPartition):
    """One Spark task: one offset range of one topic-partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range


def _native(opts: SourceOptions) -> bool:
    """Whether executors read with Strom's fetcher (option ``fetcher``; auto: unless a kafka.*
    setting needs librdkafka). Decided from the settings alone: an executor without the C
    decoder falls back by itself (strom.spark.consumer), and the driver imports no client."""
    if opts.fetcher == "librdkafka":
        return False
    why = native_reader_unsupported(opts.kafka)
    if why is None:
        return True
    if opts.fetcher == "native":
        raise StromOptionError(f"option fetcher=native: {why}; use fetcher=auto or librdkafka")
    log.info("reading through librdkafka: %s", why)
    return False


def _settings(opts: SourceOptions, group_id: str) -> ReadSettings:
    """Executors' settings. The group id only satisfies librdkafka: the consumers never join
    the group nor commit, so it is the same for every query and pooled consumers are shared."""
    return ReadSettings(
        native=_native(opts),
        require_native=opts.fetcher == "native",
        params=opts.params,
        group_id=group_id,
        include_headers=opts.include_headers,
        fail_on_data_loss=opts.fail_on_data_loss,
        poll_timeout_ms=opts.poll_timeout_ms,
    )


_reads_done = 0


def _freeze_long_lived() -> None:
    """Move the objects alive now out of the cyclic GC's reach: a reused Python worker runs a
    full ``gc.collect()`` after every task, which otherwise walks all of them each time. Done
    before a worker's first read (its modules, pyarrow's: tens of thousands of objects) and
    again after it, for what that read imported and built (the reader's modules, the protocol
    codecs compiled on first use, the client session): left to the collector, that second set
    cost about 17 ms of CPU a task (30 tasks reading 1M records: 1.04 s of Python-worker CPU,
    0.53 s frozen). Later reads create no long-lived objects."""
    gc.freeze()


def _read(partition: InputPartition, settings: ReadSettings) -> Iterator[Any]:
    global _reads_done
    if _reads_done == 0:
        _freeze_long_lived()
    r = getattr(partition, "range", None)
    if isinstance(r, OffsetRange):  # (Spark substitutes one empty partition when a batch
        yield from read_range(r, settings)  # read has none)
    _reads_done += 1
    if _reads_done == 1:
        _freeze_long_lived()


class StromDataSource(DataSource):
    """The ``strom`` format: Spark's Kafka source and sink for any Kafka-compatible broker."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return schema_ddl(parse_bool(self.options.get(INCLUDE_HEADERS, "false"), "includeHeaders"))

    def _check_schema(self, schema: Any) -> None:
        headers = parse_bool(self.options.get(INCLUDE_HEADERS, "false"), "includeHeaders")
        names = [f.name for f in getattr(schema, "fields", [])]
        if names and names != arrow_schema(headers).names:
            raise StromOptionError(
                "Kafka source has a fixed schema and cannot be set with a custom one")

    def reader(self, schema: Any) -> DataSourceReader:
        self._check_schema(schema)
        return StromBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        self._check_schema(schema)
        return StromStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from strom.spark.sink import StromBatchWriter

        return StromBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from strom.spark.sink import StromStreamWriter

        return StromStreamWriter(self.options, schema, overwrite)


# --------------------------------------------------------------------------------------------
# batch
# --------------------------------------------------------------------------------------------


class StromBatchReader(DataSourceReader):
    """``spark.read``: offsets are resolved once, when Spark plans the read."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.settings = _settings(options, f"{options.group_id_prefix}-executor")

    def partitions(self) -> Sequence[InputPartition]:
        reader = OffsetReader(self.options)
        try:
            tps = reader.partitions(fresh=True)
            start = reader.resolve(self.options.starting, starting=True, partitions=tps)
            end = reader.resolve(self.options.ending, starting=False, partitions=tps)
        finally:
            reader.close()
        ranges = []
        for tp in sorted(start):
            if tp not in end:
                continue
            s, e = start[tp], end[tp]
            if e < s:
                raise StromOptionError(
                    f"The starting offset ({s}) for {tp_text(tp)} is greater than the ending "
                    f"offset ({e}).")
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        planned = split_ranges(ranges, self.options.min_partitions,
                               self.options.max_records_per_partition)
        return [RangePartition(r) for r in planned]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition, self.settings)


# --------------------------------------------------------------------------------------------
# streaming
# --------------------------------------------------------------------------------------------


class StromStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches of offset ranges, planned on the driver."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.settings = _settings(options, f"{options.group_id_prefix}-executor")
        self.offsets = OffsetReader(options)
        self._available_now = False
        self._target: PartitionOffsets | None = None  # AvailableNow: the frozen end
        self._latest: PartitionOffsets | None = None  # last end offsets seen (for reporting)
        self._latest_at = 0.0
        self._last_trigger_ms = 0.0

    # -- offsets ------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        start = self.offsets.resolve(self.options.starting, starting=True)
        log.info("initial offsets for %s: %s", self.options.subscription.describe(), start)
        return to_json_dict(start)

    def _fetch_latest(self, start: PartitionOffsets) -> PartitionOffsets:
        """End offsets of every subscribed partition; an idle stream re-asks at most every
        IDLE_REQUERY_S (Spark polls an idle source dozens of times a second)."""
        now = time.monotonic()
        cached = self._latest
        if (cached is not None and now - self._latest_at < IDLE_REQUERY_S
                and all(cached.get(tp, -1) >= off for tp, off in start.items())):
            return dict(cached)
        latest = self.offsets.latest(self.offsets.partitions())
        self._latest, self._latest_at = latest, now
        return dict(latest)

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:
            # PySpark 4.1 asks with no arguments (no admission control): everything available
            # (maxOffsetsPerTrigger / minOffsetsPerTrigger cannot be honoured there)
            self._latest = self.offsets.latest(self.offsets.partitions())
            self._latest_at = time.monotonic()
            return to_json_dict(self._latest)
        begin = from_json_dict(start)
        if self._available_now:
            if self._target is None:
                self._target = self.offsets.latest(self.offsets.partitions(fresh=True))
                self._latest = dict(self._target)
            latest = dict(self._target)
        else:
            latest = self._fetch_latest(begin)
        if isinstance(limit, ReadAllAvailable) or not latest:
            return to_json_dict(latest)
        if self._delay_for_min_offsets(begin, latest):
            return to_json_dict(begin)
        if not isinstance(limit, ReadMaxRows):
            return to_json_dict(latest)
        return to_json_dict(rate_limit(limit.max_rows, begin, latest,
                                       self.offsets.earliest_lenient))

    def _delay_for_min_offsets(self, begin: PartitionOffsets, latest: PartitionOffsets) -> bool:
        """minOffsetsPerTrigger / maxTriggerDelay: skip this trigger while too little is new."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None or self._available_now:
            return False
        now_ms = time.time() * 1000
        if now_ms - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now_ms
            return False
        if backlog(begin, latest) < minimum:
            return True
        self._last_trigger_ms = now_ms
        return False

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        return to_json_dict(self._latest) if self._latest else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        self._target = None

    # -- planning and reading -----------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        fail = self.options.fail_on_data_loss
        ranges = plan_stream_ranges(from_json_dict(start), from_json_dict(end),
                                    self.offsets.earliest_lenient,
                                    lambda message: report_data_loss(message, fail))
        planned = split_ranges(ranges, self.options.min_partitions,
                               self.options.max_records_per_partition)
        return [RangePartition(r) for r in planned]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition, self.settings)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, never in the broker."""

    def stop(self) -> None:
        self.offsets.close()
