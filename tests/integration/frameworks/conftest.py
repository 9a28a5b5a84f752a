"""Fixtures of the frameworks tests (Kafka Streams, Connect, MirrorMaker 2 on Strom).

- ``framework_libs``: the cached jar directory of compat/java/frameworks/pom.xml (fetched once).
- ``streams_classes``: the Streams applications of compat/java/frameworks/src compiled against
  it with javac, once per session.
- ``jvms``: starts ``JavaProcess``es for one test and stops every one of them afterwards.
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

_spec = importlib.util.spec_from_file_location("compat_kafka_dist",
                                               REPO / "compat" / "kafka_dist.py")
assert _spec is not None and _spec.loader is not None
dist = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dist)

FIRST_FETCH_TIMEOUT = dist.FETCH_TIMEOUT + 120
_STARTED = pytest.StashKey[list[JavaProcess]]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first test here fetches the jars on a fresh machine: give it Maven's time."""
    here = Path(__file__).parent
    mine = [i for i in items if here in Path(str(i.path)).parents]
    if mine and not dist.is_cached(dist.FRAMEWORKS):
        mine[0].add_marker(pytest.mark.timeout(FIRST_FETCH_TIMEOUT))


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
    out = tmp_path_factory.mktemp(f"streams-apps-{digest}")
    proc = subprocess.run(["javac", "-d", str(out), "-cp", f"{framework_libs}/*",
                           *map(str, sources)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.fixture
def jvms(tmp_path: Path, request) -> Iterator[Callable[..., JavaProcess]]:
    started: list[JavaProcess] = []

    def start(name: str, classpath: list[Path], main: str, args: list[str],
              extra_flags: list[str] | None = None) -> JavaProcess:
        proc = JavaProcess(name, tmp_path / "jvm", classpath, main, args, extra_flags)
        started.append(proc.start())
        return proc

    request.node.stash[_STARTED] = started
    yield start
    for proc in started:
        proc.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report shows the log tail of every JVM it started."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        for proc in item.stash.get(_STARTED, []):
            report.sections.append((f"{proc.name} log tail", proc.log_tail()))
    return report
