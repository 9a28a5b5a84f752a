"""Fixtures of the Kafka tools tests: Kafka 4.4's tool jars (fetched once) and a runner for them.

- ``kafka_tools``: a ``KafkaTools`` (``.run(tool, *args)``, ``.start``/``.stop``), session-wide.
- ``tools_file(name, text)``: writes a file for a tool's file option (JSON plans, offsets) and
  returns its path.
Brokers come from the parent conftest (``strom_broker``, one per module).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from . import jars
from .tools import KafkaTools

FIRST_FETCH_TIMEOUT = jars.FETCH_TIMEOUT + 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On a fresh machine the first test of this package to run fetches the jars: give it Maven's
    time. Every test of the package gets it, since under pytest-xdist any of them may be the
    first one on its worker, waiting for the other worker's fetch."""
    if jars.is_cached():
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.timeout(FIRST_FETCH_TIMEOUT))


@pytest.fixture(scope="session")
def kafka_tools(tmp_path_factory: pytest.TempPathFactory) -> KafkaTools:
    needed = ("java",) if jars.is_cached() else ("java", "mvn")
    missing = [t for t in needed if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Java 17+ and Maven run Kafka's tools)")
    libs = jars.ensure_libs()
    return KafkaTools.create(libs, tmp_path_factory.mktemp("kafka-tools"))


@pytest.fixture
def tools_file(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
