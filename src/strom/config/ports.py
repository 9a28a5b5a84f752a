"""Ports of Strom's own services (the metrics endpoint so far): a default port must not stop a
second broker on the same host.

Kafka listens only where `listeners` says; the ports Strom adds have defaults of their own, so
two brokers started with default settings on one host would both ask for them. The first gets
the port; a later one goes on without that service and says so in a WARN naming the port. A
port the operator chose is needed: then a busy one stops the start-up with one line.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from typing import TypeVar

from strom.config.defs import ConfigError

log = logging.getLogger(__name__)

S = TypeVar("S")


def bind_own_port(start: Callable[[], S], *, service: str, config: str, host: str, port: int,
                  explicit: bool, hint: str = "") -> S | None:
    """``start()``, which binds host:port for ``service`` (the value of ``config``). If the port
    is in use and ``config`` was not set (``explicit`` false), a WARN names the port and None
    is returned: the caller goes on without the service. Any other failure to bind is a
    ConfigError naming the address and the config (``hint`` ends its message)."""
    try:
        return start()
    except OSError as e:
        if e.errno == errno.EADDRINUSE and not explicit:
            log.warning("%s not served: port %d on %s (the default of %s) is in use, by another "
                        "broker on this host?; going on without it (set %s to serve it on "
                        "another port)", service, port, host, config, config)
            return None
        reason = (e.strerror or str(e)).lower()
        raise ConfigError(f"cannot serve {service} on {host}:{port} ({config}): {reason}; give "
                          f"it another port{hint}") from e
