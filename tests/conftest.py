"""Test-wide hooks shared by unit and integration tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Property tests check what they compute, never how fast: no per-example deadline (Hypothesis's
# 200 ms default fails an example that a loaded CI machine merely runs slowly).
settings.register_profile("strom", deadline=None)
settings.load_profile("strom")


# Pointing the suite at another broker (Tansu, Kafka) skips what that broker lacks, by design.
PEER_ENVS = ("STROM_IT_PEER_TANSU", "STROM_SHARE_BROKER")


def skips_fail() -> bool:
    """Under CI=true a skip is a failure: every skip in Strom's own suite means a tool, package
    or privilege is missing, and a run that hides it is not a pass (issue 29). Runs against a
    peer broker keep their skips."""
    if os.environ.get("CI", "").lower() not in ("true", "1", "yes"):
        return False
    return not any(os.environ.get(e, "") not in ("", "strom") for e in PEER_ENVS)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on the item (``item.rep_setup``/``rep_call``/``rep_teardown``) so
    fixtures can tell in their teardown whether the test failed; under CI=true turn a skip into
    a failure naming what was missing (see `skips_fail`)."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and skips_fail():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which allows no skip: {reason}"
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0 loads its protocol schemas through deprecated importlib.resources calls.
    config.addinivalue_line(
        "filterwarnings", r"ignore:(read_text|open_text) is deprecated:DeprecationWarning"
    )


# --------------------------------------------------------------------------- pytest-xdist

# `make test` runs the suite on 2 pytest-xdist workers with `--dist loadfile`: each test file runs
# whole on one worker (its module-scoped brokers, the Java run's shared results). These files are
# one unit besides: they run one after another on a single worker, never beside each other. They
# are the ones that load the machine most (Spark, Kafka Streams and Connect JVMs, the Java
# client's Maven runs, the nemesis) or measure rates (client quotas).
SERIAL_HEAVY = (
    "tests/integration/spark/",
    "tests/integration/frameworks/",
    "tests/integration/java/",
    "tests/integration/cluster/test_failover.py",
    "tests/integration/cluster/test_jepsen.py",
    "tests/integration/quotas/test_throttling.py",
)
HEAVY_UNIT = "serial-heavy"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile``, with the SERIAL_HEAVY files as one unit of work (xdist sends out the
    units with the most tests first, so this one starts at once)."""
    if config.getoption("dist", "no") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return HEAVY_UNIT if path.startswith(SERIAL_HEAVY) else path

    return Scheduling(config, log)
