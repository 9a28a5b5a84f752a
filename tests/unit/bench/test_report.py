"""The benchmark report's pure logic: medians, ratios, targets and the table they make."""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.report import (
    Metric,
    Outcome,
    ScenarioRows,
    Target,
    build_rows,
    cell,
    format_ratio,
    markdown_table,
    ratio,
    summarize,
    verdict_summary,
)


def test_summarize_gives_median_and_range() -> None:
    s = summarize([3.0, 1.0, 2.0, 10.0])
    assert s is not None
    assert (s.median, s.lo, s.hi, s.n) == (2.5, 1.0, 10.0, 4)
    assert summarize([]) is None


def test_ratio_handles_missing_and_zero() -> None:
    assert ratio(6.0, 3.0) == 2.0
    assert ratio(None, 3.0) is None
    assert ratio(1.0, 0.0) is None
    assert (
        format_ratio(2.0) == "2.00x"
        and format_ratio(0.0016) == "0.0016x"
        and format_ratio(None) == "-"
    )


def test_targets() -> None:
    refs = {"ceil": 1000.0}
    assert Target("ratio_min", 2.0).check(200.0, 100.0, refs) is True
    assert Target("ratio_min", 2.0).check(199.0, 100.0, refs) is False
    assert Target("ratio_max", 0.5).check(5.0, 10.0, refs) is True
    assert Target("ratio_max", 0.5).check(6.0, 10.0, refs) is False
    assert Target("max", 300.0).check(300.0, None, refs) is True
    assert Target("ref_min", 0.9, "ceil").check(899.0, None, refs) is False
    assert Target("ref_min", 0.9, "missing").check(899.0, None, refs) is None
    assert Target("ratio_min", 2.0).check(1.0, None, refs) is None
    assert Target("ratio_min", 2.0).describe("Tansu") == ">= 2x Tansu"


def test_cell_marks_failures_and_na() -> None:
    m = Metric("mbs", "produce", "MB/s")
    ok = [Outcome({"mbs": 10.0}), Outcome({"mbs": 30.0}), Outcome({"mbs": 20.0})]
    assert cell(ok, m).text == "20.0 (10.0-30.0)"
    bad = [*ok[:2], Outcome(failed="consumed 9 of 10 records")]
    c = cell(bad, m)
    assert c.text == "FAILED (1/3)" and c.stat is None and "9 of 10" in c.note
    assert cell([Outcome(na={"mbs": "in memory"})], m).text == "n/a"


def test_rows_ratio_verdict_and_table() -> None:
    sc = ScenarioRows(
        "p",
        "produce 1 KiB",
        (
            Metric(
                "mbs",
                "produce",
                "MB/s",
                target=Target("ratio_min", 2.0),
                ceiling="c",
                reported_ceiling="cr",
            ),
            Metric("rss", "RSS", "MB", 0, Target("max", 300.0)),
        ),
    )
    runs = {
        "p": {
            "S": [Outcome({"mbs": 250.0, "rss": 90.0}), Outcome({"mbs": 210.0, "rss": 80.0})],
            "T": [Outcome({"mbs": 100.0, "rss": 400.0}), Outcome({"mbs": 120.0, "rss": 410.0})],
        }
    }
    rows = build_rows([sc], runs, "S", "T", {"c": 500.0, "cr": 250.0})
    assert [r.ratio for r in rows] == ["2.09x", "0.21x"]
    assert [r.verdict for r in rows] == ["pass", "pass"]
    assert "of client ceiling: S 46%, T 22%" in rows[0].notes
    assert "of the ceiling with delivery reports: S 92%, T 44%" in rows[0].notes
    assert "ceiling" not in rows[1].notes
    assert rows[0].scenario == "produce 1 KiB" and rows[1].scenario == ""

    runs["p"]["S"].append(Outcome(failed="broker died | badly"))
    rows = build_rows([sc], runs, "S", "T", {})
    assert rows[0].verdict == "FAIL" and rows[0].subject == "FAILED (1/3)"
    assert "badly" in rows[0].notes and "badly" not in rows[1].notes  # said once per scenario
    table = markdown_table(rows, "S", "T")
    lines = table.splitlines()
    assert len(lines) == 2 + len(rows)
    assert all(line.count(" | ") == 7 for line in lines[2:])  # the "|" in the note is escaped
    assert verdict_summary(rows) == "Targets met: 0 of 2; missed: 2."


