"""ApiVersions, and the router's answers to versions and APIs it does not serve."""

from __future__ import annotations

import pytest

from strom.broker.context import CloseConnection
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec, response_codec
from strom.protocol.errors import ErrorCode, ProtocolError


def test_lists_every_served_api_with_its_version_range(broker_harness) -> None:
    r = broker_harness.request(ApiKey.API_VERSIONS, 3, {
        "client_software_name": "unit-test", "client_software_version": "1.0"})
    assert r.error_code == ErrorCode.NONE
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    # Kafka 4.4 advertises Produce from v0 (KAFKA-18659) though it closes v0-2 connections
    assert ranges[ApiKey.PRODUCE] == (0, 13)
    assert ranges[ApiKey.FETCH] == (4, 18)
    assert ranges[ApiKey.LIST_OFFSETS] == (1, 11)
    assert ranges[ApiKey.API_VERSIONS] == (0, 4)
    assert ApiKey.CONSUMER_GROUP_HEARTBEAT in ranges
    assert ranges[ApiKey.SASL_HANDSHAKE] == (0, 1)  # Kafka lists them on every listener
    assert ApiKey.CREATE_DELEGATION_TOKEN not in ranges  # nothing advertised that is not served


def test_an_unknown_version_is_answered_in_v0_with_unsupported_version(broker_harness) -> None:
    # Kafka (KIP-511): a too-new ApiVersions gets a v0 response with UNSUPPORTED_VERSION and
    # the supported ranges, so the client can retry with a version both sides know
    body = broker_harness.send_frame(ApiKey.API_VERSIONS, 99, b"")
    r, _ = response_codec(ApiKey.API_VERSIONS, 0).decode(body)
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(k.api_key == ApiKey.METADATA for k in r.api_keys)


def test_an_unsupported_version_of_another_api_closes_the_connection(broker_harness) -> None:
    # Kafka cannot parse the request either and closes the connection
    with pytest.raises(ProtocolError):
        broker_harness.send_frame(ApiKey.FETCH, 3, b"")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_close_the_connection(broker_harness, version: int) -> None:
    # advertised (as Kafka 4.4 does) but removed by KIP-896: Kafka 4.4 closes the connection
    with pytest.raises(CloseConnection):
        broker_harness.send_frame(ApiKey.PRODUCE, version, b"\x00\x01\x00\x00\x13\x88")


def test_an_unknown_api_key_closes_the_connection(broker_harness) -> None:
    with pytest.raises(ProtocolError):
        broker_harness.send_frame(9999, 0, b"")


def test_a_malformed_body_closes_the_connection(broker_harness) -> None:
    with pytest.raises(ProtocolError):
        broker_harness.send_frame(ApiKey.API_VERSIONS, 3, b"\x05ab")  # name says 4 bytes


def test_an_invalid_client_software_name_is_invalid_request(broker_harness) -> None:
    # Kafka: ApiVersionsRequest.isValid() checks both fields against
    # [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])? and answers INVALID_REQUEST otherwise
    r = broker_harness.request(ApiKey.API_VERSIONS, 3, {
        "client_software_name": "-bad name-", "client_software_version": "1.0"})
    assert r.error_code == ErrorCode.INVALID_REQUEST


def test_every_served_api_answers_a_minimal_request_at_its_newest_version(broker_harness) -> None:
    """Smoke: each handler decodes, runs and encodes a reply for an empty-ish request."""
    routes = broker_harness.router.api_versions()
    for api_key, _, max_version in routes:
        body = request_codec(api_key, max_version).encode({})
        reply = broker_harness.send_frame(api_key, max_version, body)
        if reply is None:  # only a Produce with acks=0 has no reply; {} means acks=0
            assert api_key == ApiKey.PRODUCE
            continue
        _, pos = response_codec(api_key, max_version).decode(reply)
        assert pos == len(reply), ApiKey(api_key).name


@pytest.mark.parametrize("name, version", [("ok", "bad version"), ("", "1.0"), ("a.", "1")])
def test_each_software_field_must_match_kafkas_pattern(broker_harness, name, version) -> None:
    r = broker_harness.request(ApiKey.API_VERSIONS, 4, {
        "client_software_name": name, "client_software_version": version})
    assert (r.error_code, list(r.api_keys)) == (ErrorCode.INVALID_REQUEST, [])


def test_valid_software_fields_get_the_cached_reply(broker_harness) -> None:
    h = broker_harness
    body = request_codec(ApiKey.API_VERSIONS, 3).encode({
        "client_software_name": "confluent-kafka-python", "client_software_version": "2.6.1-rdkafka-2.6.1"})
    assert h.send_frame(ApiKey.API_VERSIONS, 3, body) == h.router.api_versions_reply(3)


def test_v2_carries_no_software_fields_to_check(broker_harness) -> None:
    assert broker_harness.request(ApiKey.API_VERSIONS, 2, {}).error_code == ErrorCode.NONE
