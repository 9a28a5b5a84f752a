"""The documentation cannot drift from the code: every fenced block marked ```bash runnable in
the README and docs/ is run, line by line in one shell, against a fresh broker (its address
replaces localhost:9092), and must succeed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```bash runnable\n(.*?)^```$", re.M | re.S)

pytestmark = pytest.mark.timeout(180)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for m in _BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append((doc.relative_to(ROOT).as_posix(), line, m.group(1)))
    return found


BLOCKS = _blocks()


def test_the_readme_has_runnable_blocks() -> None:
    assert any(path == "README.md" for path, _, _ in BLOCKS)


@pytest.mark.parametrize(("path", "line", "script"), BLOCKS,
                         ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_runnable_block(path: str, line: int, script: str, make_broker, tmp_path) -> None:
    broker = make_broker()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "STROM_BOOTSTRAP_SERVER": broker.bootstrap}
    script = script.replace("localhost:9092", broker.bootstrap)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, (f"{path}:{line} failed ({done.returncode})\n"
                                  f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}")
