"""Fixtures of the console tests: a broker, `strom console` against it, headless Chromium.

Chromium is Debian's (`make system-deps` installs it), driven by Playwright without any browser
download of its own. Its absence fails the tests instead of skipping them: CI installs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .console_process import ConsoleProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def artifacts() -> Path:
    """Where screenshots go: $STROM_TEST_ARTIFACTS/console, else test-artifacts/console."""
    base = os.environ.get("STROM_TEST_ARTIFACTS")
    path = (Path(base) if base else REPO / "test-artifacts") / "console"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def start_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """`start_console(bootstrap, *options)` -> a serving ConsoleProcess, stopped at the end."""
    started: list[ConsoleProcess] = []
    logs = tmp_path_factory.mktemp("console")

    def start(bootstrap: str, *options: str) -> ConsoleProcess:
        console = ConsoleProcess(bootstrap, logs / f"console-{len(started)}.log", *options)
        started.append(console)
        return console.start()

    try:
        yield start
    finally:
        for console in started:
            console.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A fresh headless Chromium (a Playwright BrowserContext with its own profile)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"Debian's chromium is not installed at {CHROMIUM}: `make system-deps` "
                    "installs it (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the Python package playwright is missing: pip install -e '.[test]'")
    playwright = sync_playwright().start()
    try:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM,
            headless=True, args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900},
            timeout=30_000)
    except Exception as exc:
        playwright.stop()
        pytest.fail(f"headless Chromium ({CHROMIUM}) did not start: {exc}")
    context.set_default_timeout(15_000)
    try:
        yield context
    finally:
        context.close()
        playwright.stop()
