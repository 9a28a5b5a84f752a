"""Strom: a Kafka-compatible distributed commit log.

kio gives its phantom types Hypothesis strategies at import time whenever Hypothesis is
installed (as it is in a development or test environment), which costs about half a second of
CPU in every process that loads Strom's protocol layer: a third of a broker's start-up, most of
a short `strom` command, every Spark Python worker. Strom never generates test data, so kio is
loaded with Hypothesis hidden unless this process has imported Hypothesis already (a test
process has, and keeps kio's strategies).
"""

from __future__ import annotations

import sys

__version__ = "0.1.0"


def _load_kio_without_hypothesis() -> None:
    if "hypothesis" in sys.modules or "kio" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` now fails
    try:
        import kio.static.primitive  # noqa: F401  (it skips the strategies on ImportError)
    finally:
        del sys.modules["hypothesis"]


_load_kio_without_hypothesis()
