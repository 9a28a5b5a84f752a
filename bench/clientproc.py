"""Harness side of a client job: spawn ``python -m bench.client``, handshake, collect the result."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class ClientError(RuntimeError):
    """The client job failed, timed out or broke the handshake."""


class ClientJob:
    """One client process. Use :meth:`ready`, then :meth:`go`, then :meth:`result`."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the job
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.client", json.dumps(job)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._early: dict[str, Any] | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._lines.put(raw.decode(errors="replace").rstrip("\n"))
        self._lines.put(None)

    def _next(self, timeout: float) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise ClientError(f"{self.job['job']}: no answer within {timeout:.0f}s") from None
        if line is None:
            raise ClientError(f"{self.job['job']}: exited early: {self.stderr_tail()}")
        return line

    def ready(self, timeout: float = 60.0) -> None:
        line = self._next(timeout)
        if line.startswith("RESULT "):
            self._early = json.loads(line[7:])
            return
        if line != "READY":
            raise ClientError(f"{self.job['job']}: unexpected line {line!r}")

    def go(self) -> None:
        if self._early is not None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"GO\n")
        self.proc.stdin.flush()

    def result(self, timeout: float) -> dict[str, Any]:
        """The job's result dict; raises ClientError if it reported an error."""
        if self._early is not None:
            res = self._early
        else:
            while True:
                line = self._next(timeout)
                if line.startswith("RESULT "):
                    res = json.loads(line[7:])
                    break
        if not self.job.get("hold"):
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        if "error" in res:
            raise ClientError(f"{self.job['job']}: {res['error']}")
        return res

    def release(self) -> None:
        """Let a job started with ``hold`` close its connections and exit."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b"EXIT\n")
                self.proc.stdin.close()
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stderr_tail(self, chars: int = 800) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-chars:]


def run_job(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Spawn a job, start it at once, return its result (no measurement around it)."""
    c = ClientJob(job)
    try:
        c.ready(timeout)
        c.go()
        return c.result(timeout)
    finally:
        c.kill()
