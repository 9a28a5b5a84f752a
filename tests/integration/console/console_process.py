"""Run `strom console` as a subprocess for the tests, and talk HTTP to it.

The console is judged ready when it answers HTTP on its port, and is always stopped by its PID.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ..broker import _DIE_WITH_PARENT, HOST, STROM_BIN, free_port

START_TIMEOUT = 30.0


class ConsoleProcess:
    def __init__(self, bootstrap: str, log_path: Path, *extra: str) -> None:
        self.bootstrap = bootstrap
        self.log_path = log_path
        self.port = free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> ConsoleProcess:
        argv = [str(STROM_BIN), "console", "--bootstrap-server", self.bootstrap,
                "--port", str(self.port), *self.extra]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*_DIE_WITH_PARENT, *argv], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"strom console exited with {self.proc.returncode}:\n"
                                     f"{self.log()}")
            try:
                get(self.port, "/static/console.css", timeout=1.0)
                return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"strom console not serving after {START_TIMEOUT}s:\n"
                                     f"{self.log()}")
            time.sleep(0.05)  # poll interval, not synchronisation

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(15)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


def request(port: int, method: str, path: str, timeout: float = 30.0,
            body: bytes | None = None) -> Reply:
    """One HTTP request with the path sent exactly as given (no client-side normalisation)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def get(port: int, path: str, timeout: float = 30.0) -> Reply:
    return request(port, "GET", path, timeout)
