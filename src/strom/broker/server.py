"""The network layer: accepts connections, reads size-prefixed frames, dispatches, writes replies.

Each connection is an `asyncio.BufferedProtocol` plus one task that handles its requests strictly
in order, as Kafka does (the next request waits until the previous response is handed to the
kernel). The event loop reads straight into the connection's reusable buffer (no per-read
future or poll registration, no per-read `bytes`); frames are copied out as `bytearray`s so the
produce path can patch base offsets in place, and a frame that is not complete yet is received
straight into its own buffer. Replies go out through the transport, which sends at once when the
socket has room. Fetch replies mix byte chunks with file slices: small ones are gathered into one
send, large ones go out with `os.sendfile` (zero-copy) between the chunks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections.abc import Awaitable
from typing import Any

from strom.broker.context import CloseConnection, Parts
from strom.broker.router import Router
from strom.common.tasks import cancel_all
from strom.protocol.errors import ProtocolError

log = logging.getLogger(__name__)

_READ_CHUNK = 256 * 1024
# A reply whose file slices add up to at most this is read and sent as one buffer: one send
# instead of a send per chunk plus a sendfile per slice (each costs a syscall and, on loopback,
# the receiver's wake-up) outweighs copying a few KiB.
_GATHER_BYTES = 64 * 1024
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")


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
        self._server: asyncio.AbstractServer | None = None
        self._connections: dict[int, asyncio.Task[None]] = {}
        self._next_id = 0

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit the listener's buffer sizes (and the loop sets TCP_NODELAY on
        # each), so nothing is set per connection.
        if self.send_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
        if self.receive_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
        try:
            sock.bind((self.host, self.port))
            sock.setblocking(False)
            self.port = sock.getsockname()[1]
            loop = asyncio.get_running_loop()
            # the event loop listens and accepts (uvloop: in C), calling _new_connection
            self._server = await loop.create_server(self._new_connection, sock=sock,
                                                    backlog=max(self.backlog, 128))
        except BaseException:
            sock.close()
            raise
        if self.max_idle > 0:
            self._reaper = loop.create_task(self._reap_idle())

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        if self._server is not None:
            self._server.close()  # stops accepting; live connections are cancelled below
        await cancel_all(list(self._connections.values()))

    def _new_connection(self) -> Connection:
        """The protocol for one accepted socket."""
        self._next_id += 1
        return Connection(self, self._next_id)

    def _opened(self, connection: Connection) -> None:
        cid = connection.cid
        task = connection.loop.create_task(connection.run())
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


class Connection(asyncio.BufferedProtocol):
    """One client: the event loop fills ``_buf`` (or a large frame in place), ``run`` drains it.

    Reading stops (``pause_reading``) only when the buffer holds nothing but unhandled bytes; the
    write buffer limit is 0, so ``pause_writing`` means "the kernel did not take it all yet".
    """

    def __init__(self, server: BrokerServer, cid: int) -> None:
        self.server = server
        self._peer: str | None = None
        self.cid = cid
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._fd = -1
        self._buf = bytearray(_READ_CHUNK)
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None  # a frame being received in place
        self._big_got = 0
        self._waiter: asyncio.Future[None] | None = None  # run() waiting for bytes or room
        self._reading_paused = False
        self._writing_paused = False
        self._eof = False
        self._lost = False
        self.last_active = self.loop.time()
        self.busy = False  # True while a request is being handled (e.g. a long-poll fetch)

    @property
    def peer(self) -> str:
        """host:port of the client, looked up on first use (most connections never need it)."""
        if self._peer is None:
            name = self.transport.get_extra_info("peername") if self.transport else None
            self._peer = f"{name[0]}:{name[1]}" if name else "?"
        return self._peer

    @property
    def fd(self) -> int:
        """The socket's descriptor, for sendfile."""
        if self._fd < 0:
            self._fd = self.transport.get_extra_info("socket").fileno()  # type: ignore[union-attr]
        return self._fd

    # -- protocol callbacks (called by the event loop) -------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's is no asyncio.Transport)
        transport.set_write_buffer_limits(high=0)
        self.server._opened(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        big = self._big
        if big is not None:
            return memoryview(big)[self._big_got :]
        if self._end == len(self._buf):
            self._compact()
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        big = self._big
        if big is not None:
            self._big_got += nbytes
            if self._big_got == len(big):
                self._big = None  # complete: later bytes go to the buffer again
        else:
            self._end += nbytes
            if self._end == len(self._buf) and self._start == 0:
                self._reading_paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return True  # keep the transport: requests already received still get their replies

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._writing_paused = False
        self._wake()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        """Until the event loop reports bytes, room to write, EOF or a lost connection."""
        if self._lost:
            raise ConnectionError("connection lost")
        waiter = self._waiter = self.loop.create_future()
        await waiter

    # -- the request loop ------------------------------------------------------------------

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
        except (ConnectionError, CloseConnection):
            pass
        except ProtocolError as exc:
            log.info("closing connection %s: malformed request: %s", self.peer, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection %s after an unexpected error", self.peer)
        finally:
            if self.transport is not None:
                self.transport.close()

    # -- reading --------------------------------------------------------------------------

    def _compact(self) -> None:
        """Move the unhandled bytes to the front of the buffer."""
        start, end = self._start, self._end
        if start:
            self._buf[: end - start] = self._buf[start:end]
            self._start, self._end = 0, end - start

    def _consumed(self) -> None:
        if self._reading_paused:
            self._compact()
            self._reading_paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]

    async def _fill(self, need: int) -> bool:
        """Ensure `need` buffered bytes; False on a clean EOF before any of them."""
        while self._end - self._start < need:
            if self._eof or self._lost:
                if self._end == self._start:
                    return False
                raise ConnectionError("connection closed mid-frame")
            if len(self._buf) - self._start < need:
                self._compact()
            self._consumed()
            await self._wait()
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
        start = self._start
        available = self._end - start
        if available >= size:
            self._start = start + size
            frame = self._buf[start : self._start]
            self._consumed()
            return frame
        # Not all here yet: copy what we have, then let the loop receive the rest in place.
        frame = bytearray(size)
        frame[:available] = self._buf[start : self._end]
        self._start = self._end = 0
        self._big, self._big_got = frame, available
        self._consumed()
        try:
            while self._big_got < size:
                if self._eof or self._lost:
                    raise ConnectionError("connection closed mid-frame")
                await self._wait()
        finally:
            self._big = None
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
            self._write(prefix + reply)
        else:  # avoid copying a large body just to prepend a few bytes
            self._write(prefix)
            self._write(reply)
        if self._writing_paused:
            await self._drained()

    # -- writing --------------------------------------------------------------------------

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        """Hand data to the transport: it sends at once what the socket takes, buffers the rest."""
        if self._lost:
            raise ConnectionError("connection lost")
        self.transport.write(data)  # type: ignore[union-attr]

    async def _drained(self) -> None:
        """Wait until the transport has handed everything to the kernel."""
        while self._writing_paused:
            await self._wait()
        if self._lost:
            raise ConnectionError("connection lost")

    async def _send_parts(self, header: bytes, reply: Parts) -> None:
        chunk = bytearray(_SIZE.pack(len(header) + reply.size))
        chunk += header
        if reply.size <= _GATHER_BYTES:
            for part in reply.parts:
                chunk += part if isinstance(part, (bytes, bytearray, memoryview)) else _read(part)
            self._write(chunk)
            if self._writing_paused:
                await self._drained()
            return
        for part in reply.parts:
            if isinstance(part, (bytes, bytearray, memoryview)):
                chunk += part
                continue
            if chunk:
                self._write(chunk)
                chunk = bytearray()
            await self._sendfile(part)
        if chunk:
            self._write(chunk)
        if self._writing_paused:
            await self._drained()

    async def _sendfile(self, part: Any) -> None:
        """Zero-copy send of a file slice; the file stays pinned (open) across the awaits.

        ``sendfile`` writes to the socket behind the transport's back, so it only runs while
        the transport holds nothing. When the socket is full, one chunk is read and handed to
        the transport, which reports (``resume_writing``) when the socket took it.
        """
        part.file.pin()
        try:
            in_fd = part.file.fileno()
            offset, remaining = part.position, part.length
            while remaining > 0:
                if self._writing_paused:
                    await self._drained()
                try:
                    sent = os.sendfile(self.fd, in_fd, offset, remaining)
                except BlockingIOError:
                    data = os.pread(in_fd, min(remaining, _READ_CHUNK), offset)
                    if data:
                        self._write(data)
                    sent = len(data)
                if sent == 0:  # the file shrank under us: the frame can't be completed
                    raise ConnectionError("segment file truncated during sendfile")
                offset += sent
                remaining -= sent
        finally:
            part.file.unpin()


def _read(part: Any) -> bytes:
    """The bytes of a file slice (small replies go out as one buffer)."""
    part.file.pin()
    try:
        data = os.pread(part.file.fileno(), part.length, part.position)
    finally:
        part.file.unpin()
    if len(data) != part.length:  # the file shrank under us: the frame can't be completed
        raise ConnectionError("segment file truncated during a read")
    return data
