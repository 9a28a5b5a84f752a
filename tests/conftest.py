"""Test-wide hooks shared by unit and integration tests."""

from __future__ import annotations

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on the item (``item.rep_setup``/``rep_call``/``rep_teardown``) so
    fixtures can tell in their teardown whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0 loads its protocol schemas through deprecated importlib.resources calls.
    config.addinivalue_line(
        "filterwarnings", r"ignore:(read_text|open_text) is deprecated:DeprecationWarning"
    )
