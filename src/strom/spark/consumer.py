"""Executor side of the source: read one offset range of one partition as Arrow batches.

Two clients can do it: Strom's own (strom.spark.fetcher, the default: batches decoded straight
into Arrow) and, for settings only librdkafka implements, confluent-kafka (this module).

The reader assigns the partition at the range's start offset (no group membership, no offset
commits: Spark's checkpoint is the only record of progress) and stops when the consumer's
position reaches the range's end. Position, not a count of records: compacted logs and
transaction markers leave offsets without records, and librdkafka moves its position past
control records it never hands to the application.

Data loss (offsets deleted under the reader, a partition that now ends before the range does)
fails the task with a clear message when ``failOnDataLoss`` is true; otherwise the missing part
is logged and skipped, as Spark's Kafka source does.

Consumers are pooled per configuration in the Python worker process: Spark reuses its Python
workers, so later tasks skip the connection handshake.
"""

from __future__ import annotations

import bisect
import gc
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa

from strom.spark.arrow import messages_to_batch
from strom.spark.offsets import OffsetRange
from strom.spark.options import (
    FAIL_ON_DATA_LOSS_FALSE_HINT,
    FAIL_ON_DATA_LOSS_TRUE_HINT,
    DataLossError,
    librdkafka_config,
)
from strom.spark.progress import ProgressDeadline

log = logging.getLogger("strom.spark")

DEFAULT_BATCH_ROWS = 20_000
POLL_SLICE_S = 0.1  # one consume() call waits at most this long: a range ending in markers
# (fewer records than offsets) ends after one slice, and deadlines are checked
WATERMARK_TIMEOUT_S = 10.0
POOL_MAX_IDLE = 4  # idle consumers kept by one worker process (the oldest are closed)

# Settings that make a consumer do only what the driver planned (always applied).
FORCED = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",  # surface out-of-range offsets instead of jumping
    "enable.partition.eof": True,
}
# Defaults tuned for reading known ranges fast; a kafka.* option overrides any of them.
DEFAULTS = {
    "isolation.level": "read_uncommitted",  # the Java client's default, which Spark inherits
    "fetch.wait.max.ms": 100,
    "fetch.error.backoff.ms": 50,
    "fetch.queue.backoff.ms": 10,  # librdkafka's 1 s default stalls a consumer that keeps up
    "queued.max.messages.kbytes": 32768,
    # 8 MiB a partition per fetch, not 1: a task reads one partition's range from end to end,
    # and fewer, larger fetches cost less CPU in the task and in the broker (2M records of
    # 100 B read in a Python worker: 0.85-0.90 us a record against 0.94, the broker 0.04
    # against 0.08)
    "max.partition.fetch.bytes": 8 << 20,
    "socket.nagle.disable": True,
}


@dataclass(frozen=True)
class ReadSettings:
    """What an executor needs to read a range (small and picklable)."""

    params: tuple[tuple[str, str], ...]
    group_id: str
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    batch_rows: int = DEFAULT_BATCH_ROWS
    native: bool = False  # read with strom.spark.fetcher instead of librdkafka
    require_native: bool = False  # fetcher=native: no fallback when the C decoder is missing

    def consumer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = dict(DEFAULTS)
        conf.update(librdkafka_config(dict(self.params)))
        conf.setdefault("group.id", self.group_id)  # required by librdkafka; never joined
        conf.update(FORCED)
        return conf


def report_data_loss(message: str, fail: bool) -> None:
    if fail:
        raise DataLossError(f"{message}. {FAIL_ON_DATA_LOSS_TRUE_HINT}")
    log.warning("%s. %s", message, FAIL_ON_DATA_LOSS_FALSE_HINT)


# --------------------------------------------------------------------------------------------
# consumer pool
# --------------------------------------------------------------------------------------------

_PoolKey = tuple[tuple[str, str], ...]
_POOL: list[tuple[_PoolKey, Any]] = []  # idle consumers, oldest first


def _pool_key(conf: dict[str, Any]) -> _PoolKey:
    return tuple(sorted((k, str(v)) for k, v in conf.items() if k != "logger"))


def _acquire(conf: dict[str, Any]) -> Any:
    key = _pool_key(conf)
    for i in range(len(_POOL) - 1, -1, -1):
        if _POOL[i][0] == key:
            return _POOL.pop(i)[1]
    from confluent_kafka import Consumer

    conf = dict(conf)
    conf["logger"] = logging.getLogger("strom.spark.librdkafka")
    return Consumer(conf)


