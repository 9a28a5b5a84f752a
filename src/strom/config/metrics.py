"""The metrics endpoint's config. Kafka has none (its metrics go through JMX, and the
Prometheus JMX exporter serves them); Strom serves the same names itself."""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import urlsplit

from strom.config.defs import ConfigDef, ConfigError, ConfigType

DEFAULT_METRICS_LISTENER = "http://127.0.0.1:9404"


class HttpListener(NamedTuple):
    host: str
    port: int
    tls: bool  # https: TLS with the broker's ssl.* settings (listener.name.<name>.ssl.*)


def http_endpoint(value: str | None, config: str, schemes: tuple[str, ...],
                  paths: tuple[str, ...], shape: str) -> tuple[str, str, int] | None:
    """An HTTP listener setting as (scheme, host, port); None when empty. Anything else is
    one ConfigError naming the config and the `shape` it must have."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in schemes or not parts.hostname or port is None \
            or parts.path not in paths:
        raise ConfigError(f"Invalid value {value} for configuration {config}: must look like "
                          f"{shape}")
    return parts.scheme, parts.hostname, port


def http_listener(value: str | None, config: str, what: str) -> HttpListener | None:
    """An ``http://`` or ``https://`` listener setting (the schema registry's, the HTTP
    API's); None when empty (`what` is off)."""
    found = http_endpoint(value, config, ("http", "https"), ("", "/"),
                          f"http://HOST:PORT or https://HOST:PORT (empty: no {what})")
    return None if found is None else HttpListener(found[1], found[2], found[0] == "https")


def metrics_endpoint(value: str | None) -> tuple[str, int] | None:
    """``metrics.listener`` as (host, port); None when empty (metrics off)."""
    found = http_endpoint(value, "metrics.listener", ("http",), ("", "/", "/metrics"),
                          "http://HOST:PORT (empty turns the metrics endpoint off)")
    return None if found is None else (found[1], found[2])


def _check(name: str, value: Any) -> None:
    metrics_endpoint(value)


METRICS_CONFIGS = (
    ConfigDef("metrics.listener", ConfigType.STRING, DEFAULT_METRICS_LISTENER,
              "where the Prometheus endpoint listens (http://HOST:PORT, served at /metrics, "
              "Kafka's metric names as the JMX exporter gives them); empty: no metrics, "
              "nothing counted", _check, read_only=True),
)
