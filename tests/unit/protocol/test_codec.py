"""The generic codec against kio's serializer, for every schema kio has, plus hostile input."""

from __future__ import annotations

import contextlib
import datetime
import io
import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer
from kio.static.primitive import Records

from strom.protocol import primitives as p
from strom.protocol.codec import (
    Codec,
    ProtocolError,
    Struct,
    UnsupportedVersion,
    entity_codec,
    precompile,
    request_codec,
    response_codec,
    supported_versions,
)
from strom.protocol.schema import FieldSchema, StructSchema, api_keys, kio_entity, plain_value

ALL = [
    (key, version, side)
    for key in api_keys()
    for version in range(supported_versions(key)[0], supported_versions(key)[1] + 1)
    for side in ("request", "response")
]


# kio registers strategies for its phantom types, except for record batches.
st.register_type_strategy(Records, st.binary(max_size=40))


def codec_for(key: int, version: int, side: str) -> Codec:
    return (request_codec if side == "request" else response_codec)(key, version)


# ---------------------------------------------------------------------------------------------
# A cheap deterministic generator of kio entities (all types, edge values, nulls, nesting).
# ---------------------------------------------------------------------------------------------

_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_KIO_ERRORS = list(KioErrorCode)


def _scalar(f: FieldSchema, rnd: random.Random, nullable: bool):
    kind, kafka_type = f.kind, f.kafka_type
    if kafka_type == "error_code":
        return rnd.choice(_KIO_ERRORS)
    if kafka_type == "timedelta_i32":
        return datetime.timedelta(milliseconds=rnd.randint(-(2**31), 2**31 - 1))
    if kafka_type == "timedelta_i64":
        return datetime.timedelta(milliseconds=rnd.randint(-(10**12), 10**12))
    if kafka_type == "datetime_i64":
        if nullable and rnd.random() < 0.3:
            return None
        return datetime.datetime.fromtimestamp(rnd.randint(0, 4 * 10**12) / 1000, tz=datetime.UTC)
    if kind in _BITS:
        b = _BITS[kind]
        lo, hi = -(2 ** (b - 1)), 2 ** (b - 1) - 1
        return rnd.choice([lo, hi, 0, -1, rnd.randint(lo, hi)])
    if kind == "uint16":
        return rnd.randint(0, 65535)
    if kind == "float64":
        return rnd.choice([0.0, -1.5, 1e300, rnd.random()])
    if kind == "bool":
        return rnd.random() < 0.5
    if kind == "uuid":
        # kio writes a tagged zero UUID that differs from a None default; Kafka (and we) treat
        # them alike, so tagged UUIDs are never the explicit zero UUID here.
        choices = [None, uuid.UUID(int=rnd.getrandbits(128))]
        return rnd.choice(choices if f.tag is not None else [*choices, p.ZERO_UUID])
    if kind == "string":
        if nullable and rnd.random() < 0.3:
            return None
        return rnd.choice(["", "topic-1", "ünïcødé ✓ \U0001f600", "x" * rnd.randint(0, 200)])
    if kind in ("bytes", "records"):
        if nullable and rnd.random() < 0.3:
            return None
        return rnd.randbytes(rnd.choice([0, 1, 7, 300]))
    raise AssertionError(kind)


def _field(f: FieldSchema, rnd: random.Random, depth: int):
    if f.array:
        if f.nullable and rnd.random() < 0.25:
            return None
        n = rnd.randint(0, 3 if depth < 3 else 1)
        if f.kind == "struct":
            return tuple(make_entity(f.struct, rnd, depth + 1) for _ in range(n))
        return tuple(_scalar(f, rnd, False) for _ in range(n))
    if f.kind == "struct":
        if f.nullable and rnd.random() < 0.3:
            return None
        return make_entity(f.struct, rnd, depth + 1)
    return _scalar(f, rnd, f.nullable)


def make_entity(schema: StructSchema, rnd: random.Random, depth: int = 0):
    return schema.source(**{f.name: _field(f, rnd, depth) for f in schema.all_fields()
                            if not f.strom})  # Strom's own fields are not kio's


