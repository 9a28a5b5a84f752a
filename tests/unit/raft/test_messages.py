"""The core's messages are Kafka's: every field name exists in Kafka's schema (as kio has it), and
each message encodes and decodes with Strom's codec at every version Kafka 4 speaks."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec, response_codec
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import StructSchema, load_schema, supported_versions
from strom.raft import messages as m
from strom.raft.types import (
    METADATA_TOPIC_ID,
    Endpoint,
    OffsetAndEpoch,
    ReplicaKey,
)

DIR = uuid.UUID("11111111-2222-3333-4444-555555555555")
EPS = (Endpoint("CONTROLLER", "c1", 9093), Endpoint("OTHER", "c1", 9094))
NODES = m.node_endpoints(1, EPS, "CONTROLLER")


def _requests() -> dict[str, tuple[ApiKey, dict[str, Any]]]:
    return {
        "vote": (ApiKey.VOTE, m.vote_request(
            cluster_id="c", voter=ReplicaKey(2, DIR), candidate=ReplicaKey(1, DIR), epoch=5,
            last=OffsetAndEpoch(100, 4), pre_vote=True)),
        "begin": (ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(
            cluster_id="c", voter=ReplicaKey(2), leader_id=1, epoch=5, leader_endpoints=EPS)),
        "end": (ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(
            cluster_id=None, leader_id=1, epoch=5, preferred=[ReplicaKey(3), ReplicaKey(2, DIR)],
            leader_endpoints=EPS)),
        "fetch": (ApiKey.FETCH, m.fetch_request(
            cluster_id="c", replica=ReplicaKey(2, DIR), epoch=5, fetch_offset=100,
            last_fetched_epoch=4, high_watermark=90, max_wait_ms=500, max_bytes=1 << 20)),
        "describe": (ApiKey.DESCRIBE_QUORUM, m.describe_quorum_request()),
    }


def _responses() -> dict[str, tuple[ApiKey, dict[str, Any]]]:
    return {
        "vote": (ApiKey.VOTE, m.vote_response(
            error=ErrorCode.NONE, epoch=5, leader_id=None, granted=True, nodes=[])),
        "begin": (ApiKey.BEGIN_QUORUM_EPOCH, m.epoch_response(
            error=ErrorCode.FENCED_LEADER_EPOCH, epoch=6, leader_id=1, nodes=NODES)),
        "end": (ApiKey.END_QUORUM_EPOCH, m.epoch_response(
            error=ErrorCode.NONE, epoch=5, leader_id=1, nodes=NODES)),
        "fetch": (ApiKey.FETCH, m.fetch_response(
            error=ErrorCode.NONE, leader_id=1, epoch=5, high_watermark=90, log_start_offset=0,
            records=b"\x00" * 12, diverging=OffsetAndEpoch(80, 3),
            nodes=m.node_endpoints(1, EPS, "CONTROLLER", with_rack=True))),
        "describe": (ApiKey.DESCRIBE_QUORUM, m.describe_quorum_response(
            leader_id=1, epoch=5, high_watermark=90,
            voters=[m.replica_state(ReplicaKey(1), 100, 7, 7)],
            observers=[m.replica_state(ReplicaKey(9, DIR), 50, 3, -1)],
            nodes=[{"node_id": 1, "listeners": m.leader_endpoint_list(EPS)}])),
        "describe-error": (ApiKey.DESCRIBE_QUORUM,
                           m.describe_quorum_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)),
        "snapshot": (ApiKey.FETCH_SNAPSHOT, m.fetch_snapshot_response(
            error=ErrorCode.NONE, leader_id=1, epoch=5, snapshot_id=OffsetAndEpoch(50, 3),
            size=10, position=4, chunk=b"abcdef", nodes=NODES)),
    }


def _names(schema: StructSchema, into: dict[str, set[str]], path: str = "") -> None:
    for f in schema.all_fields():
        into.setdefault(path, set()).add(f.name)
        if f.struct is not None:
            _names(f.struct, into, f"{path}.{f.name}")


def _all_names(api_key: int, side: str) -> dict[str, set[str]]:
    lo, hi = supported_versions(api_key)
    names: dict[str, set[str]] = {}
    for v in range(lo, hi + 1):
        _names(load_schema(api_key, v, side), names)  # type: ignore[arg-type]  # "request"/"response"
    return names


def _keys(value: Any, into: list[tuple[str, str]], path: str = "") -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            into.append((path, k))
            _keys(v, into, f"{path}.{k}")
    elif isinstance(value, list):
        for item in value:
            _keys(item, into, path)


@pytest.mark.parametrize("side", ["request", "response"])
def test_every_field_name_is_in_kafkas_schema(side: str) -> None:
    built = _requests() if side == "request" else _responses()
    for name, (api_key, message) in built.items():
        known = _all_names(api_key, side)
        keys: list[tuple[str, str]] = []
        _keys(message, keys)
        unknown = [f"{p}.{k}" for p, k in keys if k not in known.get(p, set())]
        assert unknown == [], f"{name}: not in Kafka's {ApiKey(api_key).name} {side}: {unknown}"


def _versions(api_key: int) -> list[int]:
    lo, hi = supported_versions(api_key)
    # Kafka 4 dropped Fetch v0-3; Raft's Fetch needs topic ids (v13+) anyway.
    return [v for v in range(lo, hi + 1) if api_key != ApiKey.FETCH or v >= 13]


def _subset_equal(sent: Any, got: Any, path: str = "") -> None:
    """Every field the decoded message has equals what was sent (absent = not in the version)."""
    if isinstance(got, dict):
        for k, v in got.items():
            if k in sent:
                _subset_equal(sent[k], v, f"{path}.{k}")
    elif isinstance(got, list) and isinstance(sent, list):
        assert len(got) == len(sent), path
        for a, b in zip(sent, got, strict=True):
            _subset_equal(a, b, path)
    elif isinstance(got, memoryview):
        assert bytes(got) == bytes(sent), path
    else:
        assert got == sent, f"{path}: sent {sent!r}, decoded {got!r}"


@pytest.mark.parametrize("side", ["request", "response"])
def test_messages_round_trip_through_stroms_codec(side: str) -> None:
    built = _requests() if side == "request" else _responses()
    for name, (api_key, message) in built.items():
        for v in _versions(api_key):
            codec = (request_codec if side == "request" else response_codec)(api_key, v)
            decoded, _ = codec.decode(codec.encode(message))
            got = decoded.to_dict()
            if name == "vote" and side == "request" and v < 2:
                got.get("topics", [{}])[0]["partitions"][0].pop("pre_vote", None)
            _subset_equal(message, got, f"{name} v{v}")


def test_the_newest_versions_carry_the_raft_fields() -> None:
    codec = request_codec(ApiKey.VOTE, 2)
    vote, _ = codec.decode(codec.encode(_requests()["vote"][1]))
    part = vote.topics[0].partitions[0]
    assert (part.pre_vote, part.replica_epoch, part.last_offset_epoch) == (True, 5, 4)
    assert part.replica_directory_id == DIR and vote.voter_id == 2

    codec = request_codec(ApiKey.FETCH, 18)
    fetch, _ = codec.decode(codec.encode(_requests()["fetch"][1]))
    assert fetch.replica_state.replica_id == 2 and fetch.cluster_id == "c"
    p = fetch.topics[0].partitions[0]
    assert fetch.topics[0].topic_id == METADATA_TOPIC_ID
    assert (p.fetch_offset, p.last_fetched_epoch, p.current_leader_epoch, p.high_watermark) == \
        (100, 4, 5, 90)

    codec = response_codec(ApiKey.FETCH, 17)
    resp, _ = codec.decode(codec.encode(_responses()["fetch"][1]))
    rp = resp.responses[0].partitions[0]
    assert (rp.diverging_epoch.epoch, rp.diverging_epoch.end_offset) == (3, 80)
    assert (rp.current_leader.leader_id, rp.current_leader.leader_epoch) == (1, 5)
    assert (rp.snapshot_id.end_offset, rp.snapshot_id.epoch) == (-1, -1)
    assert resp.node_endpoints[0].host == "c1" and resp.node_endpoints[0].port == 9093

    codec = request_codec(ApiKey.END_QUORUM_EPOCH, 0)
    end, _ = codec.decode(codec.encode(_requests()["end"][1]))
    assert end.topics[0].partitions[0].preferred_successors == [3, 2]


def test_readers_accept_only_the_metadata_partition() -> None:
    vote = _requests()["vote"][1]
    assert m.vote_like_partition(vote) is not None
    wrong = {**vote, "topics": [{**vote["topics"][0], "topic_name": "other"}]}
    assert m.vote_like_partition(wrong) is None
    two = {**vote, "topics": vote["topics"] * 2}
    assert m.vote_like_partition(two) is None
    fetch = _requests()["fetch"][1]
    assert m.fetch_partition(fetch) is not None
    by_id_only = {**fetch, "topics": [{"topic_id": uuid.uuid4(),
                                       "partitions": fetch["topics"][0]["partitions"]}]}
    assert m.fetch_partition(by_id_only) is None
    by_name = {**fetch, "topics": [{"topic": "__cluster_metadata",
                                    "partitions": fetch["topics"][0]["partitions"]}]}
    assert m.fetch_partition(by_name) is not None
    assert m.fetch_replica_id({"replica_id": 4}) == 4
    assert m.fetch_replica_id({"replica_state": {"replica_id": 5}, "replica_id": -1}) == 5
