"""The network layer: accepts connections, reads size-prefixed frames, dispatches, writes replies.

Each connection is an `asyncio.BufferedProtocol` plus one task that handles its requests strictly
in order, as Kafka does (the next request waits until the previous response is handed to the
kernel). The event loop reads into one scratch buffer shared by every connection (no per-read
future or poll registration, no per-read `bytes`, no buffer held by an idle connection), and
each read is cut into frames at once: frames are copied out as `bytearray`s so the produce path
can patch base offsets in place, and the missing part of a large frame is received straight
into its own buffer, which grows as the bytes arrive. Connection counts and request memory
are limited broker-wide (connection_limits.py). Replies go out through the transport, which sends at once when the
socket has room. Fetch replies mix byte chunks with file slices: small ones are gathered into one
send, large ones go out with `os.sendfile` (zero-copy) between the chunks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, cast

from strom.broker.connection_limits import ConnectionLimits, MemoryPool
from strom.broker.context import CloseConnection, Parts, RequestTimes, Throttle
from strom.broker.metrics.stats import BrokerStats
from strom.broker.router import Reply, Router
from strom.common.tasks import cancel_all
from strom.config.listeners import Listener
from strom.protocol.errors import ErrorCode, ProtocolError
from strom.security.listeners import AuthenticationError, ListenerSecurity
from strom.security.sasl.mechanisms import AuthenticationFailed
from strom.security.session import Gate, Session
from strom.storage.health import RateLimitedLog

log = logging.getLogger(__name__)

_READ_CHUNK = 256 * 1024
# A frame's buffer is allocated up to this size at once (a default-sized produce request, 1 MiB,
# arrives in one piece without copies); beyond it the buffer grows as the bytes arrive, so a
# client announcing 100 MiB and sending nothing costs ~1 MiB, not 100.
_EAGER_BYTES = 1024 * 1024 + 64 * 1024
# While this much of a frame is still missing, reads go straight into its buffer.
_DIRECT_BYTES = 64 * 1024
# Descriptors kept free for log files when connections would take the last ones.
_FD_RESERVE = 64
# Complete requests read ahead of the one being handled, before reading pauses.
_QUEUED_BYTES = 256 * 1024
# A reply whose file slices add up to at most this is read and sent as one buffer: one send
# instead of a send per chunk plus a sendfile per slice (each costs a syscall and, on loopback,
# the receiver's wake-up) outweighs copying a few KiB.
_GATHER_BYTES = 64 * 1024
# Over TLS, file slices are read and handed to the TLS layer in pieces of this size.
_TLS_READ_BYTES = 256 * 1024
# A TLS handshake must finish within this (or connections.max.idle.ms if smaller).
_TLS_HANDSHAKE_S = 10.0
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")


class BrokerServer:
    def __init__(self, router: Router, host: str, port: int, *, max_request_bytes: int,
                 send_buffer: int = -1, receive_buffer: int = -1, backlog: int = 50,
                 max_idle_ms: int = 600_000, limits: ConnectionLimits | None = None,
                 memory: MemoryPool | None = None,
                 security: ListenerSecurity | None = None,
                 stats: BrokerStats | None = None) -> None:
        self.router = router
        self.stats = stats  # None: metrics off (connections are counted here)
        self.security = security if security is not None else ListenerSecurity(
            Listener("PLAINTEXT", host, port, "PLAINTEXT"))
        # zero-copy sendfile only where the kernel may send file bytes as they are
        self.zero_copy = self.security.ssl_context is None
        self.host, self.port = host, port
        self.max_request_bytes = max_request_bytes
        self.send_buffer, self.receive_buffer = send_buffer, receive_buffer
        self.backlog = backlog
        self.max_idle = max_idle_ms / 1000
        # shared by every listener of a broker (max.connections counts them all)
        self.limits = limits if limits is not None else ConnectionLimits(max_waiting=backlog)
        self.memory = memory if memory is not None else MemoryPool()
        # Every read lands here first (the loop calls get_buffer, reads, then buffer_updated,
        # back to back), so an idle connection holds no buffer of its own.
        self.scratch = memoryview(bytearray(_READ_CHUNK))
        # The kernel hands out the lowest free descriptor, so a new socket numbered this high
        # means the process is about to run out: such connections are closed (and logged) so
        # that the logs can still open their segment files. Without this, the event loop
        # accepted and closed connections silently once descriptors ran out.
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.fd_ceiling = (soft_limit - _FD_RESERVE if soft_limit != resource.RLIM_INFINITY
                           else 1 << 62)
        self._fd_error = RateLimitedLog(log)
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
            tls = self.security.ssl_context
            handshake_s = min(_TLS_HANDSHAKE_S, self.max_idle) if self.max_idle > 0 else _TLS_HANDSHAKE_S
            self._server = await loop.create_server(
                self._new_connection, sock=sock, backlog=self.backlog, ssl=tls,
                ssl_handshake_timeout=handshake_s if tls is not None else None)
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
        if self.stats is not None:
            name = self.security.listener.name
            created = self.stats.connections_created
            created[name] = created.get(name, 0) + 1
        task.add_done_callback(self._forget(connection))

    @property
    def connection_count(self) -> int:
        return len(self._live)

    def waiting_requests(self) -> dict[int, int]:
        """Per API key, the requests whose reply is still awaited (Kafka: in a purgatory),
        read from their `RequestTimes` when the metrics are scraped: counting them here
        costs the requests nothing. Empty without request hooks (no times are kept)."""
        counts: dict[int, int] = {}
        for connection in self._live.values():
            times = connection.times
            if times is not None and times.ctx is not None and times.waiting:
                key = times.ctx.api_key
                counts[key] = counts.get(key, 0) + 1
        return counts

    @property
    def listener_name(self) -> str:
        return self.security.listener.name

    def out_of_fds(self, fd: int) -> None:
        self._fd_error.error(
            "fds", "out of file descriptors: a new connection got descriptor %d of the "
            "process's limit of %d (ulimit -n), %d kept for log files; closing new connections "
            "until some close (%d open here). Raise the limit, or lower max.connections or "
            "max.open.files", fd, self.fd_ceiling + _FD_RESERVE, _FD_RESERVE, len(self._live))

    def _hold_for_memory(self) -> None:
        """queued.max.request.bytes is used up: connections not in the middle of a request
        stop reading (Kafka mutes them likewise) until a handled request gives memory back."""
        for connection in self._live.values():
            connection.hold_for_memory()

    def _forget(self, connection: Connection) -> Callable[[asyncio.Task[None]], None]:
        def done(_task: asyncio.Task[None]) -> None:
            self._connections.pop(connection.cid, None)
            self._live.pop(connection.cid, None)
            connection.release()

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
    """One client: the event loop's reads are cut into frames here, ``run`` handles them.

    A read lands in the server's shared scratch buffer and is cut into frames at once; only a
    frame still arriving keeps a buffer (allocated up to _EAGER_BYTES at once, grown as more of
    it arrives, and received straight into while a large part is missing). Complete frames wait
    in a queue; reading pauses while it holds _QUEUED_BYTES, or while the memory pool is used
    up. The write buffer limit is 0, so ``pause_writing`` means "the kernel did not take it all
    yet".
    """

    def __init__(self, server: BrokerServer, cid: int) -> None:
        self.server = server
        self._peer: str | None = None
        self._address: str | None = None  # counted against max.connections.per.ip
        self._admitted = False  # counted against max.connections
        self.cid = cid
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._fd = -1
        self._frames: deque[bytearray] = deque()  # complete, not handled yet
        self._queued = 0  # their bytes
        self._head = bytearray()  # a size prefix split across reads
        self._frame: bytearray | None = None  # the frame being received
        self._size = 0  # its declared size
        self._got = 0  # its bytes received so far
        self._direct = False  # the last get_buffer handed out the frame itself
        self._charged = 0  # bytes taken from the memory pool and not given back
        self._waiter: asyncio.Future[None] | None = None  # run() waiting for bytes or room
        self._paused_for: set[str] = set()  # why reading is paused: "queue", "memory"
        self._writing_paused = False
        self._eof = False
        self._lost = False
        self._refused = False
        self.session: Session | None = None  # set once the connection is made (after TLS)
        self.last_active = self.loop.time()
        self.busy = False  # True while a request is being handled (e.g. a long-poll fetch)
        self.throttle = Throttle()  # set by a handler whose client is over a quota
        self.on_close: list[Callable[[], None]] = []  # hooks handlers leave (share sessions)
        # for the router's request hooks, if it has `after` hooks: when each queued frame
        # arrived, and the phase times of the request being handled
        self.times: RequestTimes | None = RequestTimes() if server.router.keeps_times else None
        self._arrivals: deque[float] = deque()  # kept only with times

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
            self._fd = self.transport.get_extra_info("socket").fileno()  # type: ignore[union-attr]  # connected by now
        return self._fd

    # -- admission (connection limits) -----------------------------------------------------

    def admit(self) -> None:
        """A connection slot is ours: start serving (reading was held back while waiting)."""
        self._admitted = True
        if self._lost:
            return
        if self.server.memory.exhausted():
            self.hold_for_memory()
        self._resume("slot")
        self.server._opened(self)

    def release(self) -> None:
        """The connection ended: give back its slot and any request memory it held."""
        self.server.limits.close(self, self._address, admitted=self._admitted)
        self._admitted = False
        self._frames.clear()
        self._frame = None
        self._give_back(self._charged)

    # -- protocol callbacks (called by the event loop) -------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's has asyncio.Transport's methods, not its class)
        self.transport = stream = cast(asyncio.Transport, transport)
        # "pause_writing: the kernel did not take it all yet". A TLS transport pauses when its
        # buffer holds >= high bytes (a plain one when it holds more), hence 1 there.
        stream.set_write_buffer_limits(high=0 if self.server.zero_copy else 1)
        try:
            self.session = self.server.security.new_session(
                self.peer, transport.get_extra_info("ssl_object"))
        except AuthenticationError as e:
            log.warning("closing connection %s on listener %s: %s", self.peer,
                        self.server.security.listener.name, e)
            self._refused = True
            transport.close()
            return
        if self.fd >= self.server.fd_ceiling:
            self.server.out_of_fds(self.fd)
            self._refused = True
            transport.close()
            return
        limits = self.server.limits
        if limits.tracks_addresses:
            name = transport.get_extra_info("peername")
            self._address = name[0] if name else "?"
        self._pause("slot")  # until admitted (at once, unless max.connections is reached)
        if not limits.open(self, self._address):
            self._refused = True
            self._address = None
            transport.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None and self._size - self._got >= _DIRECT_BYTES:
            if self._got == len(frame):
                frame = self._grow(frame)
            self._direct = True
            return memoryview(frame)[self._got :]
        self._direct = False
        return self.server.scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct:
            self._got += nbytes
            if self._got == self._size:
                self._complete()
        else:
            try:
                self._cut(self.server.scratch[:nbytes])
            except CloseConnection:
                self.transport.close()  # type: ignore[union-attr]  # data came: connected
                self._lost = True
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # keep the transport: requests already received still get their replies (a TLS
        # transport cannot be half-closed, and asyncio warns if asked to)
        return self.server.zero_copy

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._writing_paused = False
        if not self._admitted and not self._refused:  # it closed while waiting for a slot
            self.server.limits.close(self, self._address, admitted=False)
            self._address = None
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

    # -- cutting reads into frames ---------------------------------------------------------

    def _cut(self, data: memoryview) -> None:
        """Split the bytes of one read into frames; the rest of a frame goes to its buffer."""
        pos, end = 0, len(data)
        while pos < end:
            frame = self._frame
            if frame is None:
                if self._head or end - pos < 4:  # a size prefix split across reads
                    take = min(4 - len(self._head), end - pos)
                    self._head += data[pos : pos + take]
                    pos += take
                    if len(self._head) < 4:
                        return
                    (size,) = _SIZE.unpack(self._head)
                    self._head.clear()
                else:
                    (size,) = _SIZE.unpack_from(data, pos)
                    pos += 4
                frame = self._begin(size)
            take = min(self._size - self._got, end - pos)
            if self._got + take > len(frame):
                frame = self._grow(frame)
            frame[self._got : self._got + take] = data[pos : pos + take]
            self._got += take
            pos += take
            if self._got == self._size:
                self._complete()

    def _begin(self, size: int) -> bytearray:
        if size < 0 or size > self.server.max_request_bytes:
            log.warning("closing connection %s: request size %d is outside 0..%d "
                        "(socket.request.max.bytes)", self.peer, size, self.server.max_request_bytes)
            raise CloseConnection()
        session = self.session
        if session is not None and session.gated:
            limit = session.max_receive_size
            if limit is not None and size > limit:
                log.warning("closing connection %s on listener %s: a %d-byte request before "
                            "authentication (sasl.server.max.receive.size is %d)", self.peer,
                            session.listener, size, limit)
                raise CloseConnection()
        frame = self._frame = bytearray(min(size, _EAGER_BYTES))
        self._size, self._got = size, 0
        self._charge(len(frame))
        return frame

    def _grow(self, frame: bytearray) -> bytearray:
        """More of a large frame arrived: double its buffer (a new one: the old may be exported)."""
        bigger = bytearray(min(self._size, 2 * len(frame)))
        bigger[: self._got] = memoryview(frame)[: self._got]
        self._charge(len(bigger) - len(frame))
        self._frame = bigger
        return bigger

    def _complete(self) -> None:
        frame = self._frame
        assert frame is not None
        self._frame = None
        self._frames.append(frame)
        if self.times is not None:
            self._arrivals.append(time.monotonic())
        self._queued += len(frame)
        if self._queued >= _QUEUED_BYTES:
            self._pause("queue")
        if self.server.memory.exhausted():
            self.hold_for_memory()

    def _take(self) -> bytearray:
        frame = self._frames.popleft()
        self._queued -= len(frame)
        if self._queued < _QUEUED_BYTES:
            self._resume("queue")
        return frame

    # -- flow control and request memory ---------------------------------------------------

    def _pause(self, reason: str) -> None:
        if not self._paused_for and self.transport is not None:
            self.transport.pause_reading()
        self._paused_for.add(reason)

    def _resume(self, reason: str) -> None:
        if reason in self._paused_for:
            self._paused_for.discard(reason)
            if not self._paused_for and not self._lost:
                self.transport.resume_reading()  # type: ignore[union-attr]  # admitted: connected

    def _charge(self, size: int) -> None:
        memory = self.server.memory
        if memory.bounded:
            memory.take(size)
            self._charged += size
            if memory.exhausted():
                self.server._hold_for_memory()

    def hold_for_memory(self) -> None:
        """The pool is used up: read no new request until memory is given back (a frame
        already arriving keeps its buffer and is read to its end, as in Kafka)."""
        if "memory" not in self._paused_for and self._frame is None and not self._lost:
            self._pause("memory")
            self.server.memory.wait(lambda: self._resume("memory"))

    def _give_back(self, size: int) -> None:
        if size:
            self._charged -= size
            self.server.memory.give_back(size)

    # -- the request loop ------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while True:
                frame = await self._next_frame()
                if frame is None:
                    return
                self.busy = True
                # With `after` request hooks, the request's times start over (queued since it
                # arrived; the router stamps its dispatch) and end here: in line, as the hot
                # path is measured (bench/micro_hooks.py), not in a coroutine wrapping `_handle`.
                times = self.times
                if times is not None:
                    times.ctx = None
                    times.dispatched = times.local_done = times.reply_ready = times.sent = 0.0
                    times.arrived = self._arrivals.popleft()
                try:
                    await self._handle(frame)
                    if times is not None:
                        times.sent = time.monotonic()
                finally:
                    self._give_back(min(len(frame), self._charged))
                    if times is not None:  # the hooks' `after`, answered or not
                        self.server.router.done(times)
                if self.throttle.ms:
                    await self._mute()
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
            for hook in self.on_close:
                try:
                    hook()
                except Exception:
                    log.exception("a close hook of connection %s failed", self.peer)

    async def _next_frame(self) -> bytearray | None:
        """The next complete request; None on a clean EOF between requests."""
        while not self._frames:
            if self._eof or self._lost:
                if self._frame is None and not self._head:
                    return None
                raise ConnectionError("connection closed mid-frame")
            await self._wait()
        return self._take()

    async def _mute(self) -> None:
        """A client over its quota was answered; now nothing is read from it for the throttle
        time (Kafka mutes the channel the same way, KIP-219)."""
        seconds, self.throttle.ms = self.throttle.ms / 1000, 0
        self._pause("quota")
        try:
            await asyncio.sleep(seconds)
        finally:
            self._resume("quota")

    # -- dispatch -------------------------------------------------------------------------

    async def _handle(self, frame: bytearray) -> None:
        session = self.session
        assert session is not None
        if session.gated and session.raw_tokens:  # SASL tokens after a v0 handshake
            await self._raw_token(session, frame)
            return
        if len(frame) < 8:
            raise ProtocolError("request shorter than its header")
        api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
        router = self.server.router
        if session.gated:
            verdict = session.gate(api_key)
            if verdict is Gate.CLOSE:
                raise CloseConnection()
            if verdict is Gate.ILLEGAL_STATE:
                refusal = router.error_reply(api_key, api_version, ErrorCode.ILLEGAL_SASL_STATE)
                if refusal is not None:
                    self._send_reply(router.response_header(api_key, api_version,
                                                            correlation_id), refusal)
                    await self._drained()
                raise CloseConnection()
        reply: Reply | Awaitable[Reply] = router.dispatch(self, api_key, api_version,
                                                          correlation_id, frame)
        times = self.times
        if isinstance(reply, Awaitable):
            try:
                reply = await reply
            finally:  # the wait is over (also when the handler failed)
                if times is not None:
                    times.reply_ready = time.monotonic()
        elif times is not None:
            times.reply_ready = times.local_done
        if session.closing:  # a failed authentication: answered after a delay, then closed
            await self._fail_authentication(session)
        if reply is None:
            if session.closing:
                raise CloseConnection()
            return
        header = router.response_header(api_key, api_version, correlation_id)
        if session.closing:
            self._send_reply(header, reply)  # type: ignore[arg-type]  # a SASL reply: bytes
            await self._drained()
            raise CloseConnection()
        if isinstance(reply, Parts):
            await self._send_parts(header, reply)
            return
        self._send_reply(header, reply)
        if self._writing_paused:
            await self._drained()

    def _send_reply(self, header: bytes, reply: bytes) -> None:
        prefix = _SIZE.pack(len(header) + len(reply)) + header
        if len(reply) < 65536:
            self._write(prefix + reply)
        else:  # avoid copying a large body just to prepend a few bytes
            self._write(prefix)
            self._write(reply)

    async def _fail_authentication(self, session: Session) -> None:
        """Kafka answers a failed authentication after connection.failed.authentication.delay.ms
        (a brake on password guessing), then closes the connection."""
        delay = session.sasl.failure_delay_s if session.sasl is not None else 0.0
        if delay > 0:
            await asyncio.sleep(delay)

    async def _raw_token(self, session: Session, frame: bytearray) -> None:
        """SaslHandshake v0: tokens come and go as bare size-prefixed frames, and a failure
        closes the connection without a reply."""
        try:
            answer = session.authenticate(bytes(frame), version=0)
        except AuthenticationFailed:
            await self._fail_authentication(session)
            raise CloseConnection() from None
        self._write(_SIZE.pack(len(answer)) + answer)
        await self._drained()

    # -- writing --------------------------------------------------------------------------

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        """Hand data to the transport: it sends at once what the socket takes, buffers the rest."""
        if self._lost:
            raise ConnectionError("connection lost")
        self.transport.write(data)  # type: ignore[union-attr]  # not lost: connected

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
        send_file = self._sendfile if self.server.zero_copy else self._send_copied
        for part in reply.parts:
            if isinstance(part, (bytes, bytearray, memoryview)):
                chunk += part
                continue
            if chunk:
                self._write(chunk)
                chunk = bytearray()
            await send_file(part)
        if chunk:
            self._write(chunk)
        if self._writing_paused:
            await self._drained()

    async def _send_copied(self, part: Any) -> None:
        """A file slice over TLS, where the kernel cannot send file bytes as they are: read once,
        in bounded pieces, and handed to the TLS layer (which encrypts from that buffer)."""
        part.file.pin()
        try:
            in_fd = part.file.fileno()
            offset, remaining = part.position, part.length
            while remaining > 0:
                data = os.pread(in_fd, min(remaining, _TLS_READ_BYTES), offset)
                if not data:
                    raise ConnectionError("segment file truncated during a read")
                self._write(data)
                offset += len(data)
                remaining -= len(data)
                if self._writing_paused:
                    await self._drained()
        finally:
            part.file.unpin()

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
