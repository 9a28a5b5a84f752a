"""tests/issue_tests.py names test paths that exist, each under one issue only, and reads a
STROM_TEST_CPU report (for tools/issue_time.py) the way tests/conftest.py writes it."""

from __future__ import annotations

from pathlib import Path

from tests.issue_tests import ISSUE_TESTS, cpu_share

ROOT = Path(__file__).resolve().parents[2]


def test_every_path_exists_and_belongs_to_one_issue() -> None:
    seen: dict[str, int] = {}
    for issue, spec in ISSUE_TESTS.items():
        for p in spec.paths:
            assert (ROOT / p).exists(), f"issue {issue}: {p} does not exist"
            assert p not in seen, f"{p} is under issues {seen[p]} and {issue}"
            seen[p] = issue


def test_the_cpu_share_counts_the_issues_files_only(tmp_path) -> None:
    report = tmp_path / "cpu.tsv"
    report.write_text("10.0\t20.0\ttests/integration/rest/test_a.py\n"
                      "5.0\t7.0\ttests/integration/restless/test_b.py\n"
                      "1.0\t2.0\ttests/unit/x.py\n"
                      "garbage\n")
    mine, total, summed = cpu_share(report, ("tests/integration/rest", "tests/unit/x.py"))
    assert (mine, total, summed) == (11.0, 16.0, 22.0)
