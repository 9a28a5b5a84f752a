"""Small disks for tests that fill one: a tmpfs mounted on a fresh directory (needs root, as CI
runs), always unmounted afterwards."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's notation, e.g. "8m") mounted on `mnt` (made here)."""
    mnt.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {mount.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)
