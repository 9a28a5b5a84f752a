"""The executor-side range reader against a scripted consumer: gaps, markers, data loss."""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, Message

from strom.spark.arrow import arrow_schema, messages_to_batch
from strom.spark.consumer import ReadSettings, _RangeFetch
from strom.spark.offsets import OffsetRange
from strom.spark.options import DataLossError


class ScriptedConsumer:
    """A partition log in memory that answers like librdkafka.

    ``offsets``: offsets that hold records (others are compacted away or control records).
    ``low``/``high``: log start offset and high watermark. The position moves past offsets
    without records once they have been scanned, as librdkafka's does for control records.
    """

    def __init__(self, offsets, low=0, high=None, reset_errors=True, eof=True):
        self.records = sorted(offsets)
        self.low = low
        self.high = high if high is not None else (self.records[-1] + 1 if self.records else 0)
        self.reset_errors = reset_errors
        self.eof = eof
        self.pos = None
        self.eof_sent = False
        self.assigned = []
        self.watermark_queries = 0

    def assign(self, tps):
        (tp,) = tps
        self.pos = tp.offset
        self.eof_sent = False
        self.assigned.append(tp.offset)

    def consume(self, n, timeout):
        out = []
        if self.pos < self.low:
            if self.reset_errors:
                return [Message(topic="t", partition=0, offset=self.pos,
                                error=KafkaError(KafkaError._AUTO_OFFSET_RESET))]
            self.pos = self.low  # a broker that silently starts at the log start
        for off in self.records:
            if off >= self.pos and len(out) < n and off < self.high:
                out.append(Message(topic="t", partition=0, offset=off, key=None,
                                   value=b"v%d" % off, timestamp=(1, 1000 + off)))
        if out:
            self.pos = out[-1].offset() + 1
        if len(out) < n or not out:
            self.pos = max(self.pos, self.high)  # everything up to the end was scanned
            if self.eof and not self.eof_sent:
                self.eof_sent = True
                out.append(Message(topic="t", partition=0, offset=self.high,
                                   error=KafkaError(KafkaError._PARTITION_EOF)))
        return out

    def position(self, tps):
        from confluent_kafka import TopicPartition

        return [TopicPartition("t", 0, self.pos)]

    def get_watermark_offsets(self, tp, timeout, cached):
        self.watermark_queries += 1
        return self.low, self.high


def read(consumer, start, end, fail=True, batch_rows=4, timeout_ms=2000):
    settings = ReadSettings(params=(("bootstrap.servers", "x:1"),), group_id="g",
                            fail_on_data_loss=fail, poll_timeout_ms=timeout_ms,
                            batch_rows=batch_rows)
    batches = list(_RangeFetch(consumer, OffsetRange("t", 0, start, end), settings).batches())
    for b in batches:
        assert b.schema == arrow_schema(False)
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_contiguous_range_in_batches():
    c = ScriptedConsumer(range(20))
    assert read(c, 3, 15) == list(range(3, 15))
    assert c.assigned == [3]


def test_compaction_gaps_inside_the_range():
    c = ScriptedConsumer([0, 1, 5, 6, 9], high=10)
    assert read(c, 0, 10) == [0, 1, 5, 6, 9]


def test_trailing_transaction_marker_ends_the_range_by_position():
    c = ScriptedConsumer(range(9), high=10)  # offset 9: a commit marker
    assert read(c, 0, 10) == list(range(9))


def test_range_ending_inside_a_gap_stops_at_the_next_record():
    c = ScriptedConsumer([0, 1, 8, 9], high=10, eof=False)
    assert read(c, 0, 5) == [0, 1]


def test_deleted_start_fails_with_a_clear_message():
    c = ScriptedConsumer(range(5, 10), low=5)
    with pytest.raises(DataLossError) as e:
        read(c, 2, 10)
    assert "Cannot fetch offset 2" in str(e.value)
    assert "[2, 5)" in str(e.value)
    assert 'failOnDataLoss" to "false"' in str(e.value)


def test_deleted_start_is_skipped_without_fail_on_data_loss(caplog):
    c = ScriptedConsumer(range(5, 10), low=5)
    assert read(c, 2, 10, fail=False) == list(range(5, 10))
    assert c.assigned == [2, 5]
    assert "were deleted" in caplog.text


def test_whole_range_deleted_without_fail_on_data_loss():
    c = ScriptedConsumer(range(50, 60), low=50)
    assert read(c, 2, 10, fail=False) == []


def test_partition_ending_before_the_range_is_data_loss():
    c = ScriptedConsumer(range(6), high=6)
    with pytest.raises(DataLossError, match="now ends at offset 6"):
        read(c, 0, 10)
    c = ScriptedConsumer(range(6), high=6)
    assert read(c, 0, 10, fail=False) == list(range(6))


def test_gap_at_the_start_after_deletion_is_data_loss():
    c = ScriptedConsumer(range(5, 10), low=5, reset_errors=False)
    with pytest.raises(DataLossError, match=r"Cannot fetch records in \[2, 5\)"):
        read(c, 2, 10)


def test_gap_at_the_start_from_compaction_is_fine():
    c = ScriptedConsumer([4, 5, 6], low=0, high=7)
    assert read(c, 2, 7) == [4, 5, 6]
    assert c.watermark_queries == 1


def test_no_progress_times_out():
    class Stuck(ScriptedConsumer):
        def consume(self, n, timeout):
            return []

    with pytest.raises(TimeoutError, match=r"kafkaConsumer\.pollTimeoutMs"):
        read(Stuck(range(5)), 0, 5, timeout_ms=100)


