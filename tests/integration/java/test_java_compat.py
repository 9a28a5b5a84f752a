"""Kafka 4.4's Java client (the Maven suite in compat/java) against Strom, and against Kafka itself.

Each Java test method is one pytest item, for each run it belongs to:

- ``strom``: every class not tagged ``cluster`` or ``migration-disabled``, on one Strom broker;
- ``strom-cluster``: classes tagged ``cluster``, on 3 Strom KRaft nodes (broker and controller);
- ``strom-migration-disabled``: classes tagged ``migration-disabled``, on one Strom broker with
  ``group.consumer.migration.policy=disabled``;
- ``kafka``: classes tagged ``fast`` or ``migration``, on a single-node KRaft Apache Kafka 4.4
  (``STROM_JAVA_KAFKA=full``: every class of the ``strom`` run), to show that the tests encode
  Kafka's behaviour; ``kafka-cluster`` and ``kafka-migration-disabled`` as for Strom (3 KRaft
  nodes; one node with the policy disabled). The Kafka runs take as long as Strom's, so
  ``make test`` leaves them out (its 20-minute budget, issue 29): ``make java-on-kafka``
  (``STROM_JAVA_KAFKA=fast``) runs them, as ``make compat-kafka`` runs the Maven suite itself.

A run starts its brokers with compat/run_broker.py, runs ``mvn surefire:test`` once (compiled
once per session into a private build directory, offline when ~/.m2 has everything) and reads
surefire's XML reports; the first item of a run pays for it, the others read the results. Tags are
read from the Java sources at collection (class-level ``@Tag``); ``test_java_run[<run>]`` fails
when Maven reports a test that collection missed, or misses one it expected.

Java tests that fail on Strom for a known reason are listed in KNOWN_FAILING_ON_STROM: they are
strict xfails, so the suite turns red when one starts passing (remove it from the list then).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
COMPAT = REPO / "compat"
POM = COMPAT / "java" / "pom.xml"
SOURCES = COMPAT / "java" / "src" / "test" / "java"
STROM = Path(sys.executable).with_name("strom")
MAVEN_TIMEOUT = 900  # one Maven run; JUnit bounds each test at 120 s
RUN_TIMEOUT = 1500  # the pytest item that pays for a run: brokers + Maven

# "Class.method" (or "Class.method[n]" for one invocation of a parameterized test) -> why it fails.
KNOWN_FAILING_ON_STROM: dict[str, str] = {}


# Tags of classes that need a deployment of their own; the default selection leaves them out.
SPECIAL_TAGS = {"cluster", "migration-disabled"}
MIGRATION_DISABLED = {"group.consumer.migration.policy": "disabled"}


@dataclass(frozen=True)
class Run:
    name: str
    kind: str  # a compat/run_broker.py kind
    tags: frozenset[str]  # classes with any of these class-level tags; empty: all but SPECIAL_TAGS
    known_failing: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)

    def selects(self, tags: set[str]) -> bool:
        return bool(tags & self.tags) if self.tags else not tags & SPECIAL_TAGS


KAFKA_SIDE = os.environ.get("STROM_JAVA_KAFKA", "")  # "": Strom's runs only; "fast" or "full"
KAFKA_TAGS = frozenset() if KAFKA_SIDE == "full" else frozenset({"fast", "migration"})
STROM_RUNS = [
    Run("strom", "strom", frozenset(), KNOWN_FAILING_ON_STROM),
    Run("strom-cluster", "strom-cluster", frozenset({"cluster"}), KNOWN_FAILING_ON_STROM),
    Run("strom-migration-disabled", "strom", frozenset({"migration-disabled"}), KNOWN_FAILING_ON_STROM,
        MIGRATION_DISABLED),
]
KAFKA_RUNS = [
    Run("kafka", "kafka", KAFKA_TAGS),
    Run("kafka-cluster", "kafka-cluster", frozenset({"cluster"})),
    Run("kafka-migration-disabled", "kafka", frozenset({"migration-disabled"}), {}, MIGRATION_DISABLED),
]
RUNS = STROM_RUNS + (KAFKA_RUNS if KAFKA_SIDE else [])


# --------------------------------------------------------------------------- the Java sources


def java_tests() -> dict[str, tuple[set[str], list[str]]]:
    """Class -> (class-level tags, test methods in source order), read from compat/java."""
    found: dict[str, tuple[set[str], list[str]]] = {}
    for path in sorted(SOURCES.rglob("*.java")):
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.S)
        decl = re.search(rf"^\s*(?:@\w+(?:\([^)]*\))?\s*)*class\s+{path.stem}\b", text, flags=re.M)
        if decl is None:
            continue
        tags = set(re.findall(r'@Tag\("([^"]+)"\)', decl.group(0)))
        methods = []
        for m in re.finditer(r"@(?:Test|ParameterizedTest)\b", text):
            name = re.compile(r"\bvoid\s+(\w+)\s*\(").search(text, m.end())
            if name and name.group(1) not in methods:
                methods.append(name.group(1))
        if methods:
            found[path.stem] = (tags, methods)
    return found


JAVA_TESTS = java_tests()


# --------------------------------------------------------------------------- Maven and brokers


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_broker = _load("compat_run_broker", COMPAT / "run_broker.py")
jars = _load("compat_kafka_dist", COMPAT / "kafka_dist.py")


def mvn(args: list[str], log: Path) -> subprocess.CompletedProcess[str]:
    """Maven, offline first (~/.m2 has everything after the first fetch), online when that fails
    for a missing artifact, holding compat/kafka_dist.py's Maven lock (another pytest-xdist
    worker may be downloading into ~/.m2). Output goes to `log`."""
    if shutil.which("mvn") is None:
        pytest.fail("mvn is not on PATH: install Java 17+ and Maven (see docs/kafka-java.md)")
    base = ["nice", "-n", "10", "mvn", "-B"]
    done = None
    for offline in (["-o"], []):
        with contextlib.nullcontext() if offline else jars.maven_lock():
            done = subprocess.run([*base, *offline, *args], capture_output=True, text=True,
                                  timeout=MAVEN_TIMEOUT, stdin=subprocess.DEVNULL)
        with open(log, "a") as out:
            out.write(f"$ mvn {' '.join([*offline, *args])}\n{done.stdout}{done.stderr}\n")
        if done.returncode == 0 or "offline" not in done.stdout + done.stderr:
            break
    assert done is not None
    return done


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def java_build(tmp_path_factory) -> Path:
    """The suite compiled once per session, into a build directory of its own."""
    build = tmp_path_factory.mktemp("java-build")
    done = mvn(["-q", "-f", str(POM), "test-compile", f"-Dcompat.build.dir={build}"],
               build / "maven.log")
    if done.returncode != 0:
        pytest.fail(f"mvn test-compile failed:\n{tail(done.stdout + done.stderr)}")
    return build


@pytest.fixture(scope="session")
def kafka_libs() -> Path:
    """Kafka 4.4's jars, fetched once from Maven Central into ~/.cache (shared with the tools tests:
    compat/kafka_dist.py, which refetches when the broker pom changed)."""
    try:
        return jars.ensure_libs()
    except RuntimeError as e:
        pytest.fail(str(e))


@dataclass
class Outcome:
    failures: dict[str, str] = field(default_factory=dict)  # "[n]" or "" -> message
    passed: int = 0
    skipped: int = 0


@dataclass
class RunResult:
    run: Run
    bootstrap: str = ""
    maven: str = ""  # what went wrong with Maven itself, if anything
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # "Class.method" -> outcome
    logs: str = ""  # broker log tails, when something failed


_RESULTS: dict[str, RunResult] = {}


def _parse_reports(reports: Path, result: RunResult) -> None:
    for xml in sorted(reports.glob("TEST-*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            cls = case.get("classname", "").rsplit(".", 1)[-1]
            raw = case.get("name", "")
            method = raw.split("(", 1)[0].split("[", 1)[0]
            invocation = raw[raw.rfind("["):] if raw.endswith("]") else ""
            outcome = result.outcomes.setdefault(f"{cls}.{method}", Outcome())
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            if bad is not None:
                trace = (bad.text or "").strip().splitlines()
                where = next((ln.strip() for ln in trace if "io.strom.compat." in ln), "")
                outcome.failures[invocation] = (f"{bad.get('type', '')}: {bad.get('message', '')}"
                                                f"{f' ({where})' if where else ''}")
            elif case.find("skipped") is not None:
                outcome.skipped += 1
            else:
                outcome.passed += 1


def execute(run: Run, build: Path, libs: Path | None) -> RunResult:
    result = RunResult(run)
    selected = {c for c, (tags, _) in JAVA_TESTS.items() if run.selects(tags)}
    reports = build / f"reports-{run.name}"
    log = build / f"maven-{run.name}.log"
    # JUnit's expression for the selection: explicit class names, so the tags above are the truth.
    args = ["-f", str(POM), "surefire:test", f"-Dcompat.build.dir={build}",
            f"-Dcompat.reports.dir={reports}", "-DexcludedGroups=none",
            f"-Dtest={','.join(sorted(selected))}", "-Dsurefire.failIfNoSpecifiedTests=false",
            "-Dmaven.test.failure.ignore=true"]  # fmt: skip
    try:
        with run_broker.Deployment(run.kind, strom=STROM, kafka_libs=libs,
                                   overrides=run.overrides) as d:
            result.bootstrap = d.bootstrap
            done = mvn([*args, f"-Dbootstrap={d.bootstrap}"], log)
            if done.returncode != 0:
                result.maven = f"mvn exited {done.returncode}:\n{tail(done.stdout + done.stderr)}"
            _parse_reports(reports, result)
            if result.maven or any(o.failures for o in result.outcomes.values()):
                d.failed = True  # keep the brokers' directory for a look
                result.logs = f"brokers' directory kept: {d.work}\n{d.log_tails(30)}"
    except run_broker.StartError as e:
        result.maven = f"the brokers did not start: {e}"
    return result


def results(run: Run, request: pytest.FixtureRequest) -> RunResult:
    if run.name not in _RESULTS:
        build = request.getfixturevalue("java_build")
        libs = request.getfixturevalue("kafka_libs") if run.kind.startswith("kafka") else None
        try:
            _RESULTS[run.name] = execute(run, build, libs)
        except Exception as e:  # e.g. Maven's timeout: the other items must not run it again
            _RESULTS[run.name] = RunResult(run, maven=f"{type(e).__name__}: {e}")
    return _RESULTS[run.name]


# --------------------------------------------------------------------------- the tests


class KnownJavaFailure(Exception):
    """Raised (and expected by a strict xfail) when exactly the known invocations failed."""


def _params():
    for run in RUNS:
        for cls, (tags, methods) in JAVA_TESTS.items():
            if not run.selects(tags):
                continue
            for method in methods:
                key = f"{cls}.{method}"
                known = {k: v for k, v in run.known_failing.items() if k.split("[")[0] == key}
                marks = [pytest.mark.timeout(RUN_TIMEOUT)]
                if known:
                    marks.append(pytest.mark.xfail(raises=KnownJavaFailure, strict=True,
                                                   reason="; ".join(known.values())))
                yield pytest.param(run, key, known, id=f"{run.name}-{key}", marks=marks)


@pytest.mark.parametrize(("run", "key", "known"), list(_params()))
def test_java(run: Run, key: str, known: dict[str, str], request) -> None:
    result = results(run, request)
    if result.maven:
        pytest.fail(f"{run.name}: {result.maven}\n{result.logs}")
    outcome = result.outcomes.get(key)
    if outcome is None:
        pytest.fail(f"{key} did not run on {run.name} (no surefire report for it)")
    failed = {f"{key}{inv}": msg for inv, msg in outcome.failures.items()}
    expected = {k for k in known if k in failed or (k == key and failed)}
    unexpected = {k: m for k, m in failed.items() if k not in known and key not in known}
    if unexpected:
        pytest.fail(f"on {run.name} ({result.bootstrap}):\n"
                    + "\n".join(f"{k}: {m}" for k, m in sorted(unexpected.items()))
                    + f"\n{result.logs}", pytrace=False)
    now_passing = set(known) - expected
    if now_passing:
        pytest.fail(f"known failures now pass on {run.name}: {sorted(now_passing)}; remove them from "
                    "KNOWN_FAILING_ON_STROM", pytrace=False)
    if known:
        raise KnownJavaFailure("\n".join(f"{k}: {m}" for k, m in sorted(failed.items())))


@pytest.mark.timeout(RUN_TIMEOUT)
@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_java_run(run: Run, request) -> None:
    """Maven itself worked, and ran exactly the Java tests collection expected for this run."""
    result = results(run, request)
    if result.maven:
        pytest.fail(f"{run.name}: {result.maven}\n{result.logs}")
    expected = {f"{c}.{m}" for c, (tags, ms) in JAVA_TESTS.items() if run.selects(tags) for m in ms}
    ran = set(result.outcomes)
    assert ran - expected == set(), "Java tests that ran but were not collected (tags or parsing)"
    assert expected - ran == set(), "Java tests collected but not run"
    skipped = sorted(k for k, o in result.outcomes.items() if o.skipped)
    assert skipped == [], "skipped Java tests"
