"""``df.write.format("strom")`` / ``df.writeStream.format("strom")``: Spark's Kafka sink.

Columns, as Spark's Kafka sink reads them (others are ignored):
  value      string or binary, required (null writes a tombstone)
  key        string or binary, optional
  topic      string, required unless the ``topic`` option is set (the option wins)
  partition  int, optional (null or absent: the producer's partitioner picks one)
  headers    array<struct<key: string, value: binary>>, optional

Delivery is at-least-once, like Spark's own sink: every task flushes its producer and fails if
any record was not acknowledged, so Spark retries the task or the batch; a retried batch may
write some records twice. Exactly-once needs broker transactions (one transactional producer
per task, committed by the driver); the option is reserved and refused until then.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
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
# Spark writers
# --------------------------------------------------------------------------------------------


class _WriterBase:
    def __init__(self, raw_options: Any, schema: Any, overwrite: bool) -> None:
        self.options = parse_sink_options(raw_options)
        validate_sink_schema(schema, self.options.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StromCommitMessage:
        return StromCommitMessage(records=write_batches(self.options, iterator))


class StromBatchWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("strom")`` (append; Spark's Kafka sink refuses overwrite too)."""

    def __init__(self, raw_options: Any, schema: Any, overwrite: bool) -> None:
        if overwrite:
            raise StromOptionError(
                "Save mode Overwrite is not allowed for the strom sink (records are appended to "
                "topics). Allowed save modes are Append and ErrorIfExists (default).")
        super().__init__(raw_options, schema, overwrite)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(getattr(m, "records", 0) for m in messages if m is not None)
        log.info("wrote %d records", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("write aborted; records already acknowledged stay in their topics")


class StromStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("strom")``: every output mode appends rows to topics."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(getattr(m, "records", 0) for m in messages if m is not None)
        log.info("batch %d: wrote %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d aborted; records already acknowledged stay in their topics "
                    "(at-least-once: the batch is written again on retry)", batchId)
