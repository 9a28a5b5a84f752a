"""Kafka 4.4's jars for the tools tests: compat/kafka_dist.py fetches and caches them.

That module lives beside the pom it reads and is shared with compat/run_broker.py and the
benchmark; this file only loads it by path (compat/ is not a package) and re-exports it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[3] / "compat" / "kafka_dist.py"
_spec = importlib.util.spec_from_file_location("compat_kafka_dist", _PATH)
assert _spec is not None and _spec.loader is not None
_dist = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_dist)

KAFKA_VERSION: str = _dist.KAFKA_VERSION
FETCH_TIMEOUT: float = _dist.FETCH_TIMEOUT
libs_dir = _dist.libs_dir
is_cached = _dist.is_cached
ensure_libs = _dist.ensure_libs
