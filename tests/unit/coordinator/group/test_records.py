"""`__consumer_offsets` record codecs and the group -> partition mapping."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.coordinator.group import records as rec
from strom.coordinator.partitioning import java_string_hashcode, kafka_abs, partition_for
from strom.protocol.errors import ProtocolError

# -- Java String.hashCode and Kafka's Utils.abs ---------------------------------------------


@pytest.mark.parametrize(("s", "expected"), [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),
    ("my-group", -1906497762),
    ("polygenelubricants", -(1 << 31)),  # the classic Integer.MIN_VALUE hash
    ("\u00e9t\u00e9", 227742),  # non-ASCII: UTF-16 code units, not UTF-8 bytes
    ("\U0001F600", 1772899),  # a surrogate pair counts as two units
])
def test_java_string_hashcode(s: str, expected: int) -> None:
    """Expected values printed by java.lang.String#hashCode (OpenJDK)."""
    assert java_string_hashcode(s) == expected


@pytest.mark.parametrize(("group", "partition"), [
    ("my-group", 12), ("polygenelubricants", 0), ("console-consumer-12345", 6), ("a", 47),
    ("\U0001F600", 49),
])
def test_partition_for_matches_kafka(group: str, partition: int) -> None:
    """Kafka's Utils.abs(groupId.hashCode()) % 50, as computed by the JDK."""
    assert partition_for(group, 50) == partition


def _reference_hash(s: str) -> int:
    h = 0
    for ch in s:
        cp = ord(ch)
        units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10),
                                            0xDC00 + ((cp - 0x10000) & 0x3FF)]
        for u in units:
            h = (h * 31 + u) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


@given(st.text(max_size=60))
def test_hashcode_matches_a_reference_and_partitions_are_in_range(s: str) -> None:
    assert java_string_hashcode(s) == _reference_hash(s)
    assert 0 <= partition_for(s, 50) < 50


def test_kafka_abs_maps_min_value_to_zero() -> None:
    assert kafka_abs(-(1 << 31)) == 0
    assert kafka_abs(-5) == 5
    assert partition_for("polygenelubricants", 50) == 0


# -- record formats -----------------------------------------------------------------------------


def test_offset_commit_record_is_kafkas_byte_layout() -> None:
    key, value = rec.offset_commit("g", "t", 3, 42, 7, "meta", 1000)
    # key: version 1, string group, string topic, int32 partition
    assert key == struct.pack(">h", 1) + b"\x00\x01g" + b"\x00\x01t" + struct.pack(">i", 3)
    # value v3: offset int64, leader epoch int32, metadata string, commit timestamp int64
    assert value == (struct.pack(">hqi", 3, 42, 7) + b"\x00\x04meta" + struct.pack(">q", 1000))
    decoded = rec.decode(key, value)
    assert decoded.type == rec.OFFSET_COMMIT
    assert decoded.key == {"group": "g", "topic": "t", "partition": 3}
    assert decoded.value is not None
    assert decoded.value["offset"] == 42 and decoded.value["leader_epoch"] == 7
    assert decoded.value["metadata"] == "meta" and decoded.value["commit_timestamp"] == 1000


def test_offset_commit_with_expiry_uses_version_1() -> None:
    key, value = rec.offset_commit("g", "t", 0, 5, -1, "", 1000, expire_ts=5000)
    assert value is not None
    assert struct.unpack_from(">h", value)[0] == 1
    decoded = rec.decode(key, value)
    assert decoded.value is not None and decoded.value["expire_timestamp"] == 5000
    assert decoded.value["leader_epoch"] == -1  # absent before v3: the default


def test_reads_older_and_flexible_offset_values() -> None:
    key = rec.encode_key(rec.OFFSET_COMMIT, {"group": "g", "topic": "t", "partition": 0})
    v0 = struct.pack(">hq", 0, 9) + b"\x00\x00" + struct.pack(">q", 77)
    assert rec.decode(key, v0).value == {"offset": 9, "leader_epoch": -1, "metadata": "",
                                         "commit_timestamp": 77, "expire_timestamp": -1}
    v4 = rec.encode_value(rec.OFFSET_COMMIT, {"offset": 9, "leader_epoch": 2, "metadata": "m",
                                              "commit_timestamp": 77}, version=4)
    # flexible: compact string (length+1) and an empty tagged-field section at the end
    assert v4 == struct.pack(">hqi", 4, 9, 2) + b"\x02m" + struct.pack(">q", 77) + b"\x00"
    assert rec.decode(key, v4).value["metadata"] == "m"


