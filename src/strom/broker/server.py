"""The network layer: accepts connections, reads size-prefixed frames, dispatches, writes replies.

Each connection is one task that handles its requests strictly in order, as Kafka does (a channel
is muted until its response is sent). Frames land in `bytearray`s so the produce path can patch
base offsets in place; large frames are received straight into their own buffer. Fetch replies
mix byte chunks with file slices, which go out with `os.sendfile` (zero-copy).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from strom.broker.router import Router
from strom.protocol.errors import ProtocolError

log = logging.getLogger(__name__)

_READ_CHUNK = 256 * 1024
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_RESP_HEAD = struct.Struct(">ii")


class CloseConnection(Exception):
    """Raised by a handler to drop the connection without a reply (e.g. errors on acks=0)."""


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    connection_id: int


@dataclass(slots=True)
class Parts:
    """A reply made of byte chunks and file slices (anything with file/position/length)."""

    parts: list[Any]
    size: int


class BrokerServer:
    def __init__(self, router: Router, host: str, port: int, *, max_request_bytes: int,
                 send_buffer: int = -1, receive_buffer: int = -1, backlog: int = 50,
                 max_idle_ms: int = 600_000) -> None:
        self.router = router
        self.host, self.port = host, port
        self.max_request_bytes = max_request_bytes
        self.send_buffer, self.receive_buffer = send_buffer, receive_buffer
        self.backlog = backlog
        self.max_idle = max_idle_ms / 1000
        self._reaper: asyncio.Task[None] | None = None
        self._live: dict[int, Connection] = {}
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._connections: dict[int, asyncio.Task[None]] = {}
        self._next_id = 0

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(max(self.backlog, 128))
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        self._accept_task = loop.create_task(self._accept_loop())
        if self.max_idle > 0:
            self._reaper = loop.create_task(self._reap_idle())

    async def stop(self) -> None:
        for task in (self._accept_task, self._reaper):
            if task is not None:
                task.cancel()
        if self._sock is not None:
            self._sock.close()
        for task in list(self._connections.values()):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections.values(), return_exceptions=True)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            try:
                conn, addr = await loop.sock_accept(self._sock)
            except OSError as exc:  # e.g. EMFILE: back off briefly instead of spinning
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer > 0:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            if self.receive_buffer > 0:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            self._next_id += 1
            cid = self._next_id
            connection = Connection(self, conn, f"{addr[0]}:{addr[1]}", cid)
            task = loop.create_task(connection.run())
            self._connections[cid] = task
            self._live[cid] = connection
            task.add_done_callback(self._forget(cid))

    def _forget(self, cid: int):
        def done(_task: asyncio.Task[None]) -> None:
            self._connections.pop(cid, None)
            self._live.pop(cid, None)

        return done

    async def _reap_idle(self) -> None:
        """Close connections idle longer than connections.max.idle.ms, as Kafka does."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(self.max_idle / 4, 30))
            now = loop.time()
            for cid, conn in list(self._live.items()):
                if not conn.busy and now - conn.last_active > self.max_idle:
                    log.info("closing idle connection %s", conn.peer)
                    task = self._connections.get(cid)
                    if task is not None:
                        task.cancel()


