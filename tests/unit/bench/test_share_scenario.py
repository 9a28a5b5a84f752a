"""The share-group scenario's reading of Kafka's perf tools and its runs (no broker, no JVM)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.java_tools import consumer_seconds as tool_seconds
from bench.java_tools import parse_consumer_summary as parse_tool_output
from bench.scenarios.share import CLIENT_FETCH_BYTES, RUNS, ShareConsume

SHARE_OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms
Share consumer 1 having client id c-1 consumption metrics- 2026-11-27 19:19:29:416, \
2026-11-27 19:19:31:550, 77.7861, 36.4509, 37325.6795, 79653, 2134
2026-11-27 19:19:29:416, 2026-11-27 19:19:31:556, 195.3125, 91.2675, 93457.9439, 200000, 2140
"""

PLAIN_OUTPUT = """\
WARNING: something the JVM said
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-27 19:21:10:000, 2026-11-27 19:21:12:500, 195.3125, 78.1, 200000, 80000.0, 1000, 1500, \
130.2, 133333.3
"""


def test_share_summary_line_skips_the_per_consumer_lines() -> None:
    fields = parse_tool_output(SHARE_OUTPUT)
    assert fields["data.consumed.in.nMsg"] == "200000"
    assert tool_seconds(fields) == pytest.approx(2.140)


def test_plain_consumer_time_includes_its_join() -> None:
    fields = parse_tool_output(PLAIN_OUTPUT)
    assert fields["data.consumed.in.nMsg"] == "200000"
    assert tool_seconds(fields) == pytest.approx(2.5)  # rebalance 1.0 s + fetch 1.5 s


def test_no_summary_line() -> None:
    assert parse_tool_output("Exception in thread main\n") == {}


def test_rows_name_every_run_once() -> None:
    from bench.config import QUICK

    keys = [m.key for m in ShareConsume().rows(QUICK).metrics]
    assert len(keys) == len(set(keys))
    for run in RUNS:
        assert run.key("rps") in keys and run.key("rpcpu") in keys
    assert [r.consumers for r in RUNS if r.share and r.fetch_bytes != CLIENT_FETCH_BYTES] == [
        1, 4, 16]
