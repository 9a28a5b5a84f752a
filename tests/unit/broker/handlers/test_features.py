"""Feature levels in ApiVersions (KIP-584), as a Kafka 4.4 broker reports them.

The Java producer switches to transaction version 2 only when `transaction.version` 2 is
finalized; a v3 response lists only features whose lowest level is 1 or more (clients of
that version fail on a range starting at 0), v4 lists them all.
"""

from __future__ import annotations

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

_SOFTWARE = {"client_software_name": "unit-test", "client_software_version": "1.0"}


def _features(r) -> tuple[dict, dict]:
    supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level)
                 for f in r.finalized_features}
    return supported, finalized


def test_v4_lists_supported_and_finalized_features(broker_harness) -> None:
    r = broker_harness.request(ApiKey.API_VERSIONS, 4, _SOFTWARE)
    assert r.error_code == ErrorCode.NONE
    supported, finalized = _features(r)
    assert supported == {"group.version": (0, 1), "metadata.version": (7, 33),
                         "share.version": (0, 2), "streams.version": (0, 1),
                         "transaction.version": (0, 2)}
    assert finalized == {"group.version": (1, 1), "metadata.version": (33, 33),
                         "share.version": (2, 2), "streams.version": (1, 1),
                         "transaction.version": (2, 2)}
    assert r.finalized_features_epoch >= 0  # the Java client ignores epochs below 0


def test_v3_lists_only_features_starting_at_level_1(broker_harness) -> None:
    r = broker_harness.request(ApiKey.API_VERSIONS, 3, _SOFTWARE)
    supported, finalized = _features(r)
    assert supported == {"metadata.version": (7, 33)}
    assert finalized["transaction.version"] == (2, 2)


def test_v2_has_no_features(broker_harness) -> None:
    r = broker_harness.request(ApiKey.API_VERSIONS, 2, {})
    assert not hasattr(r, "finalized_features")


def test_transaction_v2_apis_are_offered(broker_harness) -> None:
    r = broker_harness.request(ApiKey.API_VERSIONS, 4, _SOFTWARE)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert ranges[ApiKey.END_TXN][1] >= 5
    assert ranges[ApiKey.TXN_OFFSET_COMMIT][1] >= 5
    assert ranges[ApiKey.PRODUCE][1] >= 12


def test_streams_group_apis_are_offered(broker_harness) -> None:
    """KIP-1071: StreamsGroupHeartbeat and StreamsGroupDescribe v0 (kio has no v1)."""
    r = broker_harness.request(ApiKey.API_VERSIONS, 4, _SOFTWARE)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert ranges[ApiKey.STREAMS_GROUP_HEARTBEAT] == (0, 0)
    assert ranges[ApiKey.STREAMS_GROUP_DESCRIBE] == (0, 0)
