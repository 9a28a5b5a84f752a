"""A small asyncio bridge over kazoo: awaitable ZooKeeper calls that never block the loop.

kazoo runs its own threads. Every call here uses kazoo's `*_async` form and turns its result
into an asyncio future with `call_soon_threadsafe`; watch events and session state changes are
handed to the event loop the same way, so everything that reacts to them (the mirror, the
controller) runs in the loop thread and needs no locks.

The chroot of `host:port/chroot` is handled here rather than by kazoo: kazoo cannot create its
own chroot, and Kafka creates it when missing.

All watches go through one callback per client (kazoo keeps watchers in sets, so re-arming a
watch with the same callback never piles up duplicates); listeners get (event type, path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, ZnodeStat

log = logging.getLogger(__name__)

WatchListener = Callable[[str, str], None]  # (event type: CREATED/DELETED/CHANGED/CHILD, path)
StateListener = Callable[[str], None]  # "CONNECTED" | "SUSPENDED" | "LOST"

_EVENT_NAMES = {EventType.CREATED: "CREATED", EventType.DELETED: "DELETED",
                EventType.CHANGED: "CHANGED", EventType.CHILD: "CHILD"}


IN_FLIGHT = 32  # ZooKeeper calls outstanding per client (see ZkClient._call)


class ZkTimeout(Exception):
    """A ZooKeeper call got no answer in time (the connection is probably down)."""


def split_connect(connect: str) -> tuple[str, str]:
    """'h1:2181,h2:2181/kafka' -> ('h1:2181,h2:2181', '/kafka'); chroot '' when absent."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


