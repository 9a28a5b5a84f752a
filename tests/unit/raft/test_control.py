"""Kafka's KRaft control records and control batches, byte for byte.

The expected batches were checked against Kafka 4.4.0's own MemoryRecordsBuilder (the same
records, offsets, epoch and timestamp give identical bytes)."""

from __future__ import annotations

import uuid

import pytest

from strom.raft.control import (
    ControlType,
    Endpoint,
    KRaftVersionRecord,
    LeaderChangeMessage,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    Voter,
    VotersRecord,
    build_control_batch,
    control_key,
    control_type,
    decode_control,
    decode_control_body,
    encode_control,
    encode_control_body,
    parse_control_batch,
)
from strom.record import (
    CONTROL_MASK,
    CorruptRecordError,
    Record,
    build_batch,
    control_batch,
    read_header,
)

VOTERS = VotersRecord((Voter(1, uuid.UUID(int=5), (Endpoint("CONTROLLER", "localhost", 9093),),
                             0, 1),))

# LeaderChangeMessage(leader 1, voters 1,2,3, granting 1,2) at offset 5, epoch 3, time 1000.
LEADER_CHANGE_BATCH = bytes.fromhex(
    "00000000000000050000005e0000000302704db3da00200000000000000000000003e800000000000003e8"
    "ffffffffffffffffffffffffffff00000001580000000800000002440000000000010400000001000000"
    "000200000000030003000000010000000002000000")
# A snapshot header batch: SnapshotHeader(1234), KRaftVersion(1), the voter set above; offset
# 0, epoch 7, time 77.
HEADER_BATCH = bytes.fromhex(
    "00000000000000000000009a0000000702a558b468002000000002000000000000004d000000000000004d"
    "ffffffffffffffffffffffffffff000000032a000000080000000316000000000000000004d200001e00"
    "000208000000050a000000010000820100000408000000066e00000200000001000000000000000000000000"
    "00000005020b434f4e54524f4c4c45520a6c6f63616c686f73742385000000000100000000")


def test_keys_are_version_0_and_kafkas_type_numbers() -> None:
    assert [t.value for t in ControlType] == [0, 1, 2, 3, 4, 5, 6]
    assert control_key(ControlType.LEADER_CHANGE) == b"\x00\x00\x00\x02"
    assert control_key(ControlType.KRAFT_VOTERS) == b"\x00\x00\x00\x06"
    assert encode_control(SnapshotFooterRecord())[0] == b"\x00\x00\x00\x04"


def test_values_in_the_flexible_encoding() -> None:
    # int16 version, fields, an empty tagged-field section per struct
    assert encode_control(SnapshotFooterRecord())[1] == bytes.fromhex("000000")
    assert encode_control(SnapshotHeaderRecord(1234))[1] == bytes.fromhex("0000" "00000000000004d2" "00")
    assert encode_control(KRaftVersionRecord(1))[1] == bytes.fromhex("0000" "0001" "00")
    assert encode_control(LeaderChangeMessage(1, (1, 2, 3), (1, 2)))[1] == bytes.fromhex(
        "0000" "00000001" "04" "0000000100" "0000000200" "0000000300"
        "03" "0000000100" "0000000200" "00")


@pytest.mark.parametrize("rec", [
    LeaderChangeMessage(3, (1, 2, 3), (3,)), SnapshotHeaderRecord(-1), SnapshotFooterRecord(),
    KRaftVersionRecord(0), VOTERS, VotersRecord(()),
])
def test_round_trip(rec) -> None:
    assert decode_control(*encode_control(rec)) == rec


def test_leader_change_batch_is_kafkas() -> None:
    batch = build_control_batch([LeaderChangeMessage(1, (1, 2, 3), (1, 2))], base_offset=5,
                                leader_epoch=3, timestamp=1000)
    assert batch == LEADER_CHANGE_BATCH
    h = read_header(batch)
    assert h.is_control and not h.is_transactional and h.attributes == CONTROL_MASK
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
    parsed = parse_control_batch(batch)
    assert (parsed.base_offset, parsed.leader_epoch) == (5, 3)
    assert parsed.records == (LeaderChangeMessage(1, (1, 2, 3), (1, 2)),)


def test_snapshot_header_batch_is_kafkas() -> None:
    records = [SnapshotHeaderRecord(1234), KRaftVersionRecord(1), VOTERS]
    batch = build_control_batch(records, base_offset=0, leader_epoch=7, timestamp=77)
    assert batch == HEADER_BATCH
    assert parse_control_batch(batch).records == tuple(records)
    assert read_header(batch).last_offset == 2


def test_body_form_matches_the_typed_form() -> None:
    body = {"leader_id": 1, "voters": [{"voter_id": 1}, {"voter_id": 2}],
            "granting_voters": [{"voter_id": 1}]}
    pair = encode_control_body(ControlType.LEADER_CHANGE, body)
    assert pair == encode_control(LeaderChangeMessage(1, (1, 2), (1,)))
    assert decode_control_body(*pair) == (ControlType.LEADER_CHANGE, {"version": 0, **body})
    with pytest.raises(ValueError, match="not a KRaft control record"):
        encode_control_body(ControlType.COMMIT, {})


def test_bad_control_records_are_corruption() -> None:
    with pytest.raises(CorruptRecordError, match="key of 2 bytes"):
        control_type(b"\x00\x00")
    with pytest.raises(CorruptRecordError, match="negative"):
        control_type(b"\xff\xff\x00\x02")
    assert control_type(b"\x00\x01\x00\x03") == 3  # a newer key version reads as version 0
    with pytest.raises(CorruptRecordError, match="type 1 is not a KRaft"):
        decode_control(control_key(ControlType.COMMIT), b"\x00\x00\x00\x00\x00\x00")
    with pytest.raises(CorruptRecordError, match="type 9 is not"):
        decode_control(b"\x00\x00\x00\x09", b"")
    with pytest.raises(CorruptRecordError, match="without a value"):
        decode_control(control_key(ControlType.SNAPSHOT_HEADER), None)
    with pytest.raises(CorruptRecordError, match="bad SNAPSHOT_HEADER"):
        decode_control(control_key(ControlType.SNAPSHOT_HEADER), b"\x00\x00\x01")


def test_batches_that_are_not_kraft_control_batches_are_refused() -> None:
    data = build_batch([Record(0, 1, None, b"x")], partition_leader_epoch=1)
    with pytest.raises(CorruptRecordError, match="not a control batch"):
        parse_control_batch(data)
    marker = control_batch(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                           timestamp=1)
    with pytest.raises(CorruptRecordError, match="not a KRaft control record"):
        parse_control_batch(marker)
    damaged = bytearray(LEADER_CHANGE_BATCH)
    damaged[-2] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        parse_control_batch(bytes(damaged))
    with pytest.raises(CorruptRecordError, match="claims"):
        parse_control_batch(LEADER_CHANGE_BATCH[:-1])


def test_control_batches_need_records_and_an_epoch() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_control_batch([], base_offset=0, leader_epoch=0, timestamp=0)
    with pytest.raises(ValueError, match="leader epoch"):
        build_control_batch([SnapshotFooterRecord()], base_offset=0, leader_epoch=-1, timestamp=0)
