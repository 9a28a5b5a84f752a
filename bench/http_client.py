"""The HTTP clients of the ``http-1k`` scenario: Strom's HTTP API spoken with the stdlib alone.

Jobs run in their own process like every client job (``python -m bench.client``, which hands
them over): ``http_produce`` streams records through the v3 API (``POST
/v3/clusters/{id}/topics/{t}/records`` with ``Transfer-Encoding: chunked``) and counts the
delivery report of each, read while the records are still being sent; ``http_load`` does the
same at a fixed rate until the harness says stop; ``http_consume`` reads a topic through a v2
consumer instance. A stream is one asyncio connection of its own on a raw socket: the request
body is written as it goes and the reports are read back at the same time, which a
request/response client (``http.client``, ``urllib``) cannot do.

The pieces that decide what counts (chunked framing, delivery reports, pacing, the status line)
are pure and unit-tested in tests/unit/bench/test_http_scenario.py.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from bench.client import _ready

Job = dict[str, Any]
V2_JSON = "application/vnd.kafka.v2+json"
V2_BINARY = "application/vnd.kafka.binary.v2+json"
# Records per HTTP chunk of a full-speed stream: large writes, so the client spends its time
# on the reports rather than on the sending.
PER_CHUNK = 128
# A paced stream sends what is due this often, and never more than MAX_BURST records at once.
TICK_S = 0.002
MAX_BURST = 1_000
READ_BYTES = 1 << 18
# What the server's reports begin with when a record was stored: such a line is counted
# without parsing it; any other line is parsed and judged by its error_code.
OK_PREFIX = b'{"error_code": 200,'
CRLF = b"\r\n"


class HttpError(RuntimeError):
    """The HTTP API refused a request or broke the protocol."""


# -- pure pieces ----------------------------------------------------------------------------


def binary_record(value: bytes) -> bytes:
    """One v3 produce record with a BINARY value, as JSON (records of a stream follow one
    another, each on its own line)."""
    data = base64.b64encode(value).decode()
    return json.dumps({"value": {"type": "BINARY", "data": data}}, separators=(",", ":")).encode() + b"\n"


def chunk(payload: bytes) -> bytes:
    """``payload`` as one chunk of a chunked request body (RFC 9112 section 7.1)."""
    return b"%x\r\n" % len(payload) + payload + CRLF


LAST_CHUNK = b"0\r\n\r\n"


class ChunkedDecoder:
    """Decodes a chunked response body fed in pieces of any size; :attr:`done` after the last
    chunk and its (skipped) trailer section."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._left = 0  # bytes still due of the chunk being read
        self._state = "size"  # size, data, data-end, trailer
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """The payload bytes that ``data`` completes (possibly none)."""
        self._buf += data
        out = bytearray()
        buf = self._buf
        while not self.done:
            if self._state == "data":
                take = min(self._left, len(buf))
                out += buf[:take]
                del buf[:take]
                self._left -= take
                if self._left:
                    break
                self._state = "data-end"
                continue
            if self._state == "data-end":
                if len(buf) < 2:
                    break
                if buf[:2] != CRLF:
                    raise HttpError(f"chunk not followed by CRLF: {bytes(buf[:16])!r}")
                del buf[:2]
                self._state = "size"
                continue
            end = buf.find(CRLF)
            if end < 0:
                if len(buf) > 4096:
                    raise HttpError("chunk size line too long")
                break
            line = bytes(buf[:end])
            del buf[: end + 2]
            if self._state == "trailer":  # an empty line ends the trailer section
                self.done = not line
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise HttpError(f"bad chunk size line {line[:40]!r}") from None
            if size == 0:
                self._state = "trailer"
            else:
                self._left, self._state = size, "data"
        return bytes(out)