class Connection:
    def __init__(self, server: BrokerServer, sock: socket.socket, peer: str, cid: int) -> None:
        self.server = server
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.cid = cid
        self.loop = asyncio.get_running_loop()
        self._buf = bytearray(_READ_CHUNK)
        self._start = 0
        self._end = 0
        self.last_active = self.loop.time()
        self.busy = False  # True while a request is being handled (e.g. a long-poll fetch)

    async def run(self) -> None:
        try:
            while True:
                frame = await self._read_frame()
                if frame is None:
                    return
                self.busy = True
                await self._handle(frame)
                self.busy = False
                self.last_active = self.loop.time()
        except (ConnectionError, CloseConnection, asyncio.IncompleteReadError):
            pass
        except ProtocolError as exc:
            log.info("closing connection %s: malformed request: %s", self.peer, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection %s after an unexpected error", self.peer)
        finally:
            self.sock.close()

    # -- reading --------------------------------------------------------------------------

    async def _fill(self, need: int) -> bool:
        """Ensure `need` buffered bytes; False on a clean EOF before any of them."""
        while self._end - self._start < need:
            if self._start and self._start == self._end:
                self._start = self._end = 0
            elif len(self._buf) - self._start < need:
                remaining = self._buf[self._start : self._end]
                self._buf[: len(remaining)] = remaining
                self._start, self._end = 0, len(remaining)
            view = memoryview(self._buf)[self._end :]
            n = await self.loop.sock_recv_into(self.sock, view)
            view.release()
            if n == 0:
                if self._end == self._start:
                    return False
                raise ConnectionError("connection closed mid-frame")
            self._end += n
        return True

    async def _read_frame(self) -> bytearray | None:
        if not await self._fill(4):
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        self._start += 4
        if size < 0 or size > self.server.max_request_bytes:
            log.warning("closing connection %s: request size %d is outside 0..%d "
                        "(socket.request.max.bytes)", self.peer, size, self.server.max_request_bytes)
            raise CloseConnection()
        available = self._end - self._start
        if available >= size:
            frame = self._buf[self._start : self._start + size]
            self._start += size
            return frame
        # Large frame: copy what we have, then receive the rest straight into the frame.
        frame = bytearray(size)
        frame[:available] = self._buf[self._start : self._end]
        self._start = self._end = 0
        view = memoryview(frame)
        got = available
        while got < size:
            n = await self.loop.sock_recv_into(self.sock, view[got:])
            if n == 0:
                raise ConnectionError("connection closed mid-frame")
            got += n
        view.release()
        return frame

    # -- dispatch -------------------------------------------------------------------------

    async def _handle(self, frame: bytearray) -> None:
        if len(frame) < 8:
            raise ProtocolError("request shorter than its header")
        api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
        router = self.server.router
        reply = router.dispatch(self, api_key, api_version, correlation_id, frame)
        if isinstance(reply, Awaitable):
            reply = await reply
        if reply is None:
            return
        header = router.response_header(api_key, api_version, correlation_id)
        if isinstance(reply, Parts):
            await self._send_parts(header, reply)
            return
        prefix = _SIZE.pack(len(header) + len(reply)) + header
        if len(reply) < 65536:
            await self._sendall(prefix + reply)
        else:  # avoid copying a large body just to prepend a few bytes
            await self._sendall(prefix)
            await self._sendall(reply)

    # -- writing --------------------------------------------------------------------------

    async def _sendall(self, data: bytes | bytearray | memoryview) -> None:
        """Send now if the kernel takes it all (the common case); otherwise wait for room."""
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            await self.loop.sock_sendall(self.sock, memoryview(data)[sent:])

    async def _send_parts(self, header: bytes, reply: Parts) -> None:
        chunk = bytearray(_SIZE.pack(len(header) + reply.size))
        chunk += header
        for part in reply.parts:
            if isinstance(part, (bytes, bytearray, memoryview)):
                chunk += part
                continue
            if chunk:
                await self._sendall(chunk)
                chunk = bytearray()
            await self._sendfile(part)
        if chunk:
            await self._sendall(chunk)

    async def _sendfile(self, part: Any) -> None:
        """Zero-copy send of a file slice; the file stays pinned (open) across the awaits."""
        part.file.pin()
        try:
            in_fd = part.file.fileno()
            offset, remaining = part.position, part.length
            while remaining > 0:
                try:
                    sent = os.sendfile(self.fd, in_fd, offset, remaining)
                except BlockingIOError:
                    await self._writable()
                    continue
                if sent == 0:  # the file shrank under us: the frame can't be completed
                    raise ConnectionError("segment file truncated during sendfile")
                offset += sent
                remaining -= sent
        finally:
            part.file.unpin()

    def _writable(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self.loop.create_future()

        def ready() -> None:
            self.loop.remove_writer(self.fd)
            if not fut.done():
                fut.set_result(None)

        self.loop.add_writer(self.fd, ready)
        return fut
