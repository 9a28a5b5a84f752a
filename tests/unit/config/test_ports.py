"""A port of Strom's own: taken while at its default, the service is left out with a WARN
naming the port; taken while the operator chose it, the start-up stops with one line."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from strom.config.defs import ConfigError
from strom.config.ports import bind_own_port

HOST = "127.0.0.1"


@pytest.fixture
def busy_port() -> Iterator[int]:
    holder = socket.socket()
    holder.bind((HOST, 0))
    holder.listen()
    try:
        yield holder.getsockname()[1]
    finally:
        holder.close()


def _bind(port: int) -> socket.socket:
    sock = socket.socket()
    try:
        sock.bind((HOST, port))
    except OSError:
        sock.close()
        raise
    return sock


def test_a_busy_default_port_is_left_out_with_a_warning(busy_port: int, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="strom.config.ports"):
        got = bind_own_port(lambda: _bind(busy_port), service="metrics",
                            config="metrics.listener", host=HOST, port=busy_port,
                            explicit=False)
    assert got is None
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"metrics not served: port {busy_port} on {HOST} (the default of "
                              f"metrics.listener) is in use")


def test_a_busy_port_the_operator_chose_stops_the_start(busy_port: int) -> None:
    with pytest.raises(ConfigError) as info:
        bind_own_port(lambda: _bind(busy_port), service="metrics", config="metrics.listener",
                      host=HOST, port=busy_port, explicit=True, hint=", or turn it off")
    assert str(info.value) == (f"cannot serve metrics on {HOST}:{busy_port} (metrics.listener): "
                               "address already in use; give it another port, or turn it off")


def test_a_free_port_is_served() -> None:
    sock = bind_own_port(lambda: _bind(0), service="metrics", config="metrics.listener",
                         host=HOST, port=0, explicit=False)
    assert sock is not None
    sock.close()
