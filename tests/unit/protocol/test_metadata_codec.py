"""Metadata codec: byte-for-byte against kio (generated from Kafka's JSON specs), every version."""

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

from strom.protocol.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataTopic,
    decode_metadata_request,
    encode_metadata_brokers,
    encode_metadata_response,
    encode_metadata_response_from_parts,
    encode_metadata_topic,
)
from strom.protocol.primitives import ProtocolError

VERSIONS = range(0, 14)
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NO_OPS = -(2**31)

int32 = st.integers(-(2**31), 2**31 - 1)
text = st.text(max_size=12)
topic_ids = st.uuids().filter(lambda u: u.int != 0)
error_codes = st.sampled_from([e.value for e in ErrorCode])
nodes = st.lists(int32, max_size=4)


def _kio(version: int, side: str):
    return importlib.import_module(f"kio.schema.metadata.v{version}.{side}")


def _serialize(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


# --------------------------------------------------------------------------- requests


@st.composite
def metadata_requests(draw, version: int) -> MetadataRequest:
    if version >= 10:
        topic = st.tuples(st.none() | text, st.none() | topic_ids)
    else:
        topic = st.tuples(text, st.none())
    topics = draw(st.lists(topic, min_size=1 if version == 0 else 0, max_size=3))
    if version >= 1 and draw(st.booleans()):
        topics = None
    return MetadataRequest(
        topics=topics,
        allow_auto_topic_creation=draw(st.booleans()) if version >= 4 else True,
        include_cluster_authorized_operations=draw(st.booleans()) if 8 <= version <= 10 else False,
        include_topic_authorized_operations=draw(st.booleans()) if version >= 8 else False,
    )


def _to_kio_request(version: int, req: MetadataRequest):
    m = _kio(version, "request")
    if req.topics is None:
        topics = None if version >= 1 else ()
    elif version >= 10:
        topics = tuple(m.MetadataRequestTopic(topic_id=i, name=n) for n, i in req.topics)
    else:
        topics = tuple(m.MetadataRequestTopic(name=n) for n, _ in req.topics)
    kw = {"topics": topics}
    if version >= 4:
        kw["allow_auto_topic_creation"] = req.allow_auto_topic_creation
    if version >= 8:
        kw["include_topic_authorized_operations"] = req.include_topic_authorized_operations
    if 8 <= version <= 10:
        kw["include_cluster_authorized_operations"] = req.include_cluster_authorized_operations
    return m.MetadataRequest(**kw)


@pytest.mark.parametrize("version", VERSIONS)
@FAST
@given(data=st.data())
def test_decode_request_matches_kio(version: int, data: st.DataObject) -> None:
    expected = data.draw(metadata_requests(version))
    wire = _serialize(_to_kio_request(version, expected))
    assert decode_metadata_request(memoryview(wire), version) == expected


def test_v0_empty_array_means_all_topics() -> None:
    assert decode_metadata_request(b"\x00\x00\x00\x00", 0).topics is None
    assert decode_metadata_request(b"\x00\x00\x00\x00", 1).topics == []
    assert decode_metadata_request(b"\xff\xff\xff\xff", 1).topics is None
    with pytest.raises(ProtocolError):  # null is not valid in v0
        decode_metadata_request(b"\xff\xff\xff\xff", 0)


def test_skips_unknown_tagged_fields() -> None:
    unknown = b"\x01\x05\x01z"
    wire = b"\x02" + bytes(16) + b"\x02t" + unknown + b"\x01\x00" + unknown
    got = decode_metadata_request(wire, 12)
    assert got == MetadataRequest([("t", None)], True, False, False)


@pytest.mark.parametrize("version", [0, 4, 8, 9, 10, 13])
def test_every_truncation_is_a_protocol_error(version: int) -> None:
    topics = [("a", uuid.UUID(int=3) if version >= 10 else None), ("bb", None)]
    req = MetadataRequest(topics, version < 4, 8 <= version <= 10, version >= 8)
    wire = _serialize(_to_kio_request(version, req))
    assert decode_metadata_request(wire, version) == req
    for cut in range(len(wire)):
        with pytest.raises(ProtocolError):
            decode_metadata_request(wire[:cut], version)


@pytest.mark.parametrize(
    ("version", "wire"),
    [
        (1, struct.pack(">i", 0x7FFFFFFF)),
        (1, struct.pack(">i", -2)),
        (1, struct.pack(">ih", 1, 100) + b"abc"),
        (1, struct.pack(">ih", 1, -1)),  # null topic name
        (9, b"\x02\x00\x00"),  # null topic name before v10
        (9, b"\xff\xff\xff\xff\x0f"),
        (12, b"\x02" + bytes(16) + b"\x7fabc"),
    ],
)
def test_absurd_input_is_rejected(version: int, wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_metadata_request(wire, version)


# --------------------------------------------------------------------------- responses


@st.composite
def metadata_topics(draw, version: int) -> list[MetadataTopic]:
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        partitions = [
            MetadataPartition(
                error_code=draw(error_codes),
                partition_index=draw(int32),
                leader_id=draw(int32),
                leader_epoch=draw(int32) if version >= 7 else -1,
                replica_nodes=draw(nodes),
                isr_nodes=draw(nodes),
                offline_replicas=draw(nodes) if version >= 5 else [],
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        topics.append(
            MetadataTopic(
                error_code=draw(error_codes),
                name=draw((st.none() | text) if version >= 12 else text),
                topic_id=draw(st.none() | topic_ids) if version >= 10 else None,
                is_internal=draw(st.booleans()) if version >= 1 else False,
                partitions=partitions,
                topic_authorized_operations=draw(int32) if version >= 8 else NO_OPS,
            )
        )
    return topics


def _to_kio_response(
    version: int, brokers, cluster_id, controller_id, topics, throttle, cluster_ops, error_code
):
    m = _kio(version, "response")
    kio_brokers = []
    for b in brokers:
        kw = {"node_id": b.node_id, "host": b.host, "port": b.port}
        if version >= 1:
            kw["rack"] = b.rack
        kio_brokers.append(m.MetadataResponseBroker(**kw))
    kio_topics = []
    for t in topics:
        parts = []
        for p in t.partitions:
            kw = {
                "error_code": ErrorCode(p.error_code),
                "partition_index": p.partition_index,
                "leader_id": p.leader_id,
                "replica_nodes": tuple(p.replica_nodes),
                "isr_nodes": tuple(p.isr_nodes),
            }
            if version >= 5:
                kw["offline_replicas"] = tuple(p.offline_replicas)
            if version >= 7:
                kw["leader_epoch"] = p.leader_epoch
            parts.append(m.MetadataResponsePartition(**kw))
        kw = {"error_code": ErrorCode(t.error_code), "name": t.name, "partitions": tuple(parts)}
        if version >= 1:
            kw["is_internal"] = t.is_internal
        if version >= 8:
            kw["topic_authorized_operations"] = t.topic_authorized_operations
        if version >= 10:
            kw["topic_id"] = t.topic_id
        kio_topics.append(m.MetadataResponseTopic(**kw))
    kw = {"brokers": tuple(kio_brokers), "topics": tuple(kio_topics)}
    if version >= 1:
        kw["controller_id"] = controller_id
    if version >= 2:
        kw["cluster_id"] = cluster_id
    if version >= 3:
        kw["throttle_time"] = datetime.timedelta(milliseconds=throttle)
    if 8 <= version <= 10:
        kw["cluster_authorized_operations"] = cluster_ops
    if version >= 13:
        kw["error_code"] = ErrorCode(error_code)
    return m.MetadataResponse(**kw)


@pytest.mark.parametrize("version", VERSIONS)
@FAST
@given(
    data=st.data(),
    brokers=st.lists(st.builds(MetadataBroker, int32, text, int32, st.none() | text), max_size=3),
    cluster_id=st.none() | text,
    controller_id=int32,
    throttle=int32,
    cluster_ops=int32,
    error_code=error_codes,
)
def test_encode_response_matches_kio(
    version: int,
    data: st.DataObject,
    brokers,
    cluster_id,
    controller_id,
    throttle,
    cluster_ops,
    error_code,
) -> None:
    topics = data.draw(metadata_topics(version))
    if version == 0:
        for b in brokers:
            b.rack = None
    args = (brokers, cluster_id, controller_id, topics, throttle, cluster_ops, error_code)
    expected = _serialize(_to_kio_response(version, *args))
    assert encode_metadata_response(version, *args) == expected
    # the cache-friendly path produces the very same bytes
    assembled = encode_metadata_response_from_parts(
        version,
        encode_metadata_brokers(version, brokers),
        cluster_id,
        controller_id,
        [encode_metadata_topic(version, t) for t in topics],
        throttle,
        cluster_ops,
        error_code,
    )
    assert assembled == expected
    reader = entity_reader(type(_to_kio_response(version, [], None, 0, [], 0, 0, 0)))
    assert reader(memoryview(expected).toreadonly(), 0)[1] == len(expected)


@pytest.mark.parametrize("version", [5, 9, 12])
def test_large_replica_lists(version: int) -> None:
    """Past the single-byte compact length (127+ replicas) the generic path must agree with kio."""
    big = list(range(200))
    topics = [
        MetadataTopic(
            0,
            "t",
            uuid.UUID(int=1),
            False,
            [MetadataPartition(0, 0, 1, 3, big, big[:130], big[:5])],
        )
    ]
    args = ([MetadataBroker(1, "h", 9092)], "c", 1, topics, 0, NO_OPS, 0)
    assert encode_metadata_response(version, *args) == _serialize(_to_kio_response(version, *args))


def test_encode_rejects_bad_input() -> None:
    unnamed = [MetadataTopic(0, None, uuid.UUID(int=1), False, [])]
    with pytest.raises(ValueError):
        encode_metadata_response(11, [], None, -1, unnamed)
    assert encode_metadata_response(12, [], None, -1, unnamed)  # nullable from v12
    with pytest.raises(ValueError):
        encode_metadata_topic(
            9, MetadataTopic(0, "t", None, False, [MetadataPartition(0, 2**31, 0)])
        )
    with pytest.raises(ValueError):
        encode_metadata_response(14, [], None, -1, [])
    with pytest.raises(ProtocolError):
        decode_metadata_request(b"", 14)
