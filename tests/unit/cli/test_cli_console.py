"""`strom console` wiring: its defaults and its start-up errors (one line, no traceback)."""

from __future__ import annotations

import socket
from pathlib import Path

from typer.testing import CliRunner

from strom.cli.common import EXIT_ERROR, EXIT_USAGE
from strom.cli.main import app

runner = CliRunner()


def one_line_error(result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_help_shows_the_loopback_default() -> None:
    result = runner.invoke(app, ["console", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "127.0.0.1" in result.output and "9405" in result.output
    assert "--sample-interval" in result.output and "--command-config" in result.output


def test_a_taken_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["console", "--port", str(port)])
    one_line_error(result, EXIT_ERROR, f"cannot serve on 127.0.0.1:{port}", "in use")


def test_bad_options_are_usage_errors(tmp_path: Path) -> None:
    one_line_error(runner.invoke(app, ["console", "--port", "70000"]), EXIT_USAGE, "--port")
    one_line_error(runner.invoke(app, ["console", "--sample-interval", "0"]), EXIT_USAGE,
                   "--sample-interval")
    props = tmp_path / "client.properties"
    props.write_text("no.such.property=1\n")
    result = runner.invoke(app, ["console", "--port", "0", "--command-config", str(props)])
    one_line_error(result, EXIT_USAGE, "no.such.property")
