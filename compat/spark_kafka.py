"""Spark's own Kafka connector (spark-sql-kafka-0-10) next to Strom, in a virtualenv of its own.

Maven Central does not serve the connector for the PySpark the project installs (4.3.0, checked
2026-11-27); 4.2.0 is the newest it serves. A connector jar must match its Spark, so the
connector runs in a separate virtualenv with PySpark 4.2.0 from PyPI, and its jars (the pom in
compat/java/spark-kafka) are fetched by compat/kafka_dist.py's ``ensure_libs``, with its lock and
marker. Both are cached under ``~/.cache/strom-compat``: only a first run needs the network.

The Spark driver runs compat/spark_kafka_driver.py in that virtualenv, as a child process that
takes one JSON command per line on stdin and answers one JSON line on stdout, so a test module
or the benchmark pays for one JVM start and not one per step. Used by
tests/integration/spark/test_spark_kafka_connector.py and bench/spark_bench.py; standard
library only (loaded by path, like kafka_dist.py).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SPARK_VERSION = "4.2.0"
CACHE = Path.home() / ".cache" / "strom-compat"
VENV_ENV = "STROM_SPARK_KAFKA_VENV"
DEFAULT_VENV = CACHE / f"pyspark-{SPARK_VERSION}" / "venv"
DRIVER = HERE / "spark_kafka_driver.py"
INSTALL_TIMEOUT = 900.0  # pyspark's wheel is ~450 MB: a slow link's first download


def _load_dist() -> Any:
    spec = importlib.util.spec_from_file_location("compat_kafka_dist", HERE / "kafka_dist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dist = _load_dist()
JARS = dist.JarSet(HERE / "java" / "spark-kafka" / "pom.xml",
                   CACHE / f"spark-kafka-{SPARK_VERSION}" / "libs",
                   f"spark-sql-kafka-0-10_2.13-{SPARK_VERSION}.jar")


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_ENV) or str(DEFAULT_VENV)).expanduser()


def _venv_marker(venv: Path) -> Path:
    return venv / f".strom-pyspark-{SPARK_VERSION}"


def is_cached() -> bool:
    return _venv_marker(venv_dir()).exists() and dist.is_cached(JARS)


def ensure_venv(base_python: str = sys.executable) -> Path:
    """The virtualenv's python, made with ``pyspark==SPARK_VERSION`` on first use.

    Built under a file lock (another session may be building it) and marked done only at the
    end, so a broken half-install is removed and made again.
    """
    venv = venv_dir()
    python = venv / "bin" / "python"
    if _venv_marker(venv).exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".build-{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _venv_marker(venv).exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        steps = [[base_python, "-m", "venv", str(venv)],
                 [str(python), "-m", "pip", "install", "--quiet", f"pyspark=={SPARK_VERSION}"]]
        for cmd in steps:
            proc = subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise RuntimeError(f"making the PySpark {SPARK_VERSION} virtualenv failed "
                                   f"({' '.join(cmd)}):\n{proc.stdout[-3000:]}\n"
                                   f"{proc.stderr[-3000:]}")
        _venv_marker(venv).touch()
    return python


def ensure_all() -> tuple[Path, list[Path]]:
    """The virtualenv's python and the connector's jars (fetched on first use)."""
    libs = dist.ensure_libs(JARS)
    return ensure_venv(), sorted(libs.glob("*.jar"))


class DriverError(RuntimeError):
    pass


class ConnectorDriver:
    """A Spark 4.2 driver with Spark's Kafka connector, in its own process.

    ``call(op, **args)`` sends one command and returns its answer; Spark's log goes to
    ``log_path``. ``close()`` stops it (by its PID; SIGKILL after a deadline).
    """

    def __init__(self, workdir: Path, master: str = "local[2]",
                 conf: dict[str, str] | None = None) -> None:
        python, jars = ensure_all()
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "spark-kafka-driver.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_PYTHON",
                            "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
        env["PYSPARK_PYTHON"] = str(python)  # Python workers, if any, run Spark 4.2's pyspark
        env["SPARK_LOCAL_IP"] = "127.0.0.1"  # not the address the host name resolves to
        setup = {"master": master, "jars": [str(j) for j in jars], "conf": conf or {}}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(python), str(DRIVER), json.dumps(setup)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, env=env, cwd=workdir)
        self._buffer = b""
        try:
            self.version = self._answer(300.0)["spark"]
        except BaseException:
            self.close()
            raise

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DriverError(f"no answer within {timeout}s; log tail:\n{self.log_tail()}")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise DriverError(f"driver exited ({self.proc.wait(10)}); log tail:\n"
                                      f"{self.log_tail()}")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer = json.loads(line)
        if "error" in answer:
            raise DriverError(f"{answer['error']}\nlog tail:\n{self.log_tail()}")
        return answer

    def call(self, op: str, timeout: float = 300.0, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
        self.proc.stdin.flush()
        return self._answer(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # end of commands: the driver stops Spark and exits
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()  # its JVM exits with it (py4j's gateway watches stdin)
                self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