def kio_bytes(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def expected(schema: StructSchema, entity) -> dict:
    """What our decoder should produce for a kio entity, as plain dicts."""

    def one(f: FieldSchema, x):
        if f.kind == "struct":
            return expected(f.struct, x)
        if x is None and f.kind == "uuid":
            return p.ZERO_UUID
        return plain_value(x)

    out = {}
    for f in schema.all_fields():
        if f.strom:  # Strom's own tagged field: kio never writes it, decoding gives the default
            out[f.name] = f.default
            continue
        v = getattr(entity, f.name)
        if v is None and not f.array and f.kafka_type == "datetime_i64":
            out[f.name] = -1  # Kafka's null timestamp
        elif v is None and not f.array and f.kind == "uuid":
            out[f.name] = p.ZERO_UUID
        elif v is None:
            out[f.name] = None
        elif f.array:
            out[f.name] = [one(f, x) for x in v]
        else:
            out[f.name] = one(f, v)
    return out


def plain(v):
    if isinstance(v, Struct):
        return {k: plain(x) for k, x in v.__dict__.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, memoryview):
        return bytes(v)
    return v


def check_against_kio(codec: Codec, entity) -> None:
    wire = kio_bytes(entity)
    value, end = codec.decode(wire)
    assert end == len(wire)
    assert plain(value) == expected(codec.schema, entity)
    assert codec.encode(value) == wire  # from our own Struct
    assert codec.encode(entity) == wire  # from kio's entity (timedelta, enums, tuples...)
    out: list = [b"prefix"]
    codec.encode_into(plain(value), out)  # from plain dicts and lists
    assert b"".join(out[1:]) == wire


# ---------------------------------------------------------------------------------------------
# Every schema
# ---------------------------------------------------------------------------------------------


def test_all_schemas_are_covered():
    assert len(ALL) == 604  # kio 0.6.5: 302 versions, both sides
    assert {k for k, _, _ in ALL} >= {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 92}


@pytest.mark.parametrize(("key", "version", "side"), ALL)
def test_roundtrip_matches_kio(key, version, side):
    codec = codec_for(key, version, side)
    for seed in range(3):
        entity = make_entity(codec.schema, random.Random(f"{key}/{version}/{side}/{seed}"))
        check_against_kio(codec, entity)


@pytest.mark.parametrize(("key", "version", "side"), ALL)
def test_missing_fields_take_defaults_and_extra_keys_are_ignored(key, version, side):
    codec = codec_for(key, version, side)
    wire = codec.encode({"no_such_field": 123})
    assert wire == codec.encode(Struct())
    value, end = codec.decode(wire)
    assert end == len(wire)
    assert set(value.__dict__) == {f.name for f in codec.schema.all_fields()}
    for f in codec.schema.all_fields():
        assert plain(getattr(value, f.name)) == f.default, f.name


# Hypothesis's own kio strategies on the APIs that matter most (older and flexible versions).
_SELECTED = [
    (0, 3),
    (0, 13),
    (1, 4),
    (1, 18),
    (3, 0),
    (3, 8),
    (3, 13),
    (18, 3),
    (11, 9),
    (8, 9),
    (68, 1),
    (62, 4),
]


@pytest.mark.parametrize(("key", "version"), _SELECTED)
@pytest.mark.parametrize("side", ["request", "response"])
def test_hypothesis_values_match_kio(key, version, side):
    codec = codec_for(key, version, side)
    entity_type = kio_entity(key, version, side)

    @settings(
        max_examples=10,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.from_type(entity_type))
    def run(entity):
        wire = kio_bytes(entity)
        value, end = codec.decode(wire)
        assert end == len(wire)
        assert plain(value) == expected(codec.schema, entity)
        reencoded = codec.encode(value)
        if reencoded != wire:
            # Only allowed difference: kio writes tagged fields whose value equals the default
            # in another form (e.g. an explicit zero UUID); the meaning must be the same.
            again, _ = codec.decode(reencoded)
            assert plain(again) == plain(value)

    run()


# ---------------------------------------------------------------------------------------------
# Tagged fields
# ---------------------------------------------------------------------------------------------


def test_unknown_tagged_fields_are_skipped_at_top_level_and_nested():
    codec = request_codec(3, 12)  # Metadata v12: topics[{topic_id, name, tags}], 2 bools, tags
    tid = uuid.UUID(int=7)
    unknown = p.write_tagged_fields({5: b"hello", 900: b"\x01\x02"})
    wire = (
        b"\x02"  # one topic
        + tid.bytes
        + p.write_compact_nullable_string("t")
        + unknown  # nested struct's tags
        + b"\x01\x00"
        + unknown  # top-level tags
    )
    value, end = codec.decode(wire)
    assert end == len(wire)
    assert plain(value) == {
        "topics": [{"topic_id": tid, "name": "t"}],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }
    # Re-encoding drops the unknown tags.
    assert codec.encode(value) == wire.replace(unknown, b"\x00")


def test_known_tagged_field_is_decoded_and_defaults_when_absent():
    codec = request_codec(1, 12)  # Fetch v12: cluster_id is tag 0 (nullable string)
    base = {"max_wait": 500, "min_bytes": 1, "topics": [], "forgotten_topics_data": []}
    without = codec.encode(base)
    assert without.endswith(b"\x00")
    assert codec.decode(without)[0].cluster_id is None

    with_tag = codec.encode({**base, "cluster_id": "abc"})
    assert with_tag.endswith(p.write_tagged_fields({0: p.write_compact_nullable_string("abc")}))
    assert codec.decode(with_tag)[0].cluster_id == "abc"

    # Equal to the default (None): not written.
    assert codec.encode({**base, "cluster_id": None}) == without

    # A known tag next to unknown ones, in a tagged section we build by hand.
    tags = p.write_tagged_fields({0: p.write_compact_nullable_string("xy"), 77: b"zz"})
    value, end = codec.decode(without[:-1] + tags)
    assert (value.cluster_id, end) == ("xy", len(without) - 1 + len(tags))


def test_tagged_struct_field_written_only_when_not_default():
    codec = response_codec(1, 12)  # PartitionData has tagged structs (diverging_epoch, ...)
    part = {"partition_index": 0, "records": b"abc"}
    resp = {"responses": [{"topic": "t", "partitions": [part]}]}
    plain_wire = codec.encode(resp)
    value = codec.decode(plain_wire)[0]
    partition = value.responses[0].partitions[0]
    assert partition.diverging_epoch == Struct(epoch=-1, end_offset=-1)
    assert partition.current_leader == Struct(leader_id=-1, leader_epoch=-1)
    assert bytes(partition.records) == b"abc"
    # Explicit defaults change nothing; a non-default value adds a tag.
    same = {**part, "diverging_epoch": {"epoch": -1, "end_offset": -1}}
    assert codec.encode({"responses": [{"topic": "t", "partitions": [same]}]}) == plain_wire
    changed = {**part, "diverging_epoch": {"epoch": 3}}
    wire = codec.encode({"responses": [{"topic": "t", "partitions": [changed]}]})
    assert len(wire) > len(plain_wire)
    got = codec.decode(wire)[0].responses[0].partitions[0].diverging_epoch
    assert got == Struct(epoch=3, end_offset=-1)


def test_tagged_defaults_are_private_copies():
    codec = response_codec(1, 12)
    wire = codec.encode({"responses": [{"topic": "t", "partitions": [{}, {}]}]})
    a, b = codec.decode(wire)[0].responses[0].partitions
    a.diverging_epoch.epoch = 99
    assert b.diverging_epoch.epoch == -1
    assert codec.decode(wire)[0].responses[0].partitions[0].diverging_epoch.epoch == -1


# ---------------------------------------------------------------------------------------------
# Value model details
# ---------------------------------------------------------------------------------------------


def test_records_are_zero_copy_views():
    codec = request_codec(0, 9)
    batch = b"R" * 1000
    req = {
        "acks": -1,
        "timeout": 100,
        "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch}, {"index": 1}]}
        ],
    }
    wire = bytearray(codec.encode(req))
    value, _ = codec.decode(wire)
    records = value.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is wire and bytes(records) == batch
    assert value.topic_data[0].partition_data[1].records is None
    # Encoding appends the very buffer (no copy) for writelines.
    out: list = []
    codec.encode_into(value, out)
    assert any(piece is records for piece in out)
    assert b"".join(out) == bytes(wire)


