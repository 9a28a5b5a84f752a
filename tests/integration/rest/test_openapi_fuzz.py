"""The OpenAPI document at /openapi.json against the live HTTP API (issue 32 point 4):
schemathesis generates requests for every operation from the document (fixed seed, bounded
examples and wall time) and checks each answer: never a 5xx, the status is one the document
lists, and the body matches the document's schema for it."""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)


@pytest.fixture(scope="module")
def rest_broker(make_module_broker):
    """A broker of its own: the fuzzer deletes topics (`_schemas` too) and changes configs."""
    from .conftest import REST_OVERRIDES

    return make_module_broker(REST_OVERRIDES)


BUDGET_S = 45.0  # the whole fuzz run, all operations together
EXAMPLES = 12  # per operation
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
STREAMING = ("/events",)  # Server-Sent Events never end: fuzzed by their own test


def test_every_operation_answers_as_its_document_says(rest) -> None:
    schema = schemathesis.openapi.from_url(f"{rest.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    deadline = time.monotonic() + BUDGET_S
    failures: list[str] = []
    checked = 0
    for operation in sorted(operations, key=lambda op: op.label):
        if operation.path.endswith(STREAMING) or time.monotonic() > deadline:
            continue

        @seed(32)
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def fuzz(case) -> None:
            if time.monotonic() > deadline:
                return
            case.call_and_validate(base_url=rest.url, checks=CHECKS, timeout=10)

        try:
            fuzz()
            checked += 1
        except Exception as exc:  # a failed check: collect them all, then fail once
            failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert not failures, "\n\n".join(failures)
    if checked < len(operations) - 2:
        pytest.fail(f"only {checked} of {len(operations)} operations fuzzed in {BUDGET_S:.0f} s")
