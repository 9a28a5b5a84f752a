"""`__share_group_state` records against bytes Kafka 4.4's own classes wrote.

The hex below was printed by a small Java program compiled against the Kafka 4.4.0 jars: it
built each record with the generated ShareSnapshotKey/Value and ShareUpdateKey/Value classes
and serialized it with ShareCoordinatorRecordSerde (the serde Kafka's share coordinator writes
its log with).
"""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.partitioning import partition_for
from strom.coordinator.share import records as rec
from strom.coordinator.share.state import SharePartitionKey, StateBatch

TOPIC_ID = uuid.UUID("01234567-89ab-cdef-0fed-cba987654321")
KEY = SharePartitionKey("g1", TOPIC_ID, 7)

KAFKA_SNAPSHOT_KEY = "0000000267310123456789abcdef0fedcba98765432100000007"
KAFKA_SNAPSHOT_VALUE = (
    "000000000003000000020000000500000000000000640000018bcfe568000000018bcfe5687b0300000000"
    "00000064000000000000006d02000100000000000000006e000000000000006e0000030001000400000004")
KAFKA_SNAPSHOT_DEFAULT_DCC = (
    "0000000000000000000000000000ffffffffffffffff000000000000000100000000000000010100")
KAFKA_UPDATE_KEY = "0001000267310123456789abcdef0fedcba98765432100000007"
KAFKA_UPDATE_VALUE = "00000000000300000005ffffffffffffffff02000000000000006f00000000000000780400020000"

SNAPSHOT = rec.ShareSnapshot(snapshot_epoch=3, state_epoch=2, leader_epoch=5, start_offset=100,
                             delivery_complete_count=4, create_timestamp=1700000000000,
                             write_timestamp=1700000000123,
                             batches=(StateBatch(100, 109, 2, 1), StateBatch(110, 110, 0, 3)))
UPDATE = rec.ShareUpdate(snapshot_epoch=3, leader_epoch=5, start_offset=-1,
                         delivery_complete_count=-1, batches=(StateBatch(111, 120, 4, 2),))


def test_snapshot_bytes_match_kafka() -> None:
    key, value = rec.snapshot_record(KEY, SNAPSHOT)
    assert key.hex() == KAFKA_SNAPSHOT_KEY
    assert value.hex() == KAFKA_SNAPSHOT_VALUE


def test_default_delivery_complete_count_is_not_written() -> None:
    value = rec.encode_snapshot(rec.ShareSnapshot(0, 0, 0, -1, -1, 1, 1))
    assert value.hex() == KAFKA_SNAPSHOT_DEFAULT_DCC


def test_update_bytes_match_kafka() -> None:
    key, value = rec.update_record(KEY, UPDATE)
    assert key.hex() == KAFKA_UPDATE_KEY
    assert value.hex() == KAFKA_UPDATE_VALUE


@pytest.mark.parametrize("key,value,expected", [
    (KAFKA_SNAPSHOT_KEY, KAFKA_SNAPSHOT_VALUE, rec.ShareRecord(rec.SHARE_SNAPSHOT, KEY, SNAPSHOT)),
    (KAFKA_UPDATE_KEY, KAFKA_UPDATE_VALUE, rec.ShareRecord(rec.SHARE_UPDATE, KEY, UPDATE)),
    (KAFKA_SNAPSHOT_KEY, None, rec.ShareRecord(rec.SHARE_SNAPSHOT, KEY, None)),
])
def test_decodes_kafka_records(key: str, value: str | None, expected: rec.ShareRecord) -> None:
    assert rec.decode(bytes.fromhex(key), None if value is None else bytes.fromhex(value)) \
        == expected


def test_tombstone_is_a_snapshot_key_without_value() -> None:
    assert rec.tombstone(KEY) == (bytes.fromhex(KAFKA_SNAPSHOT_KEY), None)


def test_unknown_record_type_is_reported() -> None:
    with pytest.raises(rec.UnknownShareRecordType):
        rec.decode(b"\x00\x05" + bytes.fromhex(KAFKA_SNAPSHOT_KEY)[2:], None)


def test_coordinator_key_and_partition_as_kafka() -> None:
    # Kafka: SharePartitionKey.asCoordinatorKey() and Utils.abs(hashCode) % 50
    assert KEY.coordinator_key() == "g1:ASNFZ4mrze8P7cuph2VDIQ:7"
    assert partition_for(KEY.coordinator_key(), 50) == 28


def test_strom_redelivery_delay_rides_in_a_tagged_field_kafka_skips() -> None:
    """`not_before_ms` (Strom's redelivery delay) round-trips as a tagged field of StateBatch;
    unset it is not written (the bytes above are Kafka's), and the value's untagged layout is
    unchanged, so a Kafka broker reading the record skips the unknown tag."""
    held = rec.ShareUpdate(3, 5, -1, -1, (StateBatch(111, 120, 0, 2, 1_700_000_060_000),
                                          StateBatch(121, 125, 4, 1)))
    key, value = rec.update_record(KEY, held)
    assert rec.decode(key, value) == rec.ShareRecord(rec.SHARE_UPDATE, KEY, held)
    plain = rec.encode_update(rec.ShareUpdate(3, 5, -1, -1, (StateBatch(111, 120, 0, 2),
                                                             StateBatch(121, 125, 4, 1))))
    # only the first batch's tag section differs: one tag instead of none
    tag = (bytes.fromhex("01") + rec.p.write_uvarint(rec.NOT_BEFORE_TAG) + b"\x08"
           + (1_700_000_060_000).to_bytes(8, "big"))
    assert value == plain.replace(bytes.fromhex("0002" "00"), bytes.fromhex("0002") + tag, 1)
