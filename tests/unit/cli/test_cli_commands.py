"""Command wiring and user errors: one line on stderr, the documented exit code, no traceback.

No broker is involved: "unreachable" uses a 127.0.0.1 port nothing listens on.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strom.cli.common import EXIT_UNREACHABLE, EXIT_USAGE
from strom.cli.main import app

runner = CliRunner()
STROM = Path(sys.executable).with_name("strom")


@pytest.fixture
def dead_bootstrap() -> str:
    """host:port of a closed 127.0.0.1 port (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


def assert_one_line_error(result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    assert "Traceback" not in result.output


@pytest.mark.parametrize("argv", [
    ["topics", "list"],
    ["topics", "create", "t", "--partitions", "1"],
    ["topics", "describe", "t"],
    ["topics", "alter", "t", "--partitions", "3"],
    ["topics", "delete", "t"],
    ["configs", "describe", "--topic", "t"],
    ["configs", "alter", "--topic", "t", "--add-config", "retention.ms=1"],
    ["consume", "t", "--max-messages", "1"],
])
def test_unreachable_broker(argv, dead_bootstrap):
    res = runner.invoke(app, [*argv, "--bootstrap-server", dead_bootstrap, "--timeout", "10"])
    assert_one_line_error(res, EXIT_UNREACHABLE, f"cannot reach broker at {dead_bootstrap}",
                          "Connection refused")


def test_unreachable_broker_produce(dead_bootstrap):
    res = runner.invoke(app, ["produce", "t", "-b", dead_bootstrap], input="a\n")
    assert_one_line_error(res, EXIT_UNREACHABLE, f"cannot reach broker at {dead_bootstrap}")


def test_bootstrap_from_environment(dead_bootstrap):
    res = runner.invoke(app, ["topics", "list"], env={"STROM_BOOTSTRAP_SERVER": dead_bootstrap})
    assert_one_line_error(res, EXIT_UNREACHABLE, dead_bootstrap)


@pytest.mark.parametrize("argv,fragment", [
    (["consume", "t", "--offset", "5"], "--offset needs --partition"),
    (["consume", "t", "--group", "g", "--partition", "0"], "--group and --partition"),
    (["consume", "t", "--partition", "0", "--offset", "3", "--from-beginning"], "--from-beginning"),
    (["consume", "t", "--partition", "0", "--offset", "soon"], "invalid --offset 'soon'"),
    (["consume", "t", "--format", "xml"], "invalid --format 'xml'"),
    (["consume", "t", "--isolation-level", "dirty"], "invalid --isolation-level"),
    (["produce", "t", "--acks", "2"], "invalid --acks '2'"),
    (["produce", "t", "--compression", "brotli"], "invalid --compression 'brotli'"),
    (["produce", "t", "--header", "nokv"], "invalid header 'nokv'"),
    (["produce", "t", "--property", "parse.key=maybe"], "invalid boolean for parse.key"),
    (["topics", "create", "t", "--config", "retention.ms"], "invalid topic config 'retention.ms'"),
    (["topics", "alter", "t"], "nothing to alter"),
    (["topics", "alter", "t", "--config", "a=1", "--delete-config", "a"], "both set and deleted"),
    (["topics", "describe", "--under-replicated-partitions", "--unavailable-partitions"], "at most one"),
    (["configs", "describe"], "exactly one of --topic, --group, --broker"),
    (["configs", "describe", "--topic", "t", "--broker", "1"], "exactly one of"),
    (["configs", "alter", "--topic", "t"], "nothing to alter"),
    (["configs", "alter", "--topic", "t", "--add-config", "a=[1,2"], "unclosed '['"),
])
def test_usage_errors_before_connecting(argv, fragment, dead_bootstrap):
    res = runner.invoke(app, [*argv, "-b", dead_bootstrap])
    assert_one_line_error(res, EXIT_USAGE, fragment)


def test_command_config_missing_file(tmp_path, dead_bootstrap):
    missing = tmp_path / "client.properties"
    res = runner.invoke(app, ["topics", "list", "-b", dead_bootstrap, "--command-config", str(missing)])
    assert_one_line_error(res, 1, str(missing))


def test_command_config_unknown_property(tmp_path, dead_bootstrap):
    props = tmp_path / "client.properties"
    props.write_text("# client settings\nno.such.property=1\n")
    res = runner.invoke(app, ["topics", "list", "-b", dead_bootstrap, "--command-config", str(props)])
    assert_one_line_error(res, EXIT_USAGE, "invalid client configuration", "no.such.property")


def test_command_config_is_applied(tmp_path, dead_bootstrap):
    # A valid file is read and passed on: the command gets as far as the connection.
    props = tmp_path / "client.properties"
    props.write_text("client.id=strom-cli-test\nsocket.connection.setup.timeout.ms : 5000\n")
    res = runner.invoke(app, ["topics", "list", "-b", dead_bootstrap, "--command-config", str(props)])
    assert_one_line_error(res, EXIT_UNREACHABLE, "cannot reach broker")


@pytest.mark.parametrize("argv,fragment", [
    (["topics", "create", "t", "--partitions", "zero"], "Invalid value for '--partitions'"),
    (["topics", "create", "t", "--partitions", "0"], "Invalid value for '--partitions'"),
    (["consume"], "Missing argument"),
    (["topics", "nosuch"], "No such command 'nosuch'"),
    (["produce", "t", "--no-such-option"], "No such option"),
])
def test_click_usage_errors_are_one_line(argv, fragment):
    res = runner.invoke(app, argv)
    assert_one_line_error(res, EXIT_USAGE, fragment, "--help')")


# --------------------------------------------------------------------------- broker


@pytest.fixture
def fake_broker_app(monkeypatch):
    """Stand-in for strom.broker.app (the command imports it lazily)."""
    calls = []
    module = types.ModuleType("strom.broker.app")

    def run_broker(config_path, overrides):
        calls.append((config_path, overrides))
        return 7

    module.run_broker = run_broker
    monkeypatch.setitem(sys.modules, "strom.broker.app", module)
    return calls


def test_broker_passes_config_and_overrides(tmp_path, fake_broker_app):
    props = tmp_path / "server.properties"
    props.write_text("broker.id=1\n")
    res = runner.invoke(app, ["broker", "--config", str(props), "--override", "broker.id=2",
                              "--override", "log.dirs=/x=y"])
    assert res.exit_code == 7, res.output
    assert fake_broker_app == [(props, {"broker.id": "2", "log.dirs": "/x=y"})]


def test_broker_positional_config_like_kafka_server_start(tmp_path, fake_broker_app):
    props = tmp_path / "server.properties"
    props.write_text("")
    res = runner.invoke(app, ["broker", str(props)])
    assert res.exit_code == 7
    assert fake_broker_app == [(props, {})]


def test_broker_without_config(fake_broker_app):
    res = runner.invoke(app, ["broker"])
    assert res.exit_code == 7
    assert fake_broker_app == [(None, {})]


def test_broker_errors(tmp_path, fake_broker_app):
    res = runner.invoke(app, ["broker", "--config", str(tmp_path / "nope.properties")])
    assert_one_line_error(res, EXIT_USAGE, "broker config file not found")
    res = runner.invoke(app, ["broker", "--override", "novalue"])
    assert_one_line_error(res, EXIT_USAGE, "invalid override 'novalue'")
    assert fake_broker_app == []


# --------------------------------------------------------------------------- the installed script


def test_console_script_unreachable_is_one_line(dead_bootstrap):
    env = dict(os.environ, STROM_BOOTSTRAP_SERVER=dead_bootstrap)
    proc = subprocess.run([str(STROM), "topics", "list"], capture_output=True, env=env, timeout=60)
    assert proc.returncode == EXIT_UNREACHABLE
    assert proc.stdout == b""
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: cannot reach broker at {dead_bootstrap}")


def test_console_script_help():
    proc = subprocess.run([str(STROM), "--help"], capture_output=True, timeout=60)
    assert proc.returncode == 0
    for command in (b"topics", b"configs", b"produce", b"consume", b"dump-log", b"broker"):
        assert command in proc.stdout
