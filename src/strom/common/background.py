"""Worker threads for bulk background disk work, at a lower CPU priority than the event loop.

A leadership change of a thousand partitions writes and fsyncs a thousand leader-epoch
checkpoints; a topic's deletion removes its directories. On a machine whose cores are busy,
those threads would take a core from the event loop thread just when clients wait on it
(issue 28's failover stall). Linux schedules each thread on its own, so these threads are
given a higher nice value; the event loop thread keeps the process's. Their work is mostly
system calls, which release the GIL, so a descheduled worker rarely holds it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

BACKGROUND_NICE = 10  # added to the process's nice value: such a thread gets ~1/10 of a
# contended core against a normal one (CFS weights 110 against 1024)


def background_executor(workers: int, name: str) -> ThreadPoolExecutor:
    """A thread pool whose threads run ``BACKGROUND_NICE`` below the process's priority."""
    return ThreadPoolExecutor(workers, name, initializer=lower_thread_priority,
                              initargs=(BACKGROUND_NICE,))


def lower_thread_priority(increment: int) -> None:
    """Raise the calling thread's nice value by ``increment``. Where a thread cannot have a
    priority of its own (not Linux) or the call is refused, it keeps the process's."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + increment)
    except (OSError, AttributeError):
        pass
