"""A real single-node broker in a temp dir, driven through the Router with encoded frames.

Every handler test goes through `broker_harness`: requests are encoded with Strom's schema
codecs, passed to `Router.dispatch` exactly as the network server passes a frame, and the reply
is decoded with the response codec (the hand-tuned Produce/Fetch/Metadata encoders included),
so the tests depend on the wire format only, never on handler signatures or the broker's wiring.

All construction lives in `_start_broker`/`_stop_broker` below: when the broker's wiring
changes, only these two functions need updating.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from strom.broker.app import build_broker
from strom.broker.context import Parts, RequestTimes, Throttle
from strom.broker.core import Broker
from strom.broker.handlers import MODULES
from strom.broker.router import Router
from strom.config.broker import BrokerConfig
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct, request_codec, response_codec
from strom.protocol.header import (
    decode_response_header,
    encode_request_header,
    response_header_version,
)
from strom.record import Record, build_batch
from strom.security.session import Session

REQUEST_TIMEOUT_S = 10.0  # a request that hangs fails its test instead of the whole run

# Test settings: no initial rebalance delay (a join would wait 3 s), and few partitions for the
# internal topics (50 each by default: a fresh log per partition per test adds up).
_BASE_CONFIG = {
    "broker.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "log.flush.offset.checkpoint.interval.ms": "600000",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "broker_config(**overrides): broker config of the test's broker_harness")


@dataclass
class FakeConnection:
    """What the router reads from a connection: a PLAINTEXT client (User:ANONYMOUS)."""

    peer: str = "127.0.0.1:54321"
    cid: int = 1
    session: Session = field(
        default_factory=lambda: Session("PLAINTEXT", "PLAINTEXT", "127.0.0.1:54321"))
    throttle: Throttle = field(default_factory=Throttle)
    on_close: list = field(default_factory=list)  # the connection's close hooks
    times: RequestTimes | None = None  # the request's phase times, for the router's hooks

    def close(self) -> None:
        """What the server does when the connection closes: run the hooks handlers left."""
        hooks, self.on_close = self.on_close, []
        for hook in hooks:
            hook()


class BrokerHarness:
    """Sends requests to a real broker's router (as `strom broker` builds it, no request
    hooks; a test may replace `router`); `request` returns the decoded response."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.router = Router(broker, MODULES)
        self.loop = loop
        self.conn = FakeConnection()
        self._correlation = itertools.count(1)

    # -- the wire -------------------------------------------------------------------------

    def send_frame(self, api_key: int, version: int, body: bytes,
                   client_id: str | None = "unit-test") -> bytes | None:
        """Dispatch one request body as the server does; the response body (None: no reply).
        Exceptions the server would act on (CloseConnection, ProtocolError) propagate."""
        correlation_id = next(self._correlation)
        frame = bytearray(encode_request_header(api_key, version, correlation_id, client_id)
                          + body)
        reply = self.loop.run_until_complete(asyncio.wait_for(
            self._dispatch(api_key, version, correlation_id, frame), REQUEST_TIMEOUT_S))
        if reply is None:
            return None
        data = _join(reply)
        # the header as the server writes it, checked on the way back
        header = self.router.response_header(api_key, version, correlation_id)
        got, pos = decode_response_header(header + data, 0,
                                          response_header_version(api_key, version))
        assert got == correlation_id
        assert pos == len(header)
        return data

    async def _dispatch(self, api_key: int, version: int, correlation_id: int,
                        frame: bytearray) -> Any:
        if not self.router.keeps_times:  # no `after` hooks
            self.conn.times = None
            return await self._dispatch_plain(api_key, version, correlation_id, frame)
        # as the server keeps a request's times for `after` hooks (a reply counts as sent once
        # it is there); fresh ones each time, since `start` may overlap requests
        times = self.conn.times = RequestTimes()
        times.arrived = time.monotonic()
        try:
            reply = self.router.dispatch(self.conn, api_key, version, correlation_id, frame)
            if asyncio.iscoroutine(reply) or isinstance(reply, asyncio.Future):
                try:
                    reply = await reply
                finally:
                    times.reply_ready = time.monotonic()
            else:
                times.reply_ready = times.local_done
            times.sent = time.monotonic()
            return reply
        finally:
            self.router.done(times)

    async def _dispatch_plain(self, api_key: int, version: int, correlation_id: int,
                              frame: bytearray) -> Any:
        reply = self.router.dispatch(self.conn, api_key, version, correlation_id, frame)
        if asyncio.iscoroutine(reply) or isinstance(reply, asyncio.Future):
            reply = await reply
        return reply

    def request(self, api_key: ApiKey, version: int, body: Mapping[str, Any]) -> Struct:
        """Encode `body`, dispatch it, decode the whole response (no trailing bytes allowed)."""
        data = self.send_frame(api_key, version, request_codec(api_key, version).encode(body))
        assert data is not None, "the broker sent no response"
        decoded, pos = response_codec(api_key, version).decode(data)
        assert pos == len(data), f"{len(data) - pos} trailing bytes after the response"
        return decoded

    def start(self, api_key: ApiKey, version: int, body: Mapping[str, Any]) -> asyncio.Task:
        """Dispatch a request that waits (a JoinGroup, a long poll) without waiting for it;
        `finish` gives its decoded response."""
        correlation_id = next(self._correlation)
        frame = bytearray(encode_request_header(api_key, version, correlation_id, "unit-test")
                          + request_codec(api_key, version).encode(body))
        task = self.loop.create_task(self._dispatch(api_key, version, correlation_id, frame))
        self.run(0)  # let it reach the point where it waits
        return task

    def finish(self, task: asyncio.Task, api_key: ApiKey, version: int) -> Struct:
        data = _join(self.loop.run_until_complete(asyncio.wait_for(task, REQUEST_TIMEOUT_S)))
        decoded, pos = response_codec(api_key, version).decode(data)
        assert pos == len(data)
        return decoded

    def run(self, seconds: float) -> None:
        """Let the broker's event loop run (timers of the coordinators)."""
        self.loop.run_until_complete(asyncio.sleep(seconds))

    # -- shortcuts built on requests --------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1,
                     configs: Mapping[str, str] | None = None) -> Struct:
        r = self.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout": 5000})
        assert r.topics[0].error_code == 0, r.topics[0].error_message
        return r.topics[0]

    def produce(self, topic: str, partition: int, batch: bytes, *, version: int = 9,
                acks: int = -1, transactional_id: str | None = None) -> Struct:
        """One batch to one partition; the partition's response."""
        r = self.request(ApiKey.PRODUCE, version, {
            "transactional_id": transactional_id, "acks": acks, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": batch}]}]})
        return r.responses[0].partition_responses[0]

    def topic_id(self, name: str) -> Any:
        return self.broker.image.topics[name].topic_id

    @staticmethod
    def batch(*values: bytes, key: bytes | None = None, timestamp: int = 1_700_000_000_000,
              **kwargs: Any) -> bytes:
        """A v2 record batch of these values (offsets from 0), e.g. ``batch(b"a", b"b")``;
        keyword arguments go to `build_batch` (producer id, sequence, compression...)."""
        return build_batch([Record(i, timestamp + i, key, v) for i, v in enumerate(values)],
                           **kwargs)


def _join(reply: Any) -> bytes:
    """A reply as bytes; a Parts reply's file slices are read as the server reads them."""
    if not isinstance(reply, Parts):
        return bytes(reply)
    out = bytearray()
    for part in reply.parts:
        if isinstance(part, (bytes, bytearray, memoryview)):
            out += part
            continue
        part.file.pin()
        try:
            out += os.pread(part.file.fileno(), part.length, part.position)
        finally:
            part.file.unpin()
    assert len(out) == reply.size
    return bytes(out)


# -- construction: the one place that knows how a broker is put together -----------------------


def _start_broker(log_dir: Path, overrides: Mapping[str, str],
                  loop: asyncio.AbstractEventLoop) -> Broker:
    """Build and start the broker as `strom broker` does (app.build_broker, Broker.start).
    serve itself is not used: it waits for SIGTERM/SIGINT and arms a watchdog that ends the
    process (os._exit) after shutdown, which would end the test run; no socket is opened."""
    config = BrokerConfig.load(None, {**_BASE_CONFIG, "log.dirs": str(log_dir), **overrides})
    broker = build_broker(config, loop)
    broker.start()
    return broker


def _stop_broker(broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
    broker.stop()
    leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in leftovers:
        task.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
    broker.logs.shutdown()


# The broker fsyncs its checkpoints at start and syncs the filesystem at shutdown; on a disk
# shared with other work that costs tens of milliseconds a test, on tmpfs nothing.
_MEMORY_DIR = Path("/dev/shm")


@pytest.fixture
def broker_harness(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerHarness]:
    """A fresh single-node broker per test; `@pytest.mark.broker_config(**{"a.b": "v"})`
    overrides its config."""
    marker = request.node.get_closest_marker("broker_config")
    overrides = dict(marker.kwargs) if marker else {}
    in_memory = _MEMORY_DIR.is_dir() and os.access(_MEMORY_DIR, os.W_OK)
    with tempfile.TemporaryDirectory(prefix="strom-handlers-",
                                     dir=_MEMORY_DIR if in_memory else tmp_path) as data:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        broker = None
        try:
            broker = _start_broker(Path(data), overrides, loop)
            yield BrokerHarness(broker, loop)
        finally:
            try:
                if broker is not None:
                    _stop_broker(broker, loop)
            finally:
                asyncio.set_event_loop(None)
                loop.close()
