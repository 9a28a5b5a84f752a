"""The network server's read path and connection limits, with an echo router (no broker).

Each test runs a real BrokerServer on 127.0.0.1 in its own event loop and talks to it over real
sockets from a worker thread, so frames really arrive split by the kernel and the loop.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from strom.broker import server as server_module
from strom.broker.connection_limits import (
    ConnectionLimits,
    MemoryPool,
    parse_ip_overrides,
)
from strom.broker.server import BrokerServer
from strom.config.defs import ConfigError

pytestmark = pytest.mark.timeout(60)

_HEADER = struct.Struct(">ihhi")  # size, api key, version, correlation id


class EchoRouter:
    """Answers every request with its own body length (4 bytes)."""

    keeps_times = False  # no request hooks

    def __init__(self) -> None:
        self.seen: list[int] = []

    def dispatch(self, conn: Any, api_key: int, version: int, correlation_id: int,
                 frame: bytearray) -> bytes:
        self.seen.append(len(frame))
        return struct.pack(">i", len(frame))

    def response_header(self, api_key: int, version: int, correlation_id: int) -> bytes:
        return struct.pack(">i", correlation_id)


def request(correlation_id: int, body: bytes = b"") -> bytes:
    """A frame: size, ApiVersions v0 header fields, body."""
    return _HEADER.pack(8 + len(body), 18, 0, correlation_id) + body


def read_reply(sock: socket.socket) -> tuple[int, int]:
    """(correlation id, the echoed frame length)."""
    data = b""
    while len(data) < 12:
        chunk = sock.recv(12 - len(data))
        if not chunk:
            raise EOFError("closed")
        data += chunk
    size, cid, length = struct.unpack(">iii", data)
    assert size == 8
    return cid, length


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def run_with_server(client: Callable[[int, BrokerServer], None], **kwargs: Any) -> BrokerServer:
    """Start a server, run ``client(port, server)`` in a thread, stop the server."""

    async def main() -> BrokerServer:
        server = BrokerServer(EchoRouter(), "127.0.0.1", 0,  # type: ignore[arg-type]
                              max_request_bytes=kwargs.pop("max_request_bytes", 200 << 20),
                              max_idle_ms=0, **kwargs)
        await server.start()
        try:
            await asyncio.to_thread(client, server.port, server)
        finally:
            await server.stop()
        return server

    return asyncio.run(main())


def test_frames_split_at_every_byte_and_packed_together_are_all_answered() -> None:
    frames = [request(i, bytes(range(i % 7))) for i in range(40)]

    def client(port: int, _server: BrokerServer) -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for byte in frames[0]:  # one byte per send
                s.send(bytes([byte]))
            s.sendall(b"".join(frames[1:]))  # the rest in one go
            for i in range(40):
                assert read_reply(s) == (i, 8 + i % 7)

    run_with_server(client)


def test_a_large_frame_arrives_whole() -> None:
    body = bytes(range(256)) * (3 * 4096 + 17)  # ~3 MiB: grows past the eager allocation

    def client(port: int, _server: BrokerServer) -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(request(7, body))
            assert read_reply(s) == (7, 8 + len(body))

    run_with_server(client)


def test_a_client_that_announces_100_mib_and_stalls_costs_about_a_mebibyte() -> None:
    def client(port: int, server: BrokerServer) -> None:
        socks = []
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(_HEADER.pack(100 << 20, 0, 9, i) + b"x" * 1000)  # and nothing more
            socks.append(s)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            conns = list(server._live.values())
            if len(conns) == 20 and all(c._got == 1008 for c in conns):
                break
            time.sleep(0.01)
        held = [len(c._frame) for c in server._live.values() if c._frame is not None]
        assert len(held) == 20
        # each holds its first ~1 MiB, not the 100 MiB it announced (2 GB in all before)
        assert max(held) <= server_module._EAGER_BYTES
        for s in socks:
            s.close()

    run_with_server(client)


def test_idle_connections_hold_no_read_buffer() -> None:
    def client(port: int, server: BrokerServer) -> None:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
            for s in socks:  # one request each, so every connection is surely set up
                s.sendall(request(1))
                assert read_reply(s) == (1, 8)
            per_connection = (tracemalloc.get_traced_memory()[0] - before) / 100
        finally:
            tracemalloc.stop()
        for s in socks:
            s.close()
        # each used to keep a 256 KiB read buffer (2,000 connections: +520 MB)
        assert per_connection < 16 * 1024, per_connection

    run_with_server(client)


def test_over_max_connections_a_connection_waits_for_a_slot() -> None:
    limits = ConnectionLimits(max_connections=2, max_waiting=5)

    def client(port: int, _server: BrokerServer) -> None:
        first = socket.create_connection(("127.0.0.1", port))
        second = socket.create_connection(("127.0.0.1", port))
        for s in (first, second):
            s.sendall(request(1))
            assert read_reply(s) == (1, 8)
        third = socket.create_connection(("127.0.0.1", port))
        third.sendall(request(3))
        third.settimeout(0.5)
        with pytest.raises(TimeoutError):  # held back, unread, while both slots are taken
            third.recv(1)
        first.close()
        third.settimeout(5)
        assert read_reply(third) == (3, 8)  # served once a slot is free
        second.close()
        third.close()

    run_with_server(client, limits=limits)
    assert limits.count == 0


def test_with_the_waiting_room_full_a_connection_is_closed() -> None:
    limits = ConnectionLimits(max_connections=1, max_waiting=1)

    def client(port: int, _server: BrokerServer) -> None:
        served = socket.create_connection(("127.0.0.1", port))
        served.sendall(request(1))
        assert read_reply(served) == (1, 8)
        waiting = socket.create_connection(("127.0.0.1", port))
        refused = socket.create_connection(("127.0.0.1", port))
        assert closed_by_peer(refused)
        assert not closed_by_peer(waiting, timeout=0.3)
        for s in (served, waiting, refused):
            s.close()

    run_with_server(client, limits=limits)


def test_max_connections_per_ip_closes_the_extra_connection_and_overrides_apply() -> None:
    def client(port: int, _server: BrokerServer, allowed: int) -> None:
        kept = [socket.create_connection(("127.0.0.1", port)) for _ in range(allowed)]
        for s in kept:
            s.sendall(request(1))
            assert read_reply(s) == (1, 8)
        extra = socket.create_connection(("127.0.0.1", port))
        assert closed_by_peer(extra)
        kept[0].close()
        again = None  # the slot of a closed connection is free again
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            again = socket.create_connection(("127.0.0.1", port))
            again.sendall(request(2))
            try:
                assert read_reply(again) == (2, 8)
                break
            except (EOFError, ConnectionResetError):
                again.close()
                again = None
        assert again is not None
        for s in [*kept[1:], again, extra]:
            s.close()

    run_with_server(lambda p, s: client(p, s, 1), limits=ConnectionLimits(max_per_ip=1))
    run_with_server(lambda p, s: client(p, s, 3), limits=ConnectionLimits(
        max_per_ip=1, per_ip_overrides=parse_ip_overrides("127.0.0.1:3")))


def test_ip_overrides_are_parsed_as_kafka_writes_them() -> None:
    assert parse_ip_overrides("hostName:100, 127.0.0.1:200") == {"hostName": 100,
                                                                 "127.0.0.1": 200}
    assert parse_ip_overrides("") == {}
    with pytest.raises(ConfigError):
        parse_ip_overrides("127.0.0.1")


def test_reading_pauses_while_the_request_memory_pool_is_used_up() -> None:
    pool = MemoryPool(64 * 1024)

    def client(port: int, server: BrokerServer) -> None:
        big = socket.create_connection(("127.0.0.1", port))
        big.sendall(_HEADER.pack(1 << 20, 0, 9, 1) + b"y" * 100_000)  # holds the pool
        deadline = time.monotonic() + 5
        while not pool.exhausted() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.exhausted()
        small = socket.create_connection(("127.0.0.1", port))
        small.sendall(request(5))
        small.settimeout(0.5)
        with pytest.raises(TimeoutError):  # nothing is read while the pool is used up
            small.recv(1)
        big.sendall(b"y" * ((1 << 20) - 8 - 100_000))  # the rest: handled, memory given back
        big.settimeout(5)
        assert read_reply(big)[0] == 1
        small.settimeout(5)
        assert read_reply(small) == (5, 8)
        big.close()
        small.close()

    run_with_server(client, memory=pool)
    assert pool.available == pool.capacity


def test_a_size_outside_the_limit_closes_only_that_connection() -> None:
    def client(port: int, _server: BrokerServer) -> None:
        good = socket.create_connection(("127.0.0.1", port))
        bad = socket.create_connection(("127.0.0.1", port))
        bad.sendall(struct.pack(">i", 2_000_000))
        assert closed_by_peer(bad)
        good.sendall(request(4))
        assert read_reply(good) == (4, 8)
        good.close()
        bad.close()

    run_with_server(client, max_request_bytes=1 << 20)


def test_near_the_descriptor_limit_new_connections_are_closed_with_an_error(caplog) -> None:
    def client(port: int, server: BrokerServer) -> None:
        kept = socket.create_connection(("127.0.0.1", port))
        kept.sendall(request(1))
        assert read_reply(kept) == (1, 8)
        # as if the process's limit were just above the descriptors in use now
        probe = socket.socket()
        server.fd_ceiling = probe.fileno() + 2
        probe.close()
        extra = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        assert sum(closed_by_peer(s, timeout=2) for s in extra) >= 3
        kept.sendall(request(2))  # connections already open are still served
        assert read_reply(kept) == (2, 8)
        for s in [kept, *extra]:
            s.close()

    with caplog.at_level(logging.ERROR, logger="strom.broker.server"):
        run_with_server(client)
    errors = [r for r in caplog.records if "out of file descriptors" in r.getMessage()]
    assert len(errors) == 1  # rate-limited: one line, not one per connection
