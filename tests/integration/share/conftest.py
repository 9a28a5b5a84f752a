"""Fixtures of the share-group tests (KIP-932): the Java share consumer and Kafka's tools against a broker.

The broker under test: ``STROM_SHARE_BROKER=strom`` (the default) starts a ``strom broker``
process, ``STROM_SHARE_BROKER=kafka`` an Apache Kafka 4.4 KRaft node (compat/run_broker.py's
``Deployment``, Maven Central's jars), ``strom-cluster`` and ``kafka-cluster`` three of either
(a private ZooKeeper for Strom's), all with ``BROKER_SETTINGS`` (Kafka's config names), once
per session. The tests are written against Kafka 4.4's behaviour and run unchanged on both.

- ``share_broker``: ``.bootstrap``, ``.kind``; ``share_admin``: topics, group configs, producing
  and reading records (confluent-kafka); ``share_apps``: starts ``ShareApp`` JVMs
  (compat/java/share, compiled with javac against Kafka's cached jars) and stops them by PID;
  ``kafka_tools``: Kafka's command-line tools (kafka-share-groups, kafka-console-share-consumer).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from ..broker import BrokerProcess
from ..kafka_tools.tools import KafkaTools

REPO = Path(__file__).resolve().parents[3]
APP_SOURCES = REPO / "compat" / "java" / "share" / "src" / "main" / "java"
BROKER_ENV = "STROM_SHARE_BROKER"

_spec = importlib.util.spec_from_file_location("compat_run_broker", REPO / "compat" / "run_broker.py")
assert _spec is not None and _spec.loader is not None
run_broker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_broker)
dist = run_broker.kafka_dist

# Broker settings the share tests need, by Kafka's names (Strom reads the same names). Kafka 4.4
# needs nothing to enable share groups: a freshly formatted 4.4 cluster finalizes share.version=2
# (DLQ included); group.coordinator.rebalance.protocols (deprecated) stays classic,consumer,streams.
# The broker-side minimums are lowered so a group's share.record.lock.duration.ms, session timeout
# and heartbeat interval can be short (Kafka 4.4 accepts these; its group-level floor for the lock
# duration is 1000 ms whatever the broker minimum).
BROKER_SETTINGS = {
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.session.timeout.ms": "3000",
    "group.share.session.timeout.ms": "6000",
}

START_TIMEOUT = 120.0
JVM_FLAGS = ["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
             "-Djava.awt.headless=true"]  # fmt: skip
# The app's own log4j: WARN and above from the client, to the same file as its stdout.
LOG4J2 = """\
status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_ERR
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = OUT
"""


KINDS = ("strom", "kafka", "strom-cluster", "kafka-cluster")


def broker_kind() -> str:
    kind = os.environ.get(BROKER_ENV, "strom")
    if kind not in KINDS:
        raise pytest.UsageError(f"{BROKER_ENV} must be one of {', '.join(KINDS)}, not {kind!r}")
    return kind


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- the broker


@dataclass
class ShareBroker:
    kind: str
    bootstrap: str
    log_tail: Callable[[], str]


@pytest.fixture(scope="session")
def share_libs() -> Path:
    needed = ("java", "javac") if dist.is_cached() else ("java", "javac", "mvn")
    missing = [t for t in needed if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Java 17+ runs the share consumers)")
    return dist.ensure_libs()


@pytest.fixture(scope="session")
def share_broker(share_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShareBroker]:
    kind = broker_kind()
    if kind != "strom":
        with run_broker.Deployment(kind, kafka_libs=share_libs,
                                   overrides=BROKER_SETTINGS) as deployment:  # fmt: skip
            yield ShareBroker(kind, deployment.bootstrap, lambda: deployment.log_tails(80))
        return
    with strom_share_broker(tmp_path_factory, "share-broker") as broker:
        yield broker


@contextlib.contextmanager
def strom_share_broker(tmp_path_factory: pytest.TempPathFactory, name: str
                       ) -> Iterator[ShareBroker]:
    """One Strom broker with the share tests' settings, stopped (by PID) afterwards."""
    broker = BrokerProcess(tmp_path_factory.mktemp(name), name=name)
    broker.start(BROKER_SETTINGS, timeout=START_TIMEOUT)
    try:
        yield ShareBroker("strom", broker.bootstrap, lambda: broker.log_text(0)[-8000:])
    finally:
        broker.stop()


