"""A Spark standalone cluster for the tests: a master and workers started with ``spark-class``
from a PySpark distribution (the project's own, or another virtualenv's) on 127.0.0.1, each
process with its log in a file, stopped (and, what is left, killed) by PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import IO, Any

from ..broker import free_port
from .conftest import descendants

DAEMON_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (None once it is gone): with it a PID that was
    reused by another process is never signalled."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def tree(pid: int) -> dict[int, str | None]:
    """``pid`` and the processes below it, each with its start time."""
    return {p: start_time(p) for p in descendants(pid)}


def kill_tree(processes: dict[int, str | None]) -> None:
    """SIGKILL the processes of a ``tree`` that are still the same processes."""
    for p, started in processes.items():
        if started is not None and start_time(p) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


class Proc:
    """A process of the cluster with its log in a file."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.work_dir = logdir
        self.log_path = logdir / f"{name}.log"
        self.log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, cwd=logdir)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def kill9(self) -> None:
        kill_tree(tree(self.proc.pid))
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM (a worker then stops its executors), SIGKILL what is left after a deadline."""
        if self.alive():
            processes = tree(self.proc.pid)
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
            kill_tree(processes)
            self.proc.wait(30)
        self.log.close()


class Cluster:
    """A standalone master and its workers (``cores`` and 1 GiB each), started with spark-class
    from ``home`` (the project's PySpark by default), their Python workers on ``python``."""

    def __init__(self, workdir: Path, *, home: Path | None = None, python: str | None = None,
                 env: dict[str, str] | None = None, cores: int = 1) -> None:
        if home is None:
            import pyspark

            home = Path(pyspark.__file__).resolve().parent
        self.workdir = workdir
        self.home = home
        self.cores = cores
        self.src = str(Path(__import__("strom").__file__).resolve().parents[1])
        base = env if env is not None else dict(os.environ)
        self.env = dict(base, SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1",
                        PYSPARK_PYTHON=python or sys.executable, PYTHONPATH=self.src,
                        SPARK_DAEMON_MEMORY="256m", SPARK_DAEMON_JAVA_OPTS=DAEMON_JVM)
        self.port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[Proc] = []
        self.workers: list[Proc] = []
        self.master = self._start("master", "org.apache.spark.deploy.master.Master",
                                  "--host", "127.0.0.1", "--port", str(self.port),
                                  "--webui-port", str(self.ui))

    def _start(self, name: str, cls: str, *args: str) -> Proc:
        cmd = [str(self.home / "bin" / "spark-class"), cls, *args]
        proc = Proc(name, cmd, self.env, self.workdir)
        self.procs.append(proc)
        return proc

    def start_worker(self) -> Proc:
        n = len(self.workers)
        work = self.workdir / f"worker-{n}"
        work.mkdir()
        worker = self._start(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", self.url,
                             "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", "1g",
                             "--webui-port", str(free_port()), "--work-dir", str(work))
        worker.work_dir = work
        self.workers.append(worker)
        return worker

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            return json.load(r)

    def alive_workers(self) -> int:
        return sum(1 for w in self.state()["workers"] if w["state"] == "ALIVE")

    def driver_env(self) -> dict[str, str]:
        return dict(self.env)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log_tail()}" for p in self.procs)


