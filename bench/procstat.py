"""CPU seconds and peak RSS of a process and its descendants, read from /proc.

A broker may run helper processes; counting the whole tree keeps a multi-process broker honest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def descendants(pid: int) -> list[int]:
    """``pid`` and all its live descendants."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def helper_pid(broker_pid: int, module: str) -> int | None:
    """The broker's helper process running ``python -m <module>`` (the HTTP API's, the lake
    writer's), if it runs."""
    for pid in descendants(broker_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if module.encode() in cmdline:
            return pid
    return None


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its live descendants (and of the children it reaped).

    The kernel reports these in clock ticks (10 ms), too coarse on its own for a broker that
    moves a million records in 50 ms of CPU: see :func:`cpu_sample`.
    """
    total = 0
    for p in descendants(pid):
        fields = _stat_fields(p)
        if fields is None:
            continue
        # After the command name: fields[0] is state (field 3), utime is field 14, stime 15,
        # cutime 16, cstime 17.
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / _CLK_TCK


def _sched_seconds(pids: list[int]) -> float | None:
    """Nanosecond-precise on-CPU time of every live thread (``/proc/P/task/T/schedstat``)."""
    total = 0
    for p in pids:
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except FileNotFoundError:
                continue
            except (OSError, ValueError, IndexError):
                return None
    return total / 1e9


@dataclass(frozen=True)
class CpuSample:
    ticks_s: float  # from /proc/P/stat utime+stime, 10 ms resolution, counts exited threads
    sched_s: float | None  # from per-thread schedstat, ns resolution, live threads only


def cpu_sample(pid: int) -> CpuSample:
    pids = descendants(pid)
    return CpuSample(cpu_seconds(pid), _sched_seconds(pids))


# Two tick readings can each be up to one tick (10 ms) short.
_TICK_SLACK = 2.5 / _CLK_TCK


def cpu_delta(before: CpuSample, after: CpuSample) -> float:
    """CPU seconds used between two samples.

    The precise schedstat sum is used unless it falls short of the utime+stime difference by
    more than tick rounding explains: then a thread ended in between, taking its schedstat
    with it, and only utime+stime is right.
    """
    ticks = after.ticks_s - before.ticks_s
    if before.sched_s is None or after.sched_s is None:
        return ticks
    precise = after.sched_s - before.sched_s
    return ticks if precise < ticks - _TICK_SLACK else precise


def _status_kib(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def peak_rss_bytes(pid: int) -> int:
    """Sum of VmHWM (peak resident set) over the process tree, in bytes."""
    return sum(_status_kib(p, "VmHWM") for p in descendants(pid)) * 1024
