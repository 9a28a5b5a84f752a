"""``df.write.format("strom")`` / ``df.writeStream.format("strom")``: Spark's Kafka sink.

Columns, as Spark's Kafka sink reads them (others are ignored):
  value      string or binary, required (null writes a tombstone)
  key        string or binary, optional
  topic      string, required unless the ``topic`` option is set (the option wins)
  partition  int, optional (null or absent: the producer's partitioner picks one)
  headers    array<struct<key: string, value: binary>>, optional

Delivery is at-least-once by default, like Spark's own sink: every task flushes its producer
and fails if any record was not acknowledged, so Spark retries the task or the batch; a retried
batch may write some records twice.

With ``exactlyOnce=true`` every task that has rows writes them in one Kafka transaction and
records its batch id in the same transaction, so a retried or replayed batch is recognised and
written once (scheme in ``exactly_once.py``, user's view in docs/spark.md).
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from strom.spark.exactly_once import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    TxnScope,
    already_written,
    mark_for,
    task_scope,
)
from strom.spark.options import (
    SinkOptions,
    StromOptionError,
    librdkafka_config,
    parse_sink_options,
)

log = logging.getLogger("strom.spark")

PRODUCER_DEFAULTS = {
    "partitioner": "murmur2_random",  # the Java client's partitioning of keyed records
    "linger.ms": 5,
    "acks": "all",
    "socket.nagle.disable": True,
}
POLL_EVERY = 10_000  # serve delivery callbacks every this many records


class SinkError(RuntimeError):
    """Records could not be written (the task fails, Spark retries it)."""


@dataclass
class StromCommitMessage(WriterCommitMessage):
    records: int
    transactional_id: str | None = None  # exactly-once: the task's transactional id
    skipped: bool = False  # exactly-once: the batch was already written by an earlier attempt


# --------------------------------------------------------------------------------------------
# schema checks (on the driver, before any task runs)
# --------------------------------------------------------------------------------------------


def _type_name(field: Any) -> str:
    return field.dataType.typeName() if hasattr(field, "dataType") else str(field)


def validate_sink_schema(schema: Any, topic_option: str | None) -> None:
    """Spark's KafkaWriter.validateQuery, in Spark's words where it has them."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

    fields = {f.name.lower(): f for f in schema.fields}
    topic = fields.get("topic")
    if topic_option is None and topic is None:
        raise StromOptionError(
            "topic option required when no 'topic' attribute is present. Use the topic option "
            "for setting a topic.")
    if topic is not None and topic_option is None and not isinstance(topic.dataType, StringType):
        raise StromOptionError(f"Topic type must be a string, got {_type_name(topic)}")
    for name in ("key", "value"):
        f = fields.get(name)
        if f is None:
            if name == "value":
                raise StromOptionError("Required attribute 'value' not found")
            continue
        if not isinstance(f.dataType, StringType | BinaryType):
            raise StromOptionError(
                f"{name} attribute type must be a string or binary, got {_type_name(f)}")
    part = fields.get("partition")
    if part is not None and not isinstance(part.dataType, IntegerType):
        raise StromOptionError(f"partition attribute type must be an int, got {_type_name(part)}")
    headers = fields.get("headers")
    if headers is not None:
        t = headers.dataType
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [(f.name, type(f.dataType)) for f in t.elementType.fields]
              == [("key", StringType), ("value", BinaryType)])
        if not ok:
            raise StromOptionError(
                "headers attribute type must be an array<struct<key:string,value:binary>>, got "
                f"{t.simpleString()}")


# --------------------------------------------------------------------------------------------
# producing
# --------------------------------------------------------------------------------------------

_PRODUCERS: dict[tuple[tuple[str, str], ...], Any] = {}


class _Delivery:
    """Counts failed deliveries (librdkafka reports only failures: delivery.report.only.error)."""

    def __init__(self) -> None:
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = f"{error.str()} (topic {message.topic()})"