def test_rows_with_two_peers_judge_ratio_targets_against_the_first() -> None:
    sc = ScenarioRows(
        "p",
        "produce 1 KiB",
        (
            Metric("mbs", "produce", "MB/s", target=Target("ratio_min", 2.0), ceiling="c"),
            Metric("rss", "RSS", "MB", 0),
        ),
    )
    runs = {
        "p": {
            "S": [Outcome({"mbs": 300.0, "rss": 90.0})],
            "T": [Outcome({"mbs": 100.0, "rss": 30.0})],
            "K": [Outcome({"mbs": 600.0, "rss": 450.0})],
        }
    }
    rows = build_rows([sc], runs, "S", ["T", "K"], {"c": 600.0})
    assert [r.ratios for r in rows] == [("3.00x", "0.50x"), ("3.00x", "0.20x")]
    assert rows[0].peers == ("100.0", "600.0") and rows[0].peer == "100.0"
    assert rows[0].target == ">= 2x T" and rows[0].verdict == "pass"  # K is faster: not judged
    assert "of client ceiling: S 50%, T 17%, K 100%" in rows[0].notes
    table = markdown_table(rows, "S", ["T", "K"])
    head = table.splitlines()[0]
    assert head == (
        "| Scenario | Metric | S median (min-max) | T median (min-max) | K median (min-max) "
        "| S/T | S/K | Target | Pass | Notes |"
    )
    assert all(line.count(" | ") == 9 for line in table.splitlines()[2:])

    runs["p"]["K"] = [Outcome(failed="no jars")]
    rows = build_rows([sc], runs, "S", ["T", "K"], {})
    assert rows[0].peers[1] == "FAILED (1/1)" and rows[0].ratios[1] == "-"
    assert rows[0].verdict == "pass" and "K: no jars" in rows[0].notes


def test_a_row_can_have_a_goal_per_peer_and_each_counts() -> None:
    sc = ScenarioRows(
        "p",
        "produce 1 KiB",
        (
            Metric("mbs", "produce", "MB/s", target=(Target("ratio_min", 2.0, peer="T"),
                                                     Target("ratio_min", 1.0, peer="K"))),
            Metric("rss", "RSS", "MB", 0, (Target("max", 300), Target("ratio_max", 0.25, peer="K"))),
        ),
    )
    runs = {
        "p": {
            "S": [Outcome({"mbs": 300.0, "rss": 90.0})],
            "T": [Outcome({"mbs": 100.0, "rss": 30.0})],
            "K": [Outcome({"mbs": 600.0, "rss": 300.0})],
        }
    }
    rows = build_rows([sc], runs, "S", ["T", "K"], {})
    assert rows[0].target == ">= 2x T; >= 1x K" and rows[0].verdict == "pass; FAIL"
    assert rows[1].target == "<= 300 MB; <= 0.25x K" and rows[1].verdict == "pass; FAIL"
    assert verdict_summary(rows) == "Targets met: 2 of 4; missed: 2."
    # a goal against a peer that did not run is left out; the others stay
    rows = build_rows([sc], {"p": {k: v for k, v in runs["p"].items() if k != "K"}}, "S", ["T"], {})
    assert rows[0].target == ">= 2x T" and rows[1].target == "<= 300 MB"
    assert verdict_summary(rows) == "Targets met: 2 of 2."


def test_the_100_byte_produce_row_is_judged_against_the_ceiling_with_delivery_reports() -> None:
    from bench.config import FULL
    from bench.scenarios import BY_NAME
    from bench.scenarios.throughput import reported_ceiling_key

    rows = BY_NAME["produce-100b"].rows(FULL)
    (goal,) = next(m for m in rows.metrics if m.key == "produce_rps").targets
    assert goal.kind == "ref_min" and goal.value == 0.9 and goal.ref == reported_ceiling_key(100)
    assert goal.describe("") == ">= 0.9x client ceiling with delivery reports"
    # 1.66 M records/s against a ceiling of 2.24 M, 1.81 M with reports served: a pass
    assert goal.check(1_662_614, None, {reported_ceiling_key(100): 1_805_791})
