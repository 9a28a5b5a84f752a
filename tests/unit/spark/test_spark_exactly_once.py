"""The exactly-once sink's pure parts: transactional ids, write marks, replay detection, and the
check that a task's input really ended."""

from __future__ import annotations

import io
from collections.abc import Iterable

import pyarrow as pa
import pytest

from strom.spark.exactly_once import (
    FOREACH_BATCH_NEEDS_PREFIX,
    TxnScope,
    WriteMark,
    already_written,
    mark_for,
    task_scope,
    transactional_id,
)
from strom.spark.options import StromOptionError, parse_sink_options
from strom.spark.sink import SinkError, worker_input_complete, write_exactly_once

QUERY = "5dc2cb5f-82f2-4fdb-9ae9-8d59056b4b89"


def stream_scope(batch: int = 7, partition: int = 3, prefix: str | None = None) -> TxnScope:
    return task_scope(streaming=True, prefix_option=prefix, query_id=QUERY,
                      batch_id=str(batch), partition=partition, write_id="unused")


# --------------------------------------------------------------------------- transactional ids


def test_streaming_ids_come_from_the_query_id_and_partition():
    s = stream_scope()
    assert s.transactional_id == f"strom-sink-{QUERY}-3"
    assert s.group_id == s.transactional_id
    assert (s.write, s.batch, s.partition) == (QUERY, 7, 3)
    # a restart of the same query (same checkpoint, same query id) gets the same ids
    assert stream_scope(batch=8) == TxnScope(s.transactional_id, s.group_id, QUERY, 8, 3)
    # the user's prefix replaces the default one; the query id still names the write
    own = stream_scope(prefix="orders-out")
    assert (own.transactional_id, own.write) == ("orders-out-3", QUERY)


def test_ids_of_different_prefixes_or_partitions_never_collide():
    ids = {transactional_id(p, n) for p in ("a", "a-1", "a-10") for n in (0, 1, 10)}
    assert len(ids) == 9


def test_streaming_task_without_micro_batch_properties_fails():
    with pytest.raises(RuntimeError, match="no query id or batch id"):
        task_scope(streaming=True, prefix_option=None, query_id=None, batch_id=None,
                   partition=0, write_id="w")


def test_batch_write_is_its_own_write():
    s = task_scope(streaming=False, prefix_option=None, query_id=None, batch_id=None,
                   partition=2, write_id="abc")
    assert (s.transactional_id, s.write, s.batch) == ("strom-sink-abc-2", "abc", 0)
    s = task_scope(streaming=False, prefix_option="lake", query_id=None, batch_id=None,
                   partition=2, write_id="abc")
    assert (s.transactional_id, s.write, s.batch) == ("lake-2", "abc", 0)


def test_batch_write_inside_foreach_batch_uses_the_micro_batch():
    with pytest.raises(StromOptionError) as e:
        task_scope(streaming=False, prefix_option=None, query_id=QUERY, batch_id="4",
                   partition=0, write_id="w")
    assert str(e.value) == FOREACH_BATCH_NEEDS_PREFIX
    s = task_scope(streaming=False, prefix_option="enriched", query_id=QUERY, batch_id="4",
                   partition=0, write_id="w")
    assert (s.transactional_id, s.write, s.batch) == ("enriched-0", QUERY, 4)


# --------------------------------------------------------------------------- marks and replays


def test_mark_round_trip_and_foreign_metadata():
    mark = WriteMark(write=QUERY, batch=12, partition=3, records=500)
    assert WriteMark.parse(mark.metadata()) == mark
    assert mark_for(stream_scope(batch=12), 500) == mark
    for foreign in (None, "", "x", "[]", '{"batch": 1}', '{"format": "other", "write": "q"}',
                    '{"format": "strom-sink/1", "write": "q", "batch": "x", "partition": 0}'):
        assert WriteMark.parse(foreign) is None


def meta(write: str = QUERY, batch: int = 7, partition: int = 3) -> str:
    return WriteMark(write=write, batch=batch, partition=partition, records=1).metadata()


def test_replayed_batch_is_recognised():
    scope = stream_scope(batch=7)
    assert already_written([], scope) is None
    assert already_written([meta(batch=6)], scope) is None  # the previous batch: write this one
    assert already_written([meta(batch=7)], scope).batch == 7  # this batch again: skip
    # later batches are written too (a checkpoint rolled back further than one batch)
    assert already_written([meta(batch=6), meta(batch=9), "junk"], scope).batch == 9


def test_marks_of_other_writes_prove_nothing():
    scope = stream_scope(batch=7)
    # a new query (new checkpoint) that reuses the prefix starts again at batch 0
    assert already_written([meta(write="old-query", batch=40)], scope) is None
    assert already_written([meta(partition=4, batch=40)], scope) is None


def test_partition_without_rows_in_some_batches():
    # partition 3 wrote batch 2, had no rows in batches 3-6 (no transaction, no mark)
    assert already_written([meta(batch=2)], stream_scope(batch=7)) is None


# --------------------------------------------------------------------------- the task's side


