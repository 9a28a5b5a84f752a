"""Schemas kio lacks (UnregisterController, Kafka 4.4) and the 4.4 error codes; key, version
range and error names as Kafka 4.4.0's ApiKeys and Errors give them."""

from __future__ import annotations

from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec, response_codec, supported_versions
from strom.protocol.errors import ErrorCode
from strom.protocol.header import request_header_version, response_header_version
from strom.protocol.schema import api_keys, is_flexible


def test_unregister_controller_v0() -> None:
    assert ApiKey.UNREGISTER_CONTROLLER == 94
    assert supported_versions(94) == (0, 0)
    assert is_flexible(94, 0)
    assert (request_header_version(94, 0), response_header_version(94, 0)) == (2, 1)
    assert 94 not in api_keys()  # api_keys() lists kio's APIs
    request = request_codec(94, 0)
    assert request.encode({"controller_id": 7}) == bytes.fromhex("00000007" "00")
    assert request.decode(bytes.fromhex("0000000700"))[0].controller_id == 7
    response = response_codec(94, 0)
    wire = bytes.fromhex("0000000a" "0088" "036e6f" "00")  # throttle 10, 136, "no"
    assert response.encode({"throttle_time": 10, "error_code": 136, "error_message": "no"}) == wire
    decoded = response.decode(wire)[0]
    assert (decoded.throttle_time, decoded.error_code, decoded.error_message) == (10, 136, "no")
    null_message = bytes.fromhex("00000000" "0000" "00" "00")
    assert response.encode({"error_code": 0}) == null_message
    assert response.decode(null_message)[0].error_message is None
    # the same fields as kio's UnregisterBroker response, which Kafka's JSON shares
    assert [(f.name, f.kind, f.nullable) for f in response.schema.fields] == [
        (f.name, f.kind, f.nullable) for f in response_codec(64, 0).schema.fields]


def test_kafka_4_4_error_codes() -> None:
    assert ErrorCode(134).name == "GROUP_DELETION_FAILED"
    assert ErrorCode(135).name == "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED"
    assert ErrorCode(136).name == "CONTROLLER_ID_NOT_REGISTERED"
