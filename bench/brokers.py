"""The broker under test as an object: start, wait until ready, stop, kill -9, CPU and RSS.

A :class:`BrokerSpec` says how to launch one kind of broker (Strom, Tansu, Kafka); a
:class:`BrokerProcess` is one running instance with its own fresh data directory and port.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench import procstat
from bench.tls import TlsFiles

READY_MARKER = "listening"  # both Strom and Tansu print a line containing it when ready


class BrokerError(RuntimeError):
    """The broker did not start, did not become ready in time, or died."""


class Command(Protocol):
    """Builds a broker's argv: its clients' listener on ``port`` (SSL with ``tls``, else
    PLAINTEXT), its data under ``data_dir``."""

    def __call__(self, port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]: ...


class Prepare(Protocol):
    """Runs once before a broker's first start (Kafka: its config and storage format)."""

    def __call__(self, port: int, data_dir: Path, tls: TlsFiles | None = None) -> None: ...


@dataclass(frozen=True)
class BrokerSpec:
    """How to launch one kind of broker.

    ``command(port, data_dir, tls=None)`` builds the argv. ``persistent`` says whether the broker
    keeps its data across a restart (Tansu's memory storage does not). ``prepare(port,
    data_dir, tls=None)``, if given, runs once before the first start (Kafka writes its config
    and formats its storage). ``ready_marker`` is the log line that says the broker listens; a
    broker that prints none (Kafka logs nothing below ERROR without a log4j2 config) is asked
    ApiVersions instead. With ``tls`` the clients' listener on ``port`` is SSL, from the PEM key
    store of those files; ``no_tls`` says why a broker cannot do that (None: it can).
    """

    label: str
    kind: str  # "strom", "tansu" or "kafka"
    command: Command
    persistent: bool
    version: str = ""
    notes: str = ""
    env: dict[str, str] = field(default_factory=dict)
    prepare: Prepare | None = None
    ready_marker: str | None = READY_MARKER
    no_tls: str | None = None


