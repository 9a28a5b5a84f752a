"""Unreadable checkpoint files read as absent (with a WARN naming them); the logs supply the rest.

Kafka reads an empty checkpoint as empty but stops on a garbled one; an operator's only fix is
to delete the file, so Strom does that for them and recovers from the log instead.
"""

import logging
import uuid
from pathlib import Path

import pytest

from strom.storage import checkpoints as ck
from strom.storage.config import LogConfig
from strom.storage.manager import CLEAN_SHUTDOWN_MARKER, LogManager

CFG = LogConfig(segment_bytes=3000, index_interval_bytes=200)
GARBAGE = [b"", b"\n", b"garbage\n", b"0\n5\na 0 1\n", b"1\n0\n", b"\x00\xff\xfe\x80", b"0\nx\n"]


def _warned(caplog, path: Path) -> bool:
    return any(r.levelno == logging.WARNING and str(path) in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("content", GARBAGE)
def test_unreadable_offset_checkpoint_reads_as_empty(tmp_path, caplog, content):
    p = tmp_path / ck.RECOVERY_POINT_CHECKPOINT
    p.write_bytes(content)
    caplog.set_level(logging.WARNING)
    assert ck.read_offset_checkpoint(p) == {}
    assert _warned(caplog, p)


@pytest.mark.parametrize("content", GARBAGE)
def test_unreadable_leader_epoch_checkpoint_reads_as_absent(tmp_path, caplog, content):
    p = tmp_path / ck.LEADER_EPOCH_CHECKPOINT
    p.write_bytes(content)
    caplog.set_level(logging.WARNING)
    assert ck.read_leader_epoch_checkpoint(p) is None
    assert _warned(caplog, p)
    assert ck.read_leader_epoch_checkpoint(tmp_path / "missing") is None


@pytest.mark.parametrize("content", [b"\n", b"version: 0\n", b"version: 0\ntopic_id: !!\n",
                                     b"\xff\xfe", b"version: 7\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n"])
def test_unreadable_partition_metadata_reads_as_absent(tmp_path, caplog, content):
    p = tmp_path / ck.PARTITION_METADATA
    p.write_bytes(content)
    caplog.set_level(logging.WARNING)
    assert ck.read_partition_metadata(p) is None
    assert _warned(caplog, p)


def _write_log(h, root: Path, *, clean: bool):
    m = LogManager([root], config_for=lambda _t: CFG)
    m.load()
    log = m.create("t", 0, h.TOPIC_ID, CFG)
    expected = h.Appended()
    for i in range(40):
        epoch = 1 + i // 10
        data = h.make_batch(2, 60, ts=1000 + i)
        res = log.append(bytearray(data), leader_epoch=epoch, now_ms=0)
        expected.add(data, res.first_offset, epoch)
    epochs = log.epochs.entries()
    assert len(epochs) == 4 and len(log.segments) >= 3
    if clean:
        m.shutdown()
    else:
        log.flush()
        m.checkpoint()  # then a crash: no close, no clean-shutdown marker
    return expected, epochs


def _check_all_records(log, expected):
    assert log.log_end_offset == expected.batches[-1][1] + 1
    for first, _last, data in expected.batches:
        assert log.read(first, 1).slice.read_bytes() == data


FILES = [ck.RECOVERY_POINT_CHECKPOINT, ck.LOG_START_OFFSET_CHECKPOINT,
         ck.REPLICATION_OFFSET_CHECKPOINT, "t-0/" + ck.LEADER_EPOCH_CHECKPOINT,
         "t-0/" + ck.PARTITION_METADATA, "t-0/snapshots"]  # fmt: skip


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("content", [b"", b"\x00garbled\xff\n"], ids=["empty", "garbled"])
def test_load_survives_an_unreadable_checkpoint(h, tmp_path, caplog, clean, name, content):
    expected, epochs = _write_log(h, tmp_path, clean=clean)
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists() == clean
    if name == "t-0/snapshots":
        targets = sorted((tmp_path / "t-0").glob("*.snapshot"))
        assert targets
    else:
        targets = [tmp_path / name]
    for p in targets:
        p.write_bytes(content)
    caplog.set_level(logging.WARNING)
    m = LogManager([tmp_path], config_for=lambda _t: CFG)
    m.load()
    log = m.get("t", 0)
    if not (content == b"" and name.endswith(ck.PARTITION_METADATA)):  # empty: a crash at creation
        assert all(_warned(caplog, p) for p in targets), caplog.text
    _check_all_records(log, expected)
    assert log.epochs.entries() == epochs  # rebuilt from the batches when unreadable
    assert log.epoch_for_offset(0) == 1 and log.latest_epoch == 4
    log2 = m.create("t", 0, h.TOPIC_ID, CFG)  # the topic id is (re)adopted
    assert log2 is log and log.topic_id == h.TOPIC_ID
    res = log.append(bytearray(h.make_batch(1)), leader_epoch=5, now_ms=0)
    assert res.first_offset == expected.batches[-1][1] + 1
    m.shutdown()
    # the next load finds good files again
    assert ck.read_leader_epoch_checkpoint(log.dir / ck.LEADER_EPOCH_CHECKPOINT)[-1] == (
        5, res.first_offset)  # fmt: skip
    assert ck.read_partition_metadata(log.dir / ck.PARTITION_METADATA) == h.TOPIC_ID


def test_missing_leader_epoch_checkpoint_is_rebuilt_from_the_log(h, tmp_path):
    _expected, epochs = _write_log(h, tmp_path, clean=True)
    (tmp_path / "t-0" / ck.LEADER_EPOCH_CHECKPOINT).unlink()
    m = LogManager([tmp_path], config_for=lambda _t: CFG)
    m.load()
    assert m.get("t", 0).epochs.entries() == epochs
    m.shutdown()


def test_a_new_partition_does_not_scan_for_epochs(h, tmp_path):
    m = LogManager([tmp_path], config_for=lambda _t: CFG)
    m.load()
    log = m.create("t", 0, uuid.uuid4(), CFG)
    assert log.epochs.entries() == []
    m.shutdown()