def _producer(options: SinkOptions) -> tuple[Any, _Delivery]:
    conf: dict[str, Any] = dict(PRODUCER_DEFAULTS)
    conf.update(librdkafka_config(options.kafka))
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    cached = _PRODUCERS.pop(key, None)
    if cached is not None:
        return cached
    from confluent_kafka import Producer

    delivery = _Delivery()
    conf["delivery.report.only.error"] = True
    conf["on_delivery"] = delivery
    conf["logger"] = logging.getLogger("strom.spark.librdkafka")
    try:
        producer = Producer(conf)
    except Exception as e:
        raise StromOptionError(f"invalid Kafka producer configuration: {e}") from None
    return producer, delivery


def _keep(options: SinkOptions, producer: Any, delivery: _Delivery) -> None:
    conf: dict[str, Any] = dict(PRODUCER_DEFAULTS)
    conf.update(librdkafka_config(options.kafka))
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    _PRODUCERS[key] = (producer, delivery)


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    return batch.column(index).to_pylist()


def _send(producer: Any, batch: pa.RecordBatch, topic_option: str | None) -> int:
    """Hand every row of ``batch`` to the producer (waiting for queue space as needed)."""
    n = batch.num_rows
    values = _column(batch, "value")
    assert values is not None
    keys = _column(batch, "key")
    parts = _column(batch, "partition")
    headers = _column(batch, "headers")
    topics = None if topic_option is not None else _column(batch, "topic")
    if topics is not None and None in topics:
        raise SinkError("Null topic present in the data. Use the topic option for setting a topic.")
    produce = producer.produce
    poll = producer.poll
    i = 0
    while i < n:
        try:
            if keys is None and parts is None and headers is None and topics is None:
                topic = topic_option
                while i < n:  # the common case, kept tight
                    produce(topic, values[i])
                    i += 1
                    if i % POLL_EVERY == 0:
                        poll(0)
            else:
                while i < n:
                    kwargs: dict[str, Any] = {}
                    if keys is not None:
                        kwargs["key"] = keys[i]
                    if parts is not None and parts[i] is not None:
                        kwargs["partition"] = parts[i]
                    if headers is not None and headers[i]:
                        kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
                    produce(topics[i] if topics is not None else topic_option, values[i], **kwargs)
                    i += 1
                    if i % POLL_EVERY == 0:
                        poll(0)
        except BufferError:
            poll(0.05)  # local queue full: deliveries make room
        except Exception as e:  # KafkaException: unknown partition, record too large, ...
            topic = topics[i] if topics is not None else topic_option
            where = f"topic {topic}" + (f" partition {parts[i]}" if parts and parts[i] is not None else "")
            raise SinkError(f"cannot write a record to {where}: {e}") from e
    return n


def write_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row and wait until all are acknowledged; raise if any failed."""
    producer, delivery = _producer(options)
    total = 0
    ok = False
    try:
        for batch in batches:
            total += _send(producer, batch, options.topic)
            if delivery.failed:
                break
        remaining = producer.flush(options.flush_timeout_ms / 1000.0)
        if delivery.failed:
            raise SinkError(f"{delivery.failed} of {total} records were not written: "
                            f"{delivery.first_error}")
        if remaining:
            raise SinkError(f"{remaining} of {total} records were not acknowledged within "
                            f"{options.flush_timeout_ms} ms")
        ok = True
    finally:
        if ok:
            _keep(options, producer, delivery)
    return total


# --------------------------------------------------------------------------------------------
# exactly-once: one transaction per task
# --------------------------------------------------------------------------------------------

# Producer-only settings left out of the helper consumer's and admin client's configuration
# (librdkafka would warn about each of them, in every task).
_PRODUCER_ONLY = frozenset({
    "acks", "request.required.acks", "linger.ms", "queue.buffering.max.ms",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "batch.size",
    "batch.num.messages", "compression.type", "compression.codec", "compression.level",
    "enable.idempotence", "retries", "message.send.max.retries", "transaction.timeout.ms",
    "delivery.timeout.ms", "message.timeout.ms", "max.in.flight.requests.per.connection",
    "max.in.flight", "partitioner", "sticky.partitioning.linger.ms", "enable.gapless.guarantee",
})
UNSTABLE_RETRY_S = 0.05  # OffsetFetch answered UNSTABLE_OFFSET_COMMIT: ask again after this


def _client_config(options: SinkOptions) -> dict[str, Any]:
    """The connection settings (bootstrap, security, ...) of the user's kafka.* options."""
    return {k: v for k, v in librdkafka_config(options.kafka).items() if k not in _PRODUCER_ONLY}


