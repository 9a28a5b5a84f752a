"""Version-exact error codes: the table and the in-place rewrite of response mappings."""

from __future__ import annotations

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct
from strom.protocol.error_versions import (
    downgrade_errors,
    first_exact_version,
    for_version,
    needs_downgrade,
)
from strom.protocol.errors import ErrorCode

FENCED, OLD_EPOCH = ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH


@pytest.mark.parametrize(("api_key", "old_versions", "new_version"), [
    (ApiKey.INIT_PRODUCER_ID, range(0, 4), 4),
    (ApiKey.ADD_PARTITIONS_TO_TXN, range(0, 2), 2),
    (ApiKey.ADD_OFFSETS_TO_TXN, range(0, 2), 2),
    (ApiKey.END_TXN, range(0, 2), 2),
])
def test_producer_fenced_is_invalid_producer_epoch_before_kip_588(api_key, old_versions,
                                                                   new_version) -> None:
    for version in old_versions:
        assert for_version(api_key, version, FENCED) == OLD_EPOCH
    assert for_version(api_key, new_version, FENCED) == FENCED
    assert for_version(api_key, 0, ErrorCode.NOT_COORDINATOR) == ErrorCode.NOT_COORDINATOR


@pytest.mark.parametrize(("api_key", "code", "first", "older"), [
    (ApiKey.PRODUCE, ErrorCode.TRANSACTION_ABORTABLE, 11, ErrorCode.INVALID_TXN_STATE),
    (ApiKey.TXN_OFFSET_COMMIT, ErrorCode.TRANSACTION_ABORTABLE, 4, ErrorCode.INVALID_TXN_STATE),
    (ApiKey.FETCH, ErrorCode.KAFKA_STORAGE_ERROR, 6, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (ApiKey.LIST_OFFSETS, ErrorCode.OFFSET_NOT_AVAILABLE, 5, ErrorCode.LEADER_NOT_AVAILABLE),
    (ApiKey.DELETE_TOPICS, ErrorCode.TOPIC_DELETION_DISABLED, 3, ErrorCode.INVALID_REQUEST),
])
def test_newer_codes_reach_only_the_versions_that_define_them(api_key, code, first,
                                                               older) -> None:
    assert for_version(api_key, first - 1, code) == older
    assert for_version(api_key, first, code) == code
    assert needs_downgrade(api_key, first - 1)
    assert not needs_downgrade(api_key, first_exact_version(api_key))


def test_apis_without_rules_are_left_alone() -> None:
    assert not needs_downgrade(ApiKey.METADATA, 0)
    assert for_version(ApiKey.METADATA, 0, FENCED) == FENCED


def test_downgrade_rewrites_nested_error_codes_copying_what_changes() -> None:
    untouched = {"name": "u", "results_by_partition": [{"partition_index": 9, "error_code": 0}]}
    response = {"throttle_time": 0, "results_by_topic_v3_and_below": [
        {"name": "t", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": FENCED, "error_code": FENCED},
            Struct(partition_index=1, error_code=int(FENCED))]}, untouched],
        "error_code": FENCED}
    out = downgrade_errors(ApiKey.ADD_PARTITIONS_TO_TXN, 1, response)
    partitions = out["results_by_topic_v3_and_below"][0]["results_by_partition"]
    assert out["error_code"] == OLD_EPOCH
    assert partitions[0]["error_code"] == partitions[0]["partition_error_code"] == OLD_EPOCH
    assert partitions[0]["partition_index"] == 0
    assert partitions[1].error_code == OLD_EPOCH
    assert out["results_by_topic_v3_and_below"][1] is untouched  # nothing to copy there
    # the handler's reply is left as it was (a coordinator may answer a retry with it again)
    assert response["error_code"] == FENCED
    assert response["results_by_topic_v3_and_below"][0]["results_by_partition"][1].error_code \
        == FENCED


def test_downgrade_leaves_new_versions_and_clean_replies_untouched() -> None:
    response = {"error_code": FENCED}
    assert downgrade_errors(ApiKey.END_TXN, 2, response) is response
    clean = {"error_code": 0, "topics": [{"error_code": 0}]}
    assert downgrade_errors(ApiKey.END_TXN, 1, clean) is clean
    assert response == {"error_code": FENCED}
