"""Long-running JVMs of the frameworks tests: Streams apps, Connect workers, MirrorMaker 2.

Each process logs to its own file (never a pipe that could fill and stall it), is stopped by its
PID (SIGTERM so its shutdown hooks run, SIGKILL after a deadline) or killed with SIGKILL when a
test wants a crash, and shows its log tail when a wait fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

# kafka-run-class.sh's JVM flags, with a heap sized for a test (Connect's scripts ask for 2 GB).
JVM_FLAGS = ["-Xmx384M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]  # fmt: skip

# INFO to the process's log file: the tests wait for lines the frameworks log at INFO.
LOG4J2 = """\
status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = org.apache.kafka
logger.kafka.level = info
logger.rocks.name = org.rocksdb
logger.rocks.level = warn
"""


class JavaProcess:
    """One JVM started from a jar directory (plus extra class directories)."""

    def __init__(self, name: str, workdir: Path, classpath: list[Path], main: str,
                 args: list[str], extra_flags: list[str] | None = None) -> None:
        self.name = name
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{name}.log"
        log4j = workdir / "log4j2.properties"
        if not log4j.exists():
            log4j.write_text(LOG4J2)
        cp = os.pathsep.join(f"{p}/*" if p.is_dir() and any(p.glob("*.jar")) else str(p)
                             for p in classpath)
        self.command = ["java", *JVM_FLAGS, *(extra_flags or []),
                        f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, main, *args]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> JavaProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.workdir)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, limit: int = 8000) -> str:
        return self.log()[-limit:]

    def wait_for_log(self, pattern: str, timeout: float, since: int = 0) -> re.Match[str]:
        """Poll the log until ``pattern`` matches after character ``since``; fail on exit."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.log(), since)
            if m:
                return m
            if not self.running:
                raise AssertionError(f"{self.name} exited ({self.proc and self.proc.returncode}) "
                                     f"before logging {pattern!r}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} did not log {pattern!r} in {timeout:.0f} s:\n"
                                     f"{self.log_tail()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown hook runs."""
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (shutdown hooks close clients cleanly), SIGKILL after ``timeout``."""
        if not self.running:
            return
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def wait_until(check: Callable[[], object], timeout: float, what: str,
               detail: Callable[[], str] = lambda: "") -> object:
    """Poll ``check`` until it returns something truthy, or fail saying ``what`` and ``detail``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{detail()}")
        time.sleep(0.25)
