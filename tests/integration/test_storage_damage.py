"""Damaged data on disk: a real broker never drops records silently and starts past what an
operator could fix by deleting a file.

- A damaged batch in an old segment: fetches of it answer CORRUPT_MESSAGE (no empty answer that
  leaves a consumer waiting, no silent skip), and the broker log says where.
- A damaged batch found while an index is rebuilt: the segment is cut there (as Kafka does), the
  cut bytes are kept in ``<segment>.log.corrupt-<ms>`` and the broker log has an ERROR.
- Empty or garbled checkpoint files are read as absent; every record is still served.
- A start-up failure is one line on stderr, not a traceback.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from . import clients as kc
from .broker import HOST, STROM_BIN, BrokerProcess, free_port
from .wire import CORRUPT_MESSAGE, NONE, Conn, Record, build_batch, parse_batches

pytestmark = pytest.mark.timeout(120)

SEGMENT_BYTES = 1200
BATCHES, PER_BATCH = 40, 3


def _write(bs: str, topic: str) -> list[bytes]:
    """BATCHES batches of PER_BATCH records, one produce each; several segments."""
    kc.create_topic(bs, topic, config={"segment.bytes": str(SEGMENT_BYTES)})
    values = []
    with Conn(bs) as conn:
        for i in range(BATCHES):
            vals = [f"b{i:02d}-r{j}-{'x' * 20}".encode() for j in range(PER_BATCH)]
            res = conn.produce(topic, 0, build_batch(Record(b"k", v) for v in vals))
            assert (res.error, res.base_offset) == (NONE, i * PER_BATCH)
            values += vals
    return values


def _segments(broker: BrokerProcess, topic: str) -> list[Path]:
    segs = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segs) >= 3, f"precondition: several segments, got {[p.name for p in segs]}"
    return segs


def _damage_length(seg: Path, nth: int) -> tuple[int, int]:
    """Give the ``nth`` batch of ``seg`` an impossible length; returns (its base offset, its
    position)."""
    data = bytearray(seg.read_bytes())
    pos = 0
    for _ in range(nth):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    base = struct.unpack_from(">q", data, pos)[0]
    struct.pack_into(">i", data, pos + 8, 0x7FFF0000)
    seg.write_bytes(bytes(data))
    return base, pos


def _fetch(bs: str, topic: str, offset: int):
    with Conn(bs) as conn:
        return conn.fetch(topic, 0, offset, max_wait_ms=5000)


def _values(fetched) -> list[bytes]:
    return [r.value for _, rs in parse_batches(fetched.records) for r in rs or []]


def _wait_for(pred, what: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)  # poll interval, not synchronisation
    raise AssertionError(f"timed out waiting for {what}")


def test_damaged_batch_in_old_segment_answers_corrupt_message(make_broker, unique_topic):
    broker = make_broker()
    bs, topic = broker.bootstrap, unique_topic()
    values = _write(bs, topic)
    assert broker.stop() == 0
    seg = _segments(broker, topic)[1]
    bad, _pos = _damage_length(seg, 2)
    mark = broker.log_size()
    broker.restart()

    assert _values(_fetch(bs, topic, bad - PER_BATCH))[:PER_BATCH] == values[bad - PER_BATCH : bad]
    started = time.monotonic()
    for offset in (bad, bad + 1):
        fetched = _fetch(bs, topic, offset)
        assert fetched.error == CORRUPT_MESSAGE and not fetched.records
    assert time.monotonic() - started < 4, "a damaged batch must not wait out max_wait_ms"
    log = broker.log_text(since=mark)
    assert "level=ERROR" in log and str(seg) in log and f"offset {bad}" in log, log

    # a real consumer does not stall silently on it: librdkafka reports the error (code 2,
    # which it calls INVALID_MSG)
    c = kc.consumer(bs)
    try:
        c.assign([TopicPartition(topic, 0, bad - PER_BATCH)])
        got, errors = [], []

        def poll() -> bool:
            for m in c.consume(num_messages=50, timeout=0.5):
                if m.error() is None:
                    got.append(m.value())
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(m.error())
            return bool(errors)

        _wait_for(poll, "the consumer's error")
        assert got == values[bad - PER_BATCH : bad]
        assert all(e.code() == KafkaError.INVALID_MSG for e in errors), errors  # CORRUPT_MESSAGE
        assert f"offset {bad}" in str(errors[0]), errors
    finally:
        c.close()
    # nothing was removed from the disk
    assert not list(seg.parent.glob("*.corrupt-*"))


def test_damage_found_by_an_index_rebuild_is_cut_and_saved(make_broker, unique_topic):
    broker = make_broker()
    bs, topic = broker.bootstrap, unique_topic()
    values = _write(bs, topic)
    assert broker.stop() == 0
    segs = _segments(broker, topic)
    seg = segs[1]
    next_base = int(segs[2].name[:20])
    bad, pos = _damage_length(seg, 2)
    damaged = seg.read_bytes()[pos:]
    seg.with_suffix(".index").unlink()  # the restart rebuilds it by scanning the segment
    mark = broker.log_size()
    broker.restart()

    got = kc.consume(bs, topic, bad, offset=0)
    assert [m.value for m in got] == values[:bad]
    # as in Kafka, the cut leaves a gap: the next record served is the next segment's first
    after = _fetch(bs, topic, bad)
    assert after.error == NONE and _values(after)[0] == values[next_base]
    side = list(seg.parent.glob(seg.name + ".corrupt-*"))
    assert len(side) == 1 and side[0].read_bytes() == damaged
    log = broker.log_text(since=mark)
    line = next((ln for ln in log.splitlines() if "level=ERROR" in ln and str(seg) in ln), "")
    assert f"offsets {bad} and up" in line and str(len(damaged)) in line and str(side[0]) in line, log


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_unreadable_checkpoints_are_read_as_absent(make_broker, unique_topic, how):
    broker = make_broker()
    bs, topic = broker.bootstrap, unique_topic()
    values = _write(bs, topic)
    if how == "kill":
        broker.kill()
    else:
        assert broker.stop() == 0
    data = broker.data_dir
    garbled = [p for p in data.iterdir() if p.name.endswith("-checkpoint")]
    for part in (p for p in data.iterdir() if p.is_dir()):
        garbled += [p for p in part.iterdir()
                    if p.name in ("leader-epoch-checkpoint", "partition.metadata")
                    or p.suffix == ".snapshot"]  # fmt: skip
    names = {p.name for p in garbled}
    assert {"recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
            "replication-offset-checkpoint", "leader-epoch-checkpoint",
            "partition.metadata"} <= names, names  # fmt: skip
    for i, p in enumerate(garbled):
        p.write_bytes(b"" if i % 2 else b"\x00garbled\xff\n7\n")
    mark = broker.log_size()
    broker.restart()

    got = kc.consume(bs, topic, len(values), offset=0)
    assert [m.value for m in got] == values
    assert (kc.earliest(bs, topic), kc.latest(bs, topic)) == (0, len(values))
    with Conn(bs) as conn:
        res = conn.produce(topic, 0, build_batch([Record(b"k", b"after")]))
        assert (res.error, res.base_offset) == (NONE, len(values))
    log = broker.log_text(since=mark)
    assert "Traceback" not in log
    for p in garbled[:3]:
        assert str(p) in log, f"no WARN naming {p}:\n{log}"


def _start_failure(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    data = tmp_path / "data"
    settings = {"log.dirs": str(data), "listeners": f"PLAINTEXT://{HOST}:{free_port()}",
                "metrics.listener": f"http://{HOST}:0"}
    settings.update(dict(o.split("=", 1) for o in overrides))
    cmd = [str(STROM_BIN), "broker"]
    for k, v in settings.items():
        cmd += ["--override", f"{k}={v}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("strom broker:")]
    assert len(errors) == 1, proc.stderr
    others = [ln for ln in proc.stderr.splitlines() if ln.strip() and "level=" not in ln]
    assert others == errors, proc.stderr  # every other line is a log line
    return errors[0]


def test_port_in_use_is_one_line(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        s.listen()
        port = s.getsockname()[1]
        proc = _start_failure(tmp_path, f"listeners=PLAINTEXT://{HOST}:{port}")
    line = _one_error_line(proc)
    assert str(port) in line and "in use" in line, line


@pytest.mark.parametrize("damage", ["node-id", "binary", "log-dir-is-a-file"])
def test_bad_data_dir_is_one_line(tmp_path, damage):
    data = tmp_path / "data"
    if damage == "log-dir-is-a-file":
        data.write_text("not a directory")
    else:
        data.mkdir()
        meta = data / "meta.properties"
        meta.write_bytes(b"version=1\ncluster.id=abc\nnode.id=one\n" if damage == "node-id"
                         else os.urandom(64) + b"\xff\xfe")  # fmt: skip
    line = _one_error_line(_start_failure(tmp_path))
    assert str(data) in line, line
