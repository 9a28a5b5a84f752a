"""CPU seconds and peak RSS of a process and its descendants, read from /proc.

A broker may run helper processes; counting the whole tree keeps a multi-process broker honest.
"""

from __future__ import annotations

import os

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


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its live descendants (and of the children it reaped)."""
    total = 0
    for p in descendants(pid):
        fields = _stat_fields(p)
        if fields is None:
            continue
        # After the command name: fields[0] is state (field 3), utime is field 14, stime 15,
        # cutime 16, cstime 17.
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / _CLK_TCK


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