def _check_with(infile: object) -> bool:  # stands for pyspark.worker.main(infile, outfile)
    return worker_input_complete()


def test_input_that_ended_with_spark_end_of_stream_is_complete():
    end_of_stream = (-4).to_bytes(4, "big", signed=True)
    assert _check_with(io.BufferedReader(io.BytesIO(end_of_stream))) is True


def test_input_cut_by_a_closed_socket_is_not_complete():
    assert _check_with(io.BufferedReader(io.BytesIO(b""))) is False


def test_missing_worker_stream_is_an_error_not_a_pass():
    with pytest.raises(SinkError, match="not supported by the exactly-once sink"):
        worker_input_complete()


def test_task_without_rows_opens_no_transaction():
    options = parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t",
                                  "exactlyOnce": "true"})
    empty = pa.record_batch([pa.array([], pa.binary())], names=["value"])

    def no_scope() -> TxnScope:
        raise AssertionError("an empty task must not derive a transactional id")

    message = write_exactly_once(options, no_scope, iter([empty, empty]),
                                 input_complete=lambda: True)
    assert (message.records, message.transactional_id, message.skipped) == (0, None, False)


# --------------------------------------------------------------------------- a task's decisions


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def produce(self, topic: str, value: bytes, **kwargs: object) -> None:
        self.sent.append((topic, value))

    def poll(self, timeout: float) -> int:
        return 0


class FakeTransaction:
    """Stands for sink._Transaction: records what the task asked of its producer."""

    made: list[FakeTransaction] = []

    def __init__(self, options: object, scope: TxnScope) -> None:
        from strom.spark.sink import _Delivery

        self.scope, self.timeout, self.delivery = scope, 1.0, _Delivery()
        self.producer = FakeProducer()
        self.calls: list[object] = []
        FakeTransaction.made.append(self)

    def init(self) -> None:
        self.calls.append("init")

    def begin(self) -> None:
        self.calls.append("begin")

    def commit(self, anchor_topic: str, records: int) -> None:
        self.calls.append(("commit", anchor_topic, records))

    def abort(self) -> None:
        self.calls.append("abort")


def run_task(monkeypatch, marks: list[str], *, complete: bool = True, topic: str | None = "out",
             batches: Iterable[pa.RecordBatch] | None = None):
    import strom.spark.sink as sink

    FakeTransaction.made = []
    monkeypatch.setattr(sink, "_Transaction", FakeTransaction)
    monkeypatch.setattr(sink, "_marks", lambda options, group, deadline: marks)
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", "exactlyOnce": "true"}
    if topic:
        opts["topic"] = topic
    options = parse_sink_options(opts)
    if batches is None:
        batches = [pa.record_batch([pa.array([b"a", b"b"])], names=["value"]),
                   pa.record_batch([pa.array([b"c"])], names=["value"])]
    message = write_exactly_once(options, lambda: stream_scope(batch=7), iter(batches),
                                 input_complete=lambda: complete)
    return message, FakeTransaction.made


def test_new_batch_is_written_and_committed_with_its_mark(monkeypatch):
    message, (txn,) = run_task(monkeypatch, [meta(batch=6)])
    assert txn.calls == ["init", "begin", ("commit", "out", 3)]
    assert txn.producer.sent == [("out", b"a"), ("out", b"b"), ("out", b"c")]
    assert (message.records, message.skipped) == (3, False)
    assert message.transactional_id == f"strom-sink-{QUERY}-3"


def test_replayed_batch_is_read_to_the_end_and_not_written(monkeypatch):
    consumed = []

    def batches():
        for values in ([b"a"], [b"b", b"c"]):
            consumed.append(values)
            yield pa.record_batch([pa.array(values)], names=["value"])

    message, (txn,) = run_task(monkeypatch, [meta(batch=7)], batches=batches())
    assert txn.calls == ["init"] and txn.producer.sent == []
    assert len(consumed) == 2  # Spark's runner gets its input read to the end
    assert (message.records, message.skipped) == (0, True)


def test_cut_input_is_aborted_not_committed(monkeypatch):
    with pytest.raises(SinkError, match="input ended early after 3 rows"):
        run_task(monkeypatch, [], complete=False)
    (txn,) = FakeTransaction.made
    assert txn.calls == ["init", "begin", "abort"]


def test_failing_input_aborts(monkeypatch):
    def failing():
        yield pa.record_batch([pa.array([b"a"])], names=["value"])
        raise RuntimeError("upstream failed")

    with pytest.raises(RuntimeError, match="upstream failed"):
        run_task(monkeypatch, [], batches=failing())
    assert FakeTransaction.made[0].calls == ["init", "begin", "abort"]


def test_topic_column_anchors_the_mark_on_the_first_rows_topic(monkeypatch):
    batch = pa.record_batch([pa.array(["t2", "t1"]), pa.array([b"x", b"y"])],
                            names=["topic", "value"])
    _, (txn,) = run_task(monkeypatch, [], topic=None, batches=[batch])
    assert txn.calls[-1] == ("commit", "t2", 2)
    assert txn.producer.sent == [("t2", b"x"), ("t1", b"y")]