class ZkClient:
    def __init__(self, connect: str, *, session_timeout_ms: int, connection_timeout_ms: int,
                 request_timeout_s: float | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.request_timeout_s = request_timeout_s or max(session_timeout_ms / 1000, 10.0)
        self._loop = loop
        self._kazoo = KazooClient(
            hosts=self.hosts, timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
            command_retry={"max_tries": 0})
        self._watch_listeners: list[WatchListener] = []
        self._state_listeners: list[StateListener] = []
        self._kazoo.add_listener(self._on_state)
        self._closed = False
        self._in_flight = asyncio.Semaphore(IN_FLIGHT)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def start(self) -> None:
        """Connect (within zookeeper.connection.timeout.ms) and create the chroot if missing."""
        loop = self.loop
        event = self._kazoo.start_async()
        timeout = self.connection_timeout_ms / 1000
        connected = await loop.run_in_executor(None, event.wait, timeout)
        if not connected:
            await loop.run_in_executor(None, self._stop_kazoo)
            raise ZkTimeout(f"cannot connect to ZooKeeper at {self.hosts} within {timeout:g}s")
        if self.chroot:
            path = ""
            for part in self.chroot.strip("/").split("/"):
                path += "/" + part
                with contextlib.suppress(NodeExistsError):
                    await self._bridge(self._kazoo.create_async(path, b""))

    async def stop(self) -> None:
        """Close the session: ZooKeeper removes our ephemeral znodes at once."""
        if self._closed:
            return
        self._closed = True
        await self.loop.run_in_executor(None, self._stop_kazoo)

    def _stop_kazoo(self) -> None:
        try:
            self._kazoo.stop()
            self._kazoo.close()
        except Exception:  # pragma: no cover - best effort at shutdown
            log.debug("closing the ZooKeeper client failed", exc_info=True)

    @property
    def session_id(self) -> int | None:
        cid = self._kazoo.client_id
        return cid[0] if cid else None

    @property
    def connected(self) -> bool:
        return bool(self._kazoo.connected)

    def add_watch_listener(self, listener: WatchListener) -> None:
        self._watch_listeners.append(listener)

    def add_state_listener(self, listener: StateListener) -> None:
        self._state_listeners.append(listener)

    # -- thread hand-off -------------------------------------------------------------------

    def _to_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the broker is gone
            self.loop.call_soon_threadsafe(fn, *args)

    def _on_state(self, state: str) -> None:  # kazoo thread
        name = {KazooState.CONNECTED: "CONNECTED", KazooState.SUSPENDED: "SUSPENDED",
                KazooState.LOST: "LOST"}.get(state, str(state))
        self._to_loop(self._dispatch_state, name)

    def _dispatch_state(self, name: str) -> None:
        for listener in list(self._state_listeners):
            try:
                listener(name)
            except Exception:
                log.exception("ZooKeeper state listener failed")

    def _on_watch(self, event: Any) -> None:  # kazoo thread
        kind = _EVENT_NAMES.get(event.type)
        if kind is None or event.path is None:
            return  # a session event: state listeners re-read everything on reconnection
        self._to_loop(self._dispatch_watch, kind, self._strip(event.path))

    def _dispatch_watch(self, kind: str, path: str) -> None:
        for listener in list(self._watch_listeners):
            try:
                listener(kind, path)
            except Exception:
                log.exception("ZooKeeper watch listener failed for %s", path)

    def _bridge(self, result: Any) -> asyncio.Future[Any]:
        loop = self.loop
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if fut.done():
                return
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

        def done(r: Any) -> None:  # kazoo thread
            if r.successful():
                self._to_loop(settle, True, r.value)
            else:
                self._to_loop(settle, False, r.exception)

        result.rawlink(done)
        return fut

    async def _call(self, start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start a kazoo ``*_async`` call and await its result, with at most IN_FLIGHT calls
        outstanding: each start costs the loop a socket write and a turn of the GIL with
        kazoo's thread, and a burst of 1,000 (a failover's state reads and ISR writes) started
        at once held the loop for half a second (issue 28); gated, each loop turn starts only
        as many as have just finished."""
        try:
            async with asyncio.timeout(self.request_timeout_s):
                async with self._in_flight:
                    return await self._bridge(start(*args, **kwargs))
        except TimeoutError:
            raise ZkTimeout("ZooKeeper did not answer in time") from None

    def _p(self, path: str) -> str:
        return self.chroot + path if path != "/" or not self.chroot else self.chroot

    def _strip(self, path: str) -> str:
        if self.chroot and path.startswith(self.chroot):
            return path[len(self.chroot):] or "/"
        return path

    # -- calls ------------------------------------------------------------------------------

    async def get(self, path: str, *, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        """(data, stat), or None when the znode does not exist (then no watch is left)."""
        try:
            data, stat = await self._call(
                self._kazoo.get_async, self._p(path), watch=self._on_watch if watch else None)
        except NoNodeError:
            return None
        return data or b"", stat

    async def get_or_watch(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """Like get(watch=True), but a missing znode gets an existence watch, so its creation
        is reported too."""
        while True:
            got = await self.get(path, watch=True)
            if got is not None:
                return got
            if await self.exists(path, watch=True) is None:
                return None

    async def exists(self, path: str, *, watch: bool = False) -> ZnodeStat | None:
        return await self._call(
            self._kazoo.exists_async, self._p(path), watch=self._on_watch if watch else None)

    async def children(self, path: str, *, watch: bool = False) -> list[str] | None:
        try:
            return list(await self._call(self._kazoo.get_children_async, self._p(path),
                                         watch=self._on_watch if watch else None))
        except NoNodeError:
            return None

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> None:
        await self._call(self._kazoo.create_async, self._p(path), data, ephemeral=ephemeral)

    async def ensure_path(self, path: str) -> None:
        """Create path and its parents (empty, persistent) unless they exist."""
        current = ""
        for part in path.strip("/").split("/"):
            current += "/" + part
            with contextlib.suppress(NodeExistsError):
                await self.create(current)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        return await self._call(self._kazoo.set_async, self._p(path), data, version)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(self._kazoo.delete_async, self._p(path), version)

    def transaction(self) -> Transaction:
        return Transaction(self)

    async def subtree(self, path: str) -> list[str]:
        """path and every znode below it, deepest first (the order to delete them in)."""
        kids = await self.children(path)
        if kids is None:
            return []
        out: list[str] = []
        for kid in kids:
            out += await self.subtree(f"{path}/{kid}")
        out.append(path)
        return out


class TransactionFailed(Exception):
    """A multi-op was rolled back; `errors` holds the exception of each failed operation."""

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__(", ".join(type(e).__name__ for e in errors))
        self.errors = errors

    def has(self, kind: type[BaseException]) -> bool:
        return any(isinstance(e, kind) for e in self.errors)


class Transaction:
    """A ZooKeeper multi-op: all operations apply, or none (paths are chroot-relative)."""

    def __init__(self, client: ZkClient) -> None:
        self._client = client
        self._txn = client._kazoo.transaction()

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> Transaction:
        self._txn.create(self._client._p(path), data, ephemeral=ephemeral)
        return self

    def set(self, path: str, data: bytes, version: int = -1) -> Transaction:
        self._txn.set_data(self._client._p(path), data, version)
        return self

    def delete(self, path: str, version: int = -1) -> Transaction:
        self._txn.delete(self._client._p(path), version)
        return self

    def check(self, path: str, version: int) -> Transaction:
        self._txn.check(self._client._p(path), version)
        return self

    async def commit(self) -> list[Any]:
        """The results of each operation; raises TransactionFailed when it was rolled back."""
        results: list[Any] = await self._client._call(self._txn.commit_async)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            from kazoo.exceptions import RolledBackError, RuntimeInconsistency

            real = [e for e in errors if not isinstance(e, (RolledBackError, RuntimeInconsistency))]
            raise TransactionFailed(real or errors)
        return results
