"""Kafka's Raft messages as plain dicts with the codec's snake_case field names.

A dict built here encodes with `strom.protocol.codec.request_codec(api_key, version)` (or
`response_codec`) unchanged, at any version kio has: the encoder ignores keys a version lacks
and fills the ones left out with their defaults. That is why a message carries the fields of
every version it may go out as (e.g. both `preferred_successors`, v0, and
`preferred_candidates`, v1, in EndQuorumEpoch). Inbound messages are read the same way, from
dicts (a decoded `Struct` becomes one with `to_dict()`).

Every Raft RPC names exactly one topic-partition, `__cluster_metadata`-0; the `*_partition`
readers return it, or None when the message names anything else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import strom
from strom.protocol.errors import ErrorCode

from .types import (
    METADATA_PARTITION,
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    NO_ID,
    ZERO_UUID,
    Endpoint,
    OffsetAndEpoch,
    ReplicaKey,
)

Message = dict[str, Any]

I64_MAX = (1 << 63) - 1


def top_level_error(error: ErrorCode) -> Message:
    """A response that carries only a top-level error (cluster id or topic mismatch)."""
    return {"error_code": int(error)}


def leader_endpoint_list(endpoints: Iterable[Endpoint]) -> list[Message]:
    """BeginQuorumEpoch/EndQuorumEpoch `leader_endpoints`: every listener of the leader."""
    return [{"name": e.name, "host": e.host, "port": e.port} for e in endpoints]


def node_endpoints(leader_id: int | None, endpoints: Iterable[Endpoint], listener: str,
                   *, with_rack: bool = False) -> list[Message]:
    """A response's `node_endpoints`: the named leader on the listener the request came in on."""
    if leader_id is None:
        return []
    for e in endpoints:
        if e.name == listener:
            node: Message = {"node_id": leader_id, "host": e.host, "port": e.port}
            if with_rack:
                node["rack"] = None
            return [node]
    return []


def endpoints_from_nodes(nodes: Iterable[Mapping[str, Any]], leader_id: int | None,
                         listener: str) -> tuple[Endpoint, ...]:
    """The leader's endpoint out of a response's `node_endpoints`."""
    if leader_id is None:
        return ()
    return tuple(Endpoint(listener, n["host"], int(n["port"]))
                 for n in nodes if n.get("node_id") == leader_id)


def endpoints_from_listeners(listeners: Iterable[Mapping[str, Any]]) -> tuple[Endpoint, ...]:
    return tuple(Endpoint(x["name"], x["host"], int(x["port"])) for x in listeners)


# ----------------------------------------------------------------------------- reading


def _single(msg: Mapping[str, Any], topics: str, match: Mapping[str, object], partitions: str,
            index: str) -> Mapping[str, Any] | None:
    ts = msg.get(topics) or []
    if len(ts) != 1:
        return None
    topic = ts[0]
    # The first identifying field the message has decides (a zero topic id counts as absent).
    for key, expected in match.items():
        value = topic.get(key)
        if value is None or value == ZERO_UUID:
            continue
        if value != expected:
            return None
        break
    else:
        return None
    ps = topic.get(partitions) or []
    if len(ps) != 1 or ps[0].get(index) != METADATA_PARTITION:
        return None
    partition: Mapping[str, Any] = ps[0]
    return partition


_BY_NAME = {"topic_name": METADATA_TOPIC}


