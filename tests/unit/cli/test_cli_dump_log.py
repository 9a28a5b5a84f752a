"""`strom dump-log` on segment files built with `strom.record.build_batch`."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strom.cli.main import app
from strom.record import (
    COMPRESSION_GZIP,
    COMPRESSION_ZSTD,
    CRC_OFFSET,
    Record,
    build_batch,
    control_batch,
)

runner = CliRunner()
TS = 1_700_000_000_000
BASE = 100  # segment base offset (from the file name)


def seg_name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def three_batches() -> list[bytes]:
    return [
        build_batch([Record(100, TS, b"k0", b"v0"), Record(101, TS + 1, None, b"v1", [("h", b"x")])],
                    base_offset=100),
        build_batch([Record(102, TS + 5, b"k2", b"\xffbin\nline")], base_offset=102,
                    compression=COMPRESSION_GZIP, producer_id=7, producer_epoch=1, base_sequence=3),
        build_batch([Record(103 + i, TS + 10, None, b"z" * 50) for i in range(4)], base_offset=103,
                    compression=COMPRESSION_ZSTD),
    ]


@pytest.fixture
def segment(tmp_path: Path) -> tuple[Path, list[bytes], list[int]]:
    batches = three_batches()
    positions, pos = [], 0
    for b in batches:
        positions.append(pos)
        pos += len(b)
    path = tmp_path / seg_name(BASE, ".log")
    path.write_bytes(b"".join(batches))
    return path, batches, positions


def run(*args: str | Path):
    return runner.invoke(app, ["dump-log", *map(str, args)])


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_batches_listed_with_header_fields(segment):
    path, batches, positions = segment
    res = run(path)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == f"Log starting offset: {BASE}"
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batch_lines) == 3
    first = batch_lines[0]
    for part in ("baseOffset: 100", "lastOffset: 101", "count: 2", "position: 0",
                 f"CreateTime: {TS + 1}", f"size: {len(batches[0])}", "magic: 2",
                 "compresscodec: none", "isvalid: true", "isTransactional: false", "isControl: false",
                 "producerId: -1"):
        assert part in first, (part, first)
    second = batch_lines[1]
    for part in ("baseOffset: 102", "lastOffset: 102", f"position: {positions[1]}", "compresscodec: gzip",
                 "producerId: 7", "producerEpoch: 1", "baseSequence: 3", "lastSequence: 3"):
        assert part in second, (part, second)
    assert "compresscodec: zstd" in batch_lines[2] and "count: 4" in batch_lines[2]
    assert not any(line.startswith("| ") for line in lines)  # records only on request


def test_print_records_and_data(segment):
    path, _, _ = segment
    res = run(path, "--print-records")
    assert res.exit_code == 0, res.output
    recs = [line for line in res.output.splitlines() if line.startswith("| ")]
    assert len(recs) == 7
    assert recs[0] == f"| offset: 100 CreateTime: {TS} keySize: 2 valueSize: 2 sequence: -1 headerKeys: []"
    assert "headerKeys: [h]" in recs[1] and "keySize: -1" in recs[1]
    assert "payload" not in res.output

    res = run(path, "--print-data")
    assert res.exit_code == 0, res.output
    recs = [line for line in res.output.splitlines() if line.startswith("| ")]
    assert recs[0].endswith("key: k0 payload: v0")
    assert "headers: h:x" in recs[1] and recs[1].endswith("key: null payload: v1")
    # Non-UTF-8 bytes and newlines are escaped so every record stays on one line.
    assert recs[2].endswith("key: k2 payload: \\\\xffbin\\nline")
    assert "sequence: 3" in recs[2]


def test_json_format_round_trips_fields(segment):
    path, batches, positions = segment
    res = run(path, "--format", "json", "--deep-iteration")
    assert res.exit_code == 0, res.output
    objs = json_lines(res.output)
    assert [o["baseOffset"] for o in objs] == [100, 102, 103]
    assert [o["position"] for o in objs] == positions
    assert [o["size"] for o in objs] == [len(b) for b in batches]
    assert all(o["isvalid"] is True and o["file"] == str(path) for o in objs)
    assert [r["offset"] for o in objs for r in o["records"]] == list(range(100, 107))


def test_bad_crc_is_reported_and_exits_1(segment, tmp_path):
    path, _batches, positions = segment
    data = bytearray(path.read_bytes())
    data[positions[1] + 70] ^= 0xFF  # inside the second batch's records
    path.write_bytes(bytes(data))
    res = run(path)
    assert res.exit_code == 1
    assert "isvalid: false" in res.output
    assert f"problem: batch at position {positions[1]} (baseOffset 102) fails its CRC check" in res.output
    assert res.output.count("baseOffset: ") == 3  # the walk goes on after a bad CRC


def test_crc_field_itself_corrupt(segment):
    path, _, _ = segment
    data = bytearray(path.read_bytes())
    struct.pack_into(">I", data, CRC_OFFSET, 12345)
    path.write_bytes(bytes(data))
    res = run(path, "--format", "json")
    objs = json_lines(res.output)
    assert objs[0]["crc"] == 12345 and objs[0]["isvalid"] is False
    assert res.exit_code == 1


@pytest.mark.parametrize("cut", [11, 30, 70])
def test_torn_tail_reported(segment, cut):
    path, batches, positions = segment
    data = b"".join(batches)
    path.write_bytes(data[: positions[2] + cut])
    res = run(path)
    assert res.exit_code == 1
    assert res.output.count("baseOffset: ") == 2  # the complete batches are still shown
    assert "problem: torn tail: " in res.output
    assert f"position {positions[2]}" in res.output.splitlines()[-1]


def test_zero_preallocated_tail_is_not_a_problem(segment):
    path, batches, _ = segment
    data = b"".join(batches)
    path.write_bytes(data + bytes(4096))
    res = run(path)
    assert res.exit_code == 0, res.output
    assert f"4096 zero bytes from position {len(data)} to the end" in res.output
    # A torn batch whose written part happens to be zeros cannot be told apart: same note.
    path.write_bytes(data[: -len(batches[-1])] + batches[-1][:5])
    res = run(path)
    assert res.exit_code == 0, res.output
    assert f"5 zero bytes from position {len(data) - len(batches[-1])} to the end" in res.output


def test_empty_log(tmp_path):
    path = tmp_path / seg_name(0, ".log")
    path.write_bytes(b"")
    res = run(path)
    assert res.exit_code == 0
    assert res.output.splitlines() == [f"Dumping {path}", "Log starting offset: 0"]


def test_control_batch_shows_marker(tmp_path):
    path = tmp_path / seg_name(0, ".log")
    data = build_batch([Record(0, TS, b"k", b"v")], producer_id=5, producer_epoch=0, transactional=True)
    data += control_batch(commit=True, producer_id=5, producer_epoch=0, coordinator_epoch=3,
                          timestamp=TS, base_offset=1)
    path.write_bytes(data)
    res = run(path, "--print-records")
    assert res.exit_code == 0, res.output
    assert "isTransactional: true isControl: true" in res.output
    assert "endTxnMarker: COMMIT coordinatorEpoch: 3" in res.output


def test_max_bytes_stops_early(segment):
    path, batches, _ = segment
    res = run(path, "--max-bytes", str(len(batches[0])))
    assert res.exit_code == 0
    assert res.output.count("baseOffset: ") == 1


def write_index(path: Path, entries: list[tuple[int, int]], pad: int = 0) -> None:
    path.write_bytes(b"".join(struct.pack(">ii", o, p) for o, p in entries) + bytes(8 * pad))


def test_offset_index_entries_and_check_against_log(segment):
    path, _, positions = segment
    idx = path.with_suffix(".index")
    write_index(idx, [(1, positions[0]), (2, positions[1]), (6, positions[2])], pad=3)
    res = run(idx)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[1:] == [
        f"offset: 101 position: {positions[0]}",
        f"offset: 102 position: {positions[1]}",
        f"offset: 106 position: {positions[2]}",
    ]
    write_index(idx, [(1, positions[0]), (5, positions[1]), (6, 3)])
    res = run(idx)
    assert res.exit_code == 1
    assert "index entry 1 (offset 105 -> position" in res.output
    assert "the batch there holds offsets 102..102" in res.output
    assert "index entry 2 (offset 106 -> position 3): no batch starts at this position" in res.output


def test_offset_index_without_log_and_backwards_entries(tmp_path):
    idx = tmp_path / seg_name(50, ".index")
    write_index(idx, [(0, 0), (3, 100), (2, 200)])
    res = run(idx)
    assert res.exit_code == 1
    assert "offset: 50 position: 0" in res.output and "offset: 52 position: 200" in res.output
    assert "offset 52 is not above the previous 53" in res.output


def test_time_index(tmp_path):
    tidx = tmp_path / seg_name(BASE, ".timeindex")
    tidx.write_bytes(struct.pack(">qi", TS, 1) + struct.pack(">qi", TS + 10, 6) + bytes(24))
    res = run(tidx)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[1:] == [f"timestamp: {TS} offset: 101", f"timestamp: {TS + 10} offset: 106"]


def test_txn_index(tmp_path):
    txn = tmp_path / seg_name(0, ".txnindex")
    txn.write_bytes(struct.pack(">hqqqq", 0, 9, 10, 20, 30))
    res = run(txn, "--format", "json")
    assert res.exit_code == 0, res.output
    assert json_lines(res.output) == [{"file": str(txn), "version": 0, "producerId": 9, "firstOffset": 10,
                                       "lastOffset": 20, "lastStableOffset": 30}]


def test_directory_expands_to_segment_files(segment):
    path, _, _ = segment
    write_index(path.with_suffix(".index"), [(0, 0)])
    (path.parent / "leader-epoch-checkpoint").write_text("0\n0\n")
    res = run(path.parent)
    assert res.exit_code == 0, res.output
    dumped = [line for line in res.output.splitlines() if line.startswith("Dumping ")]
    assert dumped == [f"Dumping {path.with_suffix('.index')}", f"Dumping {path}"]


def test_user_errors_are_one_line(tmp_path):
    res = runner.invoke(app, ["dump-log", str(tmp_path / "missing.log")])
    assert res.exit_code == 2
    assert res.output.strip() == f"Error: no such file or directory: {tmp_path / 'missing.log'}"
    other = tmp_path / "notes.txt"
    other.write_text("x")
    res = run(other)
    assert res.exit_code == 1 and f"problem: {other}: unsupported file type .txt" in res.output
    bad_name = tmp_path / "abc.log"
    bad_name.write_bytes(b"")
    res = run(bad_name)
    assert res.exit_code == 2 and "Error: abc.log: not a segment file name" in res.output
    assert "Traceback" not in res.output
