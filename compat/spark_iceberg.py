"""PySpark 4.1 with Iceberg's Spark runtime, in a virtualenv of its own (issue 33).

Maven Central serves Iceberg's Spark runtime for Spark 4.1 at the newest
(``iceberg-spark-runtime-4.1_2.13:1.12.0``, checked 2026-11-29), and the 4.1 runtime does not
load on the PySpark the project installs (4.3: see docs/design/iceberg.md). So Spark pipelines
into Iceberg run in a separate virtualenv with PySpark 4.1.4, pyarrow, pandas,
``pyiceberg[sql-sqlite,pyiceberg-core]`` (to read the tables back through the same SQLite
catalog) and Strom's runtime dependencies, read from pyproject.toml. Strom itself is not
installed there (its ``[spark]`` extra pins PySpark 4.3): processes get it through
``PYTHONPATH=<repo>/src`` (:func:`child_env`). The jars (the pom in compat/java/iceberg: the
Iceberg runtime and sqlite-jdbc) are fetched by compat/kafka_dist.py's ``ensure_libs``, with its
lock and marker. Both are cached under ``~/.cache/strom-compat``: only a first run needs the
network. Standard library only (loaded by path, like spark_kafka.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SPARK_VERSION = "4.1.4"
ICEBERG_VERSION = "1.12.0"
CACHE = Path.home() / ".cache" / "strom-compat"
VENV_ENV = "STROM_SPARK_ICEBERG_VENV"
DEFAULT_VENV = CACHE / f"pyspark-{SPARK_VERSION}" / "venv"
INSTALL_TIMEOUT = 900.0  # pyspark 4.1 is a 455 MB sdist that pip builds: a slow first run
# besides Strom's runtime dependencies (pyproject.toml's [project].dependencies)
EXTRA_REQUIREMENTS = (f"pyspark=={SPARK_VERSION}", "pyarrow>=18,<27", "pandas>=2.2,<3",
                      "pyiceberg[sql-sqlite,pyiceberg-core]>=0.12,<0.13")


def _load_dist() -> Any:
    spec = importlib.util.spec_from_file_location("compat_kafka_dist", HERE / "kafka_dist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dist = _load_dist()
JARS = dist.JarSet(HERE / "java" / "iceberg" / "pom.xml",
                   CACHE / f"spark-iceberg-{SPARK_VERSION}" / "libs",
                   f"iceberg-spark-runtime-4.1_2.13-{ICEBERG_VERSION}.jar")


def requirements() -> list[str]:
    """Everything the virtualenv holds: Strom's runtime dependencies plus EXTRA_REQUIREMENTS."""
    with open(REPO / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return [*deps, *EXTRA_REQUIREMENTS]


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_ENV) or str(DEFAULT_VENV)).expanduser()


def _venv_marker(venv: Path) -> Path:
    # named after the requirement list: a changed dependency makes the virtualenv again
    digest = hashlib.sha256("\n".join(requirements()).encode()).hexdigest()[:12]
    return venv / f".strom-pyspark-{SPARK_VERSION}-{digest}"


def is_cached() -> bool:
    return _venv_marker(venv_dir()).exists() and dist.is_cached(JARS)


def check_tools() -> None:
    """Fail with one clear line when a tool the first run needs is missing."""
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("PySpark 4.1 + Iceberg needs Java 17+: no java on PATH or JAVA_HOME")
    if not dist.is_cached(JARS) and not shutil.which("mvn"):
        raise RuntimeError("fetching Iceberg's Spark runtime needs Maven: no mvn on PATH")


def ensure_venv(base_python: str = sys.executable) -> Path:
    """The virtualenv's python, made on first use (see :func:`requirements`).

    Built under a file lock (another session may be building it) and marked done only at the
    end, so a broken half-install is removed and made again.
    """
    venv = venv_dir()
    python = venv / "bin" / "python"
    marker = _venv_marker(venv)
    if marker.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".build-{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        steps = [[base_python, "-m", "venv", str(venv)],
                 [str(python), "-m", "pip", "install", "--quiet", *requirements()]]
        for cmd in steps:
            proc = subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise RuntimeError(f"making the PySpark {SPARK_VERSION} virtualenv failed "
                                   f"({' '.join(cmd)}):\n{proc.stdout[-3000:]}\n"
                                   f"{proc.stderr[-3000:]}")
        marker.touch()
    return python


def ensure_all() -> tuple[Path, list[Path]]:
    """The virtualenv's python and the Iceberg jars (both made or fetched on first use)."""
    check_tools()
    libs = dist.ensure_libs(JARS)
    return ensure_venv(), sorted(libs.glob("*.jar"))


def child_env(python: Path, extra_pythonpath: list[str] | None = None) -> dict[str, str]:
    """The environment for a process in the virtualenv: Strom from the repo's src, Python
    workers on the virtualenv's python, nothing inherited from another Spark or venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_PYTHON",
                        "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *(extra_pythonpath or [])])
    env["PYSPARK_PYTHON"] = str(python)
    env["PYSPARK_DRIVER_PYTHON"] = str(python)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


if __name__ == "__main__":  # make the caches: python compat/spark_iceberg.py
    py, jars = ensure_all()
    print(py)
    for jar in jars:
        print(jar)
