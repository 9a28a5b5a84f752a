"""Apache Kafka 4.4 from Maven Central's jars, cached outside the repo, and how its scripts run it.

Shared by compat/run_broker.py (`make compat-kafka`), tests/integration/kafka_tools (Kafka's
command-line tools) and the benchmark's Kafka peer (bench/kafka_peer.py), so all of them run the same
broker the same way. Standard library only: each of them loads this file by its path.

The jars: compat/java/kafka-broker/pom.xml names them; `mvn dependency:copy-dependencies` copies the runtime
closure into one directory (`make compat-kafka` runs the broker from the same one). A fresh machine
gets them on first use: the copy goes to a temporary directory that is renamed into place, under a
file lock, so concurrent sessions neither fetch twice nor see half a directory. A marker named after
the pom's hash tells a copy made from an older pom (e.g. without kafka-tools) to be fetched again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).resolve().parent / "java" / "kafka-broker" / "pom.xml"
FRAMEWORKS_POM = POM.parents[1] / "frameworks" / "pom.xml"
LIBS_ENV = "STROM_KAFKA_LIBS"
DEFAULT_LIBS = Path.home() / ".cache" / "strom-compat" / f"kafka-{KAFKA_VERSION}" / "libs"
FETCH_TIMEOUT = 900.0  # a first download over a slow link; bounded all the same
# kafka-server-start.sh's heap and kafka-run-class.sh's JVM flags (KAFKA_JVM_PERFORMANCE_OPTS).
KAFKA_HEAP = ["-Xmx1G", "-Xms1G"]
KAFKA_GC = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true"]  # fmt: skip


class JarSet(NamedTuple):
    """One pom's runtime closure, copied into one directory for ``java -cp '<dir>/*'``.

    A NamedTuple, not a dataclass: this file is loaded by path, outside ``sys.modules``.
    """

    pom: Path
    default_dir: Path
    sentinel: str  # a jar whose presence shows the copy is whole
    env: str | None = None  # an environment variable that overrides the directory


BROKER = JarSet(POM, DEFAULT_LIBS, f"kafka-tools-{KAFKA_VERSION}.jar", LIBS_ENV)
# Kafka Streams, Connect (with the FileStream and MirrorMaker 2 connectors) and their closure.
FRAMEWORKS = JarSet(FRAMEWORKS_POM, DEFAULT_LIBS.parent / "frameworks",
                    f"kafka-streams-{KAFKA_VERSION}.jar")


# Maven's local repository is not safe for processes that download into it at the same time
# (Maven 3.9's cross-process named locks are off by default; Debian's Maven is 3.8): every Maven
# run that may go online holds this lock (pytest-xdist workers, two sessions on one machine).
MAVEN_LOCK = Path.home() / ".m2" / ".strom-maven.lock"


@contextlib.contextmanager
def maven_lock() -> Iterator[None]:
    """Held around a Maven run that may download into ~/.m2 (waits for another one to end)."""
    MAVEN_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(MAVEN_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def libs_dir(jars: JarSet = BROKER) -> Path:
    env = os.environ.get(jars.env) if jars.env else None
    return Path(env or str(jars.default_dir)).expanduser()


def _marker(jars: JarSet, libs: Path) -> Path:
    digest = hashlib.sha256(jars.pom.read_bytes()).hexdigest()[:16]
    return libs / f".pom-{digest}"


def is_cached(jars: JarSet = BROKER) -> bool:
    return _marker(jars, libs_dir(jars)).exists()


def ensure_libs(jars: JarSet = BROKER) -> Path:
    """The jar directory for ``java -cp '<dir>/*'``, fetched with Maven if not cached yet."""
    libs = libs_dir(jars)
    if _marker(jars, libs).exists():
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with open(libs.parent / f".fetch-{libs.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be fetching: wait for it
        if _marker(jars, libs).exists():
            return libs
        tmp = libs.parent / f"{libs.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = ["nice", "-n", "10", "mvn", "-q", "-B", "-f", str(jars.pom),
               "dependency:copy-dependencies", "-DincludeScope=runtime",
               f"-DoutputDirectory={tmp}"]  # fmt: skip
        with maven_lock():
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT,
                                  stdin=subprocess.DEVNULL)
        if proc.returncode != 0 or not (tmp / jars.sentinel).exists():
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"fetching Kafka's jars failed ({' '.join(cmd)}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        (tmp / ".complete").touch()  # the marker `make compat-kafka` looks for
        _marker(jars, tmp).touch()
        old = libs.parent / f"{libs.name}.old-{os.getpid()}"
        if libs.exists():
            libs.rename(old)
        tmp.rename(libs)
        shutil.rmtree(old, ignore_errors=True)
    return libs


def java_bin() -> str:
    """``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH (Kafka 4 needs Java 17+)."""
    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=os.path.join(home, "bin")) if home else shutil.which("java")
    if not java:
        raise RuntimeError("no java on PATH (or in $JAVA_HOME/bin)")
    return java
