"""An Iceberg REST catalog server for tests, bound to 127.0.0.1 only (issue 33).

Maven Central serves no runnable REST catalog server. Iceberg's own test server
(``RESTCatalogServer`` in iceberg-open-api's test-fixtures) runs from a hand-made classpath, but
it listens on every address. So a launcher of our own
(compat/java/iceberg-rest/src/io/strom/compat/iceberg/RestCatalogLauncher.java) wraps a
JdbcCatalog on a SQLite file (schema V1, the one pyiceberg's SqlCatalog shares) in Iceberg's
REST handler and servlet and serves it with Jetty on the loopback address.

The classpath (the pom in compat/java/iceberg-rest) is fetched by compat/kafka_dist.py's
``ensure_libs``, with its lock and marker; the launcher is compiled with ``javac`` into a
directory named after the hash of its source and the pom. Both are cached under
``~/.cache/strom-compat``: only a first run needs the network (and Maven, and a JDK's javac).
Standard library only (loaded by path, like spark_iceberg.py).

    url, proc = start_rest_catalog(tmp / "catalog.db", (tmp / "wh").as_uri(), "lake")
    ...
    stop_rest_catalog(proc)
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import select
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ICEBERG_VERSION = "1.11.0"
CACHE = Path.home() / ".cache" / "strom-compat" / f"iceberg-rest-{ICEBERG_VERSION}"
POM = HERE / "java" / "iceberg-rest" / "pom.xml"
SOURCE = HERE / "java" / "iceberg-rest" / "src" / "io" / "strom" / "compat" / "iceberg" / \
    "RestCatalogLauncher.java"
MAIN_CLASS = "io.strom.compat.iceberg.RestCatalogLauncher"
HOST = "127.0.0.1"
COMPILE_TIMEOUT = 300.0
START_TIMEOUT = 60.0  # a JVM on a loaded 2-core machine; about 1 s when idle
STOP_TIMEOUT = 15.0
# one small JVM: no JIT past C1, the serial collector, a small heap
JVM_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xms32m", "-Xmx256m",
             "-Djava.net.preferIPv4Stack=true"]


def _load_dist() -> Any:
    spec = importlib.util.spec_from_file_location("compat_kafka_dist", HERE / "kafka_dist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dist = _load_dist()
JARS = dist.JarSet(POM, CACHE / "libs", f"iceberg-core-{ICEBERG_VERSION}-tests.jar")


class RestCatalogError(RuntimeError):
    pass


def classes_dir() -> Path:
    """Where the compiled launcher goes: named after its source and the pom (either changed:
    compiled again)."""
    digest = hashlib.sha256(SOURCE.read_bytes() + POM.read_bytes()).hexdigest()[:16]
    return CACHE / f"classes-{digest}"


def is_cached() -> bool:
    return dist.is_cached(JARS) and classes_dir().is_dir()


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("javac", path=os.path.join(home, "bin")) if home else \
        shutil.which("javac")


def check_tools() -> None:
    """Fail with one clear line when a tool the first run needs is missing."""
    dist.java_bin()  # raises: no java on PATH (or in $JAVA_HOME/bin)
    if not dist.is_cached(JARS) and not shutil.which("mvn"):
        raise RestCatalogError("fetching Iceberg's REST catalog classpath needs Maven: no mvn "
                               "on PATH")
    if not classes_dir().is_dir() and not _javac():
        raise RestCatalogError("compiling the REST catalog launcher needs a JDK 17+: no javac "
                               "on PATH (or in $JAVA_HOME/bin)")


def ensure_built() -> str:
    """The launcher's classpath (compiled classes, then the jars), made on first use."""
    check_tools()
    libs = dist.ensure_libs(JARS)
    classes = classes_dir()
    if not classes.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE / ".compile.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be compiling
            if not classes.is_dir():
                tmp = CACHE / f"{classes.name}.tmp-{os.getpid()}"
                shutil.rmtree(tmp, ignore_errors=True)
                cmd = ["nice", "-n", "10", str(_javac()), "--release", "17", "-nowarn",
                       "-d", str(tmp), "-cp", str(libs / "*"), str(SOURCE)]
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=COMPILE_TIMEOUT, stdin=subprocess.DEVNULL)
                if proc.returncode != 0:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise RestCatalogError(f"compiling the REST catalog launcher failed:\n"
                                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
                tmp.rename(classes)
    return os.pathsep.join([str(classes), str(libs / "*")])


def _log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _read_port(proc: subprocess.Popen[bytes], deadline: float, log: Path) -> int:
    """The port of the launcher's one stdout line ``port=<n>``."""
    assert proc.stdout is not None
    fd, buffer = proc.stdout.fileno(), b""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RestCatalogError(f"the REST catalog did not start within {START_TIMEOUT}s; "
                                   f"its log:\n{_log_tail(log)}")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RestCatalogError(f"the REST catalog exited ({proc.wait(10)}); its log:\n"
                                       f"{_log_tail(log)}")
            buffer += chunk
    line = buffer.partition(b"\n")[0].decode().strip()
    if not line.startswith("port="):
        raise RestCatalogError(f"unexpected first line from the REST catalog: {line!r}")
    return int(line[len("port="):])


def _wait_config(url: str, proc: subprocess.Popen[bytes], deadline: float, log: Path) -> None:
    """Poll ``GET /v1/config`` until it answers 200 (Jetty serves once the line is out: this
    is the check that the catalog itself answers)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RestCatalogError(f"the REST catalog exited ({proc.returncode}); its log:\n"
                                   f"{_log_tail(log)}")
        try:
            with opener.open(f"{url}/v1/config", timeout=5) as answer:
                if answer.status == 200:
                    return
                last = f"HTTP {answer.status}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.1)  # a poll interval, bounded by the deadline
    raise RestCatalogError(f"GET {url}/v1/config did not answer 200 within {START_TIMEOUT}s "
                           f"({last}); its log:\n{_log_tail(log)}")


def start_rest_catalog(sqlite_path: Path | str, warehouse_uri: str, name: str, *,
                       port: int = 0, log_path: Path | str | None = None,
                       timeout: float = START_TIMEOUT) -> tuple[str, subprocess.Popen[bytes]]:
    """Start a REST catalog over a JdbcCatalog named `name` on the SQLite file `sqlite_path`
    (made if missing) with its warehouse at `warehouse_uri` (e.g. ``file:///...``), on
    127.0.0.1:`port` (0: any free port). Returns its URL (``http://127.0.0.1:<port>``) once
    ``GET /v1/config`` answers, and the process (stop it with :func:`stop_rest_catalog`).
    Its log (stderr) goes to `log_path`, by default ``rest-catalog.log`` beside the SQLite
    file."""
    classpath = ensure_built()
    sqlite = Path(sqlite_path).absolute()
    sqlite.parent.mkdir(parents=True, exist_ok=True)
    log = Path(log_path) if log_path is not None else sqlite.parent / "rest-catalog.log"
    cmd = [dist.java_bin(), *JVM_FLAGS, "-cp", classpath, MAIN_CLASS, str(sqlite),
           warehouse_uri, name, str(port)]
    deadline = time.monotonic() + timeout
    with open(log, "ab") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=sqlite.parent)
    try:
        url = f"http://{HOST}:{_read_port(proc, deadline, log)}"
        _wait_config(url, proc, deadline, log)
    except BaseException:
        stop_rest_catalog(proc)
        raise
    return url, proc


def stop_rest_catalog(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM to its PID (Jetty stops, the catalog closes), SIGKILL after `timeout`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    if proc.stdout is not None:
        proc.stdout.close()


if __name__ == "__main__":  # make the caches: python compat/iceberg_rest.py
    print(ensure_built())