def test_arrow_conversion_matches_spark_kafka_columns():
    msgs = [
        Message(topic="t", partition=3, offset=7, key=b"k", value=b"v", timestamp=(1, 1500),
                headers=[("a", b"1"), ("b", None)]),
        Message(topic="t", partition=3, offset=8, key=None, value=None, timestamp=(2, 2000)),
    ]
    b = messages_to_batch(msgs, "t", 3, include_headers=True)
    assert b.schema == arrow_schema(True)
    assert b.to_pydict() == {
        "key": [b"k", None],
        "value": [b"v", None],
        "topic": ["t", "t"],
        "partition": [3, 3],
        "offset": [7, 8],
        "timestamp": [pa.scalar(1_500_000, pa.timestamp("us", tz="UTC")).as_py(),
                      pa.scalar(2_000_000, pa.timestamp("us", tz="UTC")).as_py()],
        "timestampType": [0, 1],  # CreateTime, LogAppendTime
        "headers": [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], None],
    }


def test_arrow_schema_is_what_spark_expects():
    types = pytest.importorskip("pyspark.sql.types")
    from pyspark.sql.pandas.types import to_arrow_schema

    for headers in (False, True):
        fields = [
            types.StructField("key", types.BinaryType()),
            types.StructField("value", types.BinaryType()),
            types.StructField("topic", types.StringType()),
            types.StructField("partition", types.IntegerType()),
            types.StructField("offset", types.LongType()),
            types.StructField("timestamp", types.TimestampType()),
            types.StructField("timestampType", types.IntegerType()),
        ]
        if headers:
            fields.append(types.StructField("headers", types.ArrayType(types.StructType([
                types.StructField("key", types.StringType()),
                types.StructField("value", types.BinaryType())]))))
        spark_schema = types.StructType(fields)
        assert to_arrow_schema(spark_schema, timezone="UTC") == arrow_schema(headers)


def test_consumer_pool_reuses_by_configuration_and_stays_bounded(monkeypatch):
    import confluent_kafka

    from strom.spark import consumer as mod

    made, closed = [], []

    class FakeConsumer:
        def __init__(self, conf):
            self.conf = conf
            made.append(self)

        def unassign(self):
            pass

        def close(self):
            closed.append(self)

    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    monkeypatch.setattr(mod, "_POOL", [])
    a, b = {"group.id": "a"}, {"group.id": "b"}
    first = mod._acquire(a)
    mod._release(first, a, reusable=True)
    assert mod._acquire(a) is first  # same settings: the idle consumer is reused
    mod._release(first, a, reusable=False)  # a failed read: never reused
    assert closed == [first]
    others = [mod._acquire(b) for _ in range(mod.POOL_MAX_IDLE + 2)]
    for c in others:
        mod._release(c, b, reusable=True)
    assert len(mod._POOL) == mod.POOL_MAX_IDLE
    assert closed[1:] == others[:2]  # the oldest idle consumers were closed


@pytest.mark.parametrize("offsets", [list(range(12)), [0, 2, 3, 5, 6, 8, 10, 11]])
def test_a_batch_is_cut_to_the_range_with_and_without_consecutive_offsets(offsets):
    settings = ReadSettings(params=(("bootstrap.servers", "x:1"),), group_id="g")
    fetch = _RangeFetch(ScriptedConsumer(offsets), OffsetRange("t", 0, 3, 9), settings)
    msgs = [Message(topic="t", partition=0, offset=o, key=None, value=b"v%d" % o,
                    timestamp=(1, 1000 + o)) for o in offsets]
    batch = fetch._take(msgs)
    kept = [o for o in offsets if 3 <= o < 9]
    assert batch.column("offset").to_pylist() == kept
    assert batch.column("value").to_pylist() == [b"v%d" % o for o in kept]
    assert fetch.pos == 9
    # a consecutive batch that starts past the range's end (the range ends in a gap)
    fetch = _RangeFetch(ScriptedConsumer([0, 10, 11]), OffsetRange("t", 0, 5, 8), settings)
    assert fetch._take(msgs[-2:]) is None
    assert fetch.pos == 8


def test_arrow_conversion_without_numpy_is_the_same(monkeypatch):
    import strom.spark.arrow as arrow

    msgs = [Message(topic="t", partition=1, offset=o, key=b"k" if o % 2 else None,
                    value=b"v%d" % o, timestamp=(o % 3, 1000 * o)) for o in range(5)]
    with_numpy = [messages_to_batch(msgs, "t", 1, False, first_offset=0),
                  messages_to_batch(msgs, "t", 1, False)]
    monkeypatch.setattr(arrow, "_np", None)
    without = [messages_to_batch(msgs, "t", 1, False, first_offset=0),
               messages_to_batch(msgs, "t", 1, False, [0, 1, 2, 3, 4])]
    assert all(b.equals(with_numpy[0]) for b in with_numpy + without)
    assert with_numpy[0].column("timestampType").to_pylist() == [-1, 0, 1, -1, 0]


def test_fetches_are_large_unless_the_user_says_otherwise():
    base = (("bootstrap.servers", "x:1"),)
    conf = ReadSettings(params=base, group_id="g").consumer_config()
    assert conf["max.partition.fetch.bytes"] == 8 << 20
    mine = ReadSettings(params=(*base, ("max.partition.fetch.bytes", "1048576")),
                        group_id="g").consumer_config()
    assert str(mine["max.partition.fetch.bytes"]) == "1048576"


def test_an_executor_without_the_c_decoder_reads_through_librdkafka(monkeypatch) -> None:
    import sys

    from strom.spark import consumer

    assert consumer._decoder_built(required=True)
    monkeypatch.setitem(sys.modules, "strom.record._columns", None)  # import now fails
    assert not consumer._decoder_built(required=False)
    with pytest.raises(RuntimeError, match="fetcher=native: the C decoder"):
        consumer._decoder_built(required=True)
