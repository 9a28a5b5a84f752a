"""The child side of the broker's helper processes (the HTTP API, the lake writer): the broker
hands each one a JSON line on stdin and keeps stdin open; the child logs as the broker does
(into the broker's log) and stops when stdin closes, so it never outlives its broker."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Self


class JsonLine:
    """A dataclass's one-line JSON form, for the hand-off."""

    def to_line(self) -> str:
        return json.dumps(asdict(self)) + "\n"  # type: ignore[call-overload]  # a dataclass

    @classmethod
    def from_line(cls, line: str) -> Self:
        fields: dict[str, Any] = json.loads(line)
        return cls(**fields)


def start_child(name: str, started_by: str) -> str:
    """Logging as the broker's, and the hand-off line (without one, exit with a line)."""
    logging.basicConfig(level=os.environ.get("STROM_LOG_LEVEL", "INFO").upper(), stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s "
                               "pid=%(process)d msg=%(message)s")  # the broker's, in its log
    logging.getLogger("strom.config").setLevel(logging.ERROR)  # the broker warned already
    line = sys.stdin.readline()
    if not line:
        sys.exit(f"{name}: started without the broker's hand-off (it is started by a broker "
                 f"with {started_by})")
    return line


def watch_parent(on_exit: Callable[[], None],
                 on_nudge: Callable[[], None] | None = None) -> None:
    """Call `on_exit` (on a thread of its own) when stdin closes: the broker stopped or died;
    `on_nudge` for each line the broker writes after the hand-off (`HelperProcess.nudge`)."""
    def watch() -> None:
        for _ in sys.stdin:  # (the text reader start_child read the hand-off through)
            if on_nudge is not None:
                on_nudge()
        on_exit()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
