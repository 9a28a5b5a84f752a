"""Fixtures that run real ``strom broker`` processes for integration tests.

Contract (other test modules rely on it):
- ``free_port()`` and ``BrokerProcess`` (importable from here or from ``.broker``).
- ``strom_broker``: one default broker per test module (auto-create on).
- ``make_broker(overrides=None, data_dir=None) -> BrokerProcess``: a started broker with special config;
  every process it started is stopped after the test. ``make_module_broker`` is the same per module.
- ``kcat``: a ``Kcat`` (``.path``, ``.env``, ``.run(*args, input=...)``) that runs the Debian kcat binary
  against the librdkafka 2.16 bundled in the confluent-kafka wheel.
- ``unique_topic(prefix="")``: a new topic name, unique per call.
When a test fails, the part of every broker's log written during that test is added to its report.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .broker import ALL_BROKERS, BrokerProcess, free_port, running_peer

__all__ = ["BrokerProcess", "Kcat", "free_port"]

# Tests form groups quickly; production keeps Kafka's 3 s initial rebalance delay.
DEFAULT_OVERRIDES = {"auto.create.topics.enable": "true", "group.initial.rebalance.delay.ms": "0"}
_LOG_MARKS = pytest.StashKey[dict[int, int]]()


# --------------------------------------------------------------------------- logs in failure reports


def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_LOG_MARKS] = {id(b): b.log_size() for b in ALL_BROKERS}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and report.when in ("setup", "call"):
        marks = item.stash.get(_LOG_MARKS, {})
        for b in ALL_BROKERS:
            since = marks.get(id(b), 0)
            if b.log_size() > since:
                report.sections.append((f"broker log {b.name} {b.bootstrap}", b.log_text(since)))
    return report


# --------------------------------------------------------------------------- brokers


class _Launcher:
    """Starts brokers and remembers them so each one is stopped at the end of its scope."""

    def __init__(self, factory: pytest.TempPathFactory, label: str) -> None:
        self.factory = factory
        self.label = label
        self.brokers: list[BrokerProcess] = []

    def __call__(
        self, overrides: dict[str, object] | None = None, data_dir: Path | str | None = None
    ) -> BrokerProcess:
        merged: dict[str, object] = dict(DEFAULT_OVERRIDES)
        merged.update(overrides or {})
        name = f"{self.label}-{len(self.brokers)}"
        broker = BrokerProcess(self.factory.mktemp(name), data_dir=data_dir, name=name)
        self.brokers.append(broker)
        return broker.start(merged)

    def stop_all(self) -> None:
        errors = []
        for b in self.brokers:
            try:
                b.stop()
            except Exception as e:  # keep stopping the others
                errors.append(e)
        if errors:
            raise errors[0]


def _label(node: pytest.Item | pytest.Collector) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", node.name)[:40].strip("-") or "broker"


@pytest.fixture(scope="module")
def strom_broker(tmp_path_factory: pytest.TempPathFactory, request) -> Iterator[BrokerProcess]:
    launcher = _Launcher(tmp_path_factory, _label(request.node))
    try:
        yield launcher()
    finally:
        launcher.stop_all()


@pytest.fixture
def make_broker(tmp_path_factory, request) -> Iterator[Callable[..., BrokerProcess]]:
    launcher = _Launcher(tmp_path_factory, _label(request.node))
    try:
        yield launcher
    finally:
        launcher.stop_all()


@pytest.fixture(scope="module")
def make_module_broker(tmp_path_factory, request) -> Iterator[Callable[..., BrokerProcess]]:
    launcher = _Launcher(tmp_path_factory, _label(request.node))
    try:
        yield launcher
    finally:
        launcher.stop_all()


@pytest.fixture
def peer() -> str | None:
    """'tansu' when the suite runs against the stand-in broker (for xfail markers), else None."""
    return running_peer()


# --------------------------------------------------------------------------- topics


@pytest.fixture
def unique_topic(request) -> Callable[[str], str]:
    """``unique_topic(prefix="")`` -> a topic name no other test (or call) uses."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60].strip("-")

    def make(prefix: str = "") -> str:
        parts = [p for p in (prefix, base, uuid.uuid4().hex[:8]) if p]
        return ".".join(parts)

    return make


# --------------------------------------------------------------------------- kcat


@dataclass(frozen=True)
class Kcat:
    """The kcat binary plus the environment that makes it load librdkafka 2.16."""

    path: str
    env: dict[str, str]

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def run(
        self, *args: str, input: bytes | None = None, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run(
            [self.path, *args], input=input, env=self.env, capture_output=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kcat {' '.join(args)} exited {proc.returncode}\n"
                f"stdout: {proc.stdout.decode(errors='replace')}\n"
                f"stderr: {proc.stderr.decode(errors='replace')}"
            )
        return proc


def _bundled_librdkafka() -> Path | None:
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    return found[0] if found else None


@pytest.fixture(scope="session")
def kcat(tmp_path_factory: pytest.TempPathFactory) -> Kcat:
    path = shutil.which("kcat")
    if path is None:
        pytest.skip("kcat is not installed (Debian package kcat; `make test` installs it)")
    lib = _bundled_librdkafka()
    if lib is None:
        pytest.fail("confluent-kafka wheel has no bundled librdkafka (confluent_kafka.libs)")
    # kcat asks the loader for librdkafka.so.1; the wheel's copy has a hashed name.
    libdir = tmp_path_factory.mktemp("kcat-lib")
    (libdir / "librdkafka.so.1").symlink_to(lib)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(libdir), env.get("LD_LIBRARY_PATH", "")) if p
    )
    version = subprocess.run([path, "-V"], env=env, capture_output=True, timeout=30)
    assert b"librdkafka 2.16" in version.stdout + version.stderr, version
    return Kcat(path, env)
