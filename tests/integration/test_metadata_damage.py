"""Damaged metadata never deletes data, on a real broker read with a real client.

- The newest `__cluster_metadata` snapshot truncated, emptied or garbled: the broker starts from
  the older one and the log after it; every topic, old and new, reads back whole.
- Both snapshots damaged, or a batch the start must replay damaged: the broker exits non-zero
  with one line naming the file; with the files restored it starts again.
- A partition directory the metadata does not know is renamed `<dir>.<uuid>-stray`, kept as it
  is, and left alone by later starts; a `-delete` directory a crash left is removed.
- A deleted topic's directories are renamed at once (re-creating the name works immediately)
  and removed in the background.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import uuid
from pathlib import Path

import pytest

from . import clients as kc
from .broker import BrokerProcess
from .cluster.faults import wait_for
from .test_client_quotas import ALTER, alter_v0_body, parse_alter_v0
from .wire import Conn

# the embedded metadata log's own snapshots and damage checks (a KRaft node's: tests/unit/raft)
pytestmark = [pytest.mark.timeout(180), pytest.mark.legacy_single_node]

SNAPSHOT_EVERY = 1000  # the metadata log's snapshot interval in records
QUOTAS_PER_ROUND = SNAPSHOT_EVERY  # one AlterClientQuotas: that many metadata records


def _write(bs: str, topic: str, n: int = 5) -> list[bytes]:
    kc.create_topic(bs, topic)
    values = [f"{topic}-{i}".encode() for i in range(n)]
    kc.produce(bs, topic, [kc.Msg(b"k", v) for v in values], partition=0)
    return values


def _read(bs: str, topic: str, count: int) -> list[bytes | None]:
    return [m.value for m in kc.consume(bs, topic, count, offset=0, timeout=20)]


def _many_metadata_records(bs: str, tag: str) -> None:
    """Enough metadata records for a snapshot, in one request and without any directory."""
    entries = [([("client-id", f"{tag}-{i}")], [("producer_byte_rate", 1024.0 + i, False)])
               for i in range(QUOTAS_PER_ROUND)]
    with Conn(bs) as conn:
        answers = parse_alter_v0(conn.request(ALTER, 0, alter_v0_body(entries, False)))
    assert {code for code, _, _ in answers} == {0}


def _snapshots(broker: BrokerProcess) -> list[Path]:
    return sorted((broker.data_dir / "__cluster_metadata-0").glob("*.checkpoint"))


def _failed_start(broker: BrokerProcess) -> str:
    """Start the broker as a user would and return its one error line (it must exit)."""
    proc = subprocess.run(broker.command(), capture_output=True, text=True, timeout=60,
                          cwd=broker.base_dir, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("strom broker:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _garble(p: Path) -> None:
    data = bytearray(p.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 6] = b"\xffgarb\x00"
    p.write_bytes(bytes(data))


SEGMENT = "00000000000000000000.log"
STRAY = r"{}\.[0-9a-f]{{32}}-stray"
DAMAGE = {"truncated": _truncate, "empty": lambda p: p.write_bytes(b""), "garbled": _garble}


def test_damaged_metadata_never_deletes_data(make_broker, unique_topic):
    broker = make_broker()
    bs, data = broker.bootstrap, broker.data_dir
    topics = {name: [] for name in (unique_topic("before"), unique_topic("between"),
                                    unique_topic("after"))}
    before, between, after = topics
    topics[before] = _write(bs, before)
    _many_metadata_records(bs, "a")  # snapshot 1
    topics[between] = _write(bs, between)  # only in snapshot 2 and the log
    _many_metadata_records(bs, "b")  # snapshot 2
    topics[after] = _write(bs, after)  # only in the log

    # a deleted topic, re-created at once under its name, holds only new records
    doomed = unique_topic("doomed")
    _write(bs, doomed, n=20)
    admin = kc.admin(bs)
    admin.delete_topics([doomed], operation_timeout=30)[doomed].result(30)
    wait_for(lambda: doomed not in kc.topic_names(bs), 15, "the deletion")
    kc.create_topic(bs, doomed)
    kc.produce(bs, doomed, [kc.Msg(b"k", b"fresh")], partition=0)
    assert _read(bs, doomed, 1) == [b"fresh"] and kc.latest(bs, doomed) == 1
    topics[doomed] = [b"fresh"]
    wait_for(lambda: not list(data.glob("*-delete")), 15, "the old directories' removal")
    wait_for(lambda: len(_snapshots(broker)) == 2, 15, "two metadata snapshots")
    assert broker.stop() == 0

    ghost = data / "ghost-0"  # a partition directory the metadata does not know
    shutil.copytree(data / f"{before}-0", ghost)
    ghost_segment = (ghost / SEGMENT).read_bytes()
    leftover = data / f"gone-0.{uuid.uuid4().hex}-delete"  # a deletion a crash interrupted
    shutil.copytree(data / f"{before}-0", leftover)

    for kind, damage in DAMAGE.items():
        newest = _snapshots(broker)[-1]
        damage(newest)
        mark = broker.log_size()
        broker.restart()
        for name, values in topics.items():
            assert _read(bs, name, len(values)) == values, (kind, name)
        log = broker.log_text(since=mark)
        assert f"metadata snapshot {newest} is damaged" in log, log
        assert list(newest.parent.glob(newest.name + ".damaged*")), kind
        assert len(_snapshots(broker)) == 2  # whole again: the older one and a new one
        # from a fallback snapshot nothing is judged stray: the unknown directory stays
        assert "stray detection skipped" in log, log
        assert (ghost / SEGMENT).read_bytes() == ghost_segment
        assert "ghost" not in kc.topic_names(bs)
        wait_for(lambda: not leftover.exists(), 15, "the leftover -delete directory's removal")
        assert broker.stop() == 0

    metadata = data / "__cluster_metadata-0"
    backup = broker.base_dir / "metadata-backup"
    shutil.copytree(metadata, backup)

    def restore() -> None:  # what the operator does: the directory from a backup
        shutil.rmtree(metadata)
        shutil.copytree(backup, metadata)

    # both damaged: nothing complete to start from
    older, newest = _snapshots(broker)
    _garble(newest)
    older.write_bytes(b"")
    line = _failed_start(broker)
    assert str(newest) in line and str(older) in line and "backup" in line, line
    restore()

    # the newest damaged, and a batch the fallback must replay damaged too
    [segment] = sorted(metadata.glob("*.log"))
    _garble_batch_after(segment, int(older.name[:20]))
    _truncate(newest)
    line = _failed_start(broker)
    # (the refused start above left no clean-shutdown marker: recovery cut the log at the
    # damage and kept the rest aside, and the broker says which file holds those records)
    assert str(segment) in line and "backup" in line, line
    assert (ghost / SEGMENT).read_bytes() == ghost_segment  # a refusal touches no partition
    restore()

    # whole metadata: the unknown directory is renamed stray, kept as it is
    mark = broker.log_size()
    broker.start()
    for name, values in topics.items():
        assert _read(bs, name, len(values)) == values, name
    [stray] = [p for p in data.iterdir() if re.fullmatch(STRAY.format("ghost-0"), p.name)]
    assert not ghost.exists() and (stray / SEGMENT).read_bytes() == ghost_segment
    log = broker.log_text(since=mark)
    assert any("level=WARN" in ln and stray.name in ln for ln in log.splitlines()), log

    # later starts leave it alone: not served, not renamed again, not removed
    assert broker.stop() == 0
    mark = broker.log_size()
    broker.restart()
    assert [p for p in data.iterdir() if "ghost" in p.name] == [stray]
    assert (stray / SEGMENT).read_bytes() == ghost_segment
    assert "ghost" not in kc.topic_names(bs)
    assert stray.name in broker.log_text(since=mark)


def _garble_batch_after(segment: Path, offset: int) -> int:
    """Flip bytes in the first batch at or after `offset` (its CRC fails); its base offset."""
    data = bytearray(segment.read_bytes())
    pos = 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if base >= offset:
            end = pos + 12 + length
            for i in range(end - 6, end - 2):
                data[i] ^= 0x5A
            segment.write_bytes(bytes(data))
            return base
        pos += 12 + length
    raise AssertionError(f"no batch at or after offset {offset} in {segment}")


