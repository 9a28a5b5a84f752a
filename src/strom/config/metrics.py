"""The metrics endpoint's config. Kafka has none (its metrics go through JMX, and the
Prometheus JMX exporter serves them); Strom serves the same names itself."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from strom.config.defs import ConfigDef, ConfigError, ConfigType

DEFAULT_METRICS_LISTENER = "http://127.0.0.1:9404"


def metrics_endpoint(value: str | None) -> tuple[str, int] | None:
    """``metrics.listener`` as (host, port); None when empty (metrics off)."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in (
            "", "/", "/metrics"):
        raise ConfigError(
            f"Invalid value {value} for configuration metrics.listener: must look like "
            "http://HOST:PORT (empty turns the metrics endpoint off)")
    return parts.hostname, port


def _check(name: str, value: Any) -> None:
    metrics_endpoint(value)


METRICS_CONFIGS = (
    ConfigDef("metrics.listener", ConfigType.STRING, DEFAULT_METRICS_LISTENER,
              "where the Prometheus endpoint listens (http://HOST:PORT, served at /metrics, "
              "Kafka's metric names as the JMX exporter gives them); empty: no metrics, "
              "nothing counted", _check, read_only=True),
)