def test_durations_timestamps_and_enums_accept_python_types():
    codec = response_codec(0, 9)
    ts = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    ms = int(ts.timestamp() * 1000)
    as_ints = {
        "throttle_time": 1500,
        "responses": [
            {
                "name": "t",
                "partition_responses": [{"index": 1, "error_code": 6, "log_append_time": ms}],
            }
        ],
    }
    as_types = {
        "throttle_time": datetime.timedelta(seconds=1.5),
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {
                        "index": 1,
                        "error_code": KioErrorCode.not_leader_or_follower,
                        "log_append_time": ts,
                    }
                ],
            }
        ],
    }
    assert codec.encode(as_ints) == codec.encode(as_types)
    value = codec.decode(codec.encode(as_types))[0]
    assert value.throttle_time == 1500
    assert value.responses[0].partition_responses[0].log_append_time == ms
    assert type(value.responses[0].partition_responses[0].error_code) is int
    # Nullable timestamp: None is Kafka's -1.
    none = {"responses": [{"name": "t", "partition_responses": [{"log_append_time": None}]}]}
    assert (
        codec.decode(codec.encode(none))[0].responses[0].partition_responses[0].log_append_time
        == -1
    )


def test_encodes_from_objects_with_attributes():
    class Broker:
        node_id = 1
        host = "h"
        port = 9092
        rack = None

    codec = response_codec(3, 12)
    as_obj = codec.encode({"brokers": [Broker()], "topics": []})
    as_dict = codec.encode({"brokers": [{"node_id": 1, "host": "h", "port": 9092}], "topics": []})
    assert as_obj == as_dict


