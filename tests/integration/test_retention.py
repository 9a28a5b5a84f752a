"""Time-based retention: old closed segments are deleted and the log start offset moves up."""

from __future__ import annotations

import time

import pytest

from . import clients as kc
from .clients import Msg
from .wire import NONE, Conn, Record, build_batch

pytestmark = pytest.mark.timeout(120)

SEGMENT = 1024 * 1024


def test_old_segments_are_deleted(make_broker, unique_topic):
    broker = make_broker(
        {
            "log.retention.check.interval.ms": 200,
            # Kafka waits this long (30 s by default) before the first retention pass.
            "log.initial.task.delay.ms": 0,
        }
    )
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, config={"segment.bytes": str(SEGMENT), "retention.ms": "600000"})

    hour_ago = int(time.time() * 1000) - 3_600_000
    value = b"r" * 100_000
    with Conn(bs) as conn:
        # ~4 MiB of records an hour old: several full segments, all past retention.ms.
        for i in range(40):
            batch = build_batch([Record(b"old", value, timestamp=hour_ago + i)])
            assert conn.produce(topic, 0, batch).error == NONE
        # A fresh record keeps the active segment alive.
        res = conn.produce(topic, 0, build_batch([Record(b"new", b"fresh")]))
        assert (res.error, res.base_offset) == (NONE, 40)

    seg_dir = broker.data_dir / f"{topic}-0"
    # a retention pass may already have run (every 200 ms): then the log start has moved
    rolled = len(list(seg_dir.glob("*.log"))) >= 3 or kc.earliest(bs, topic) > 0
    assert rolled, "precondition: several segments were rolled"

    deadline = time.monotonic() + 60
    while (start := kc.earliest(bs, topic)) == 0:
        assert time.monotonic() < deadline, "retention never deleted a segment"
        time.sleep(0.1)

    # Only whole segments go: the new start is a segment boundary, the newest records stay.
    # Every closed segment is past retention, so the passes end with the active segment alone
    # (reading before that could race a later pass that moves the log start again).
    while True:
        bases = sorted(int(p.stem) for p in seg_dir.glob("*.log"))
        if len(bases) == 1 and bases[0] == kc.earliest(bs, topic):
            break
        assert time.monotonic() < deadline, (
            f"segments {bases} vs log start {kc.earliest(bs, topic)}"
        )
        time.sleep(0.1)
    start = kc.earliest(bs, topic)
    assert 0 < start <= 40
    assert kc.latest(bs, topic) == 41
    got = kc.consume(bs, topic, 41 - start, offset=start)
    assert [m.offset for m in got] == list(range(start, 41))
    assert got[-1].value == b"fresh"

    # Reading from 0 now restarts at the new log start (auto.offset.reset=earliest).
    got = kc.consume(bs, topic, 1, offset=0)
    assert got[0].offset >= start
    kc.produce(bs, topic, [Msg(None, b"after")], partition=0)
    assert kc.latest(bs, topic) == 42
