"""A pytest plugin for the run of confluent-kafka-python's own schema-registry integration tests
that tests/integration/registry/test_confluent_python_suite.py starts against Strom (loaded there
with ``-p strom_byo_plugin``; it is not a test module of Strom's suite).

- Their tests that Strom's run leaves out are the explicit list in the JSON file named by
  STROM_CKP_SKIPS (test id or id prefix -> reason), written by that test from its SKIPS: they are
  deselected here, and an entry that matches none of their collected tests stops the run (the
  pinned copy changed; the list must follow it).
- Their ByoFixture has no ``async_schema_registry`` (only their trivup fixture has it), which
  every test of theirs under schema_registry/_async asks for: when it is missing, it is added
  here, returning their async client for the same URL as ``schema_registry()`` does for the sync
  one. Nothing else of theirs is changed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

SKIPS_ENV = "STROM_CKP_SKIPS"


def matches(entry: str, nodeid: str) -> bool:
    """A skip entry names one test id, or a prefix of ids: a file, or a test's parametrizations."""
    return nodeid == entry or nodeid.startswith((entry + "::", entry + "["))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skips: dict[str, str] = json.loads(Path(os.environ[SKIPS_ENV]).read_text())
    used: set[str] = set()
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        entry = next((e for e in skips if matches(e, item.nodeid)), None)
        if entry is None:
            keep.append(item)
        else:
            used.add(entry)
            dropped.append(item)
    stale = sorted(set(skips) - used)
    if stale:
        raise pytest.UsageError(f"skip entries that match none of their tests: {stale}")
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
    _give_byo_fixture_an_async_client()


def _give_byo_fixture_an_async_client() -> None:
    fixtures = sys.modules.get("tests.integration.cluster_fixture")
    byo: Any = getattr(fixtures, "ByoFixture", None)
    if byo is None or hasattr(byo, "async_schema_registry"):
        return
    from confluent_kafka.schema_registry import AsyncSchemaRegistryClient

    def async_schema_registry(self: Any, conf: dict[str, Any] | None = None) -> Any:
        if self._sr_url is None:
            raise RuntimeError("No Schema-registry available in Byo cluster")
        return AsyncSchemaRegistryClient({"url": self._sr_url, **(conf or {})})

    byo.async_schema_registry = async_schema_registry
