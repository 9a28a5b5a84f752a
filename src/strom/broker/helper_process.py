"""A helper process of the broker (the HTTP API's, the lake writer's): `python -m <module>`,
handed one line on its stdin, started again with a back-off when it dies (an ERROR line says
so), stopped by closing its stdin — which a broker killed with -9 closes too, so a helper never
outlives its broker. A helper may report on its stdout, one line at a time (`on_line`, called
on a reading thread of its own): the lake writer's lag reaches the broker's metrics that way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

MAX_BACKOFF_S = 30.0


@dataclass
class HelperProcess:
    what: str  # for log lines: "the HTTP API's process"
    module: str  # run as python -m <module>
    handoff: str  # the first line on its stdin
    log: logging.Logger
    stop_s: float = 10.0  # how long it may take to exit once its stdin is closed
    pass_fds: Sequence[int] = ()
    on_line: Callable[[str], None] | None = None  # each line the helper writes on its stdout
    process: subprocess.Popen[bytes] | None = None
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    restarts: int = field(default=0)

    def start(self) -> None:
        self.spawn()
        self.task = asyncio.get_running_loop().create_task(
            self.supervise(), name=f"{self.module}-supervisor")

    def spawn(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE if self.on_line is not None else None,
            pass_fds=list(self.pass_fds), close_fds=True)
        assert self.process.stdin is not None
        self.process.stdin.write(self.handoff.encode())
        self.process.stdin.flush()
        os.set_blocking(self.process.stdin.fileno(), False)  # nudge() never waits for it
        if self.on_line is not None:
            threading.Thread(target=self._read_lines, args=(self.process, self.on_line),
                             name=f"{self.module}-lines", daemon=True).start()

    def _read_lines(self, process: subprocess.Popen[bytes],
                    on_line: Callable[[str], None]) -> None:
        assert process.stdout is not None
        for line in process.stdout:  # ends when the process exits
            try:
                on_line(line.decode(errors="replace"))
            except Exception:
                self.log.exception("a line from %s could not be taken: %r", self.what, line)

    def nudge(self) -> None:
        """Tell the helper something changed (a line on its stdin: the lake writer looks at
        the topics again). Never blocks: a helper that is not reading misses the nudge, which
        only spares it its next periodic look."""
        process = self.process
        if process is None or process.stdin is None or process.poll() is not None:
            return
        with contextlib.suppress(OSError):  # BlockingIOError (a full pipe), a closed one
            os.write(process.stdin.fileno(), b"\n")

    async def supervise(self) -> None:
        backoff = 1.0
        while not self.stopping:
            process = self.process
            assert process is not None
            code = await asyncio.to_thread(process.wait)
            if self.stopping:
                return
            self.log.error("%s (pid %d) exited with %s: starting it again in %.0f s",
                           self.what, process.pid, code, backoff)
            await asyncio.sleep(backoff)  # a back-off, not synchronisation
            backoff = min(backoff * 2, MAX_BACKOFF_S)
            if self.stopping:
                return
            self.restarts += 1
            self.spawn()

    async def stop(self) -> None:
        self.stopping = True
        process = self.process
        if process is not None and process.poll() is None:
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.close()  # EOF: the process shuts down
            try:
                await asyncio.wait_for(asyncio.to_thread(process.wait), self.stop_s)
            except TimeoutError:
                self.log.warning("%s (pid %d) did not stop in %.0f s: killed", self.what,
                                 process.pid, self.stop_s)
                process.kill()
                await asyncio.to_thread(process.wait)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
