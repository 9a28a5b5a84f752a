"""`strom dump-log` on segment files built with `strom.record.build_batch`, and on partition
directories written by the storage layer (active and preallocated indexes, internal topics)."""

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


# ---------------------------------------------------------------- directories the storage layer wrote

KAFKA_INDEX_BYTES = 10 * 1024 * 1024  # segment.index.bytes: what Kafka preallocates


def storage_log(directory: Path, topic: str, **config):
    """A partition log written by Strom's storage layer, left open (as a running broker has it)."""
    import uuid

    from strom.storage.config import LogConfig
    from strom.storage.log import PartitionLog

    return PartitionLog(directory, topic, 0, uuid.uuid4(), LogConfig(**config))


def append(log, records: list[tuple[bytes | None, bytes | None]], ts: int = TS) -> None:
    start = log.log_end_offset
    batch = build_batch([Record(start + i, ts + i, k, v) for i, (k, v) in enumerate(records)],
                        base_offset=start)
    log.append(bytearray(batch), leader_epoch=0, now_ms=0)


def index_entries(res) -> list[dict]:
    return [o for o in json_lines(res.output) if o["file"].endswith((".index", ".timeindex"))]


def test_active_and_preallocated_indexes_of_a_running_log(tmp_path):
    """Kafka preallocates an active segment's .index and .timeindex (zeros past the last entry)
    and leaves them so after an unclean stop; a just-rolled segment's are all zeros. Their
    entries end at the first zero entry, and an all-zero index has none: no phantom
    `offset: <base> position: 0` entry, checked against an empty log as a problem."""
    part = tmp_path / "orders-0"
    log = storage_log(part, "orders", segment_bytes=3000, index_interval_bytes=100)
    for i in range(12):
        append(log, [(b"k", b"v" * 150)] * 2, ts=TS + 10 * i)
    last = log.segments[-1]
    assert len(log.segments) > 1 and len(last.offset_index) > 0
    rolled = log.roll()  # a new, empty active segment
    log.flush(sync=False)  # the open log's index tails reach the files, as on a broker
    assert rolled.log_path.stat().st_size == 0
    res = run(part, "--format", "json")
    assert res.exit_code == 0, res.output
    exact = index_entries(res)
    assert exact and not [o for o in json_lines(res.output) if "problem" in o]

    # the files as Kafka leaves them: the last two segments' indexes preallocated
    for seg in (last, rolled):
        for path, size in ((seg.index_path, KAFKA_INDEX_BYTES),
                           (seg.timeindex_path, KAFKA_INDEX_BYTES // 12 * 12)):
            with path.open("ab") as f:
                f.truncate(size)
    res = run(part, "--format", "json")
    assert res.exit_code == 0, res.output
    assert not [o for o in json_lines(res.output) if "problem" in o]
    assert index_entries(res) == exact
    for path in (rolled.index_path, rolled.timeindex_path):
        text = run(path)
        assert text.exit_code == 0 and text.output.splitlines() == [f"Dumping {path}"]
    log.close()


def test_a_lone_zero_first_entry_is_still_an_entry(tmp_path):
    """Only an all-zero file is taken for preallocated space from its first entry on."""
    tidx = tmp_path / seg_name(BASE, ".timeindex")
    tidx.write_bytes(struct.pack(">qi", 0, 0) + struct.pack(">qi", TS, 3))
    res = run(tidx)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[1:] == ["timestamp: 0 offset: 100", f"timestamp: {TS} offset: 103"]


def share_key(group: str, topic_id, partition: int):
    from strom.coordinator.share.state import SharePartitionKey

    return SharePartitionKey(group, topic_id, partition)


def test_share_group_state_records_are_decoded(tmp_path):
    """A `__share_group_state` partition written by the storage layer: a snapshot, an update,
    a tombstone and a record type of a newer Kafka, printed as kafka-dump-log's
    --share-group-state-decoder prints them."""
    import uuid

    from strom.coordinator.share import records as sr
    from strom.coordinator.share.state import StateBatch

    topic_id = uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF)
    kafka_topic_id = "ASNFZ4mrze8BI0VniavN7w"  # Kafka's base64 text of that id
    key = share_key("billing", topic_id, 3)
    snapshot = sr.snapshot_record(key, sr.ShareSnapshot(
        snapshot_epoch=2, state_epoch=1, leader_epoch=5, start_offset=40,
        delivery_complete_count=1, create_timestamp=TS, write_timestamp=TS + 1,
        batches=(StateBatch(40, 44, 2, 1), StateBatch(45, 45, 0, 3, not_before_ms=TS + 9))))
    update = sr.update_record(key, sr.ShareUpdate(
        snapshot_epoch=2, leader_epoch=5, start_offset=-1, batches=(StateBatch(46, 47, 4, 5),)))
    part = tmp_path / "__share_group_state-7"
    log = storage_log(part, "__share_group_state")
    append(log, [snapshot, update, sr.tombstone(key), (struct.pack(">h", 9) + b"x", b"\0\0")])
    log.flush(sync=False)

    res = run(part, "--print-data", "--format", "json")  # decoded: the directory is the topic's
    assert res.exit_code == 0, res.output
    records = [r for o in json_lines(res.output) if "records" in o for r in o["records"]]
    key_json = {"type": "0", "data": {"groupId": "billing", "topicId": kafka_topic_id,
                                      "partition": 3}}
    assert [r["key"] for r in records[:3]] == [
        key_json, {**key_json, "type": "1"}, key_json]
    assert records[0]["payload"] == {"version": "0", "data": {
        "snapshotEpoch": 2, "stateEpoch": 1, "leaderEpoch": 5, "startOffset": 40,
        "deliveryCompleteCount": 1, "createTimestamp": TS, "writeTimestamp": TS + 1,
        "stateBatches": [
            {"firstOffset": 40, "lastOffset": 44, "deliveryState": 2, "deliveryCount": 1},
            {"firstOffset": 45, "lastOffset": 45, "deliveryState": 0, "deliveryCount": 3,
             "notBeforeMs": TS + 9}]}}  # Strom's own tagged field, shown only when set
    assert records[1]["payload"] == {"version": "0", "data": {
        "snapshotEpoch": 2, "leaderEpoch": 5, "startOffset": -1, "deliveryCompleteCount": -1,
        "stateBatches": [{"firstOffset": 46, "lastOffset": 47, "deliveryState": 4,
                          "deliveryCount": 5}]}}
    assert records[2]["payload"] == "<DELETE>"
    assert records[3]["key"] == "Unknown record type 9 at offset 3, skipping."
    assert "payload" not in records[3]

    # a copy elsewhere needs the option, as with kafka-dump-log; text lines carry compact JSON
    copy = tmp_path / "copy" / seg_name(0, ".log")
    copy.parent.mkdir()
    copy.write_bytes((part / seg_name(0, ".log")).read_bytes())
    raw = run(copy, "--print-data")
    assert raw.exit_code == 0 and '"groupId"' not in raw.output
    res = run(copy, "--share-group-state-decoder")
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if line.startswith("| ")]
    assert lines[0].endswith(f' key: {{"type":"0","data":{{"groupId":"billing","topicId":'
                             f'"{kafka_topic_id}","partition":3}}}} payload: {{"version":"0",'
                             '"data":{"snapshotEpoch":2,"stateEpoch":1,"leaderEpoch":5,'
                             '"startOffset":40,"deliveryCompleteCount":1,'
                             f'"createTimestamp":{TS},"writeTimestamp":{TS + 1},'
                             '"stateBatches":[{"firstOffset":40,"lastOffset":44,'
                             '"deliveryState":2,"deliveryCount":1},{"firstOffset":45,'
                             '"lastOffset":45,"deliveryState":0,"deliveryCount":3,'
                             f'"notBeforeMs":{TS + 9}}}]}}}}'), lines[0]
    assert lines[2].endswith("payload: <DELETE>")
    assert lines[3].endswith("key: Unknown record type 9 at offset 3, skipping.")
    log.close()


