"""Micro-benchmark: what request metrics and the request quota cost per request.

Small requests go through a `Connection` the way the event loop hands them over: frames cut
from reads, the connection's request loop, `Router.dispatch` with the hooks `strom broker`
installs (`app.request_hooks`), the reply written to a transport that takes every write at
once. The broker is a real single node with its data in /dev/shm, on uvloop as in production;
no socket is involved, so what is timed is the broker's own work per request.

Requests: Produce v9 of one 100-byte record (acks=1: answered at once), Fetch v12 of one
small batch (min.bytes 0; its handler is a coroutine, so the reply is awaited) and ApiVersions
v3 (answered from a cache: next to no handler work, so what the per-request machinery costs
stands out).
Configurations:

- ``bare``: metrics off and a router without hooks (the floor);
- ``metrics off``: metrics off, the hooks `strom broker` installs then (the quota hook alone);
- ``default``: metrics on, no quota set (what `strom broker` runs by default);
- ``quota set``: metrics on and a request_percentage quota on the client (measured on every
  request; large enough never to throttle).

Run: ``.venv/bin/python -m bench.micro_hooks [--requests N] [--repeat R]``. Prints the event
loop thread's CPU microseconds per request, the best of R runs of N requests (CPU time and the
minimum: the least disturbed by other work on the machine). docs/architecture.md ("Request hooks") has the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strom.broker import app
from strom.broker.handlers import MODULES
from strom.broker.router import Router
from strom.config.broker import BrokerConfig
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec
from strom.protocol.header import encode_request_header
from strom.record import Record, build_batch

_CONFIG = {
    "broker.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "log.flush.offset.checkpoint.interval.ms": "600000",
}
_CLIENT_ID = "bench"
_TOPIC = "hooks"
_correlation = itertools.count(1)


class _Socket:
    def fileno(self) -> int:
        return 0  # never used: replies this small are written, not sent from files


class _Transport:
    """A socket that always has room: every write is taken at once."""

    def __init__(self) -> None:
        self.written = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "socket": _Socket()}.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def _frame(api_key: ApiKey, version: int, body: Mapping[str, Any]) -> bytes:
    data = (encode_request_header(api_key, version, next(_correlation), _CLIENT_ID)
            + request_codec(api_key, version).encode(body))
    return len(data).to_bytes(4, "big") + data


def _produce() -> bytes:
    batch = build_batch([Record(0, 1_700_000_000_000, None, b"v" * 100)])
    return _frame(ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": 1, "timeout": 5000,
        "topic_data": [{"name": _TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})


def _fetch() -> bytes:
    return _frame(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "topics": [{"topic": _TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 200}]}]})


def _api_versions() -> bytes:
    return _frame(ApiKey.API_VERSIONS, 3, {"client_software_name": "bench",
                                           "client_software_version": "1"})


def _create_topic() -> bytes:
    return _frame(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": _TOPIC, "num_partitions": 1, "replication_factor": 1}], "timeout": 5000})


def _request_quota() -> bytes:
    return _frame(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": _CLIENT_ID}],
        "ops": [{"key": "request_percentage", "value": 1e6, "remove": False}]}]})


async def _through_connection(server: Any, frames: list[bytes]) -> float:
    """CPU seconds of the event loop's thread for one connection to read, handle and answer
    these frames (CPU time, not wall time: other work on the machine barely moves it)."""
    data = b"".join(frames)
    started = time.thread_time()
    conn = server._new_connection()
    transport = _Transport()
    conn.connection_made(transport)  # admitted at once: its request loop starts
    for pos in range(0, len(data), 64 * 1024):
        chunk = data[pos:pos + 64 * 1024]
        buf = conn.get_buffer(len(chunk))
        buf[:len(chunk)] = chunk
        conn.buffer_updated(len(chunk))
    conn.eof_received()
    await server._connections[conn.cid]
    elapsed = time.thread_time() - started
    assert transport.written > 0
    return elapsed


async def _measure(metrics: bool, hooked: bool, quota: bool, requests: int,
                   repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="strom-micro-hooks-", dir=_data_root()) as data:
        config = BrokerConfig.load(None, {**_CONFIG, "log.dirs": data,
                                          "metrics.listener": "http://127.0.0.1:0" if metrics else ""})
        broker = app.build_broker(config, asyncio.get_running_loop())
        broker.start()
        try:
            hooks = app.request_hooks(broker) if hooked else ()
            router = Router(broker, MODULES, hooks)
            securities = app.listener_securities(config, lambda: broker.image.user_configs)
            server = app.make_servers(router, config, securities)[0]
            setup = [_create_topic(), _produce()] + ([_request_quota()] if quota else [])
            for frame in setup:
                await _through_connection(server, [frame])
            assert quota == bool(broker.quotas.active)
            best: dict[str, float] = {}
            for _ in range(repeat):
                for name, make in _REQUESTS:
                    frames = [make() for _ in range(requests)]
                    gc.collect()
                    seconds = await _through_connection(server, frames)
                    best[name] = min(best.get(name, float("inf")), seconds / requests * 1e6)
            return best
        finally:
            broker.stop()
            leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in leftovers:
                task.cancel()
            await asyncio.gather(*leftovers, return_exceptions=True)
            broker.logs.shutdown()


def _data_root() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


_REQUESTS = (("produce", _produce), ("fetch", _fetch), ("api_versions", _api_versions))

CONFIGS = {  # name: (metrics on, hooks as `strom broker` installs them, a request quota set)
    "bare": (False, False, False),
    "metrics off": (False, True, False),
    "default": (True, True, False),
    "quota set": (True, True, True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--only", choices=sorted(CONFIGS), action="append")
    args = parser.parse_args()
    try:
        import uvloop

        new_loop = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        new_loop = asyncio.new_event_loop
    print("| configuration | " + " | ".join(f"{name} us/request" for name, _ in _REQUESTS) + " |")
    print("| --- " * (len(_REQUESTS) + 1) + "|")
    for name in args.only or CONFIGS:
        loop = new_loop()
        try:
            best = loop.run_until_complete(
                _measure(*CONFIGS[name], requests=args.requests, repeat=args.repeat))
        finally:
            loop.close()
        print(f"| {name} | " + " | ".join(f"{best[r]:.2f}" for r, _ in _REQUESTS) + " |",
              flush=True)


if __name__ == "__main__":
    main()