def test_codecs_are_cached_and_describe_themselves():
    assert request_codec(3, 12) is request_codec(3, 12)
    c = response_codec(18, 3)
    assert (c.api_key, c.version, c.side, c.flexible, c.header_version) == (
        18,
        3,
        "response",
        True,
        0,
    )
    assert request_codec(18, 3).header_version == 2
    assert request_codec(3, 8).header_version == 1
    assert response_codec(3, 8).header_version == 0
    assert response_codec(3, 9).header_version == 1


def test_unsupported_versions():
    with pytest.raises(UnsupportedVersion) as info:
        request_codec(0, 2)  # Produce v0-2 were removed in Kafka 4
    assert (info.value.api_key, info.value.version) == (0, 2)
    with pytest.raises(UnsupportedVersion):
        response_codec(3, 99)
    with pytest.raises(UnsupportedVersion):
        request_codec(4, 0)
    with pytest.raises(UnsupportedVersion):
        supported_versions(4)
    assert supported_versions(0) == (3, 13)
    assert supported_versions(18) == (0, 4)


# ---------------------------------------------------------------------------------------------
# Encoding errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "version", "value"),
    [
        (1, 12, {"topics": None}),  # non-nullable array
        (3, 12, {"topics": [{"name": 5}]}),  # not a string
        (3, 12, {"topics": [{"topic_id": "x"}]}),  # not a UUID
        (3, 12, {"allow_auto_topic_creation": 1, "topics": [None]}),  # null struct
        (3, 12, {"topics": 5}),  # not a sequence
        (3, 4, {"topics": [{"name": None}]}),  # null for a non-nullable legacy string
        (0, 9, {"topic_data": [{"partition_data": [{"records": "text"}]}]}),  # not bytes
    ],
)
def test_bad_values_raise_protocol_error_and_leave_output_untouched(key, version, value):
    codec = request_codec(key, version)
    out = [b"keep"]
    with pytest.raises(ProtocolError):
        codec.encode_into(value, out)
    assert out == [b"keep"]


def test_out_of_range_ints_and_long_legacy_strings_raise():
    with pytest.raises(ProtocolError):
        request_codec(1, 12).encode({"max_wait": 2**40})
    with pytest.raises(ProtocolError):
        request_codec(1, 12).encode({"isolation_level": 128})
    with pytest.raises(ProtocolError):
        response_codec(3, 8).encode({"brokers": [{"host": "h" * 40000}], "topics": []})


# ---------------------------------------------------------------------------------------------
# Hostile input: only ProtocolError, fast, no huge allocations
# ---------------------------------------------------------------------------------------------


