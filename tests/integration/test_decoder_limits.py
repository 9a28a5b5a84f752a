"""Requests with absurd counts that still fit their frame: an array of more than 1,000,000
elements, a tagged-field section of more than 10,000 fields. The broker refuses them before
decoding further and closes only that connection: another connection opened before keeps
working, and the log holds exactly what was written around the bad input."""

from __future__ import annotations

import pytest

from . import clients as kc
from .wire import (
    API_VERSIONS,
    METADATA,
    NONE,
    Conn,
    frame,
    i32,
    records_of,
    request_header_v1,
    request_header_v2,
    simple_batch,
    uvarint,
)

pytestmark = pytest.mark.timeout(90)

OVER_ARRAY = 1_000_001
OVER_TAGS = 10_001
DELETE_GROUPS = 42


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker({})


def tags(count: int) -> bytes:
    return uvarint(count) + b"".join(uvarint(t) + b"\x00" for t in range(count))


BAD_REQUESTS = {
    # Metadata v1 (hand-written decoder): a million and one empty topic names, all present
    "metadata-array": frame(request_header_v1(METADATA, 1, 7, "x") + i32(OVER_ARRAY)
                            + b"\x00\x00" * OVER_ARRAY),
    # DeleteGroups v2 (generated decoder): a million and one empty group names, all present
    "generated-array": frame(request_header_v2(DELETE_GROUPS, 2, 7, "x")
                             + uvarint(OVER_ARRAY + 1) + b"\x01" * OVER_ARRAY + b"\x00"),
    # ApiVersions v3: 10,001 empty tagged fields in the request header
    "header-tags": frame(request_header_v1(API_VERSIONS, 3, 7, "x") + tags(OVER_TAGS)
                         + b"\x01\x01\x00"),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_absurd_counts_close_only_that_connection(broker, unique_topic, name):
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic)
    with Conn(broker.bootstrap) as bystander, Conn(broker.bootstrap) as bad:
        assert bystander.produce(topic, 0, simple_batch(b"before")).error == NONE
        try:
            bad.send_raw(BAD_REQUESTS[name])
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while still writing: a close too
        else:
            assert bad.wait_closed(30), "the broker answered instead of closing"
        res = bystander.produce(topic, 0, simple_batch(b"after"))
        assert (res.error, res.base_offset) == (NONE, 1)
        fetched = bystander.fetch(topic, 0, 0)
        assert [r.value for r in records_of(fetched.records)] == [b"before", b"after"]
    with Conn(broker.bootstrap) as fresh:
        err, keys = fresh.api_versions_v0()
        assert err == NONE and METADATA in keys
