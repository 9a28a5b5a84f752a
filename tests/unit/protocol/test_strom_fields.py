"""Strom's own tagged fields on Kafka messages: the end of a share record's redelivery delay
(`not_before_ms`) in the StateBatches of ReadShareGroupState's response and WriteShareGroupState's
request. Unset, the bytes are kio's (Kafka's); set, it round-trips between Strom brokers, and a
decoder that does not know the tag (Kafka's) reads the rest unchanged."""

from __future__ import annotations

import uuid

import pytest

from strom.protocol.codec import Struct, request_codec, response_codec
from strom.protocol.primitives import write_uvarint
from strom.protocol.schema import STROM_NOT_BEFORE_TAG, load_schema

WRITE, READ = 85, 84


def write_body(batches: list[dict]) -> dict:
    return {"group_id": "g", "topics": [{"topic_id": uuid.uuid4(), "partitions": [
        {"partition": 0, "state_epoch": 1, "leader_epoch": 2, "start_offset": 10,
         "state_batches": batches}]}]}


def batches_of(value: Struct) -> list[tuple[int, int]]:
    return [(b.first_offset, b.not_before_ms)
            for b in value.topics[0].partitions[0].state_batches]


@pytest.mark.parametrize("version", [0, 1])
def test_write_share_group_state_carries_not_before(version):
    codec = request_codec(WRITE, version)
    plain = write_body([{"first_offset": 10, "last_offset": 12, "delivery_state": 0,
                         "delivery_count": 1}])
    held = write_body([{**plain["topics"][0]["partitions"][0]["state_batches"][0],
                        "not_before_ms": 1_700_000_000_000}])
    held["topics"][0]["topic_id"] = plain["topics"][0]["topic_id"]
    wire = codec.encode(held)
    assert batches_of(codec.decode(wire)[0]) == [(10, 1_700_000_000_000)]
    assert batches_of(codec.decode(codec.encode(plain))[0]) == [(10, 0)]
    # the only difference is the one tagged field: its tag (3 bytes), size (1) and value (8)
    tag = write_uvarint(STROM_NOT_BEFORE_TAG) + b"\x08" + (1_700_000_000_000).to_bytes(8, "big")
    plain_wire = codec.encode(plain)
    at = wire.index(tag) - 1  # the batch's tag count, 1 here, 0 without the field
    assert wire[:at] == plain_wire[:at] and wire[at:at + 1] == b"\x01"
    assert wire[at + 1 + len(tag):] == plain_wire[at + 1:]


def test_read_share_group_state_response_carries_not_before():
    codec = response_codec(READ, 0)
    body = {"results": [{"topic_id": uuid.uuid4(), "partitions": [
        {"partition": 0, "error_code": 0, "state_epoch": 1, "start_offset": 10,
         "state_batches": [{"first_offset": 10, "last_offset": 10, "delivery_state": 0,
                            "delivery_count": 2, "not_before_ms": 5}]}]}]}
    value = codec.decode(codec.encode(body))[0]
    assert value.results[0].partitions[0].state_batches[0].not_before_ms == 5


def test_only_the_share_state_batches_have_it():
    names = {f.name for f in load_schema(WRITE, 1, "request").fields[-1].struct.fields}
    assert "not_before_ms" not in names  # it is tagged, not a plain field
    flagged = [f for f in load_schema(WRITE, 1, "request").all_fields() if f.strom]
    assert flagged == []  # the top level is Kafka's