# --------------------------------------------------------------------------- admin and data


@dataclass
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class ShareAdmin:
    """Topics, group configs (IncrementalAlterConfigs on GROUP resources), records."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        futures = self.admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                           operation_timeout=30)  # fmt: skip
        futures[name].result(timeout=60)
        return name

    def topic_names(self) -> set[str]:
        return set(self.admin.list_topics(timeout=30).topics)

    def set_group_configs(self, group: str, configs: dict[str, str]) -> None:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in configs.items()]  # fmt: skip
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        for future in self.admin.incremental_alter_configs([resource]).values():
            future.result(timeout=60)
        # In a cluster the other brokers learn of it a moment later (ZooKeeper watches, KRaft
        # metadata records), and DescribeConfigs may go to any of them.
        deadline = time.monotonic() + 30
        while any(self.group_configs(group).get(k) != v for k, v in configs.items()):
            assert time.monotonic() < deadline, f"group {group}: configs {configs} not seen"
            time.sleep(0.1)  # poll interval

    def group_configs(self, group: str) -> dict[str, str]:
        resource = ConfigResource(ResourceType.GROUP, group)
        (future,) = self.admin.describe_configs([resource]).values()
        return {k: v.value for k, v in future.result(timeout=60).items()}

    def produce(self, topic: str, values: list[str], partition: int = 0) -> list[int]:
        """Produce ``values`` (key ``k-<value>``) in order; returns their offsets."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        offsets: dict[int, int] = {}

        def delivered(i: int):
            def callback(err, msg) -> None:
                assert err is None, f"produce failed: {err}"
                offsets[i] = msg.offset()

            return callback

        for i, value in enumerate(values):
            producer.produce(topic, value=value.encode(), key=f"k-{value}".encode(),
                             partition=partition, on_delivery=delivered(i))  # fmt: skip
        assert producer.flush(30) == 0, "records still unsent after 30 s"
        return [offsets[i] for i in range(len(values))]

    def end_offset(self, topic: str, partition: int = 0) -> int:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": unique("probe")})
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            return int(high)
        finally:
            consumer.close()

    def read(self, topic: str, count: int, timeout: float = 30.0, partition: int = 0) -> list[Record]:
        """The first ``count`` records of a partition (fails if fewer arrive in ``timeout``)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": unique("reader"),
                             "enable.auto.commit": False})  # fmt: skip
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        try:
            while len(out) < count:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{topic}: {len(out)} of {count} records after {timeout} s: {out}")
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                out.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                  list(msg.headers() or [])))  # fmt: skip
        finally:
            consumer.close()
        return out


@pytest.fixture(scope="session")
def share_admin(share_broker: ShareBroker) -> ShareAdmin:
    return ShareAdmin(share_broker.bootstrap)


# --------------------------------------------------------------------------- the Java share consumer


@pytest.fixture(scope="session")
def share_classes(share_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    sources = sorted(APP_SOURCES.rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    out = tmp_path_factory.mktemp(f"share-app-{digest}")
    proc = subprocess.run(["javac", "-d", str(out), "-cp", f"{share_libs}/*", *map(str, sources)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    (out / "log4j2.properties").write_text(LOG4J2)
    return out


@dataclass(frozen=True)
class Delivery:
    """One ``RECORD`` line of the app."""

    consumer: int
    partition: int
    offset: int
    delivery_count: int
    ack: str
    value: str
    at: float  # when the test saw the line (monotonic)


_RECORD = re.compile(r"^RECORD (\d+) (\d+) (\d+) (-?\d+) (\S+) (.*)$")


class ShareApp:
    """One ``io.strom.share.ShareApp`` JVM: stdout and stderr to a log file, stdin a pipe (closing
    it stops the app cleanly), stopped by its PID."""

    def __init__(self, name: str, workdir: Path, command: list[str]) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self._seen: dict[int, float] = {}  # line number -> when first seen

    def start(self) -> ShareApp:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=log,
                                         stderr=subprocess.STDOUT)  # fmt: skip
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def lines(self) -> list[str]:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
        now = time.monotonic()
        for i in range(len(self._seen), len(lines)):
            self._seen[i] = now
        return lines

    def deliveries(self) -> list[Delivery]:
        out = []
        for i, line in enumerate(self.lines()):
            m = _RECORD.match(line)
            if m:
                c, p, o, dc, ack, value = m.groups()
                out.append(Delivery(int(c), int(p), int(o), int(dc), ack, value, self._seen[i]))
        return out

    def log_tail(self, limit: int = 6000) -> str:
        return "\n".join(self.lines())[-limit:]

    def wait_for(self, check: Callable[[ShareApp], object], timeout: float, what: str,
                 *, exit_ok: bool = False) -> object:  # fmt: skip
        """Poll ``check(self)`` until truthy; fail on the deadline or if the app exits first."""
        deadline = time.monotonic() + timeout
        while True:
            value = check(self)
            if value:
                return value
            if not exit_ok and not self.running:
                raise AssertionError(f"{self.name} exited ({self.proc and self.proc.returncode}) "
                                     f"before {what}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {what} after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)  # poll interval, not synchronisation

    def within(self, check: Callable[[ShareApp], object], seconds: float) -> bool:
        """Whether ``check(self)`` turns truthy within ``seconds`` (fails if the app exits)."""
        try:
            self.wait_for(check, seconds, "check")
        except AssertionError:
            if not self.running:
                raise
            return False
        return True

    def wait_line(self, pattern: str, timeout: float, *, exit_ok: bool = False) -> re.Match[str]:
        rx = re.compile(pattern)

        def found(app: ShareApp):
            return next((m for line in app.lines() if (m := rx.search(line))), None)

        return self.wait_for(found, timeout, f"line {pattern!r}", exit_ok=exit_ok)  # type: ignore[return-value]

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout:.0f} s:\n{self.log_tail()}") from None

    def finish(self, timeout: float = 30.0) -> int:
        """Close stdin (the app closes its consumers, leaving the group) and wait for its exit."""
        assert self.proc is not None and self.proc.stdin is not None
        if not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        return self.wait_exit(timeout)

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        """Closed stdin, then SIGTERM, then SIGKILL, each with a deadline, by PID."""
        if not self.running:
            return
        assert self.proc is not None
        try:
            self.finish(15)
            return
        except AssertionError:
            pass
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


class AppStarter:
    def __init__(self, classes: Path, libs: Path, bootstrap: str, workdir: Path) -> None:
        self.classes = classes
        self.libs = libs
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.started: list[ShareApp] = []

    def __call__(self, name: str, group: str | list[str], topic: str, *, mode: str = "explicit",
                 consumers: int = 1, count: int = 0, props: dict[str, str] | None = None,
                 extra: list[str] | None = None) -> ShareApp:  # fmt: skip
        args = ["--bootstrap", self.bootstrap, "--topic", topic, "--mode", mode, "--name", name,
                "--consumers", str(consumers), "--count", str(count)]  # fmt: skip
        for g in [group] if isinstance(group, str) else group:
            args += ["--group", g]
        for k, v in (props or {}).items():
            args += ["--prop", f"{k}={v}"]
        command = [dist.java_bin(), *JVM_FLAGS,
                   f"-Dlog4j2.configurationFile={self.classes / 'log4j2.properties'}",
                   "-cp", f"{self.classes}{os.pathsep}{self.libs}/*", "io.strom.share.ShareApp",
                   *args, *(extra or [])]  # fmt: skip
        app = ShareApp(name, self.workdir, command)
        self.started.append(app)
        return app.start()

    def stop_all(self) -> None:
        for app in self.started:
            app.stop()


_APPS = pytest.StashKey[list[ShareApp]]()


@pytest.fixture
def share_apps(share_classes: Path, share_libs: Path, share_broker: ShareBroker,
               request) -> Iterator[AppStarter]:  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix="share-apps-"))
    starter = AppStarter(share_classes, share_libs, share_broker.bootstrap, workdir)
    request.node.stash[_APPS] = starter.started
    try:
        yield starter
    finally:
        starter.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_tools(share_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> KafkaTools:
    return KafkaTools.create(share_libs, tmp_path_factory.mktemp("share-tools"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report shows its apps' output and the share broker's log tail."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        for app in item.stash.get(_APPS, []):
            report.sections.append((f"{app.name} output", app.log_tail()))
    return report