def _close(consumer: Any) -> None:
    try:
        consumer.close()
    except Exception as e:  # closing is best effort
        log.debug("closing a consumer failed: %s", e)


def _release(consumer: Any, conf: dict[str, Any], reusable: bool) -> None:
    try:
        consumer.unassign()
    except Exception:
        reusable = False
    if not reusable:
        _close(consumer)
        return
    _POOL.append((_pool_key(conf), consumer))
    while len(_POOL) > POOL_MAX_IDLE:
        _close(_POOL.pop(0)[1])


def clear_pool() -> None:
    """Close every pooled consumer of this process (tests, benchmarks)."""
    while _POOL:
        _close(_POOL.pop()[1])


# --------------------------------------------------------------------------------------------
# reading a range
# --------------------------------------------------------------------------------------------


def read_range(r: OffsetRange, settings: ReadSettings) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches in the source schema."""
    if r.size <= 0:
        return
    if settings.native and _decoder_built(settings.require_native):
        from strom.spark.fetcher import NativeRangeFetch, session_for

        yield from NativeRangeFetch(session_for(settings.params), r, settings,
                                    report_data_loss).batches()
        return
    conf = settings.consumer_config()
    consumer = _acquire(conf)
    finished = False
    try:
        yield from _RangeFetch(consumer, r, settings).batches()
        finished = True
    finally:
        _release(consumer, conf, reusable=finished)


_decoder_missing_logged = False


def _decoder_built(required: bool) -> bool:
    """Whether this process has the native reader's C decoder (``pip install`` builds it;
    a machine without a C compiler has none): without it a read goes through librdkafka,
    logged once, unless the query asked for fetcher=native."""
    global _decoder_missing_logged
    try:
        import strom.record._columns  # noqa: F401
    except ImportError as e:
        if required:
            raise RuntimeError(f"fetcher=native: the C decoder strom.record._columns is not "
                               f"built on this executor ({e}); reinstall Strom with a C "
                               "compiler, or use fetcher=auto") from e
        if not _decoder_missing_logged:
            _decoder_missing_logged = True
            log.warning("the native reader's C decoder is not built here (%s): reading "
                        "through librdkafka", e)
        return False
    return True


class _RangeFetch:
    def __init__(self, consumer: Any, r: OffsetRange, settings: ReadSettings) -> None:
        from confluent_kafka import KafkaError, Message, TopicPartition

        self.consumer = consumer
        self.r = r
        self.settings = settings
        self.tp_cls = TopicPartition
        self.err_of = Message.error
        # (a consumed record always has an offset: only errors lack one)
        self.offset_of = cast("Callable[[Message], int]", Message.offset)
        self.eof = KafkaError._PARTITION_EOF
        self.out_of_range = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
        self.gone = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                     KafkaError._UNKNOWN_TOPIC)
        self.denied = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._AUTHENTICATION,
                       KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED)
        self.pos = r.start

    @property
    def label(self) -> str:
        return f"{self.r.topic}-{self.r.partition}"

    def _assign(self, offset: int) -> None:
        self.consumer.assign([self.tp_cls(self.r.topic, self.r.partition, offset)])

    def _watermarks(self) -> tuple[int, int]:
        return self.consumer.get_watermark_offsets(
            self.tp_cls(self.r.topic, self.r.partition), timeout=WATERMARK_TIMEOUT_S, cached=False)

    def batches(self) -> Iterator[pa.RecordBatch]:
        r, s = self.r, self.settings
        self._assign(self.pos)
        progress = ProgressDeadline(r, s.poll_timeout_ms, self.label)
        while self.pos < r.end:
            wait = min(POLL_SLICE_S, progress.remaining())
            before = self.pos
            batch, errors = self._poll(min(s.batch_rows, r.end - self.pos), wait)
            if batch is not None:
                yield batch
            for m in errors:
                self._on_error(m)
            if self.pos < r.end:
                # librdkafka's position also moves past control records and aborted data
                position = self.consumer.position([self.tp_cls(r.topic, r.partition)])[0].offset
                if position is not None and position > self.pos:
                    self.pos = min(position, r.end)
            progress.check(before, self.pos)

    def _poll(self, n: int, wait: float) -> tuple[pa.RecordBatch | None, list[Any]]:
        """Consume up to ``n`` messages: the Arrow batch of their records (None if none is
        left in the range) and the error events among them.

        Python's cyclic GC is paused meanwhile. Every ``Message`` is a GC-tracked object, so
        tens of thousands of them alive at once would otherwise set off collections, full
        ones included, that traverse every object of the worker process for nothing: they
        hold no cycles and are freed by reference counting before GC is resumed (which also
        takes them off the collector's count).
        """
        resume = gc.isenabled()  # a caller that turned GC off keeps it off
        if resume:
            gc.disable()
        try:
            messages = self.consumer.consume(n, wait)
            if not messages:
                return None, []
            if any(map(self.err_of, messages)):
                records = [m for m in messages if m.error() is None]
                errors = [m for m in messages if m.error() is not None]
            else:
                records, errors = messages, []
            batch = self._take(records) if records else None
            del messages, records  # freed here, while collections are paused
            return batch, errors
        finally:
            if resume:
                gc.enable()

    def _take(self, records: list[Any]) -> pa.RecordBatch | None:
        r = self.r
        first, last = self.offset_of(records[0]), self.offset_of(records[-1])
        if last - first == len(records) - 1:
            # consecutive offsets (a partition's offsets only grow): no list of them needed
            if first < self.pos:  # never expected after a fresh assign; be safe
                records = records[self.pos - first:]
                if not records:
                    return None
                first = self.pos
            if first > self.pos:
                self._check_gap(first)
            if last >= r.end:
                records = records[:max(0, r.end - first)]
                self.pos = r.end
            else:
                self.pos = last + 1
            if not records:
                return None
            return messages_to_batch(records, r.topic, r.partition,
                                     self.settings.include_headers, first_offset=first)
        offsets = list(map(self.offset_of, records))
        if first < self.pos:  # never expected after a fresh assign; be safe
            cut = bisect.bisect_left(offsets, self.pos)
            records, offsets = records[cut:], offsets[cut:]
            if not records:
                return None
            first = offsets[0]
        if first > self.pos:
            self._check_gap(first)
        if last >= r.end:
            cut = bisect.bisect_left(offsets, r.end)
            records, offsets = records[:cut], offsets[:cut]
            self.pos = r.end
        else:
            self.pos = last + 1
        if not records:
            return None
        return messages_to_batch(records, r.topic, r.partition, self.settings.include_headers,
                                 offsets)

    def _check_gap(self, first: int) -> None:
        """Offsets [pos, first) had no record: compaction or markers, unless they were deleted."""
        low, _ = self._watermarks()
        if low > self.pos:
            report_data_loss(
                f"Cannot fetch records in [{self.pos}, {min(first, low)}) of {self.label}: the "
                f"earliest offset is now {low}", self.settings.fail_on_data_loss)

    def _on_error(self, m: Any) -> None:
        err = m.error()
        code = err.code()
        r, fail = self.r, self.settings.fail_on_data_loss
        if code == self.eof:
            end_of_log = m.offset()
            if end_of_log is not None and end_of_log > self.pos:
                self.pos = min(end_of_log, r.end)
            if self.pos < r.end:
                _, high = self._watermarks()
                if high < r.end:
                    report_data_loss(
                        f"Cannot fetch records in [{self.pos}, {r.end}) of {self.label}: the "
                        f"partition now ends at offset {high}", fail)
                    self.pos = r.end
            return
        if code in self.out_of_range:
            low, high = self._watermarks()
            if self.pos < low:
                report_data_loss(
                    f"Cannot fetch offset {self.pos} of {self.label}: records in [{self.pos}, "
                    f"{min(low, r.end)}) were deleted or aged out (earliest offset is now {low})",
                    fail)
                self.pos = min(low, r.end)
            elif self.pos >= high:
                report_data_loss(
                    f"Cannot fetch offset {self.pos} of {self.label}: the partition ends at "
                    f"offset {high}, before the range [{r.start}, {r.end})", fail)
                self.pos = r.end
            if self.pos < r.end:
                self._assign(self.pos)
            return
        if code in self.gone:
            report_data_loss(f"{self.label} is gone ({err.str()}); records in [{self.pos}, "
                             f"{r.end}) cannot be read", fail)
            self.pos = r.end
            return
        if err.fatal() or code in self.denied:
            raise RuntimeError(f"reading {self.label} at offset {self.pos} failed: {err.str()}")
        # anything else (a dropped connection, a leader moving) is retried by librdkafka;
        # the poll deadline bounds how long the task waits for it
        log.debug("transient error reading %s: %s", self.label, err.str())
