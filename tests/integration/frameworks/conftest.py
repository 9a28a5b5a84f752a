"""Fixtures of the frameworks tests (Kafka Streams, Connect, MirrorMaker 2 on Strom).

- ``framework_libs``: the cached jar directory of compat/java/frameworks/pom.xml (fetched once).
- ``streams_classes``: the Streams applications of compat/java/frameworks/src compiled against
  it with javac, once per session.
- ``connect_classpath``: the jar directory behind the two forwarding classes of
  compat/java/frameworks/connect-compat, which let its 4.3.1 connectors run on Connect 4.4.0.
- ``jvms``: starts ``JavaProcess``es for one test and stops every one of them afterwards;
  ``module_jvms`` does the same for a module (a Connect worker shared by its tests).
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .jvm import JavaProcess

REPO = Path(__file__).resolve().parents[3]
APPS = REPO / "compat" / "java" / "frameworks" / "src" / "main" / "java"
CONNECT_COMPAT = REPO / "compat" / "java" / "frameworks" / "connect-compat"

_spec = importlib.util.spec_from_file_location("compat_kafka_dist",
                                               REPO / "compat" / "kafka_dist.py")
assert _spec is not None and _spec.loader is not None
dist = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dist)

FIRST_FETCH_TIMEOUT = dist.FETCH_TIMEOUT + 120
_STARTED = pytest.StashKey[list[JavaProcess]]()
_MODULE_STARTED = pytest.StashKey[list[JavaProcess]]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On a fresh machine the first test here to run fetches the jars: give it Maven's time.
    Every test here gets it, since under pytest-xdist the first one to run on a worker need not
    be the first one collected (and another worker's Maven may hold the Maven lock)."""
    if dist.is_cached(dist.FRAMEWORKS):
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.timeout(FIRST_FETCH_TIMEOUT))


@pytest.fixture(scope="session")
def framework_libs() -> Path:
    needed = ("java", "javac") if dist.is_cached(dist.FRAMEWORKS) else ("java", "javac", "mvn")
    missing = [t for t in needed if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Java 17+ and Maven run the frameworks)")
    return dist.ensure_libs(dist.FRAMEWORKS)


@pytest.fixture(scope="session")
def streams_classes(framework_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    sources = sorted(APPS.rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    return _javac(sources, framework_libs, tmp_path_factory.mktemp(f"streams-apps-{digest}"))


def _javac(sources: list[Path], classpath: Path, out: Path) -> Path:
    proc = subprocess.run(["javac", "-d", str(out), "-cp", f"{classpath}/*", *map(str, sources)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.fixture(scope="session")
def connect_classpath(framework_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Connect's classpath: the forwarding classes first, then the jars (connect-compat/README)."""
    sources = sorted(CONNECT_COMPAT.rglob("*.java"))
    return [_javac(sources, framework_libs, tmp_path_factory.mktemp("connect-compat")),
            framework_libs]


class _Starter:
    """Starts ``JavaProcess``es in one directory and remembers them, to stop them at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[JavaProcess] = []

    def __call__(self, name: str, classpath: list[Path], main: str, args: list[str],
                 extra_flags: list[str] | None = None) -> JavaProcess:
        proc = JavaProcess(name, self.workdir, classpath, main, args, extra_flags)
        self.started.append(proc.start())
        return proc

    def stop_all(self) -> None:
        for proc in self.started:
            proc.stop()


@pytest.fixture(scope="module")
def module_jvms(tmp_path_factory: pytest.TempPathFactory,
                request) -> Iterator[Callable[..., JavaProcess]]:
    starter = _Starter(tmp_path_factory.mktemp("jvm"))
    request.node.stash[_MODULE_STARTED] = starter.started
    try:
        yield starter
    finally:
        starter.stop_all()


@pytest.fixture
def jvms(tmp_path: Path, request) -> Iterator[Callable[..., JavaProcess]]:
    starter = _Starter(tmp_path / "jvm")
    request.node.stash[_STARTED] = starter.started
    try:
        yield starter
    finally:
        starter.stop_all()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report shows the log tail of every JVM it started or its module shares."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        module = item.getparent(pytest.Module)
        shared = module.stash.get(_MODULE_STARTED, []) if module is not None else []
        for proc in [*item.stash.get(_STARTED, []), *shared]:
            report.sections.append((f"{proc.name} log tail", proc.log_tail()))
    return report