class Reports:
    """Counts a stream's delivery reports (one JSON object per line): stored (``error_code``
    200) or failed, with the first failure's message."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.first_error: str | None = None
        self._rest = b""

    def feed(self, data: bytes) -> None:
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            self._line(line)

    def close(self) -> None:
        """The body ended: a last report without its newline counts too."""
        rest, self._rest = self._rest, b""
        self._line(rest)

    @property
    def seen(self) -> int:
        return self.ok + self.failed

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        if line.startswith(OK_PREFIX):
            self.ok += 1
            return
        try:
            body = json.loads(line)
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("error_code") == 200:
            self.ok += 1
            return
        self.failed += 1
        if self.first_error is None:
            what = body.get("message") if isinstance(body, dict) else None
            code = body.get("error_code") if isinstance(body, dict) else None
            self.first_error = f"{code}: {what}" if what else line[:200].decode(errors="replace")


def due(rate: float, elapsed: float) -> int:
    """How many records a stream paced at ``rate`` records/s has owed after ``elapsed`` s."""
    return int(rate * max(0.0, elapsed))


def split_rate(rate: float, streams: int) -> list[float]:
    """``rate`` shared by ``streams`` streams."""
    return [rate / streams] * streams


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """A response's status code and headers (names lower-case) from its head (status line and
    header lines, up to the empty line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpError(f"bad status line {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def records_path(cluster_id: str, topic: str) -> str:
    return f"/v3/clusters/{quote(cluster_id, safe='')}/topics/{quote(topic, safe='')}/records"


@dataclass
class Consumed:
    """What a v2 consumer read: record count and, per partition, the offsets seen (their count
    and the highest), so gaps and duplicates show."""

    count: int = 0
    per_partition: dict[int, tuple[int, int]] = field(default_factory=dict)

    def add(self, records: list[dict[str, Any]]) -> None:
        seen = self.per_partition
        for r in records:
            n, high = seen.get(r["partition"], (0, -1))
            seen[r["partition"]] = (n + 1, max(high, r["offset"]))
        self.count += len(records)

    def problem(self, expected: int) -> str | None:
        """Why the read does not hold exactly offsets 0..n-1 of every partition, ``expected``
        records in all; None when it does."""
        seen = self.per_partition
        if self.count != expected:
            return f"consumed {self.count} of {expected} records"
        holes = {p: (n, high) for p, (n, high) in seen.items() if n != high + 1}
        if holes:
            return f"offsets with gaps or duplicates (partition: count, highest): {holes}"
        return None


# -- the client side ------------------------------------------------------------------------


def _host_port(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    return host, int(port)


def _request(url: str, method: str, path: str, body: Any = None,
             accept: str = V2_JSON, timeout: float = 30.0) -> tuple[int, bytes]:
    """One request on a connection of its own: (status, body)."""
    host, port = _host_port(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = V2_JSON
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def cluster_id(url: str, timeout: float = 60.0) -> str:
    """The cluster's id from ``GET /v3/clusters``, once the HTTP API answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, body = _request(url, "GET", "/v3/clusters", accept="application/json",
                                    timeout=max(0.5, min(10.0, deadline - time.monotonic())))
            if status == 200:
                return str(json.loads(body)["data"][0]["cluster_id"])
            problem = f"{status} {body[:200]!r}"
        except OSError as e:  # the process behind the port still starting
            problem = str(e)
        if time.monotonic() > deadline:
            raise HttpError(f"no answer from {url}/v3/clusters in {timeout:.0f} s: {problem}")
        time.sleep(0.05)


class Stream:
    """One streaming produce request: records written as they go, reports read meanwhile."""

    def __init__(self, url: str, path: str, record: bytes) -> None:
        self.host, self.port = _host_port(url)
        self.path = path
        self.record = record
        self.reports = Reports()
        self.sent = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._writer.write(
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )

    async def send(self, count: int) -> None:
        """Write ``count`` more records (waiting while the socket's buffer is full)."""
        assert self._writer is not None
        full, left = divmod(count, PER_CHUNK)
        block = chunk(self.record * PER_CHUNK) if full else b""
        for _ in range(full):
            self._writer.write(block)
            self.sent += PER_CHUNK
            await self._writer.drain()
        if left:
            self._writer.write(chunk(self.record * left))
            self.sent += left
            await self._writer.drain()

    async def end(self) -> None:
        assert self._writer is not None
        self._writer.write(LAST_CHUNK)
        await self._writer.drain()

    async def read_reports(self) -> None:
        """Read the response to its end, counting reports as they arrive."""
        assert self._reader is not None
        head = await self._reader.readuntil(b"\r\n\r\n")
        status, headers = parse_head(head)
        if status != 200:
            body = await self._reader.read(4096)
            raise HttpError(f"POST {self.path}: {status} {body[:300]!r}")
        if headers.get("transfer-encoding", "").lower() != "chunked":
            raise HttpError(f"POST {self.path}: the reports are not streamed: {headers}")
        decoder = ChunkedDecoder()
        while not decoder.done:
            data = await self._reader.read(READ_BYTES)
            if not data:
                raise HttpError(f"POST {self.path}: the connection closed after "
                                f"{self.reports.seen} reports")
            self.reports.feed(decoder.feed(data))
        self.reports.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _target(job: Job) -> tuple[str, str, bytes]:
    """The job's HTTP API, its cluster id (once the API answers) and the record it sends."""
    url = job["url"]
    return url, cluster_id(url), binary_record(os.urandom(job["size"]))


async def _warm(url: str, path: str, record: bytes, count: int) -> None:
    """A short stream before the clock starts: the HTTP API's producer for this user and its
    connection to the broker exist after it."""
    s = Stream(url, path, record)
    await s.open()
    try:
        reading = asyncio.ensure_future(s.read_reports())
        await s.send(count)
        await s.end()
        await reading
    finally:
        s.close()
    if s.reports.failed:
        raise HttpError(f"warm-up: {s.reports.failed} reports failed ({s.reports.first_error})")


async def _full_speed(streams: list[Stream], each: list[int]) -> None:
    async def one(s: Stream, n: int) -> None:
        reading = asyncio.ensure_future(s.read_reports())
        try:
            await s.send(n)
            await s.end()
        except BaseException:
            reading.cancel()
            raise
        await reading

    await asyncio.gather(*(one(s, n) for s, n in zip(streams, each, strict=True)))


def job_http_produce(job: Job) -> dict[str, Any]:
    """Stream ``count`` records of ``size`` bytes through ``streams`` concurrent produce
    requests as fast as the HTTP API takes them; the time runs from GO until the last
    report arrived."""
    url, cid, record = _target(job)
    path = records_path(cid, job["topic"])
    count, streams = job["count"], max(1, job.get("streams", 1))
    each = [count // streams + (1 if i < count % streams else 0) for i in range(streams)]

    async def main() -> dict[str, Any]:
        if job.get("warm_topic"):
            await _warm(url, records_path(cid, job["warm_topic"]), record,
                        job.get("warm_records", 1_000))
        conns = [Stream(url, path, record) for _ in range(streams)]
        for s in conns:
            await s.open()
        await asyncio.get_running_loop().run_in_executor(None, _ready)
        cpu0, t0 = time.process_time(), time.perf_counter()
        try:
            await asyncio.wait_for(_full_speed(conns, each), job.get("timeout", 300))
        finally:
            for s in conns:
                s.close()
        elapsed = time.perf_counter() - t0
        return _stream_result(conns, count, elapsed, time.process_time() - cpu0)

    return asyncio.run(main())


def _stream_result(conns: list[Stream], count: int, seconds: float, cpu: float) -> Job:
    ok = sum(s.reports.ok for s in conns)
    failed = sum(s.reports.failed for s in conns)
    first = next((s.reports.first_error for s in conns if s.reports.first_error), None)
    missing = count - ok - failed
    return {
        "records": ok,
        "seconds": seconds,
        "client_cpu_s": cpu,
        "failed": failed + max(0, missing),
        "first_error": first or (f"{missing} reports missing" if missing else None),
    }


def job_http_load(job: Job) -> dict[str, Any]:
    """Stream records at ``rate`` records/s (over ``streams`` requests) until told to stop.

    Its handshake differs from the other jobs': it starts sending at once, says READY once
    the load has run ``ramp_s`` and reports have come back, and stops at GO; then it ends its
    streams, waits for their last reports and returns the rate it held between READY and GO.
    """
    url, cid, record = _target(job)
    path = records_path(cid, job["topic"])
    rate, streams = float(job["rate"]), max(1, job.get("streams", 1))

    async def paced(s: Stream, share: float, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while not stop.is_set():
            owed = due(share, loop.time() - t0) - s.sent
            if owed > 0:
                await s.send(min(owed, MAX_BURST))
            await asyncio.sleep(TICK_S)  # the pacing's tick
        await s.end()

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        conns = [Stream(url, path, record) for _ in range(streams)]
        for s in conns:
            await s.open()
        readers = [asyncio.ensure_future(s.read_reports()) for s in conns]
        senders = [asyncio.ensure_future(paced(s, share, stop))
                   for s, share in zip(conns, split_rate(rate, streams), strict=True)]
        started = loop.time()
        ramp = float(job.get("ramp_s", 1.0))
        while loop.time() - started < ramp or not any(s.reports.ok for s in conns):
            for task in (*readers, *senders):
                failed = task.exception() if task.done() else None
                if failed is not None:
                    raise failed
            if loop.time() - started > ramp + 30:
                raise HttpError("no delivery report within 30 s of the load's start")
            await asyncio.sleep(0.01)  # a check interval, not synchronisation
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        ok0, cpu0, t0 = sum(s.reports.ok for s in conns), time.process_time(), time.perf_counter()
        threading.Thread(target=_stop_on_line, args=(loop, stop), daemon=True).start()
        await stop.wait()
        ok1, elapsed = sum(s.reports.ok for s in conns), time.perf_counter() - t0
        try:
            await asyncio.wait_for(asyncio.gather(*senders, *readers), 120)
        finally:
            for s in conns:
                s.close()
        res = _stream_result(conns, sum(s.sent for s in conns), elapsed,
                             time.process_time() - cpu0)
        res["window_records"] = ok1 - ok0
        res["window_rps"] = (ok1 - ok0) / elapsed if elapsed > 0 else 0.0
        return res

    return asyncio.run(main())


def _stop_on_line(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    line = sys.stdin.readline()
    if line and line.strip() != "GO":
        sys.stderr.write(f"expected GO, got {line!r}; stopping anyway\n")
    loop.call_soon_threadsafe(stop.set)


def job_http_consume(job: Job) -> dict[str, Any]:
    """Read ``expected`` records of a topic through a v2 consumer instance assigned all its
    ``partitions`` (binary format, from the earliest offset, ``fetch.min.bytes`` set so a
    read returns once that much has arrived); the instance is made before READY."""
    url, topic, expected = job["url"], job["topic"], job["expected"]
    group, name = job.get("group", "strom-bench-http"), f"bench-{os.getpid()}"
    cluster_id(url)
    status, body = _request(url, "POST", f"/consumers/{quote(group)}", {
        "name": name, "format": "binary", "auto.offset.reset": "earliest",
        "fetch.min.bytes": job.get("min_bytes", 1)})
    if status != 200:
        raise HttpError(f"creating the consumer instance: {status} {body[:300]!r}")
    base = f"/consumers/{quote(group)}/instances/{quote(name)}"
    parts = [{"topic": topic, "partition": p} for p in range(job["partitions"])]
    status, body = _request(url, "POST", f"{base}/assignments", {"partitions": parts})
    if status != 204:
        raise HttpError(f"assigning the partitions: {status} {body[:300]!r}")
    host, port = _host_port(url)
    conn = http.client.HTTPConnection(host, port, timeout=60)
    query = f"{base}/records?max_bytes={job.get('max_bytes', 64 * 1024 * 1024)}"
    got = Consumed()
    reads = 0
    _ready()
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = time.monotonic() + job.get("timeout", 300)
    idle_since = time.monotonic()
    stalled = False
    while got.count < expected and time.monotonic() < deadline:
        conn.request("GET", query, headers={"Accept": V2_BINARY})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise HttpError(f"GET {query}: {resp.status} {data[:300]!r}")
        records = json.loads(data)
        reads += 1
        got.add(records)
        if records:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > 15:
            stalled = True
            break
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    conn.close()
    _request(url, "DELETE", base)
    problem = got.problem(expected)
    if problem and stalled:
        problem += " (nothing more arrived for 15 s)"
    return {"records": got.count, "seconds": elapsed, "client_cpu_s": cpu, "reads": reads,
            "errors": 0, "first_error": None, "problem": problem}


JOBS = {
    "http_produce": job_http_produce,
    "http_load": job_http_load,
    "http_consume": job_http_consume,
}
