"""Kafka's snapshot files of __cluster_metadata-0: names, layout, checks.

A file written here was read back by Kafka 4.4.0's kafka-dump-log, and a (0, 0) bootstrap
snapshot written by Kafka 4.4.0's `kafka-storage format --standalone` reads here."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strom.cluster import metadata_snapshot
from strom.raft.control import (
    Endpoint,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    Voter,
    VotersRecord,
    build_control_batch,
)
from strom.raft.snapshot import (
    BOOTSTRAP_SNAPSHOT_ID,
    SnapshotBatch,
    SnapshotCorruptError,
    SnapshotId,
    SnapshotWriter,
    delete_snapshot,
    load_snapshot,
    mark_for_delete,
    parse_snapshot_path,
    read_snapshot,
    snapshot_ids,
    snapshot_name,
    snapshot_paths,
    write_snapshot,
)
from strom.record import Record, build_batch, iter_batches, read_header

VOTERS = VotersRecord((Voter(1, uuid.UUID(int=7), (Endpoint("CONTROLLER", "localhost", 9093),)),))


def test_names() -> None:
    assert snapshot_name(SnapshotId(42, 3)) == "00000000000000000042-0000000003.checkpoint"
    assert snapshot_name(BOOTSTRAP_SNAPSHOT_ID) == "00000000000000000000-0000000000.checkpoint"
    assert BOOTSTRAP_SNAPSHOT_ID == (0, 0)
    with pytest.raises(ValueError):
        snapshot_name(SnapshotId(-1, 0))


@pytest.mark.parametrize(("name", "expected"), [
    ("00000000000000000042-0000000003.checkpoint", ((42, 3), False, False)),
    ("00000000000000000042-0000000003.checkpoint.deleted", ((42, 3), False, True)),
    ("00000000000000000042-0000000003-8123456.checkpoint.part", ((42, 3), True, False)),
    ("00000000000000000042.checkpoint", None),  # Strom's older snapshots
    ("00000000000000000042-0000000003.checkpoint.damaged", None),
    ("00000000000000000042-000000003.checkpoint", None),
    ("0000000000000000004x-0000000003.checkpoint", None),
    ("bootstrap.checkpoint", None),
    ("quorum-state", None),
])
def test_parse_names(name: str, expected) -> None:
    parsed = parse_snapshot_path(Path(name))
    if expected is None:
        assert parsed is None
    else:
        assert parsed is not None
        assert (parsed.snapshot_id, parsed.partial, parsed.deleted) == expected


def test_old_and_new_names_do_not_mix(tmp_path: Path) -> None:
    for name in ("00000000000000000100.checkpoint", "00000000000000000042-0000000003.checkpoint",
                 "00000000000000000000-0000000000.checkpoint",
                 "00000000000000000042-0000000002.checkpoint",
                 "00000000000000000042-0000000001.checkpoint.deleted",
                 "00000000000000000050-0000000003-1.checkpoint.part", "quorum-state"):
        (tmp_path / name).write_bytes(b"")
    assert snapshot_ids(tmp_path) == [(0, 0), (42, 2), (42, 3)]
    assert [p.path.name[:31] for p in snapshot_paths(tmp_path)] == [
        "00000000000000000000-0000000000", "00000000000000000042-0000000001",
        "00000000000000000042-0000000002", "00000000000000000042-0000000003",
        "00000000000000000050-0000000003"]
    # the existing metadata log sees only its own name
    assert [p.name for p in metadata_snapshot.snapshot_files(tmp_path)] == [
        "00000000000000000100.checkpoint"]
    assert snapshot_ids(tmp_path / "missing") == []


def test_layout_header_data_footer(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, SnapshotId(10, 4), [b"a", b"bb"],
                          last_contained_log_timestamp=555, kraft_version=1, voters=VOTERS,
                          timestamp=99)
    assert path == tmp_path / "00000000000000000010-0000000004.checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no .part left
    header = build_control_batch([SnapshotHeaderRecord(555), KRaftVersionRecord(1), VOTERS],
                                 base_offset=0, leader_epoch=4, timestamp=99)
    data = build_batch([Record(3, 99, None, b"a"), Record(4, 99, None, b"bb")], base_offset=3,
                       partition_leader_epoch=4)
    footer = build_control_batch([SnapshotFooterRecord()], base_offset=5, leader_epoch=4,
                                 timestamp=99)
    assert path.read_bytes() == header + data + footer
    assert list(read_snapshot(path)) == [
        SnapshotBatch(0, 4, controls=(SnapshotHeaderRecord(555), KRaftVersionRecord(1), VOTERS)),
        SnapshotBatch(3, 4, values=(b"a", b"bb")),
        SnapshotBatch(5, 4, controls=(SnapshotFooterRecord(),)),
    ]
    snap = load_snapshot(path)
    assert (snap.snapshot_id, snap.last_contained_log_timestamp, snap.kraft_version) == (
        (10, 4), 555, 1)
    assert snap.voters == VOTERS and snap.values == (b"a", b"bb")


def test_kraft_version_0_has_only_the_header(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, BOOTSTRAP_SNAPSHOT_ID, [], last_contained_log_timestamp=0)
    batches = list(read_snapshot(path))
    assert batches == [SnapshotBatch(0, 0, controls=(SnapshotHeaderRecord(0),)),
                       SnapshotBatch(1, 0, controls=(SnapshotFooterRecord(),))]
    assert load_snapshot(path).voters is None
    with pytest.raises(ValueError, match=r"kraft\.version is 0"):
        SnapshotWriter(tmp_path, SnapshotId(1, 1), last_contained_log_timestamp=0, voters=VOTERS)
    assert snapshot_ids(tmp_path) == [(0, 0)]


def test_data_is_split_into_batches(tmp_path: Path) -> None:
    values = [bytes([i]) * 100 for i in range(20)]
    with SnapshotWriter(tmp_path, SnapshotId(30, 2), last_contained_log_timestamp=1,
                        max_batch_bytes=400, timestamp=5) as w:
        w.append(values[:7])
        w.append(values[7:])
        path = w.freeze()
    raw = path.read_bytes()
    headers = [h for _, h in iter_batches(raw)]
    assert len(headers) > 4
    assert all(h.size <= 400 for h in headers[1:-1])
    assert [h.base_offset for h in headers][1:] == [h.next_offset for h in headers][:-1]
    assert all(h.partition_leader_epoch == 2 for h in headers)
    assert load_snapshot(path).values == tuple(values)


def test_the_part_file_and_abort(tmp_path: Path) -> None:
    w = SnapshotWriter(tmp_path, SnapshotId(7, 1), last_contained_log_timestamp=0)
    assert w.part_path.name.startswith("00000000000000000007-0000000001-")
    assert w.part_path.name.endswith(".checkpoint.part")
    assert parse_snapshot_path(w.part_path) is not None and snapshot_ids(tmp_path) == []
    w.append([b"x"])
    w.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="closed"):
        w.append([b"y"])
    with pytest.raises(RuntimeError), SnapshotWriter(tmp_path, SnapshotId(8, 1),
                                                     last_contained_log_timestamp=0):
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []
    w = SnapshotWriter(tmp_path, SnapshotId(9, 1), last_contained_log_timestamp=0)
    w.freeze()
    with pytest.raises(ValueError, match="frozen"):
        w.append([b"z"])
    w.abort()  # a frozen snapshot stays
    assert snapshot_ids(tmp_path) == [(9, 1)]


def test_delete(tmp_path: Path) -> None:
    write_snapshot(tmp_path, SnapshotId(5, 1), [], last_contained_log_timestamp=0)
    deleted = mark_for_delete(tmp_path, SnapshotId(5, 1))
    assert deleted.name == "00000000000000000005-0000000001.checkpoint.deleted"
    assert snapshot_ids(tmp_path) == []
    assert delete_snapshot(tmp_path, SnapshotId(5, 1))
    assert not delete_snapshot(tmp_path, SnapshotId(5, 1))
    assert list(tmp_path.iterdir()) == []


def _good(tmp_path: Path) -> Path:
    return write_snapshot(tmp_path, SnapshotId(4, 1), [b"v1", b"v2"],
                          last_contained_log_timestamp=0, timestamp=1)


def _corrupt(path: Path, match: str) -> None:
    with pytest.raises(SnapshotCorruptError, match=match) as e:
        load_snapshot(path)
    assert str(path) in str(e.value)


def test_damaged_files(tmp_path: Path) -> None:
    path = _good(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[:-1])
    _corrupt(path, "cut short")
    path.write_bytes(raw + b"\x00" * 5)
    _corrupt(path, "stray bytes")
    damaged = bytearray(raw)
    damaged[80] ^= 0xFF  # inside the header batch's records
    path.write_bytes(bytes(damaged))
    _corrupt(path, "CRC")
    path.write_bytes(b"")
    _corrupt(path, "empty")


def _file(tmp_path: Path, *batches: bytes) -> Path:
    path = tmp_path / snapshot_name(SnapshotId(9, 1))
    path.write_bytes(b"".join(batches))
    return path


def test_framing_rules(tmp_path: Path) -> None:
    def header(offset: int = 0) -> bytes:
        return build_control_batch([SnapshotHeaderRecord(0)], base_offset=offset, leader_epoch=1,
                                   timestamp=0)

    def footer(offset: int) -> bytes:
        return build_control_batch([SnapshotFooterRecord()], base_offset=offset, leader_epoch=1,
                                   timestamp=0)

    def data(offset: int, value: bytes | None = b"v") -> bytes:
        return build_batch([Record(offset, 0, None, value)], base_offset=offset,
                           partition_leader_epoch=1)

    assert load_snapshot(_file(tmp_path, header(), data(1), footer(2))).values == (b"v",)
    _corrupt(_file(tmp_path, header(), data(1)), "no snapshot footer")
    _corrupt(_file(tmp_path, data(0), footer(1)), "first batch is not a snapshot header")
    _corrupt(_file(tmp_path, footer(0)), "first batch is not a snapshot header")
    _corrupt(_file(tmp_path, header(), data(2), footer(3)), "expected offset 1")
    _corrupt(_file(tmp_path, header(1), footer(2)), "expected offset 0")
    _corrupt(_file(tmp_path, header(), footer(1), data(2)), "after the footer")
    _corrupt(_file(tmp_path, header(), data(1, None), footer(2)), "record 1 has no value")


def test_read_batches_follow_the_file(tmp_path: Path) -> None:
    path = _good(tmp_path)
    positions = [pos for pos, _ in iter_batches(path.read_bytes())]
    assert len(positions) == 3
    assert read_header(path.read_bytes(), positions[1]).records_count == 2
    other = tmp_path / "bootstrap.checkpoint"
    other.write_bytes(path.read_bytes())
    assert load_snapshot(other).snapshot_id is None
