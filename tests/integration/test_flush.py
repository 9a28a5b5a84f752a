"""Flushes run off the event loop (issue 15.7) and still do what Kafka's do: a produce that
reaches log.flush.interval.messages is answered after its flush, and rolled segments move the
recovery point, which the periodic checkpoint writes."""

from __future__ import annotations

import time

import pytest

from strom.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint

from . import clients as kc
from .wire import NONE, Conn, Record, build_batch

pytestmark = pytest.mark.timeout(120)

SEGMENT = 1024 * 1024


def _recovery_point(broker, topic: str) -> int:
    path = broker.data_dir / RECOVERY_POINT_CHECKPOINT
    return read_offset_checkpoint(path).get((topic, 0), -1) if path.exists() else -1


def _wait_recovery_point(broker, topic: str, want: int) -> None:
    deadline = time.monotonic() + 30
    while (rp := _recovery_point(broker, topic)) < want:
        assert time.monotonic() < deadline, f"recovery point {rp}, expected {want}"
        time.sleep(0.05)


def test_flush_messages_answers_after_the_flush(make_broker, unique_topic):
    broker = make_broker({"log.flush.interval.messages": 1,
                          "log.flush.offset.checkpoint.interval.ms": 100})  # fmt: skip
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic)
    with Conn(broker.bootstrap) as conn:
        for i in range(30):
            res = conn.produce(topic, 0, build_batch([Record(b"k", b"v%d" % i)]))
            assert (res.error, res.base_offset) == (NONE, i)
    _wait_recovery_point(broker, topic, 30)


def test_rolled_segments_move_the_recovery_point(make_broker, unique_topic):
    broker = make_broker({"log.flush.offset.checkpoint.interval.ms": 100})
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic, config={"segment.bytes": str(SEGMENT)})
    value = b"r" * 100_000
    with Conn(broker.bootstrap) as conn:
        for _ in range(35):  # ~3.5 MiB: three rolls
            assert conn.produce(topic, 0, build_batch([Record(b"k", value)])).error == NONE
    seg_dir = broker.data_dir / f"{topic}-0"
    active = max(int(p.stem) for p in seg_dir.glob("*.log"))
    assert active > 0, "precondition: segments rolled"
    _wait_recovery_point(broker, topic, active)
    assert _recovery_point(broker, topic) < 35  # the active segment is not flushed (flush.ms)
