"""The suites' time budgets (tests/conftest.py): each test counts toward its longest matching
suite, and a suite over its budget is named."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def _conftest():
    spec = importlib.util.spec_from_file_location("strom_root_conftest", ROOT_CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_test_counts_toward_its_longest_suite(monkeypatch) -> None:
    c = _conftest()
    monkeypatch.setattr(c, "SUITE_BUDGETS_S", {"tests/integration/": 10, "tests/integration/spark/": 5})
    assert c.suite_of("tests/integration/spark/test_x.py::test_y") == "tests/integration/spark/"
    assert c.suite_of("tests/integration/test_x.py::test_y[a/b]") == "tests/integration/"
    assert c.suite_of("tests/unit/test_x.py::test_y") is None


def test_a_suite_over_its_budget_is_named(monkeypatch) -> None:
    c = _conftest()
    monkeypatch.setattr(c, "SUITE_BUDGETS_S", {"tests/integration/": 10, "tests/unit/": 5})
    over = c.over_budget({"tests/integration/": 12.4, "tests/unit/": 5.0})
    assert over == ["tests/integration/: 12 s of test time, over its budget of 10 s"]


def test_every_suite_of_the_tree_has_a_budget() -> None:
    c = _conftest()
    root = ROOT_CONFTEST.parent
    suites = {"tests/unit/", "tests/integration/"} | {
        f"tests/integration/{d.name}/" for d in (root / "integration").iterdir()
        if d.is_dir() and any(d.glob("test_*.py"))}
    assert suites <= set(c.SUITE_BUDGETS_S)
