"""Decoded requests carry every field of their API, absent ones at their schema defaults."""

from __future__ import annotations

from pathlib import Path

from strom.broker import request_types
from strom.broker.request_types_gen import generate
from strom.broker.requests import complete_request
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct, request_codec
from strom.protocol.primitives import ZERO_UUID


def _decoded(api_key: ApiKey, version: int, body: dict) -> Struct:
    codec = request_codec(api_key, version)
    request, _ = codec.decode(codec.encode(body))
    complete_request(api_key, version, request)
    return request


def test_the_generated_request_types_are_up_to_date() -> None:
    current = Path(request_types.__file__).read_text()
    assert current == generate(), (
        "run: python -m strom.broker.request_types_gen > src/strom/broker/request_types.py")


def test_fields_of_other_versions_get_their_defaults() -> None:
    r = _decoded(ApiKey.JOIN_GROUP, 0, {"group_id": "g", "session_timeout": 10, "protocols": []})
    assert (r.group_instance_id, r.reason, r.rebalance_timeout) == (None, None, -1)


def test_nested_fields_are_completed_in_every_element() -> None:
    r = _decoded(ApiKey.OFFSET_COMMIT, 2, {"group_id": "g", "topics": [
        {"name": "a", "partitions": [{"partition_index": 0}, {"partition_index": 1}]},
        {"name": "b", "partitions": []}]})
    assert [t.topic_id for t in r.topics] == [ZERO_UUID, ZERO_UUID]
    assert [p.committed_leader_epoch for p in r.topics[0].partitions] == [-1, -1]
    assert r.group_instance_id is None
    assert r.retention_time == -1  # on the wire in v2: decoded as sent (its default here)


def test_fields_on_the_wire_are_left_alone() -> None:
    r = _decoded(ApiKey.OFFSET_COMMIT, 4, {"group_id": "g", "retention_time": 5000, "topics": []})
    assert r.retention_time == 5000


def test_list_defaults_are_private_to_each_request() -> None:
    first = _decoded(ApiKey.LIST_GROUPS, 0, {})
    second = _decoded(ApiKey.LIST_GROUPS, 0, {})
    assert first.states_filter == [] and first.types_filter == []
    first.states_filter.append("Stable")
    assert second.states_filter == []


def test_the_latest_version_lacks_only_removed_fields() -> None:
    r = _decoded(ApiKey.OFFSET_FETCH, 9, {"groups": [{"group_id": "g", "topics": None}]})
    assert (r.group_id, r.topics) == ("", None)  # v0-7's single group, defaults as in v7