def vote_like_partition(msg: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The partition of a Vote, BeginQuorumEpoch, EndQuorumEpoch or DescribeQuorum message."""
    return _single(msg, "topics", _BY_NAME, "partitions", "partition_index")


def fetch_partition(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # v13+ names the topic by id, older versions by name.
    return _single(request, "topics", {"topic_id": METADATA_TOPIC_ID, "topic": METADATA_TOPIC},
                   "partitions", "partition")


def fetch_response_partition(response: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return _single(response, "responses",
                   {"topic_id": METADATA_TOPIC_ID, "topic": METADATA_TOPIC},
                   "partitions", "partition_index")


def fetch_snapshot_partition(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return _single(request, "topics", {"name": METADATA_TOPIC}, "partitions", "partition")


def fetch_replica_id(request: Mapping[str, Any]) -> int:
    """The fetching replica: `replica_state.replica_id` (v15+) or the old top-level field."""
    state = request.get("replica_state")
    if isinstance(state, Mapping) and state.get("replica_id", NO_ID) != NO_ID:
        return int(state["replica_id"])
    return int(request.get("replica_id", NO_ID))


def opt_id(value: int) -> int | None:
    return None if value < 0 else value


# ----------------------------------------------------------------------------- Vote (52)


def _voter_topics(partition: Message) -> list[Message]:
    return [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]


def vote_request(*, cluster_id: str | None, voter: ReplicaKey, candidate: ReplicaKey, epoch: int,
                 last: OffsetAndEpoch, pre_vote: bool) -> Message:
    return {
        "cluster_id": cluster_id,
        "voter_id": voter.id,
        "topics": _voter_topics({
            "partition_index": METADATA_PARTITION,
            "replica_epoch": epoch,
            "replica_id": candidate.id,
            "replica_directory_id": candidate.wire_directory_id(),
            "voter_directory_id": voter.wire_directory_id(),
            "last_offset_epoch": last.epoch,
            "last_offset": last.offset,
            "pre_vote": pre_vote,
        }),
    }


def vote_response(*, error: ErrorCode, epoch: int, leader_id: int | None, granted: bool,
                  nodes: list[Message]) -> Message:
    """A BeginQuorumEpoch-shaped answer whose partition also says whether the vote is granted."""
    response = epoch_response(error=error, epoch=epoch, leader_id=leader_id, nodes=nodes)
    response["topics"][0]["partitions"][0]["vote_granted"] = granted
    return response


# ----------------------------------------------------------------- BeginQuorumEpoch (53)


def begin_quorum_epoch_request(*, cluster_id: str | None, voter: ReplicaKey, leader_id: int,
                               epoch: int, leader_endpoints: Iterable[Endpoint]) -> Message:
    return {
        "cluster_id": cluster_id,
        "voter_id": voter.id,
        "topics": _voter_topics({
            "partition_index": METADATA_PARTITION,
            "voter_directory_id": voter.wire_directory_id(),
            "leader_id": leader_id,
            "leader_epoch": epoch,
        }),
        "leader_endpoints": leader_endpoint_list(leader_endpoints),
    }


def epoch_response(*, error: ErrorCode, epoch: int, leader_id: int | None,
                   nodes: list[Message]) -> Message:
    """BeginQuorumEpoch and EndQuorumEpoch responses have the same shape."""
    return {
        "error_code": 0,
        "topics": _voter_topics({
            "partition_index": METADATA_PARTITION,
            "error_code": int(error),
            "leader_id": NO_ID if leader_id is None else leader_id,
            "leader_epoch": epoch,
        }),
        "node_endpoints": nodes,
    }


# ------------------------------------------------------------------- EndQuorumEpoch (54)


def end_quorum_epoch_request(*, cluster_id: str | None, leader_id: int, epoch: int,
                             preferred: Iterable[ReplicaKey],
                             leader_endpoints: Iterable[Endpoint]) -> Message:
    keys = list(preferred)
    return {
        "cluster_id": cluster_id,
        "topics": _voter_topics({
            "partition_index": METADATA_PARTITION,
            "leader_id": leader_id,
            "leader_epoch": epoch,
            "preferred_successors": [k.id for k in keys],  # v0
            "preferred_candidates": [  # v1
                {"candidate_id": k.id, "candidate_directory_id": k.wire_directory_id()}
                for k in keys],
        }),
        "leader_endpoints": leader_endpoint_list(leader_endpoints),
    }


def preferred_candidates(partition: Mapping[str, Any]) -> list[ReplicaKey]:
    """EndQuorumEpoch successors, from v1's `preferred_candidates` or v0's ids."""
    candidates = partition.get("preferred_candidates")
    if candidates:
        return [ReplicaKey.of(c["candidate_id"], c.get("candidate_directory_id"))
                for c in candidates]
    return [ReplicaKey(i) for i in partition.get("preferred_successors") or []]


# ----------------------------------------------------------------------------- Fetch (1)


def fetch_request(*, cluster_id: str | None, replica: ReplicaKey, epoch: int, fetch_offset: int,
                  last_fetched_epoch: int, high_watermark: int | None, max_wait_ms: int,
                  max_bytes: int) -> Message:
    return {
        "cluster_id": cluster_id,
        "replica_id": replica.id,  # v4-14
        "replica_state": {"replica_id": replica.id, "replica_epoch": -1},  # v15+
        "max_wait": max_wait_ms,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{
            "topic_id": METADATA_TOPIC_ID,
            "topic": METADATA_TOPIC,
            "partitions": [{
                "partition": METADATA_PARTITION,
                "current_leader_epoch": epoch,
                "fetch_offset": fetch_offset,
                "last_fetched_epoch": last_fetched_epoch,
                "log_start_offset": -1,
                "partition_max_bytes": max_bytes,
                "replica_directory_id": replica.wire_directory_id(),
                "high_watermark": I64_MAX if high_watermark is None else high_watermark,
            }],
        }],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def fetch_response(*, error: ErrorCode, leader_id: int | None, epoch: int,
                   high_watermark: int | None, log_start_offset: int, records: object,
                   diverging: OffsetAndEpoch | None = None,
                   snapshot_id: OffsetAndEpoch | None = None,
                   nodes: list[Message]) -> Message:
    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{
            "topic_id": METADATA_TOPIC_ID,
            "topic": METADATA_TOPIC,
            "partitions": [{
                "partition_index": METADATA_PARTITION,
                "error_code": int(error),
                "high_watermark": -1 if high_watermark is None else high_watermark,
                "last_stable_offset": -1,
                "log_start_offset": log_start_offset,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": records,
                "diverging_epoch": {
                    "epoch": diverging.epoch if diverging else -1,
                    "end_offset": diverging.offset if diverging else -1,
                },
                "current_leader": {
                    "leader_id": NO_ID if leader_id is None else leader_id,
                    "leader_epoch": epoch,
                },
                "snapshot_id": {
                    "end_offset": snapshot_id.offset if snapshot_id else -1,
                    "epoch": snapshot_id.epoch if snapshot_id else -1,
                },
            }],
        }],
        "node_endpoints": nodes,
    }


# ---------------------------------------------------------------------- DescribeQuorum (55)


def describe_quorum_request() -> Message:
    return {"topics": [{"topic_name": METADATA_TOPIC,
                        "partitions": [{"partition_index": METADATA_PARTITION}]}]}


# A partition-level DescribeQuorum error as Kafka's (singletonErrorResponse): the other
# fields keep the message's defaults, 0 (not -1) for the leader, epoch and high watermark
_ERROR_PARTITION: Message = {"error_message": None, "leader_id": 0, "leader_epoch": 0,
                    "high_watermark": 0, "current_voters": [], "observers": []}


def describe_quorum_error(error: ErrorCode, request: Mapping[str, Any] | None = None) -> Message:
    """Partition-level error; for a wrong topic-partition, echo what was asked."""
    topics: list[Message] = []
    if request is not None:
        for t in request.get("topics") or []:
            topics.append({"topic_name": t.get("topic_name", ""), "partitions": [
                {"partition_index": p.get("partition_index", 0), "error_code": int(error),
                 **_ERROR_PARTITION}
                for p in t.get("partitions") or []]})
    else:
        topics = _voter_topics({"partition_index": METADATA_PARTITION,
                                "error_code": int(error), **_ERROR_PARTITION})
    return {"error_code": 0, "error_message": None, "topics": topics, "nodes": []}


def describe_quorum_response(*, leader_id: int, epoch: int, high_watermark: int | None,
                             voters: list[Message], observers: list[Message],
                             nodes: list[Message]) -> Message:
    return {
        "error_code": 0,
        "error_message": None,
        "topics": _voter_topics({
            "partition_index": METADATA_PARTITION,
            "error_code": 0,
            "error_message": None,
            "leader_id": leader_id,
            "leader_epoch": epoch,
            "high_watermark": -1 if high_watermark is None else high_watermark,
            "current_voters": voters,
            "observers": observers,
        }),
        "nodes": nodes,
    }


def replica_state(key: ReplicaKey, end_offset: int | None, last_fetch_ms: int,
                  last_caught_up_ms: int) -> Message:
    return {
        "replica_id": key.id,
        "replica_directory_id": key.wire_directory_id(),
        "log_end_offset": -1 if end_offset is None else end_offset,
        "last_fetch_timestamp": last_fetch_ms,
        "last_caught_up_timestamp": last_caught_up_ms,
    }


# ---------------------------------------------------------------------- FetchSnapshot (59)


def fetch_snapshot_response(*, error: ErrorCode, leader_id: int | None, epoch: int,
                            snapshot_id: OffsetAndEpoch | None = None, size: int = 0,
                            position: int = 0, chunk: bytes = b"", nodes: list[Message],
                            topic: str = METADATA_TOPIC,
                            partition: int = METADATA_PARTITION) -> Message:
    return {
        "throttle_time": 0,
        "error_code": 0,
        "topics": [{"name": topic, "partitions": [{
            "index": partition,
            "error_code": int(error),
            "snapshot_id": {"end_offset": snapshot_id.offset if snapshot_id else -1,
                            "epoch": snapshot_id.epoch if snapshot_id else -1},
            "current_leader": {"leader_id": NO_ID if leader_id is None else leader_id,
                               "leader_epoch": epoch},
            "size": size,
            "position": position,
            "unaligned_records": chunk,
        }]}],
        "node_endpoints": nodes,
    }


# ------------------------------------------- AddRaftVoter (80), RemoveRaftVoter (81), UpdateRaftVoter (82)


def listener_list(endpoints: Iterable[Endpoint]) -> list[Message]:
    """AddRaftVoter/UpdateRaftVoter `listeners`."""
    return [{"name": e.name, "host": e.host, "port": e.port} for e in endpoints]


def add_raft_voter_request(*, cluster_id: str | None, voter: ReplicaKey, timeout_ms: int,
                           endpoints: Iterable[Endpoint], ack_when_committed: bool) -> Message:
    return {"cluster_id": cluster_id, "timeout": timeout_ms, "voter_id": voter.id,
            "voter_directory_id": voter.wire_directory_id(),
            "listeners": listener_list(endpoints), "ack_when_committed": ack_when_committed}


def api_versions_request() -> Message:
    """What a leader asks a replica named by AddRaftVoter (its kraft.version range)."""
    return {"client_software_name": "strom", "client_software_version": strom.__version__}


def supported_range(response: Mapping[str, Any], feature: str) -> tuple[int, int]:
    """An ApiVersions answer's supported range of `feature` ((0, 0) when not listed, as
    Kafka reads it)."""
    for f in response.get("supported_features") or []:
        if f.get("name") == feature:
            return int(f.get("min_version", 0)), int(f.get("max_version", 0))
    return 0, 0


def remove_raft_voter_request(*, cluster_id: str | None, voter: ReplicaKey) -> Message:
    return {"cluster_id": cluster_id, "voter_id": voter.id,
            "voter_directory_id": voter.wire_directory_id()}


def voter_change_response(error: ErrorCode, message: str | None = None) -> Message:
    """AddRaftVoter's and RemoveRaftVoter's answer."""
    return {"throttle_time": 0, "error_code": int(error), "error_message": message}


def update_raft_voter_request(*, cluster_id: str | None, epoch: int, voter: ReplicaKey,
                              endpoints: Iterable[Endpoint], kraft_range: tuple[int, int]
                              ) -> Message:
    return {"cluster_id": cluster_id, "current_leader_epoch": epoch, "voter_id": voter.id,
            "voter_directory_id": voter.wire_directory_id(),
            "listeners": listener_list(endpoints),
            "k_raft_version_feature": {"min_supported_version": kraft_range[0],
                                       "max_supported_version": kraft_range[1]}}


def update_raft_voter_response(*, error: ErrorCode, leader_id: int | None, epoch: int,
                               leader_endpoint: Endpoint | None) -> Message:
    return {"throttle_time": 0, "error_code": int(error), "current_leader": {
        "leader_id": NO_ID if leader_id is None else leader_id, "leader_epoch": epoch,
        "host": leader_endpoint.host if leader_endpoint is not None else "",
        "port": leader_endpoint.port if leader_endpoint is not None else -1}}
