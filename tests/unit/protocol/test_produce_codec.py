"""Produce codec: byte-for-byte against kio (generated from Kafka's JSON specs), every version."""

from __future__ import annotations

import datetime
import importlib
import io
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from strom.protocol.primitives import ProtocolError
from strom.protocol.produce import (
    ProducePartitionData,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceTopicData,
    ProduceTopicResponse,
    decode_produce_request,
    encode_produce_response,
)

VERSIONS = range(3, 14)
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=12)
topic_ids = st.uuids().filter(lambda u: u.int != 0)
error_codes = st.sampled_from([e.value for e in ErrorCode])


def _kio_request(version: int):
    return importlib.import_module(f"kio.schema.produce.v{version}.request")


def _kio_response(version: int):
    return importlib.import_module(f"kio.schema.produce.v{version}.response")


def _serialize(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


# --------------------------------------------------------------------------- requests


@st.composite
def produce_requests(draw, version: int) -> ProduceRequest:
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        partitions = [
            ProducePartitionData(draw(int32), draw(st.none() | st.binary(max_size=40)))
            for _ in range(draw(st.integers(0, 3)))
        ]
        if version >= 13:
            topics.append(ProduceTopicData(None, draw(topic_ids), partitions))
        else:
            topics.append(ProduceTopicData(draw(text), None, partitions))
    return ProduceRequest(draw(st.none() | text), draw(int16), draw(int32), topics)


def _to_kio_request(version: int, req: ProduceRequest):
    m = _kio_request(version)
    topic_data = []
    for t in req.topics:
        key = {"topic_id": t.topic_id} if version >= 13 else {"name": t.name}
        parts = tuple(
            m.PartitionProduceData(
                index=p.index, records=None if p.records is None else bytes(p.records)
            )
            for p in t.partitions
        )
        topic_data.append(m.TopicProduceData(**key, partition_data=parts))
    return m.ProduceRequest(
        transactional_id=req.transactional_id,
        acks=req.acks,
        timeout=datetime.timedelta(milliseconds=req.timeout_ms),
        topic_data=tuple(topic_data),
    )


@pytest.mark.parametrize("version", VERSIONS)
@FAST
@given(data=st.data())
def test_decode_request_matches_kio(version: int, data: st.DataObject) -> None:
    expected = data.draw(produce_requests(version))
    wire = _serialize(_to_kio_request(version, expected))
    assert decode_produce_request(memoryview(wire), version) == expected
    assert decode_produce_request(wire, version) == expected  # plain bytes are accepted too


def test_records_are_zero_copy_slices() -> None:
    req = ProduceRequest(
        None, 1, 100, [ProduceTopicData("t", None, [ProducePartitionData(0, b"x" * 64)])]
    )
    for version in (8, 9):
        wire = bytearray(_serialize(_to_kio_request(version, req)))
        records = decode_produce_request(memoryview(wire), version).topics[0].partitions[0].records
        assert isinstance(records, memoryview) and records.obj is wire
        wire[-70:] = b"y" * 70  # the batch sits at the end (+ tag bytes when flexible)
        assert bytes(records) == b"y" * 64


def test_skips_unknown_tagged_fields_at_every_level() -> None:
    tag = b"\x01\x07\x03abc"  # one tagged field: tag 7, 3 bytes
    wire = (
        b"\x00"  # null transactional_id
        + struct.pack(">hi", -1, 500)
        + b"\x02"  # one topic
        + b"\x02t"
        + b"\x02"  # one partition
        + struct.pack(">i", 4)
        + b"\x04rec"
        + tag  # partition tags
        + tag  # topic tags
        + tag  # request tags
    )
    got = decode_produce_request(memoryview(wire), 9)
    assert got == ProduceRequest(
        None, -1, 500, [ProduceTopicData("t", None, [ProducePartitionData(4, b"rec")])]
    )


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_every_truncation_is_a_protocol_error(version: int) -> None:
    req = ProduceRequest(
        "tx",
        -1,
        1000,
        [
            ProduceTopicData(
                "topic",
                uuid.UUID(int=5),
                [ProducePartitionData(0, b"abc"), ProducePartitionData(1, None)],
            )
        ],
    )
    if version < 13:
        req.topics[0].topic_id = None
    else:
        req.topics[0].name = None
    wire = _serialize(_to_kio_request(version, req))
    assert decode_produce_request(memoryview(wire), version) == req
    for cut in range(len(wire)):
        with pytest.raises(ProtocolError):
            decode_produce_request(memoryview(wire[:cut]), version)


@pytest.mark.parametrize(
    ("version", "wire"),
    [
        (3, struct.pack(">hhii", -1, 1, 0, 0x7FFFFFFF)),  # topic count > remaining bytes
        (3, struct.pack(">hhii", -1, 1, 0, -2)),  # negative topic count
        (3, struct.pack(">hhiih", -1, 1, 0, 1, 30000) + b"ab"),  # name longer than the body
        (
            3,
            struct.pack(">hhiih", -1, 1, 0, 1, 1) + b"t" + struct.pack(">iii", 1, 0, 0x7FFFFFF0),
        ),  # records longer than the body
        (9, b"\x00" + struct.pack(">hi", 1, 0) + b"\xff\xff\xff\xff\x07"),  # count 2^31-2
        (9, b"\x00" + struct.pack(">hi", 1, 0) + b"\xff\xff\xff\xff\xff\x01"),  # 6-byte varint
        (
            9,
            b"\x00"
            + struct.pack(">hi", 1, 0)
            + b"\x02\x02t\x02"
            + struct.pack(">i", 0)
            + b"\xff\xff\x03",
        ),
    ],
)
def test_absurd_lengths_are_rejected(version: int, wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_produce_request(memoryview(wire), version)


@pytest.mark.parametrize("version", [2, 14])
def test_unsupported_versions(version: int) -> None:
    with pytest.raises(ProtocolError):
        decode_produce_request(memoryview(b""), version)
    with pytest.raises(ValueError):
        encode_produce_response(version, [])


# --------------------------------------------------------------------------- responses

leaders = st.none() | st.tuples(int32, int32)
endpoints = st.lists(st.tuples(int32, text, int32, st.none() | text), max_size=2)


@st.composite
def produce_responses(draw, version: int) -> list[ProduceTopicResponse]:
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        partitions = []
        for _ in range(draw(st.integers(0, 3))):
            partitions.append(
                ProducePartitionResponse(
                    index=draw(int32),
                    error_code=draw(error_codes),
                    base_offset=draw(int64),
                    log_append_time_ms=draw(st.just(-1) | st.integers(0, 2**42)),
                    log_start_offset=draw(int64) if version >= 5 else -1,
                    record_errors=draw(st.lists(st.tuples(int32, st.none() | text), max_size=2))
                    if version >= 8
                    else [],
                    error_message=draw(st.none() | text) if version >= 8 else None,
                    current_leader=draw(leaders),
                )
            )
        if version >= 13:
            topics.append(ProduceTopicResponse(None, draw(topic_ids), partitions))
        else:
            topics.append(ProduceTopicResponse(draw(text), None, partitions))
    return topics


def _to_kio_response(version: int, topics, throttle_time_ms: int, node_endpoints):
    m = _kio_response(version)
    out = []
    for t in topics:
        parts = []
        for p in t.partitions:
            kw = {
                "index": p.index,
                "error_code": ErrorCode(p.error_code),
                "base_offset": p.base_offset,
                "log_append_time": None
                if p.log_append_time_ms == -1
                else EPOCH + datetime.timedelta(milliseconds=p.log_append_time_ms),
            }
            if version >= 5:
                kw["log_start_offset"] = p.log_start_offset
            if version >= 8:
                kw["record_errors"] = tuple(
                    m.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=msg)
                    for i, msg in p.record_errors
                )
                kw["error_message"] = p.error_message
            if version >= 10 and p.current_leader is not None:
                kw["current_leader"] = m.LeaderIdAndEpoch(
                    leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                )
            parts.append(m.PartitionProduceResponse(**kw))
        key = {"topic_id": t.topic_id} if version >= 13 else {"name": t.name}
        out.append(m.TopicProduceResponse(**key, partition_responses=tuple(parts)))
    kw = {
        "responses": tuple(out),
        "throttle_time": datetime.timedelta(milliseconds=throttle_time_ms),
    }
    if version >= 10:
        kw["node_endpoints"] = tuple(
            m.NodeEndpoint(node_id=n, host=h, port=port, rack=rack)
            for n, h, port, rack in node_endpoints
        )
    return m.ProduceResponse(**kw)


@pytest.mark.parametrize("version", VERSIONS)
@FAST
@given(data=st.data(), throttle=int32, nodes=endpoints)
def test_encode_response_matches_kio(
    version: int, data: st.DataObject, throttle: int, nodes
) -> None:
    topics = data.draw(produce_responses(version))
    ours = encode_produce_response(version, topics, throttle, nodes)
    assert ours == _serialize(_to_kio_response(version, topics, throttle, nodes))
    # and kio reads it back (read-only buffer, as kio requires)
    _entity, size = entity_reader(type(_to_kio_response(version, [], 0, [])))(
        memoryview(ours).toreadonly(), 0
    )
    assert size == len(ours)


def test_default_current_leader_is_not_written() -> None:
    plain = [ProduceTopicResponse("t", None, [ProducePartitionResponse(0)])]
    defaulted = [
        ProduceTopicResponse("t", None, [ProducePartitionResponse(0, current_leader=(-1, -1))])
    ]
    assert encode_produce_response(10, defaulted) == encode_produce_response(10, plain)
    led = [ProduceTopicResponse("t", None, [ProducePartitionResponse(0, current_leader=(2, 7))])]
    assert len(encode_produce_response(10, led)) == len(encode_produce_response(10, plain)) + 11
    assert encode_produce_response(9, led) == encode_produce_response(
        9, plain
    )  # no tags before v10


def test_encode_rejects_missing_names_and_out_of_range_values() -> None:
    with pytest.raises(ValueError):
        encode_produce_response(9, [ProduceTopicResponse(None, uuid.uuid4(), [])])
    with pytest.raises(ValueError):
        encode_produce_response(
            9, [ProduceTopicResponse("t", None, [ProducePartitionResponse(2**31)])]
        )
