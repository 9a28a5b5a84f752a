"""`strom configs` for client quotas without a broker: kafka-configs' entity syntax and its
one-line errors (the wire calls are tested against brokers in tests/integration)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from strom.cli.common import EXIT_USAGE, UsageError
from strom.cli.main import app
from strom.cli.quotas import (
    ANY,
    entity_label,
    entity_tokens,
    format_value,
    pair_entity,
    parse_quota_values,
)

runner = CliRunner()


def pair(*args: str, alter: bool = False):
    return pair_entity(entity_tokens(list(args)), alter=alter)


def test_tokens_keep_the_command_line_order() -> None:
    assert entity_tokens(["--entity-type", "users", "--add-config", "--entity-default",
                          "--entity-default", "--entity-type=clients", "--entity-name=a b",
                          "-b", "--entity-name", "--", "--entity-type", "x"]) == [
        ("type", "users"), ("default", None), ("type", "clients"), ("name", "a b")]


@pytest.mark.parametrize(("args", "expected"), [
    (["--entity-type", "users", "--entity-name", "alice"], [("user", "alice")]),
    (["--entity-type", "clients", "--entity-default"], [("client-id", None)]),
    (["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
      "--entity-default"], [("user", "alice"), ("client-id", None)]),
    # names pair with types by position, whatever the order of the types
    (["--entity-type", "clients", "--entity-type", "users", "--entity-default",
      "--entity-name", "bob"], [("client-id", None), ("user", "bob")]),
    (["--entity-type", "users"], [("user", ANY)]),
    (["--entity-type", "users", "--entity-name", "a", "--entity-type", "clients"],
     [("user", "a"), ("client-id", ANY)]),
])
def test_describe_entities(args, expected) -> None:
    assert pair(*args) == expected


@pytest.mark.parametrize(("args", "alter", "message"), [
    (["--entity-type", "users"], True,
     "An entity-name or default entity must be specified with --alter of users, clients, "
     "brokers or ips"),
    (["--entity-type", "users", "--entity-name", "a", "--entity-type", "clients"], True,
     "An entity name must be specified for every entity type"),
    (["--entity-type", "users", "--entity-default", "--entity-name", "x"], False,
     "More entity names specified than entity types"),
    (["--entity-type", "users", "--entity-type", "users"], False,
     "Duplicate entity type(s) specified: users"),
    (["--entity-type", "users", "--entity-type", "topics"], False,
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--entity-type", "ips"], False, "Strom does not enforce connection_creation_rate"),
    (["--entity-type", "topics"], False, "use users or clients"),
])
def test_bad_entities(args, alter, message) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        pair(*args, alter=alter)


def test_labels_and_values() -> None:
    assert entity_label([("client-id", "app"), ("user", "alice")]) == (
        "user-principal 'alice', client-id 'app'")
    assert entity_label([("user", None)]) == "the default user-principal"
    assert entity_label([("user", "bob"), ("client-id", None)]) == (
        "user-principal 'bob', default client-id")
    assert entity_label([("client-id", ANY)]) == "every client-id"
    assert format_value("producer_byte_rate", 1048576.0) == "1048576"
    assert format_value("request_percentage", 12.5) == "12.5"
    assert parse_quota_values("users", {"producer_byte_rate": "1e3"}) == {
        "producer_byte_rate": 1000.0}
    with pytest.raises(UsageError, match="Cannot parse quota configuration value for "
                                         "producer_byte_rate: fast"):
        parse_quota_values("users", {"producer_byte_rate": "fast"})
    with pytest.raises(UsageError, match=re.escape(
            "Only quota configs can be added for 'clients' using --bootstrap-server. "
            "Unexpected config names: a, b")):
        parse_quota_values("clients", {"b": "1", "a": "1", "consumer_byte_rate": "1"})


@pytest.mark.parametrize(("argv", "fragment"), [
    (["configs", "alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
     "An entity-name or default entity must be specified"),
    (["configs", "alter", "--entity-type", "users", "--entity-name", "a", "--add-config",
      "producer_byte_rate=1", "--delete-config", "producer_byte_rate"],
     "Invalid config(s): producer_byte_rate"),
    (["configs", "alter", "--entity-type", "users", "--entity-name", "a", "--add-config",
      "bogus=1"], "Unexpected config names: bogus"),
    (["configs", "alter", "--entity-type", "users", "--entity-name", "a"], "nothing to alter"),
    (["configs", "describe", "--entity-type", "users", "--topic", "t"],
     "give either --entity-type or one of --topic"),
    (["configs", "describe", "--entity-name", "a", "--topic", "t"],
     "need an --entity-type before them"),
    (["configs", "describe", "--entity-type", "users", "--all"], "--all applies to topic"),
])
def test_cli_usage_errors_are_one_line(argv, fragment) -> None:
    result = runner.invoke(app, [*argv, "-b", "127.0.0.1:1"])
    assert result.exit_code == EXIT_USAGE, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], lines