def test_group_metadata_roundtrip_and_tombstone() -> None:
    fields = {"protocol_type": "consumer", "generation": 3, "protocol": "range",
              "leader": "m1", "current_state_timestamp": 123, "members": [
                  {"member_id": "m1", "group_instance_id": "i1", "client_id": "c",
                   "client_host": "/1.2.3.4", "rebalance_timeout": 300, "session_timeout": 100,
                   "subscription": b"\x00\x01", "assignment": b"\x02"}]}
    key, value = rec.group_metadata("grp", fields)
    assert key == struct.pack(">h", 2) + b"\x00\x03grp"
    assert struct.unpack_from(">h", value or b"")[0] == 3
    decoded = rec.decode(key, value)
    assert decoded.value == fields
    tomb = rec.decode(*rec.group_tombstone("grp"))
    assert tomb.type == rec.GROUP_METADATA and tomb.value is None


def test_consumer_group_records_roundtrip() -> None:
    t = uuid.uuid4()
    cases = [
        (rec.CONSUMER_GROUP_METADATA, None, {"epoch": 5}),
        (rec.CONSUMER_GROUP_PARTITION_METADATA, None, {"topics": [
            {"topic_id": t, "topic_name": "x", "num_partitions": 4, "partition_metadata": []}]}),
        (rec.CONSUMER_GROUP_MEMBER_METADATA, "m", {
            "instance_id": None, "rack_id": "r", "client_id": "c", "client_host": "/h",
            "subscribed_topic_names": ["a", "b"], "subscribed_topic_regex": "^x.*",
            "rebalance_timeout": 300000, "server_assignor": None,
            "classic_member_metadata": None}),
        (rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, None, {"assignment_epoch": 5}),
        (rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, "m", {
            "topic_partitions": [{"topic_id": t, "partitions": [0, 2]}]}),
        (rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "m", {
            "member_epoch": 5, "previous_member_epoch": 4, "state": 1,
            "assigned_partitions": [{"topic_id": t, "partitions": [0]}],
            "partitions_pending_revocation": [{"topic_id": t, "partitions": [2]}]}),
    ]
    for record_type, member, fields in cases:
        key, value = rec.consumer_group_record(record_type, "grp", member, fields)
        decoded = rec.decode(key, value)
        assert decoded.type == record_type
        assert decoded.key["group_id"] == "grp"
        assert decoded.value == fields
        assert rec.decode(*rec.consumer_group_record(record_type, "grp", member, None)).value \
            is None


def test_tagged_classic_member_metadata_roundtrip() -> None:
    fields = {"instance_id": None, "rack_id": None, "client_id": "c", "client_host": "/h",
              "subscribed_topic_names": [], "subscribed_topic_regex": None,
              "rebalance_timeout": -1, "server_assignor": None,
              "classic_member_metadata": {"session_timeout": 45000, "supported_protocols": [
                  {"name": "range", "metadata": b"\x00\x03"}]}}
    key, value = rec.consumer_group_record(rec.CONSUMER_GROUP_MEMBER_METADATA, "g", "m", fields)
    assert rec.decode(key, value).value == fields


def test_unknown_and_broken_records() -> None:
    with pytest.raises(rec.UnknownRecordType):
        rec.decode(struct.pack(">h", 99) + b"\x00\x01g", b"\x00\x00")
    key = rec.encode_key(rec.OFFSET_COMMIT, {"group": "g", "topic": "t", "partition": 0})
    with pytest.raises(ProtocolError):
        rec.decode(key, struct.pack(">h", 9) + b"\x00" * 20)  # unknown value version
    with pytest.raises(ProtocolError):
        rec.decode(key, struct.pack(">hq", 3, 1))  # truncated


@given(group=st.text(max_size=20), topic=st.text(min_size=1, max_size=20),
       partition=st.integers(0, 2**31 - 1), offset=st.integers(-1, 2**63 - 1),
       epoch=st.integers(-1, 2**31 - 1), metadata=st.text(max_size=50),
       ts=st.integers(0, 2**62))
def test_offset_commit_roundtrip(group, topic, partition, offset, epoch, metadata, ts) -> None:
    decoded = rec.decode(*rec.offset_commit(group, topic, partition, offset, epoch, metadata, ts))
    assert decoded.key == {"group": group, "topic": topic, "partition": partition}
    assert decoded.value is not None
    assert (decoded.value["offset"], decoded.value["leader_epoch"], decoded.value["metadata"],
            decoded.value["commit_timestamp"]) == (offset, epoch, metadata, ts)