def _marks(options: SinkOptions, group: str, deadline: float) -> list[str | None]:
    """Commit metadata of every partition ``group`` has committed offsets for, read with
    require_stable: offsets of a transaction still being completed are waited for."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_client_config(options))
    while True:
        timeout = max(1.0, deadline - time.monotonic())
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], require_stable=True, request_timeout=timeout)
        try:
            result = futures[group].result()
        except KafkaException as e:
            if (e.args[0].code() == KafkaError.UNSTABLE_OFFSET_COMMIT
                    and time.monotonic() < deadline):
                time.sleep(UNSTABLE_RETRY_S)
                continue
            raise SinkError(f"cannot read the committed batches of group {group}: {e}") from e
        return [tp.metadata for tp in result.topic_partitions or ()
                if tp.error is None]


class _Transaction:
    """One task's transactional producer, created, used for one transaction and dropped: a
    fresh ``init_transactions`` per attempt is what fences an earlier attempt of the task."""

    def __init__(self, options: SinkOptions, scope: TxnScope) -> None:
        from confluent_kafka import Producer

        self.options = options
        self.scope = scope
        self.timeout = options.flush_timeout_ms / 1000.0
        self.delivery = _Delivery()
        conf: dict[str, Any] = dict(PRODUCER_DEFAULTS)
        conf.update(librdkafka_config(options.kafka))
        conf["transactional.id"] = scope.transactional_id
        conf["delivery.report.only.error"] = True
        conf["on_delivery"] = self.delivery
        conf["logger"] = logging.getLogger("strom.spark.librdkafka")
        try:
            self.producer = Producer(conf)
        except Exception as e:
            raise StromOptionError(f"invalid Kafka producer configuration: {e}") from None
        self.open = False

    def init(self) -> None:
        """Fence earlier attempts (their open transaction is aborted, a committing one is
        waited for) and make this producer the id's current one."""
        try:
            self.producer.init_transactions(self.timeout)
        except Exception as e:
            raise SinkError(
                f"cannot initialise transactions for {self.scope.transactional_id}: {e}") from e

    def begin(self) -> None:
        self.producer.begin_transaction()
        self.open = True

    def commit(self, anchor_topic: str, records: int) -> None:
        """Record the batch in the task's group and commit records and record together."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        remaining = self.producer.flush(self.timeout)
        if self.delivery.failed:
            raise SinkError(f"{self.delivery.failed} of {records} records were not written: "
                            f"{self.delivery.first_error}")
        if remaining:
            raise SinkError(f"{remaining} of {records} records were not acknowledged within "
                            f"{self.options.flush_timeout_ms} ms")
        mark = mark_for(self.scope, records)
        # The offset is the batch id (monotonic, readable in `groups describe`); the metadata
        # is what replay detection reads.
        offsets = [TopicPartition(anchor_topic, 0, self.scope.batch, mark.metadata())]
        conf = _client_config(self.options)
        conf.update({"group.id": self.scope.group_id, "enable.auto.commit": False,
                     "logger": logging.getLogger("strom.spark.librdkafka")})
        consumer = Consumer(conf)  # only for its group metadata: never subscribes
        try:
            self.producer.send_offsets_to_transaction(
                offsets, consumer.consumer_group_metadata(), self.timeout)
        except KafkaException as e:
            raise SinkError(f"cannot record batch {self.scope.batch} in group "
                            f"{self.scope.group_id}: {e}") from e
        finally:
            consumer.close()
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self.producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                break
            except KafkaException as e:
                # retriable (e.g. a timeout): the outcome is not known yet, ask again
                if not e.args[0].retriable() or time.monotonic() >= deadline:
                    raise SinkError(f"cannot commit the transaction of "
                                    f"{self.scope.transactional_id}: {e}") from e
        self.open = False

    def abort(self) -> None:
        """Best effort: a failed abort is finished by the next attempt's init_transactions
        or, failing that, by the broker's transaction timeout."""
        if not self.open:
            return
        self.open = False
        try:
            self.producer.abort_transaction(min(self.timeout, 30.0))
        except Exception as e:
            log.warning("could not abort the transaction of %s: %s (the next attempt fences it)",
                        self.scope.transactional_id, e)


