"""The lake writer's reports (one JSON line on its stdout) become the broker's metrics; a line
that is not a report changes nothing."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

import strom
from strom.broker.helper_process import HelperProcess
from strom.broker.lake_listener import LakeCollector, LakeStatus


def test_reports_become_metrics() -> None:
    status = LakeStatus()
    registry = CollectorRegistry()
    registry.register(LakeCollector(status))
    status.take(json.dumps({"lake": {"t": {"lag_records": 7, "commit_failures": 2,
                                           "last_commit_s": 1700000000.5}}}))
    status.take("not json\n")
    status.take(json.dumps({"other": 1}))
    text = generate_latest(registry).decode()
    assert 'strom_lake_lag_records{topic="t"} 7.0' in text
    assert 'strom_lake_commit_failures_total{topic="t"} 2.0' in text
    assert 'strom_lake_last_commit_timestamp_seconds{topic="t"} 1.7000000005e+09' in text


def test_a_helper_s_stdout_lines_reach_on_line(tmp_path, monkeypatch) -> None:
    (tmp_path / "helper.py").write_text(
        "import sys\nsys.stdin.readline()\nprint('one')\nprint('two')\n")
    monkeypatch.chdir(tmp_path)  # python -m helper finds it there
    lines: list[str] = []
    helper = HelperProcess("a helper", "helper", "go\n", logging.getLogger("t"),
                           on_line=lines.append)
    helper.spawn()
    assert helper.process is not None and helper.process.wait(30) == 0
    deadline = time.monotonic() + 10
    while len(lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # poll interval: the reading thread ends at the helper's EOF
    assert lines == ["one\n", "two\n"]


def test_nudges_reach_the_helper_and_never_block(tmp_path, monkeypatch) -> None:
    """Each nudge is a line on the helper's stdin (watch_parent's on_nudge); closing stdin
    still stops it; a nudge to a helper that exited is dropped, not raised."""
    (tmp_path / "helper.py").write_text(
        "import sys, threading\n"
        "from strom.common.helper_child import watch_parent\n"
        "sys.stdin.readline()\n"
        "done = threading.Event()\n"
        "watch_parent(done.set, lambda: print('nudged', flush=True))\n"
        "done.wait(30)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(Path(strom.__file__).parents[1]))
    lines: list[str] = []
    helper = HelperProcess("a helper", "helper", "go\n", logging.getLogger("t"),
                           on_line=lines.append)
    helper.spawn()
    assert helper.process is not None
    helper.nudge()
    helper.nudge()
    deadline = time.monotonic() + 10
    while len(lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # poll interval, not synchronisation
    assert lines == ["nudged\n", "nudged\n"]
    assert helper.process.stdin is not None
    helper.process.stdin.close()
    assert helper.process.wait(30) == 0
    helper.nudge()  # exited: nothing happens


def test_a_nudge_to_a_helper_that_does_not_read_returns(tmp_path, monkeypatch) -> None:
    (tmp_path / "deaf.py").write_text("import sys, time\nsys.stdin.readline()\ntime.sleep(60)\n")
    monkeypatch.chdir(tmp_path)
    helper = HelperProcess("a helper", "deaf", "go\n", logging.getLogger("t"))
    helper.spawn()
    assert helper.process is not None
    try:
        for _ in range(100_000):  # 100 kB: past a pipe's 64 kB buffer
            helper.nudge()
    finally:
        helper.process.kill()
        helper.process.wait(30)
