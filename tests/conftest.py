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


# ----------------------------------------------------------------------------- time budgets

# Seconds of test time (setup, call and teardown summed over a suite's tests, on the 2-core
# machine `make test` is made for) each suite may take. `make test` must finish in 20 minutes
# (issue 29), so each suite has its share; under CI=true a suite over its budget fails the run,
# naming it. The longest matching prefix is a test's suite.
# The budgets below are a fresh clone's `make test` on 3 workers (2026-11-28: 2,924 s of test
# time, 16.9 min, while other work loaded the machine) plus about 40% for a noisy machine. The 20
# minutes with every open issue's tests need about 3,400 s of test time on 3 workers: these
# budgets are a ratchet on the way there.
SUITE_BUDGETS_S: dict[str, float] = {
    "tests/unit/": 215,  # + the HTTP API's formats and the lake writer's units (issues 32, 33)
    "tests/integration/": 700,  # the files directly in tests/integration
    # the cluster suite runs on KRaft nodes (issue 30): each cluster starts with an election
    # and the brokers' registrations (about 2 s more than on ZooKeeper); a ZooKeeper smoke
    # test, ZooKeeper's own tests and the migration from it come on top
    "tests/integration/cluster/": 1200,
    "tests/integration/spark/": 490,
    "tests/integration/docs/": 340,  # + docs/schemas.md's walk-through (issue 31)
    "tests/integration/kafka_tools/": 330,
    "tests/integration/frameworks/": 390,
    "tests/integration/java/": 250,  # Strom's runs only (the Kafka side: make java-on-kafka)
    "tests/integration/share/": 260,
    "tests/integration/security/": 90,
    "tests/integration/quotas/": 75,
    "tests/integration/console/": 60,
    "tests/integration/registry/": 90,  # issue 31 (its cluster test counts under cluster/)
    "tests/integration/rest/": 90,  # issue 32 asks for 60 s in all (its docs page included)
    "tests/integration/lake/": 100,  # issue 33's Iceberg topics, REST catalog included (its
    # Spark test counts under spark/; the REST catalog's first build fetches 80 MB with Maven);
    # 39 s alone, 80-92 s in fresh-clone runs (its writer runs at nice 10: load slows it most)
    "tests/integration/metrics/": 65,
}
_spent: dict[str, float] = {}


def suite_of(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    matches = [p for p in SUITE_BUDGETS_S if path.startswith(p)]
    return max(matches, key=len) if matches else None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    suite = suite_of(report.nodeid)
    if suite is not None:
        _spent[suite] = _spent.get(suite, 0.0) + report.duration


def over_budget(spent: dict[str, float]) -> list[str]:
    return [f"{suite}: {spent[suite]:.0f} s of test time, over its budget of {budget:.0f} s"
            for suite, budget in SUITE_BUDGETS_S.items() if spent.get(suite, 0.0) > budget]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller sums them all
        return
    over = over_budget(_spent)
    if not over:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    enforced = os.environ.get("CI", "").lower() in ("true", "1", "yes")
    for line in over:
        if reporter is not None:
            reporter.write_line(("FAILED " if enforced else "note: ") + "time budget: " + line)
    if enforced and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0 loads its protocol schemas through deprecated importlib.resources calls.
    config.addinivalue_line(
        "filterwarnings", r"ignore:(read_text|open_text) is deprecated:DeprecationWarning"
    )


# --------------------------------------------------------------------------- pytest-xdist

# `make test` runs the suite on 3 pytest-xdist workers with `--dist loadfile`: each test file runs
# whole on one worker (its module-scoped brokers, the Java run's shared results). The files that
# load the machine most (Spark, Kafka Streams and Connect JVMs, the Java client's Maven runs, the
# nemesis) or measure rates (client quotas) are grouped besides into two units of about the same
# length, each run one file after another on one worker: so at most two of them run at once, and
# Spark never beside the Java suite nor the Streams/Connect JVMs beside the nemesis.
SERIAL_HEAVY: dict[str, tuple[str, ...]] = {
    "heavy-spark-java": (
        "tests/integration/spark/",
        "tests/integration/java/",
    ),
    "heavy-frameworks-faults": (
        "tests/integration/frameworks/",
        "tests/integration/cluster/test_failover.py",
        "tests/integration/cluster/test_jepsen.py",
        "tests/integration/quotas/test_throttling.py",
    ),
}


def heavy_unit(path: str) -> str | None:
    """The SERIAL_HEAVY unit a test file belongs to, if any."""
    return next((unit for unit, prefixes in SERIAL_HEAVY.items() if path.startswith(prefixes)),
                None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile``, with each SERIAL_HEAVY group as one unit of work (xdist sends out the
    units with the most tests first, so these start at once)."""
    if config.getoption("dist", "no") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return heavy_unit(path) or path

    return Scheduling(config, log)


# ----------------------------------------------------------------------------- CPU per file

# STROM_TEST_CPU=<file>: append one line per test file, "<cpu seconds>\t<wall seconds>\t<path>",
# the CPU being this process's plus every reaped child's (brokers, JVMs, Maven, Spark) over the
# file's tests: where the suite's machine time goes, which wall time alone does not show.
_CPU_REPORT = os.environ.get("STROM_TEST_CPU", "")
_cpu_spent: dict[str, list[float]] = {}


def _cpu_now() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if not _CPU_REPORT:
        return (yield)
    import time

    cpu, wall = _cpu_now(), time.monotonic()
    try:
        return (yield)
    finally:
        spent = _cpu_spent.setdefault(item.nodeid.split("::", 1)[0], [0.0, 0.0])
        spent[0] += _cpu_now() - cpu
        spent[1] += time.monotonic() - wall


def pytest_unconfigure(config: pytest.Config) -> None:
    if _CPU_REPORT and _cpu_spent:
        with open(_CPU_REPORT, "a") as out:
            for path, (cpu, wall) in _cpu_spent.items():
                out.write(f"{cpu:.1f}\t{wall:.1f}\t{path}\n")