def _decode_or_protocol_error(codec: Codec, data) -> None:
    with contextlib.suppress(ProtocolError):
        codec.decode(data)


@pytest.mark.parametrize(("key", "version", "side"), ALL)
def test_truncated_and_mutated_input_only_raises_protocol_error(key, version, side):
    codec = codec_for(key, version, side)
    rnd = random.Random(f"fuzz/{key}/{version}/{side}")
    wire = kio_bytes(make_entity(codec.schema, rnd))
    if not wire:  # an empty message (e.g. ApiVersions v0 request)
        assert codec.decode(b"") == (Struct(), 0)
        return
    cuts = sorted(rnd.sample(range(len(wire)), min(len(wire), 25)))
    for cut in cuts:
        with pytest.raises(ProtocolError):
            codec.decode(wire[:cut])
    for _ in range(25):
        data = bytearray(wire)
        for _ in range(rnd.randint(1, 4)):
            data[rnd.randrange(len(data))] = rnd.choice(
                [0x00, 0x7F, 0x80, 0xFF, rnd.randrange(256)]
            )
        _decode_or_protocol_error(codec, bytes(data))
    for n in (0, 1, 3, 17, 64):
        _decode_or_protocol_error(codec, rnd.randbytes(n))


def test_huge_lengths_fail_fast():
    legacy = request_codec(3, 4)  # topics: int32-length array
    with pytest.raises(ProtocolError, match="exceeds"):
        legacy.decode(b"\x7f\xff\xff\xff" + b"\x00" * 10)
    with pytest.raises(ProtocolError):
        legacy.decode(b"\xff\xff\xff\xfe")  # -2
    compact = request_codec(3, 12)
    with pytest.raises(ProtocolError):
        compact.decode(b"\xff\xff\xff\xff\x07")  # 2**31 elements as a uvarint
    with pytest.raises(ProtocolError, match="too long"):
        compact.decode(b"\xff\xff\xff\xff\xff\xff\x01")  # over-long varint
    fetch = request_codec(1, 4)
    head = fetch.encode({"topics": [{"topic": "t", "partitions": []}]})
    # The same message with a 2**31-1 byte topic name claimed: the int16 length is checked.
    with pytest.raises(ProtocolError):
        fetch.decode(head[:17] + b"\x7f\xff" + b"x")
    # int32 arrays of fixed-width items, larger than the small-array fast path.
    resp = response_codec(3, 8)
    wire = resp.encode(
        {"topics": [{"name": "t", "partitions": [{"replica_nodes": list(range(100))}]}]}
    )
    assert resp.decode(wire)[0].topics[0].partitions[0].replica_nodes == list(range(100))
    with pytest.raises(ProtocolError):
        resp.decode(wire[:-30])


def test_decode_accepts_bytes_bytearray_memoryview_and_offsets():
    codec = request_codec(18, 3)
    wire = codec.encode({"client_software_name": "strom", "client_software_version": "1"})
    expected_value = codec.decode(wire)[0]
    for buf in (wire, bytearray(wire), memoryview(wire)):
        assert codec.decode(buf) == (expected_value, len(wire))
    assert codec.decode(b"junk" + wire, 4) == (expected_value, len(wire) + 4)
    with pytest.raises(ProtocolError):
        codec.decode(wire, len(wire) + 1)


def test_entity_codec_for_data_records():
    from kio.schema.consumer_protocol_assignment.v3.data import (
        ConsumerProtocolAssignment,
        TopicPartition,
    )

    entity = ConsumerProtocolAssignment(
        assigned_partitions=(TopicPartition(topic="t", partitions=(0, 2)),), user_data=b"u"
    )
    codec = entity_codec(ConsumerProtocolAssignment)
    wire = kio_bytes(entity)
    assert codec.encode(entity) == wire
    value, end = codec.decode(wire)
    assert end == len(wire)
    assert plain(value) == {
        "assigned_partitions": [{"topic": "t", "partitions": [0, 2]}],
        "user_data": b"u",
    }


def test_precompile_builds_every_version_of_an_api():
    lo, hi = supported_versions(3)
    assert precompile((3,)) == 2 * (hi - lo + 1)
