"""The asyncio driver of the sans-IO Raft client: timers, sockets and a thread for the disk.

`RaftClient` (client.py) never blocks and never reads a clock; this module runs it for real:

- **One Raft thread.** Every call into the client (poll, inbound requests, responses,
  appends) runs in a single worker thread, one at a time, so the client and its log need no
  locks and their disk work (appends, the fsync a voter does before its next Fetch and a
  leader before it counts its own end offset, quorum-state writes) never runs on the event
  loop. The loop only moves bytes.
- **Timers.** `poll` returns the time by which it must run again; the loop sleeps until then
  or until something happens (a request, a response, an append), then polls again.
- **Outbound requests.** Each request `poll` hands out goes to its peer over Strom's
  `BrokerClient` (the peer's first controller listener, from the voter set). The client itself
  keeps at most one request in flight per peer; after a state change it may send a new one
  while an answer to an older one is still on the wire, so a peer has a few connections and a
  new request takes an idle one. A connection starts with ApiVersions, and each request goes
  out at the highest version both sides speak. A peer without Vote v2 gets no pre-vote: its
  answer is an UNSUPPORTED_VERSION, on which the client stands for election directly (as
  Kafka's network client reports it).
- **Inbound requests** (from the CONTROLLER listener's handlers): `handle_request` returns the
  response, or waits for a parked Fetch (long poll) that a later `poll` completes.
- **Time** is wall-clock milliseconds, as Kafka's Raft uses (DescribeQuorum reports fetch
  times as timestamps).

An invariant broken inside the client (`FatalRaftError`: two leaders in one epoch, a
truncation below the high watermark) stops the driver and is reported to `on_fatal`: the
process must stop rather than serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import strom
from strom.cluster.client import BrokerClient, BrokerConnectionError
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import ProtocolError, supported_versions
from strom.protocol.errors import ErrorCode, UnsupportedVersion
from strom.security.client import PLAINTEXT, ClientSecurity
from strom.storage.errors import KafkaStorageError

from .base import Outbound, Parked, Pending, PendingVoterChange, PollResult
from .client import RaftClient
from .messages import Message
from .types import FatalRaftError

log = logging.getLogger("strom.raft.driver")

T = TypeVar("T")

API_VERSIONS_VERSION = 3
CONNECTIONS_PER_PEER = 3  # one for the request in flight, spares for those after a reset
_MIN_SLEEP_S = 0.001


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Connection:
    client: BrokerClient
    versions: dict[int, tuple[int, int]] | None = None  # the peer's, from ApiVersions
    busy: bool = False


@dataclass
class _Peer:
    host: str
    port: int
    connections: list[_Connection] = field(default_factory=list)

    def close(self) -> None:
        for c in self.connections:
            c.client.close()
        self.connections.clear()


class RaftDriver:
    def __init__(self, client: RaftClient, *, client_id: str, request_timeout_ms: int,
                 security: ClientSecurity = PLAINTEXT,
                 clock: Callable[[], int] = wall_clock_ms,
                 on_fatal: Callable[[BaseException], None] | None = None) -> None:
        self.client = client
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.security = security
        self.clock = clock
        self.on_fatal = on_fatal
        self.fatal: BaseException | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"raft-{client.local.id}")
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._peers: dict[int, _Peer] = {}
        # parked requests (Fetch, voter changes) by id: the future their handler waits on
        self._parked: dict[int, tuple[Parked, asyncio.Future[Message]]] = {}
        self._stopped = False

    # -- the Raft thread ------------------------------------------------------------------

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the Raft thread (every use of the client and its log goes
        through here, one at a time)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def wake(self) -> None:
        """Poll the client again soon (something happened that it may act on)."""
        self._wake.set()

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        await self.call(self.client.initialize, self.clock())
        self._task = asyncio.create_task(self._run(), name=f"raft-{self.client.local.id}")

    async def stop(self, timeout_ms: int) -> None:
        """Graceful stop: a leader resigns and tells the other voters (EndQuorumEpoch) until a
        successor is known or `timeout_ms` has passed; then everything is closed. The log
        itself is the caller's to close (in the Raft thread: `call`)."""
        if self._task is not None and not self._task.done() and self.fatal is None:
            now = self.clock()
            await self.call(self.client.shutdown, now, timeout_ms)
            self.wake()
            deadline = time.monotonic() + timeout_ms / 1000
            while time.monotonic() < deadline and self.fatal is None:
                if await self.call(self.client.shutdown_complete, self.clock()):
                    break
                await asyncio.sleep(0.02)  # a bounded wait for the hand-over, not a sync point
            if self.fatal is None and not await self.call(self.client.handed_over):
                log.info("raft %d: stopping with no successor known after %d ms",
                         self.client.local.id, timeout_ms)
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for task in list(self._sends):
            task.cancel()
        if self._sends:
            await asyncio.wait(self._sends, timeout=1.0)
        for _pending, fut in self._parked.values():
            if not fut.done():
                fut.cancel()
        self._parked.clear()
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()

    def close_executor(self) -> None:
        self._executor.shutdown(wait=True)

    def _fail(self, exc: BaseException) -> None:
        if self.fatal is not None:
            return
        self.fatal = exc
        log.critical("raft %d stops: %s", self.client.local.id, exc)
        if self.on_fatal is not None:
            self.on_fatal(exc)

    # -- the poll loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while not self._stopped:
                self._wake.clear()
                result = await self.call(self.client.poll, self.clock())
                self._dispatch(result)
                delay = max((result.deadline_ms - self.clock()) / 1000, _MIN_SLEEP_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a broken invariant, or a bug: stop serving
            self._fail(e)

    def _dispatch(self, result: PollResult) -> None:
        for ob in result.outbound:
            task = asyncio.create_task(self._send(ob))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
        for done in result.completed:
            entry = self._parked.pop(id(done), None)
            if entry is not None and not entry[1].done() and done.response is not None:
                entry[1].set_result(done.response)

    # -- inbound ----------------------------------------------------------------------------

    async def handle_request(self, source: int, api_key: int,
                             request: Mapping[str, Any]) -> Message:
        """An inbound Raft request (its fields as a dict): the response to send."""
        if self.fatal is not None or self._stopped:
            return {"error_code": int(ErrorCode.BROKER_NOT_AVAILABLE)}
        try:
            result = await self.call(self.client.handle_request, self.clock(), source, api_key,
                                     request)
        except (FatalRaftError, KafkaStorageError) as e:
            self._fail(e)
            return {"error_code": int(ErrorCode.BROKER_NOT_AVAILABLE)}
        self.wake()
        if not isinstance(result, Pending | PendingVoterChange):
            return result
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._parked[id(result)] = (result, fut)
        try:
            # A poll that completed it before the future was registered set its response.
            if result.response is not None:
                return result.response
            return await fut
        finally:
            self._parked.pop(id(result), None)

    async def append(self, records: list[bytes]) -> int:
        """Hand records to the leader (one atomic group); the offset of the last one. Raises
        `NotLeaderError` on a replica that is not the leader."""
        offset = await self.call(self.client.append, records)
        self.wake()
        return offset

    # -- outbound ---------------------------------------------------------------------------

    def _peer(self, node_id: int) -> _Peer | None:
        listener = self.client.settings.listener
        endpoint = self.client.bootstrap_endpoints.get(node_id)
        st = self.client.quorum.state
        if st.leader_id == node_id:
            # what the leader itself announced (BeginQuorumEpoch, a fetch answer) is fresher
            # than the voter set: a voter may have come back at another address and won
            endpoint = next((e for e in st.leader_endpoints if e.name == listener), None)
        if endpoint is None:
            endpoint = next((e for e in (*self.client.quorum.voters.endpoints(node_id),
                                         *self.client.adding_voter_endpoints(node_id))
                             if e.name == listener), None)
        if endpoint is None:
            return None
        peer = self._peers.get(node_id)
        if peer is None or (peer.host, peer.port) != (endpoint.host, endpoint.port):
            if peer is not None:
                peer.close()
            peer = self._peers[node_id] = _Peer(endpoint.host, endpoint.port)
        return peer

    def _connection(self, peer: _Peer) -> _Connection:
        for c in peer.connections:
            if not c.busy:
                return c
        if len(peer.connections) < CONNECTIONS_PER_PEER:
            c = _Connection(BrokerClient(peer.host, peer.port, client_id=self.client_id,
                                         timeout_s=self.request_timeout_s,
                                         security=self.security))
            peer.connections.append(c)
            return c
        return peer.connections[0]  # all busy: queue behind the oldest

    async def _versions(self, conn: _Connection) -> dict[int, tuple[int, int]]:
        if conn.versions is None:
            resp = await conn.client.request(
                ApiKey.API_VERSIONS, API_VERSIONS_VERSION,
                {"client_software_name": "strom",
                 "client_software_version": strom.__version__},
                timeout_s=self.request_timeout_s)
            if resp.error_code != 0:
                raise BrokerConnectionError(f"ApiVersions answered error {resp.error_code}")
            conn.versions = {int(k.api_key): (int(k.min_version), int(k.max_version))
                             for k in resp.api_keys}
        return conn.versions

    async def _send(self, ob: Outbound) -> None:
        peer = self._peer(ob.destination)
        outcome: tuple[str, Message | None]
        if peer is None:
            log.warning("raft %d: no %s endpoint for node %d", self.client.local.id,
                        self.client.settings.listener, ob.destination)
            outcome = ("failure", None)
        else:
            outcome = await self._exchange(peer, ob)
        if self._stopped:
            return
        kind, response = outcome
        try:
            if kind == "response":
                assert response is not None
                await self.call(self.client.handle_response, self.clock(), ob.destination,
                                ob.api_key, ob.correlation_id, response)
            else:
                await self.call(self.client.handle_failure, self.clock(), ob.destination,
                                ob.correlation_id)
        except (FatalRaftError, KafkaStorageError) as e:
            self._fail(e)  # a broken invariant, or the metadata log's disk failed
            return
        except Exception as e:
            # A bad answer (e.g. fetched records that do not continue our log): drop it and
            # back off from that peer.
            log.warning("raft %d: %s response from node %d not taken: %s",
                        self.client.local.id, ApiKey(ob.api_key).name, ob.destination, e)
            await self.call(self.client.handle_failure, self.clock(), ob.destination,
                            ob.correlation_id)
        self.wake()

    async def _exchange(self, peer: _Peer, ob: Outbound) -> tuple[str, Message | None]:
        """Send one request: ("response", its fields) or ("failure", None)."""
        conn = self._connection(peer)
        conn.busy = True
        try:
            versions = await self._versions(conn)
            version = _pick_version(ob.api_key, versions.get(int(ob.api_key)))
            if version is None or (ob.api_key == ApiKey.VOTE and version < 2
                                   and _is_pre_vote(ob.request)):
                if ob.api_key == ApiKey.VOTE:
                    # Kafka's network client answers this way for a version the peer lacks.
                    return "response", {"error_code": int(ErrorCode.UNSUPPORTED_VERSION)}
                log.warning("raft %d: node %d does not speak %s", self.client.local.id,
                            ob.destination, ApiKey(ob.api_key).name)
                return "failure", None
            resp = await conn.client.request(ob.api_key, version, ob.request,
                                             timeout_s=self.request_timeout_s)
            return "response", resp.to_dict()
        except (BrokerConnectionError, ProtocolError, UnsupportedVersion, OSError) as e:
            conn.versions = None  # the next use reconnects and asks again
            conn.client.close()
            log.debug("raft %d: %s to node %d failed: %s", self.client.local.id,
                      ApiKey(ob.api_key).name, ob.destination, e)
            return "failure", None
        except Exception:
            # anything else still fails this request (the client learns of it and retries)
            # and drops the connection: a request task that died instead left the Raft
            # client waiting for an answer that never came
            conn.versions = None
            conn.client.close()
            log.exception("raft %d: %s to node %d failed", self.client.local.id,
                          ApiKey(ob.api_key).name, ob.destination)
            return "failure", None
        finally:
            conn.busy = False


def _pick_version(api_key: int, theirs: tuple[int, int] | None) -> int | None:
    """The highest version both this codec and the peer speak (None: no common version)."""
    if theirs is None:
        return None
    try:
        lo, hi = supported_versions(api_key)
    except UnsupportedVersion:
        return None
    top = min(hi, theirs[1])
    return top if top >= max(lo, theirs[0]) else None


def _is_pre_vote(request: Mapping[str, Any]) -> bool:
    for topic in request.get("topics") or []:
        for part in topic.get("partitions") or []:
            if part.get("pre_vote"):
                return True
    return False
