"""Telling a failing log dir from a failing request, and finding out when a dir is healthy again.

Kafka takes a log dir offline on any ``IOException`` in it (its LogDirFailureChannel): every
partition there answers KAFKA_STORAGE_ERROR until the broker restarts. Strom does the same, but
checks an offline dir in the background (``probe_dir``) and brings it back once it has free
space again and a small write and fsync in it succeed.

Running out of file descriptors (EMFILE, ENFILE) is a property of the process, not of the dir:
the request fails with KAFKA_STORAGE_ERROR, the dir stays online.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from strom.storage import files

FD_EXHAUSTED = frozenset((errno.EMFILE, errno.ENFILE))
PROBE_FILE = ".strom_probe"
# an offline dir comes back only with this much free space (or 5% of its filesystem if less)
FREE_SPACE_MARGIN = 64 * 1024 * 1024
_PROBE_BYTES = 4096


def io_cause(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind a storage failure (None: not an I/O failure, e.g. a closed log)."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 8:
        if isinstance(e, OSError):
            return e
        e = e.__cause__
        seen += 1
    return None


def is_fd_exhaustion(cause: OSError) -> bool:
    return cause.errno in FD_EXHAUSTED


def describe(cause: OSError) -> str:
    """``No space left on device (ENOSPC)``: the message without the file name noise."""
    name = errno.errorcode.get(cause.errno or 0)
    text = cause.strerror or str(cause)
    return f"{text} ({name})" if name else text


def free_space_margin(total_bytes: int) -> int:
    return min(FREE_SPACE_MARGIN, total_bytes // 20)


def probe_dir(d: Path) -> str | None:
    """Why ``d`` cannot take writes yet (None: it can). Blocking (statvfs, a write, an fsync):
    call it from a worker thread."""
    try:
        st = os.statvfs(d)
    except OSError as e:
        return f"cannot stat the filesystem: {describe(e)}"
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    need = free_space_margin(total)
    if free < need:
        return f"{free} bytes free, waiting for {need}"
    path = d / PROBE_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(bytes(_PROBE_BYTES))
            while view:
                view = view[os.write(fd, view) :]
            files.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(path)
    except OSError as e:
        return f"a test write failed: {describe(e)}"
    return None


class RateLimitedLog:
    """At most one line per key every ``interval_s``; the next one says how many were held back
    (a request per millisecond failing the same way must not flood the log)."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def error(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, msg, *args)

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at ``level`` unless ``key`` was logged less than ``interval_s``
        ago; True when it was logged."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            msg += " (%d more like it in the last %.0f s)"
            args = (*args, held, now - last if last is not None else 0.0)
        self._logger.log(level, msg, *args)
        return True