def test_offsets_and_transaction_log_records_are_decoded(tmp_path):
    from strom.coordinator.group import records as gr
    from strom.coordinator.transaction import records as tr

    offsets = tmp_path / "__consumer_offsets-0"
    log = storage_log(offsets, "__consumer_offsets")
    append(log, [gr.offset_commit("billing", "orders", 2, 17, 4, "m", TS),
                 gr.offset_tombstone("billing", "orders", 2)])
    log.flush(sync=False)
    res = run(offsets, "--print-data", "--format", "json")
    assert res.exit_code == 0, res.output
    commit, tombstone = [r for o in json_lines(res.output) if "records" in o for r in o["records"]]
    assert commit["key"] == {"type": "1", "data": {"group": "billing", "topic": "orders",
                                                   "partition": 2}}
    assert commit["payload"] == {"version": "3", "data": {
        "offset": 17, "leaderEpoch": 4, "metadata": "m", "commitTimestamp": TS}}
    assert tombstone["payload"] == "<DELETE>"
    log.close()

    txns = tmp_path / "elsewhere" / "copy-0"
    log = storage_log(txns, "copy")
    value = tr.encode_value({"producer_id": 8, "producer_epoch": 1, "transaction_timeout_ms": 60000,
                             "transaction_status": 1, "transaction_partitions":
                                 tr.partitions_field({("orders", 0), ("orders", 2)}),
                             "transaction_last_update_timestamp_ms": TS,
                             "transaction_start_timestamp_ms": TS - 5})
    append(log, [(tr.encode_key("tx-1"), value), (b"\x00", b"")])
    log.flush(sync=False)
    res = run(txns, "--transaction-log-decoder", "--format", "json")
    assert res.exit_code == 0, res.output
    entry, broken = [r for o in json_lines(res.output) if "records" in o for r in o["records"]]
    assert entry["key"] == {"type": "0", "data": {"transactionalId": "tx-1"}}
    assert entry["payload"] == {"version": "0", "data": {
        "producerId": 8, "producerEpoch": 1, "transactionTimeoutMs": 60000,
        "transactionStatus": 1,
        "transactionPartitions": [{"topic": "orders", "partitionIds": [0, 2]}],
        "transactionLastUpdateTimestampMs": TS, "transactionStartTimestampMs": TS - 5}}
    # (version 0 is not flexible: no tagged fields, as in Kafka's TransactionLogValue)
    assert broken["key"].startswith("Error at offset 1, skipping.") and "payload" not in broken
    log.close()


def test_decoder_options_are_exclusive(tmp_path):
    path = tmp_path / seg_name(0, ".log")
    path.write_bytes(b"")
    res = run(path, "--offsets-decoder", "--share-group-state-decoder")
    assert res.exit_code == 2 and "choose one of --offsets-decoder" in res.output
