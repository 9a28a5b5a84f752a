"""The documentation cannot drift from the code: the fenced blocks marked ```bash runnable in
the README and in each page of docs/ run, one page at a time, in order, as one bash script in a
fresh directory, and must succeed. A fresh broker serves them (its address replaces
localhost:9092 and is $STROM_BOOTSTRAP_SERVER, its metrics endpoint replaces localhost:9404); a page may start its own broker in the
background, which is stopped with the script's process group."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```bash runnable\n(.*?)^```$", re.M | re.S)

pytestmark = pytest.mark.timeout(180)


def _scripts() -> list[tuple[str, str]]:
    """(page, its runnable blocks joined) for each page that has some."""
    found = []
    for doc in DOCS:
        blocks = _BLOCK.findall(doc.read_text())
        if blocks:
            found.append((doc.relative_to(ROOT).as_posix(), "\n".join(blocks)))
    return found


SCRIPTS = _scripts()


def test_the_readme_and_the_security_walk_through_are_runnable() -> None:
    assert {"README.md", "docs/security.md"} <= {page for page, _ in SCRIPTS}


@pytest.mark.parametrize(("page", "script"), SCRIPTS, ids=[p for p, _ in SCRIPTS])
def test_runnable_blocks(page: str, script: str, make_broker, tmp_path) -> None:
    broker = make_broker()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "STROM_BOOTSTRAP_SERVER": broker.bootstrap}
    script = script.replace("localhost:9092", broker.bootstrap).replace(
        "localhost:9404", broker.metrics_url.removeprefix("http://").removesuffix("/metrics"))
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own process group, stopped below
    try:
        out, err = proc.communicate(timeout=150)
    finally:
        _stop_group(proc.pid)
    assert proc.returncode == 0, (f"{page} failed ({proc.returncode})\n"
                                  f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}")


def _stop_group(pgid: int) -> None:
    """Stop what the script left running (a broker it started in the background)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)  # waiting for the group to exit, with a deadline
