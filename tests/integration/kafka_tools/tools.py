"""Run Kafka's command-line tools as Kafka's `bin/*.sh` scripts do, without a Kafka tarball.

Each script is `kafka-run-class.sh <MainClass> "$@"`; that script puts every jar on the classpath
and adds a 256 MB heap, G1 flags and a log4j config sending WARN and above to stderr. The same is
done here, plus two things that only shorten the start of these short-lived JVMs: C1-only
compilation, and a class-data-sharing archive (Java's AppCDS) of the classes the first tool run
loaded, which the later runs map instead of loading them from the jars (about half of a tool's
start-up CPU: measured 1.05 s against 0.6 s for a `kafka-topics --describe`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

# bin/<name>.sh -> the main class it runs (Kafka 4.4).
MAIN_CLASSES = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
}

# kafka-run-class.sh's KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS defaults.
RUN_CLASS_FLAGS = ["-Xmx256M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                   "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                   "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]  # fmt: skip
START_FLAGS = ["-XX:TieredStopAtLevel=1"]

# What Kafka's config/tools-log4j2.yaml sets up: WARN and above on stderr, stdout left to the tool.
LOG4J2 = """\
status = error
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = STDERR
"""

DEFAULT_TIMEOUT = 60.0


class ToolError(AssertionError):
    pass


@dataclass(frozen=True)
class KafkaTools:
    """Runs `bin/<name>.sh <args>` equivalents from one jar directory."""

    java: str
    libs: Path
    work: Path  # log4j config, files handed to tools, the class-data archive

    @property
    def archive(self) -> Path:
        return self.work / "kafka-tools.jsa"

    def _archive_flags(self, writing: Path | None) -> list[str]:
        """Use the class-data archive once it exists; until then a run to its end writes one at
        its exit (to ``writing``, a name of its own), and `run` moves the first complete one into
        place. `-Xlog:cds=off` keeps the JVM's notes on classes it cannot archive out of the
        tool's output."""
        if self.archive.exists():
            return [f"-XX:SharedArchiveFile={self.archive}", "-Xlog:cds=off"]
        if writing is None:
            return []
        return [f"-XX:ArchiveClassesAtExit={writing}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]

    @classmethod
    def create(cls, libs: Path, work: Path) -> KafkaTools:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java is not installed")
        (work / "log4j2.properties").write_text(LOG4J2)
        return cls(java, libs, work)

    def command(self, tool: str, *args: str, archive_to: Path | None = None) -> list[str]:
        return [self.java, *RUN_CLASS_FLAGS, *START_FLAGS, *self._archive_flags(archive_to),
                f"-Dlog4j2.configurationFile={self.work / 'log4j2.properties'}",
                "-cp", f"{self.libs}/*", MAIN_CLASSES[tool], *args]  # fmt: skip

    def run(self, tool: str, *args: str, input: str | None = None, code: int | None = 0,
            timeout: float = DEFAULT_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """Run a tool to its end; with ``code`` set, its exit status must be that."""
        writing = self.work / f"archiving-{uuid.uuid4().hex}.jsa"
        try:
            proc = subprocess.run(self.command(tool, *args, archive_to=writing), input=input,
                                  capture_output=True, text=True, timeout=timeout,
                                  stdin=None if input is not None else subprocess.DEVNULL)
            if writing.exists() and not self.archive.exists():
                writing.rename(self.archive)  # written by a JVM that ran to its end
        finally:
            writing.unlink(missing_ok=True)
        if code is not None and proc.returncode != code:
            raise ToolError(f"{tool} {' '.join(args)} exited {proc.returncode}, wanted {code}\n"
                            f"stdout:\n{proc.stdout[-5000:]}\nstderr:\n{proc.stderr[-5000:]}")
        return proc

    def start(self, tool: str, *args: str) -> subprocess.Popen[str]:
        """Start a tool that runs until stopped (stop it with ``stop``)."""
        return subprocess.Popen(self.command(tool, *args), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @staticmethod
    def stop(proc: subprocess.Popen[str], timeout: float = 20.0) -> tuple[str, str]:
        """SIGTERM (the tools' shutdown hooks run), then SIGKILL; returns (stdout, stderr)."""
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            return proc.communicate(timeout=timeout)


def unique(prefix: str) -> str:
    """A topic or group name used once: dashes only, since kafka-topics warns about '.' with '_'."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def rows(text: str) -> list[list[str]]:
    """The non-empty lines of a printed table, split on whitespace."""
    return [line.split() for line in text.splitlines() if line.strip()]


def properties(text: str) -> dict[str, str]:
    """`key=value` lines as kafka-configs prints them (`  key=value sensitive=... synonyms=...`)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if "=" in line and not line.endswith(":"):
            key, _, rest = line.partition("=")
            out[key] = rest.split(" sensitive=")[0]
    return out
