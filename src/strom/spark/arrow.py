"""The source's row layout (Spark's Kafka schema) as Spark and as Arrow, and the conversion of
a list of fetched messages into one Arrow record batch with as little per-record Python as the
client allows (a handful of C-level ``map`` calls per batch, no Python loop over records)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))

_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_FIELDS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_FIELDS, pa.field("headers", HEADERS_TYPE)])

# Spark's KafkaRecordToRowConverter.kafkaSchema, as DDL (a Python data source may return DDL).
SCHEMA_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
              "timestamp TIMESTAMP, timestampType INT")
SCHEMA_DDL_WITH_HEADERS = SCHEMA_DDL + ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


def schema_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL_WITH_HEADERS if include_headers else SCHEMA_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    return ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA


def empty_batch(include_headers: bool) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=arrow_schema(include_headers))


_first = itemgetter(0)
_second = itemgetter(1)
_UTC_US = pa.timestamp("us", tz="UTC")

_np: Any  # numpy turns the flattened (type, ms) pairs into two columns in one C loop
try:
    import numpy

    _np = numpy
except ImportError:  # pragma: no cover - pyspark's Arrow support installs it
    _np = None


def _message_methods() -> tuple[Any, ...]:
    from confluent_kafka import Message

    return Message.key, Message.value, Message.offset, Message.timestamp, Message.headers


def _timestamp_columns(stamps: Any, n: int) -> tuple[pa.Array, pa.Array]:
    """``timestamp`` and ``timestampType`` from an iterator of confluent-kafka's
    ``(type, milliseconds)`` pairs."""
    if _np is not None:
        flat = _np.fromiter(chain.from_iterable(stamps), _np.int64, 2 * n)
        return (pa.array(flat[1::2] * 1000).view(_UTC_US),
                pa.array((flat[0::2] - 1).astype(_np.int32)))
    pairs = list(stamps)
    ts = pa.array(list(map(_second, pairs)), pa.int64())
    return (pc.multiply(ts, 1000).cast(_UTC_US),
            pc.subtract(pa.array(list(map(_first, pairs)), pa.int32()), 1))


def _offset_column(first: int, n: int) -> pa.Array:
    """``first, first + 1, ..., first + n - 1`` without a Python int per record."""
    if _np is not None:
        return pa.array(_np.arange(first, first + n, dtype=_np.int64))
    return pa.array(range(first, first + n), pa.int64())


def messages_to_batch(messages: Sequence[Any], topic: str, partition: int,
                      include_headers: bool, offsets: Sequence[int] | None = None,
                      first_offset: int | None = None) -> pa.RecordBatch:
    """One Arrow batch in the source schema from confluent-kafka ``Message`` objects.

    The offsets column comes from ``offsets`` when given, else from ``first_offset`` when the
    caller knows the messages hold consecutive offsets from there, else from the messages.

    ``timestampType`` follows Kafka's TimestampType ids as Spark reports them: 0 CreateTime,
    1 LogAppendTime (-1 when the record has none); confluent-kafka numbers them one higher.
    """
    key_of, value_of, offset_of, timestamp_of, headers_of = _message_methods()
    n = len(messages)
    ts, kinds = _timestamp_columns(map(timestamp_of, messages), n)
    keys = list(map(key_of, messages))
    if offsets is not None:
        offset_column = pa.array(offsets, pa.int64())
    elif first_offset is not None:
        offset_column = _offset_column(first_offset, n)
    else:
        offset_column = pa.array(list(map(offset_of, messages)), pa.int64())
    columns = [
        pa.nulls(n, pa.binary()) if keys.count(None) == n else pa.array(keys, pa.binary()),
        pa.array(list(map(value_of, messages)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offset_column,
        ts,
        kinds,
    ]
    if include_headers:
        columns.append(headers_array(list(map(headers_of, messages))))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _binary_array(kind: pa.DataType, n: int, col: Any) -> pa.Array:
    validity = None if col.validity is None else pa.py_buffer(col.validity)
    return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(col.offsets),
                                           pa.py_buffer(col.data)], null_count=col.nulls)


def _header_keys(n: int, col: Any) -> pa.Array:
    """Header keys as strings; bytes that are not UTF-8 become U+FFFD, as the Java consumer
    decodes them."""
    keys = _binary_array(pa.string(), n, col)
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        raw = _binary_array(pa.binary(), n, col).to_pylist()
        keys = pa.array([k.decode("utf-8", "replace") for k in raw], pa.string())
    return keys


def columns_to_batch(cols: Any, topic: str, partition: int,
                     include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch in the source schema from decoded columns (strom.record.columns), the
    buffers shared, not copied."""
    n = cols.rows
    columns = [
        _binary_array(pa.binary(), n, cols.keys),
        _binary_array(pa.binary(), n, cols.values),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets)]),
        pa.Array.from_buffers(_UTC_US, n, [None, pa.py_buffer(cols.timestamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(cols.timestamp_types)]),
    ]
    if include_headers:
        h = cols.headers
        entries = len(h.keys.offsets) // 4 - 1
        pairs = pa.StructArray.from_arrays(
            [_header_keys(entries, h.keys), _binary_array(pa.binary(), entries, h.values)],
            fields=list(HEADER_TYPE))
        validity = None if h.validity is None else pa.py_buffer(h.validity)
        columns.append(pa.Array.from_buffers(HEADERS_TYPE, n, [validity, pa.py_buffer(h.offsets)],
                                             null_count=h.nulls, children=[pairs]))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def headers_array(headers: Sequence[list[tuple[str, bytes | None]] | None]) -> pa.Array:
    """Spark's headers column: null for a record without headers, else [{key, value}, ...]."""
    rows = [[{"key": k, "value": v} for k, v in h] if h else None for h in headers]
    return pa.array(rows, HEADERS_TYPE)
