"""Fetch codec: byte-for-byte against kio (generated from Kafka's JSON specs), every version."""

from __future__ import annotations

import datetime
import importlib
import io
import itertools
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from strom.protocol.fetch import (
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchTopic,
    FetchTopicResponse,
    decode_fetch_request,
    encode_fetch_response,
)
from strom.protocol.primitives import ProtocolError

VERSIONS = range(4, 19)
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int8 = st.integers(-128, 127)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=12)
topic_ids = st.uuids().filter(lambda u: u.int != 0)
error_codes = st.sampled_from([e.value for e in ErrorCode])
pairs32 = st.tuples(int32, int32)


def _kio(version: int, side: str):
    return importlib.import_module(f"kio.schema.fetch.v{version}.{side}")


def _serialize(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


# --------------------------------------------------------------------------- requests


@st.composite
def fetch_requests(draw, version: int) -> FetchRequest:
    by_id = version >= 13
    topics = []
    for _ in range(draw(st.integers(0, 2))):
        partitions = [
            FetchPartition(
                partition=draw(int32),
                current_leader_epoch=draw(int32) if version >= 9 else -1,
                fetch_offset=draw(int64),
                last_fetched_epoch=draw(int32) if version >= 12 else -1,
                log_start_offset=draw(int64) if version >= 5 else -1,
                partition_max_bytes=draw(int32),
                replica_directory_id=draw(st.none() | topic_ids) if version >= 17 else None,
                high_watermark=draw(int64) if version >= 18 else 2**63 - 1,
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        if by_id:
            topics.append(FetchTopic(None, draw(topic_ids), partitions))
        else:
            topics.append(FetchTopic(draw(text), None, partitions))
    forgotten = []
    if version >= 7:
        for _ in range(draw(st.integers(0, 2))):
            parts = draw(st.lists(int32, max_size=3))
            forgotten.append((None, draw(topic_ids), parts) if by_id else (draw(text), None, parts))
    return FetchRequest(
        replica_id=draw(int32) if version < 15 or draw(st.booleans()) else -1,
        max_wait_ms=draw(int32),
        min_bytes=draw(int32),
        max_bytes=draw(int32),
        isolation_level=draw(int8),
        session_id=draw(int32) if version >= 7 else 0,
        session_epoch=draw(int32) if version >= 7 else -1,
        topics=topics,
        forgotten=forgotten,
        rack_id=draw(text) if version >= 11 else "",
        cluster_id=draw(st.none() | text) if version >= 12 else None,
        replica_epoch=draw(int64) if version >= 15 else -1,
    )


def _to_kio_request(version: int, req: FetchRequest):
    m = _kio(version, "request")
    by_id = version >= 13
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            kw = {
                "partition": p.partition,
                "fetch_offset": p.fetch_offset,
                "partition_max_bytes": p.partition_max_bytes,
            }
            if version >= 5:
                kw["log_start_offset"] = p.log_start_offset
            if version >= 9:
                kw["current_leader_epoch"] = p.current_leader_epoch
            if version >= 12:
                kw["last_fetched_epoch"] = p.last_fetched_epoch
            if version >= 17:
                kw["replica_directory_id"] = p.replica_directory_id
            if version >= 18:
                kw["high_watermark"] = p.high_watermark
            parts.append(m.FetchPartition(**kw))
        key = {"topic_id": t.topic_id} if by_id else {"topic": t.topic}
        topics.append(m.FetchTopic(**key, partitions=tuple(parts)))
    kw = {
        "max_wait": datetime.timedelta(milliseconds=req.max_wait_ms),
        "min_bytes": req.min_bytes,
        "max_bytes": req.max_bytes,
        "isolation_level": req.isolation_level,
        "topics": tuple(topics),
    }
    if version < 15:
        kw["replica_id"] = req.replica_id
    else:
        kw["replica_state"] = m.ReplicaState(
            replica_id=req.replica_id, replica_epoch=req.replica_epoch
        )
    if version >= 7:
        kw["session_id"] = req.session_id
        kw["session_epoch"] = req.session_epoch
        kw["forgotten_topics_data"] = tuple(
            m.ForgottenTopic(
                **({"topic_id": tid} if by_id else {"topic": name}), partitions=tuple(parts)
            )
            for name, tid, parts in req.forgotten
        )
    if version >= 11:
        kw["rack_id"] = req.rack_id
    if version >= 12:
        kw["cluster_id"] = req.cluster_id
    return m.FetchRequest(**kw)


@pytest.mark.parametrize("version", VERSIONS)
@FAST
@given(data=st.data())
def test_decode_request_matches_kio(version: int, data: st.DataObject) -> None:
    expected = data.draw(fetch_requests(version))
    wire = _serialize(_to_kio_request(version, expected))
    assert decode_fetch_request(memoryview(wire), version) == expected


def test_many_partitions_fast_and_slow_paths_agree() -> None:
    partitions = [FetchPartition(i, 1, i * 10, 2, 0, 1 << 20) for i in range(300)]
    req = FetchRequest(-1, 500, 1, 1 << 20, 0, 0, -1, [FetchTopic("t", None, partitions)], [])
    assert decode_fetch_request(_serialize(_to_kio_request(12, req)), 12) == req
    # one partition with a tag forces the per-partition path
    tagged = [*partitions[:5], FetchPartition(5, 1, 50, 2, 0, 1, uuid.UUID(int=1), 77)]
    req = FetchRequest(
        -1, 500, 1, 1 << 20, 0, 0, -1, [FetchTopic(None, uuid.UUID(int=9), tagged)], []
    )
    assert decode_fetch_request(_serialize(_to_kio_request(18, req)), 18) == req


def test_replica_state_tag_is_ignored_before_v15() -> None:
    req = FetchRequest(3, 500, 1, 100, 0, 0, -1, [], [], "", None, -1)
    wire = _serialize(_to_kio_request(12, req))
    assert wire.endswith(b"\x00")
    # append tag 1 (replica_state) by hand: v12 does not know it and must skip it
    forged = wire[:-1] + b"\x01\x01\x0d" + struct.pack(">iqB", 9, 9, 0)
    assert decode_fetch_request(forged, 12) == req
    assert decode_fetch_request(forged, 14) == req


def test_skips_unknown_tagged_fields() -> None:
    req = FetchRequest(
        -1,
        500,
        1,
        100,
        0,
        0,
        -1,
        [FetchTopic("t", None, [FetchPartition(0, -1, 5, -1, -1, 100)])],
        [("f", None, [1])],
    )
    wire = _serialize(_to_kio_request(12, req))
    unknown = b"\x01\x09\x02zz"
    head = 25 + 1 + 2 + 1  # fixed header, topic count, "t", partition count
    forged = (
        wire[: head + 32]
        + unknown  # partition tags
        + unknown  # topic tags
        + wire[head + 34 : -1].replace(  # forgotten topics + rack
            b"\x02f\x02\x00\x00\x00\x01\x00", b"\x02f\x02\x00\x00\x00\x01" + unknown
        )
        + unknown  # request tags
    )
    assert decode_fetch_request(forged, 12) == req


@pytest.mark.parametrize("version", [4, 11, 12, 15, 18])
def test_every_truncation_is_a_protocol_error(version: int) -> None:
    by_id = version >= 13
    req = FetchRequest(
        -1 if version >= 15 else 2,
        500,
        1,
        100,
        1,
        7 if version >= 7 else 0,
        3 if version >= 7 else -1,
        [
            FetchTopic(
                None if by_id else "topic",
                uuid.UUID(int=4) if by_id else None,
                [FetchPartition(0, -1, 5, -1, -1, 100)],
            )
        ],
        [(None if by_id else "f", uuid.UUID(int=5) if by_id else None, [1, 2])]
        if version >= 7
        else [],
        "rack" if version >= 11 else "",
        "cluster" if version >= 12 else None,
    )
    wire = _serialize(_to_kio_request(version, req))
    assert decode_fetch_request(wire, version) == req
    for cut in range(len(wire)):
        with pytest.raises(ProtocolError):
            decode_fetch_request(wire[:cut], version)


@pytest.mark.parametrize(
    ("version", "wire"),
    [
        (4, struct.pack(">iiiibi", -1, 0, 0, 0, 0, 0x7FFFFFFF)),  # topic count
        (4, struct.pack(">iiiibih", -1, 0, 0, 0, 0, 1, 1) + b"t" + struct.pack(">i", 2**30)),
        (
            7,
            struct.pack(">iiiibiii", -1, 0, 0, 0, 0, 0, 0, 0)
            + struct.pack(">ih", 1, 1)
            + b"f"
            + struct.pack(">i", 2**29),
        ),  # forgotten partitions
        (12, struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0) + b"\x02\x02t\xff\xff\xff\x0f"),
        (12, struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0) + b"\x01\x01\x01\x01\x00\x7f\x00"),
    ],
)
def test_absurd_lengths_are_rejected(version: int, wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_fetch_request(wire, version)


# --------------------------------------------------------------------------- responses


@st.composite
def fetch_responses(draw, version: int) -> list[FetchTopicResponse]:
    topics = []
    for _ in range(draw(st.integers(0, 2))):
        partitions = []
        for _ in range(draw(st.integers(0, 3))):
            records = draw(st.none() | st.binary(max_size=30))
            partitions.append(
                FetchPartitionResponse(
                    partition=draw(int32),
                    error_code=draw(error_codes),
                    high_watermark=draw(int64),
                    last_stable_offset=draw(int64),
                    log_start_offset=draw(int64) if version >= 5 else -1,
                    aborted_transactions=draw(
                        st.none() | st.lists(st.tuples(int64, int64), max_size=2)
                    ),
                    preferred_read_replica=draw(int32) if version >= 11 else -1,
                    records=records,
                    records_size=0 if records is None else len(records),
                    diverging_epoch=draw(st.none() | st.tuples(int32, int64)),
                    current_leader=draw(st.none() | pairs32),
                    snapshot_id=draw(st.none() | st.tuples(int64, int32)),
                )
            )
        if version >= 13:
            topics.append(FetchTopicResponse(None, draw(topic_ids), partitions))
        else:
            topics.append(FetchTopicResponse(draw(text), None, partitions))
    return topics


def _to_kio_response(version: int, topics, throttle: int, error_code: int, session_id: int, nodes):
    m = _kio(version, "response")
    out = []
    for t in topics:
        parts = []
        for p in t.partitions:
            kw = {
                "partition_index": p.partition,
                "error_code": ErrorCode(p.error_code),
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "aborted_transactions": None
                if p.aborted_transactions is None
                else tuple(
                    m.AbortedTransaction(producer_id=a, first_offset=b)
                    for a, b in p.aborted_transactions
                ),
                "records": None if p.records is None else bytes(p.records),
            }
            if version >= 5:
                kw["log_start_offset"] = p.log_start_offset
            if version >= 11:
                kw["preferred_read_replica"] = p.preferred_read_replica
            if version >= 12:
                if p.diverging_epoch is not None:
                    kw["diverging_epoch"] = m.EpochEndOffset(
                        epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
                    )
                if p.current_leader is not None:
                    kw["current_leader"] = m.LeaderIdAndEpoch(
                        leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                    )
                if p.snapshot_id is not None:
                    kw["snapshot_id"] = m.SnapshotId(
                        end_offset=p.snapshot_id[0], epoch=p.snapshot_id[1]
                    )
            parts.append(m.PartitionData(**kw))
        key = {"topic_id": t.topic_id} if version >= 13 else {"topic": t.topic}
        out.append(m.FetchableTopicResponse(**key, partitions=tuple(parts)))
    kw = {"throttle_time": datetime.timedelta(milliseconds=throttle), "responses": tuple(out)}
    if version >= 7:
        kw["error_code"] = ErrorCode(error_code)
        kw["session_id"] = session_id
    if version >= 16:
        kw["node_endpoints"] = tuple(
            m.NodeEndpoint(node_id=n, host=h, port=port, rack=rack) for n, h, port, rack in nodes
        )
    return m.FetchResponse(**kw)


class _Slice:
    """An opaque records object, as the storage layer hands out (never read by the codec)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def _opaque(topics: list[FetchTopicResponse]) -> list[FetchTopicResponse]:
    for t in topics:
        for p in t.partitions:
            if p.records is not None:
                p.records = _Slice(p.records)
    return topics


def _materialize(parts: list[object]) -> bytes:
    return b"".join(p.data if isinstance(p, _Slice) else p for p in parts)


@pytest.mark.parametrize("version", VERSIONS)
@FAST
@given(
    data=st.data(),
    throttle=int32,
    error_code=error_codes,
    session_id=int32,
    nodes=st.lists(st.tuples(int32, text, int32, st.none() | text), max_size=2),
)
def test_encode_response_matches_kio(
    version: int, data: st.DataObject, throttle: int, error_code: int, session_id: int, nodes
) -> None:
    topics = data.draw(fetch_responses(version))
    expected = _serialize(
        _to_kio_response(version, topics, throttle, error_code, session_id, nodes)
    )
    kw = {"throttle_time_ms": throttle, "error_code": error_code, "session_id": session_id}
    parts, total = encode_fetch_response(version, topics, node_endpoints=nodes, **kw)
    assert all(isinstance(p, bytes) for p in parts)
    assert b"".join(parts) == expected and total == len(expected)
    # the same with opaque records: they pass through untouched, sizes from records_size
    parts, total = encode_fetch_response(version, _opaque(topics), node_endpoints=nodes, **kw)
    assert _materialize(parts) == expected and total == len(expected)
    assert not any(
        isinstance(a, bytes) and isinstance(b, bytes) for a, b in itertools.pairwise(parts)
    )
    # kio reads our bytes back
    reader = entity_reader(type(_to_kio_response(version, [], 0, 0, 0, [])))
    assert reader(memoryview(expected).toreadonly(), 0)[1] == len(expected)


def test_parts_interleave_chunks_and_slices() -> None:
    slices = [_Slice(b"r" * 100) for _ in range(10)]
    topics = [
        FetchTopicResponse(
            "t",
            None,
            [FetchPartitionResponse(i, records=s, records_size=100) for i, s in enumerate(slices)],
        )
    ]
    for version in (11, 12, 16):
        parts, total = encode_fetch_response(version, topics)
        assert [p for p in parts if isinstance(p, _Slice)] == slices
        assert len(parts) == 2 * len(slices) + (1 if version >= 12 else 0)
        assert total == sum(len(p) for p in parts if isinstance(p, bytes)) + 100 * len(slices)


def test_default_tags_are_not_written() -> None:
    plain = [FetchTopicResponse("t", None, [FetchPartitionResponse(0)])]
    defaulted = [
        FetchTopicResponse(
            "t",
            None,
            [
                FetchPartitionResponse(
                    0, diverging_epoch=(-1, -1), current_leader=(-1, -1), snapshot_id=(-1, -1)
                )
            ],
        )
    ]
    assert encode_fetch_response(12, defaulted) == encode_fetch_response(12, plain)


def test_encode_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        encode_fetch_response(12, [FetchTopicResponse(None, None, [])])
    with pytest.raises(ValueError):
        encode_fetch_response(
            12,
            [
                FetchTopicResponse(
                    "t", None, [FetchPartitionResponse(0, records=_Slice(b""), records_size=-1)]
                )
            ],
        )
    with pytest.raises(ValueError):
        encode_fetch_response(19, [])
    with pytest.raises(ProtocolError):
        decode_fetch_request(b"", 3)
