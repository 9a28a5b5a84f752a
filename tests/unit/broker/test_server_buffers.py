"""The listener's socket buffer sizes follow socket.send/receive.buffer.bytes (-1: the OS's own)."""

import asyncio
import socket

import pytest

from strom.broker.server import BrokerServer
from strom.config.broker import BROKER_CONFIGS

pytestmark = pytest.mark.timeout(30)


def _os_default_rcvbuf() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


async def _listener_buffers(send: int, receive: int) -> tuple[int, int]:
    server = BrokerServer(None, "127.0.0.1", 0, max_request_bytes=1 << 20,  # type: ignore[arg-type]
                          send_buffer=send, receive_buffer=receive, max_idle_ms=0)
    await server.start()
    try:
        sock = server._server.sockets[0]  # type: ignore[union-attr]
        return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    finally:
        await server.stop()


def test_receive_buffer_defaults_to_the_os_default_so_linux_can_autotune_it() -> None:
    # the server built with the configured defaults, as the broker builds it
    default = BROKER_CONFIGS["socket.receive.buffer.bytes"].default
    send_default = BROKER_CONFIGS["socket.send.buffer.bytes"].default
    _, rcv = asyncio.run(_listener_buffers(send_default, default))
    assert rcv == _os_default_rcvbuf()


def test_explicit_sizes_are_set_on_the_listener() -> None:
    snd, rcv = asyncio.run(_listener_buffers(102400, 102400))
    # Linux doubles the asked size for its bookkeeping; other kernels keep it
    assert snd in (102400, 204800)
    assert rcv in (102400, 204800)