def _first_topic(batch: pa.RecordBatch, topic_option: str | None) -> str:
    if topic_option is not None:
        return topic_option
    topics = _column(batch.slice(0, 1), "topic")
    if not topics or topics[0] is None:
        raise SinkError("Null topic present in the data. Use the topic option for setting a topic.")
    return str(topics[0])


class InputTruncatedError(SinkError):
    """The task's input stopped before its end: Spark failed or cancelled the task."""


def worker_input_complete() -> bool:
    """Whether the input Spark streamed to this Python worker really ended, once the
    iterator handed to ``write()`` is exhausted.

    A Python writer cannot tell the end of its input from a cut: when the task fails upstream
    (a failing expression or source, a cancelled job, a stopped query), Spark closes the
    worker's socket and the Arrow stream reader ends without error. A task that commits its
    transaction at that point would commit part of its rows and mark the batch written, and
    the retry would skip it. At a real end Spark has sent the end-of-stream marker after the
    Arrow stream, and the socket stays open while it waits for the result; after a cut the
    socket is at EOF. The worker's input stream is the ``infile`` of PySpark's worker
    ``main(infile, outfile)``, found up the call stack; not finding it is an error (a PySpark
    change this check must follow), never a silent pass.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        stream = frame.f_locals.get("infile")
        if stream is not None and hasattr(stream, "peek"):
            try:
                return stream.peek(1) != b""
            except (OSError, ValueError):  # reset or closed: cut as well
                return False
        frame = frame.f_back
    raise SinkError(
        "exactlyOnce=true cannot check that the task's input is complete: PySpark's Python "
        "worker input stream ('infile' of pyspark.worker.main) was not found. This PySpark "
        "version is not supported by the exactly-once sink.")


def write_exactly_once(options: SinkOptions, scope_of: Any,
                       batches: Iterator[pa.RecordBatch],
                       input_complete: Any = worker_input_complete) -> StromCommitMessage:
    """Write every row of the task in one transaction, unless its batch is already written.

    ``scope_of()`` gives the task's :class:`TxnScope`; it is called only once the task turns
    out to have rows, so partitions that are empty in a batch cost nothing (no client, no
    transactional id). ``input_complete()`` is asked once the rows are exhausted: a cut input
    aborts the transaction (see :func:`worker_input_complete`).
    """
    batches = iter(batches)
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return StromCommitMessage(records=0)
    scope: TxnScope = scope_of()
    txn = _Transaction(options, scope)
    txn.init()
    done = already_written(_marks(options, scope.group_id,
                                  time.monotonic() + txn.timeout), scope)
    if done is not None:
        # read to the end (Spark's Python runner expects it), counting: a replay of a
        # deterministic batch has the rows it had the first time
        rows = first.num_rows + sum(b.num_rows for b in batches)
        if done.batch == scope.batch and rows != done.records:
            log.warning("%s: batch %d was written with %d records and now has %d: the query's "
                        "input or partitioning changed since; it is not written again",
                        scope.transactional_id, scope.batch, done.records, rows)
        log.info("%s: batch %d is already written (%d records, batch %d); skipped",
                 scope.transactional_id, scope.batch, done.records, done.batch)
        return StromCommitMessage(records=0, transactional_id=scope.transactional_id,
                                  skipped=True)
    anchor = _first_topic(first, options.topic)
    total = 0
    txn.begin()
    try:
        total += _send(txn.producer, first, options.topic)
        for batch in batches:
            total += _send(txn.producer, batch, options.topic)
            if txn.delivery.failed:
                break
        if not txn.delivery.failed and not input_complete():
            raise InputTruncatedError(
                f"{scope.transactional_id}: the task's input ended early after {total} rows "
                "(Spark failed or cancelled the task); its transaction is aborted")
        txn.commit(anchor, total)
    except BaseException:  # a Kafka error, or the task's input failed: nothing becomes visible
        txn.abort()
        raise
    log.info("%s: batch %d: committed %d records", scope.transactional_id, scope.batch, total)
    return StromCommitMessage(records=total, transactional_id=scope.transactional_id)


def _task_scope(options: SinkOptions, *, streaming: bool, write_id: str) -> TxnScope:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the strom sink's write() must run in a Spark task")
    return task_scope(streaming=streaming, prefix_option=options.transactional_id_prefix,
                      query_id=context.getLocalProperty(QUERY_ID_PROPERTY),
                      batch_id=context.getLocalProperty(BATCH_ID_PROPERTY),
                      partition=context.partitionId(), write_id=write_id)


# --------------------------------------------------------------------------------------------
# Spark writers
# --------------------------------------------------------------------------------------------


class _WriterBase:
    streaming = False

    def __init__(self, raw_options: Any, schema: Any, overwrite: bool) -> None:
        self.options = parse_sink_options(raw_options)
        validate_sink_schema(schema, self.options.topic)
        # Names this writer's batch write (one per save(), pickled to every task with the
        # writer): the transactions of its tasks' attempts share it.
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StromCommitMessage:
        if self.options.exactly_once:
            def scope() -> TxnScope:
                return _task_scope(self.options, streaming=self.streaming,
                                   write_id=self.write_id)

            return write_exactly_once(self.options, scope, iterator)
        return StromCommitMessage(records=write_batches(self.options, iterator))


def _summary(messages: list[WriterCommitMessage | None]) -> str:
    done = [m for m in messages if isinstance(m, StromCommitMessage)]
    total = sum(m.records for m in done)
    skipped = sum(1 for m in done if m.skipped)
    text = f"wrote {total} records"
    if any(m.transactional_id for m in done):
        committed = sum(1 for m in done if m.transactional_id and not m.skipped)
        text += f" in {committed} transactions"
        if skipped:
            text += f"; {skipped} tasks found their part already written and skipped it"
    return text


class StromBatchWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("strom")`` (append; Spark's Kafka sink refuses overwrite too)."""

    def __init__(self, raw_options: Any, schema: Any, overwrite: bool) -> None:
        if overwrite:
            raise StromOptionError(
                "Save mode Overwrite is not allowed for the strom sink (records are appended to "
                "topics). Allowed save modes are Append and ErrorIfExists (default).")
        super().__init__(raw_options, schema, overwrite)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("%s", _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            log.warning("write aborted; the tasks that committed their transaction stay "
                        "written (%s)", _summary(messages))
        else:
            log.warning("write aborted; records already acknowledged stay in their topics")


class StromStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("strom")``: every output mode appends rows to topics."""

    streaming = True

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("batch %d: %s", batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            log.warning("batch %d aborted; tasks that committed their transaction stay written "
                        "and are skipped when the batch is run again (%s)", batchId,
                        _summary(messages))
        else:
            log.warning("batch %d aborted; records already acknowledged stay in their topics "
                        "(at-least-once: the batch is written again on retry)", batchId)