def strom_settings(port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
    """Strom's per-run ``--override`` settings: one listener on ``port``, PLAINTEXT or, with
    ``tls``, SSL from a PEM key store (docs/security.md), and ``log.dirs`` under ``data_dir``."""
    if tls is None:
        listener = [f"listeners=PLAINTEXT://127.0.0.1:{port}"]
    else:
        listener = [
            f"listeners=SSL://127.0.0.1:{port}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={tls.keystore}",
        ]
    return [
        *listener,
        f"log.dirs={data_dir / 'logs'}",
        "metrics.listener=http://127.0.0.1:0",  # on, as by default; --strom-override wins
    ]


def strom_spec(
    exe: str, config: str | None = None, overrides: Sequence[str] = (), label: str = "Strom"
) -> BrokerSpec:
    def command(port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        argv = [exe, "broker"]
        if config:
            argv += ["--config", config]
        for item in (*strom_settings(port, data_dir, tls), *overrides):
            argv += ["--override", item]
        return argv

    return BrokerSpec(
        label=label, kind="strom", command=command, persistent=True, notes="disk storage"
    )


@dataclass(frozen=True)
class WithSchemaRegistry:
    """A Strom :class:`Command` that also serves the schema registry at ``url``
    (``schema.registry.listeners``, issue 31); see :func:`with_schema_registry`."""

    inner: Command
    url: str

    def __call__(self, port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        return [*self.inner(port, data_dir, tls), "--override", f"schema.registry.listeners={self.url}"]


def with_schema_registry(spec: BrokerSpec, url: str) -> BrokerSpec:
    """``spec`` (a Strom's) with its schema registry listening at ``url``
    (``http://127.0.0.1:PORT``), for the scenarios that validate records on produce."""
    if spec.kind != "strom":
        raise ValueError(f"{spec.label} serves no schema registry")
    return dataclasses.replace(spec, command=WithSchemaRegistry(spec.command, url))


def schema_registry_url(spec: BrokerSpec) -> str | None:
    """Where a broker made by :func:`with_schema_registry` serves its registry; None: nowhere."""
    return spec.command.url if isinstance(spec.command, WithSchemaRegistry) else None


@dataclass(frozen=True)
class WithRestApi:
    """A Strom :class:`Command` that also serves the HTTP API (``rest.listeners``, issue 32) on
    a port the broker picks; see :func:`with_rest_api` and :func:`rest_api_url`."""

    inner: Command

    def __call__(self, port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        return [*self.inner(port, data_dir, tls), "--override", "rest.listeners=http://127.0.0.1:0"]


def with_rest_api(spec: BrokerSpec) -> BrokerSpec:
    """``spec`` (a Strom's) with its HTTP API on, for the scenarios that measure it."""
    if spec.kind != "strom":
        raise ValueError(f"{spec.label} serves no HTTP API")
    return dataclasses.replace(spec, command=WithRestApi(spec.command))


HTTP_API_AT = re.compile(r"HTTP API at (https?://[^\s,]+)")


def http_api_url(log: str) -> str | None:
    """The HTTP API's URL from a Strom broker's start-up line ("..., HTTP API at
    http://HOST:PORT"); None when the log has none."""
    found = HTTP_API_AT.search(log)
    return found.group(1) if found else None


def rest_api_url(broker: BrokerProcess) -> str | None:
    """Where a broker made by :func:`with_rest_api` serves its HTTP API (the port it chose,
    read from its start-up line); None for any other broker."""
    if not isinstance(broker.spec.command, WithRestApi):
        return None
    return http_api_url(broker.log_text())


# Tansu 0.6.0's `broker --help` lists --cert and --key ("Transport Layer Security
# Certificate/Key"), but they change nothing about the Kafka listener: started with --cert (a
# PEM certificate, or key and certificate; listener URL tcp://, tls:// or ssl://) or with --key
# (the two together are refused), it still answers ApiVersions in plaintext, and a TLS
# ClientHello gets no reply (checked on 2026-11-27).
TANSU_NO_TLS = "Tansu 0.6.0 has no TLS listener (its --cert/--key leave the listener plaintext)"


def tansu_spec(binary: str, label: str = "Tansu", version: str = "") -> BrokerSpec:
    def command(port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        if tls is not None:
            raise BrokerError(TANSU_NO_TLS)
        url = f"tcp://127.0.0.1:{port}"
        return [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    return BrokerSpec(
        label=label,
        kind="tansu",
        command=command,
        persistent=False,
        version=version,
        notes="memory storage",
        env={"RUST_LOG": "warn"},
        no_tls=TANSU_NO_TLS,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_versions_ok(port: int, timeout: float = 1.0, tls: ssl.SSLContext | None = None) -> bool:
    """Whether the broker answers ApiVersions v0 without error: it serves requests, not just
    accepts connections (Kafka binds its port well before it processes anything). With ``tls``
    the request goes over a TLS connection made with that context (an SSL listener)."""
    client_id = b"strom-bench"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            s = raw if tls is None else tls.wrap_socket(raw, server_hostname="127.0.0.1")
            try:
                s.sendall(struct.pack(">i", len(body)) + body)
                head = _recv_exact(s, 4)
                payload = _recv_exact(s, struct.unpack(">i", head)[0])
            finally:
                if s is not raw:
                    s.close()
    except (OSError, EOFError, struct.error):  # ssl.SSLError is an OSError
        return False
    if len(payload) < 6:
        return False
    correlation, error = struct.unpack(">ih", payload[:6])
    return correlation == 1 and error == 0


def listening(port: int) -> bool:
    """Whether some socket listens on ``port`` (/proc/net/tcp and tcp6, state 0A).

    Connecting to a port nobody has bound yet can, now and then, connect the socket to itself
    (Linux may pick the destination port as the source port) and so hold the port the broker
    is about to bind: Kafka then dies with "Address already in use". So the probe connects only
    once the port is bound.
    """
    suffix = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A" and fields[1].endswith(suffix):
                        return True
        except OSError:
            continue
    return False


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class BrokerProcess:
    """One broker instance: a process, a port and a fresh data directory that it owns.

    With ``tls`` the broker's clients' listener on :attr:`port` is SSL: :attr:`security` holds
    the client settings every client of this broker needs (the readiness probe, the harness's
    admin client and the client jobs use them)."""

    def __init__(self, spec: BrokerSpec, workdir: Path, tls: TlsFiles | None = None) -> None:
        if tls is not None and spec.no_tls:
            raise BrokerError(spec.no_tls)
        self.spec = spec
        self.tls = tls
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"{spec.label.lower()}-", dir=workdir))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._starts = 0
        self._log_seen, self._log_tail_bytes, self._marker_found = 0, b"", False
        self.started_at = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def security(self) -> dict[str, str]:
        """librdkafka settings besides bootstrap.servers: none for PLAINTEXT, SSL's with tls."""
        return self.tls.client_config() if self.tls is not None else {}

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Launch the broker (same port and data directory on every restart)."""
        if self.proc is not None and self.proc.poll() is None:
            raise BrokerError("already running")
        if self._starts == 0 and self.spec.prepare is not None:
            self.spec.prepare(self.port, self.data_dir, tls=self.tls)
        self._starts += 1
        self._log_path = self.data_dir / f"broker-{self._starts}.log"
        self._log_seen, self._log_tail_bytes, self._marker_found = 0, b"", False
        log = open(self._log_path, "wb")  # noqa: SIM115 - handed to the child
        env = {**os.environ, **self.spec.env}
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                self.spec.command(self.port, self.data_dir, tls=self.tls),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        except OSError as e:
            raise BrokerError(f"cannot start {self.spec.label}: {e}") from e
        finally:
            log.close()

    def wait_ready(self, timeout: float = 60.0, topic: tuple[str, int] | None = None) -> float:
        """Block until the broker serves Metadata (listing ``topic`` with all its partitions,
        if given); return seconds since :meth:`start`.

        The TCP port is polled before a Kafka client is made, so the client's reconnect
        back-off never inflates the measured start-up time.
        """
        deadline = time.monotonic() + timeout
        context = self.tls.client_context() if self.tls is not None else None
        while True:
            self._check_alive()
            if self.spec.ready_marker is None:
                if listening(self.port) and api_versions_ok(
                    self.port, max(0.05, min(1.0, deadline - time.monotonic())), context
                ):
                    break
            elif self._marker_seen() and _port_open(self.port):
                break
            self._check_deadline(deadline, "to listen")
            time.sleep(0.01)

        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.security, "log_level": 0})
        while True:
            self._check_alive()
            try:
                md = admin.list_topics(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            except Exception:  # KafkaException while the broker is still coming up
                md = None
            if md is not None and md.brokers and topic_ready(md, topic):
                return time.monotonic() - self.started_at
            self._check_deadline(deadline, "to serve metadata" + (f" for {topic}" if topic else ""))
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> tuple[float, bool]:
        """SIGTERM and wait. Returns (seconds, clean); falls back to SIGKILL after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0, self.proc is None or self.proc.returncode == 0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill_tree()
            self.proc.wait(10)
            return time.monotonic() - t0, False
        # A JVM that shuts down on SIGTERM exits with 128 + 15.
        return time.monotonic() - t0, rc in (0, -signal.SIGTERM, 128 + signal.SIGTERM)

    def kill9(self) -> None:
        """SIGKILL the broker (and any children it started), as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self._kill_tree()
            self.proc.wait(10)

    def close(self, keep: bool = False) -> None:
        """Stop if still running, then delete the run's data if that is cheap (``keep``: leave
        it for a look, e.g. after a failed run).

        Data in few large files (the throughput runs: hundreds of MB each) is deleted at once.
        Kept, it would make every later run write into page cache the machine has not used
        recently, and on this VM that is slow: `dd` of 300 MB into a file costs 0.07-0.1 s of
        system time for the first gigabyte or so and 0.5-0.9 s after it, and Strom's produce
        CPU tripled in the third round of a sitting that kept everything (the copy into the
        page cache, `copy_folio_from_iter_atomic`, took 10x longer), while a broker that keeps
        data in memory frees it on exit. Directories of many files are left for the runner to
        delete after the last round: deleting tens of thousands of files makes this machine's
        disk (ext4 mounted with `discard`) create files 10-20x slower for the next tens of
        seconds, which would land on whichever broker runs next. Before that, `sync` writes
        this run's dirty files back now, so the next run does not pay for that either.
        """
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.stop(timeout=20)
        finally:
            if not keep and _few_files(self.data_dir, FEW_FILES):
                shutil.rmtree(self.data_dir, ignore_errors=True)
            os.sync()

    # -- measurements ----------------------------------------------------------------------

    def cpu_sample(self) -> procstat.CpuSample:
        """Take two samples and subtract them with :func:`bench.procstat.cpu_delta`."""
        return procstat.cpu_sample(self.pid)

    def peak_rss_bytes(self) -> int:
        return procstat.peak_rss_bytes(self.pid)

    def log_text(self) -> str:
        """Everything the broker has logged since its last start."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 15) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        text = self._log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    # -- internals -------------------------------------------------------------------------

    def _kill_tree(self) -> None:
        for p in reversed(procstat.descendants(self.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)

    def _marker_seen(self) -> bool:
        """Whether the log has the ready line yet; reads only what was added since last time."""
        assert self._log_path is not None
        if self._marker_found:
            return True
        try:
            with open(self._log_path, "rb") as f:
                f.seek(self._log_seen)
                fresh = f.read()
        except FileNotFoundError:
            return False
        # Keep a line's worth of overlap so a marker split across two reads is still found.
        text = (self._log_tail_bytes + fresh).decode(errors="replace").lower()
        self._log_seen += len(fresh)
        self._log_tail_bytes = (self._log_tail_bytes + fresh)[-256:]
        self._marker_found = (self.spec.ready_marker or READY_MARKER) in text
        return self._marker_found

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise BrokerError(
                f"{self.spec.label} exited with {self.proc.returncode}: {self.log_tail()}"
            )

    def _check_deadline(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise BrokerError(f"{self.spec.label} took too long {what}: {self.log_tail()}")


def topic_ready(md: object, topic: tuple[str, int] | None) -> bool:
    if topic is None:
        return True
    name, partitions = topic
    t = md.topics.get(name)  # type: ignore[attr-defined]
    if t is None or t.error is not None or len(t.partitions) != partitions:
        return False
    return all(p.leader >= 0 and p.error is None for p in t.partitions.values())


# At most this many files in a run's data directory: delete it when the run ends.
FEW_FILES = 500


def _few_files(root: Path, limit: int) -> bool:
    """Whether ``root`` holds at most ``limit`` files (stops counting past the limit)."""
    seen = 0
    for _dirpath, _dirnames, filenames in os.walk(root):
        seen += len(filenames)
        if seen > limit:
            return False
    return True
