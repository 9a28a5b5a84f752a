"""`strom schemas` run as a user runs it (a subprocess) against a broker serving the schema
registry: register, list, show, check, delete, config, and its one-line errors. The registry
asks for HTTP basic authentication (the broker's SASL/PLAIN users): every call gives the
credentials through `$STROM_SCHEMA_REGISTRY_USER` unless it says otherwise.

Each `strom` start costs most of a second, so the calls that do not depend on each other run
together (`run_all`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..broker import HOST, STROM_BIN, free_port
from .test_registry_api import BREAKING, V1, V2, registry_url

pytestmark = pytest.mark.timeout(120)

Call = tuple[str, ...]

ADDRESS = json.dumps({"type": "object", "properties": {"street": {"type": "string"}}})
PERSON = json.dumps({"type": "object", "properties": {
    "name": {"type": "string"}, "address": {"$ref": "address.json"}}})
ORDER = 'syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; int64 cents = 2; }\n'
USER = "ops:ops-pw"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_ops="ops-pw";')


def get(url: str) -> tuple[int, object]:
    """GET as USER: the status and the JSON body."""
    token = base64.b64encode(USER.encode()).decode()
    req = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="module")
def url(make_module_broker) -> str:
    broker = make_module_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_PLAINTEXT://{HOST}:{free_port()}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "schema.registry.listeners": "http://127.0.0.1:0",
        "schema.registry.authentication.method": "BASIC",
        "metrics.listener": ""})
    found = registry_url(broker)
    deadline = time.monotonic() + 30
    while get(f"{found}/subjects")[0] != 200:  # it answers once it has loaded _schemas
        assert time.monotonic() < deadline, get(f"{found}/subjects")
        time.sleep(0.05)  # poll interval, not synchronisation
    return found


@pytest.fixture
def files(tmp_path: Path) -> Path:
    for name, text in (("v1.avsc", V1), ("v2.avsc", V2), ("breaking.avsc", BREAKING),
                       ("address.json", ADDRESS), ("person.json", PERSON),
                       ("order.proto", ORDER)):
        (tmp_path / name).write_text(text)
    return tmp_path


def run(url: str, cwd: Path, args: Call) -> subprocess.CompletedProcess[str]:
    argv = [str(STROM_BIN), "schemas", *args]
    if "--registry-url" not in args:
        argv += ["--registry-url", url]
    env = {**os.environ, "STROM_SCHEMA_REGISTRY_USER": USER}
    if "--no-user" in args:  # a call without credentials
        argv.remove("--no-user")
        del env["STROM_SCHEMA_REGISTRY_USER"]
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def run_all(url: str, cwd: Path, *calls: Call) -> list[subprocess.CompletedProcess[str]]:
    """The calls at once (they must not depend on each other), their results in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda args: run(url, cwd, args), calls))


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (proc.args, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def failed(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """The one `Error: ` line of a call that exited with `code`."""
    assert proc.returncode == code, (proc.args, proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    return lines[0]


def table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines()]


def registered(proc: subprocess.CompletedProcess[str], subject: str, version: int) -> int:
    """The id `register` printed, checking the subject and version it names."""
    found = re.fullmatch(rf"Registered {re.escape(subject)}: version {version}, id (\d+)\n",
                         ok(proc))
    assert found is not None, proc.stdout
    return int(found.group(1))


def test_register_list_show_and_check(url: str, files: Path) -> None:
    first = run_all(url, files, ("register", "clicks-value", "--file", "v1.avsc"),
                    ("register", "address-value", "--file", "address.json", "--type", "json"),
                    ("register", "orders-value", "--file", "order.proto"))  # PROTOBUF: .proto
    ids = {subject: registered(p, subject, 1)
           for p, subject in zip(first, ("clicks-value", "address-value", "orders-value"),
                                 strict=True)}
    second = run_all(url, files, ("register", "clicks-value", "-f", "v2.avsc"),
                     ("register", "person-value", "-f", "person.json", "-t", "JSON",
                      "--reference", "address.json=address-value:latest"))
    v2_id = registered(second[0], "clicks-value", 2)
    ids["person-value"] = registered(second[1], "person-value", 1)
    assert len({*ids.values(), v2_id}) == 5
    listed, show, person, compatible, incompatible, refused = run_all(
        url, files, ("list",), ("show", "clicks-value"), ("show", "person-value", "--version", "1"),
        ("check", "clicks-value", "--file", "v2.avsc"),
        ("check", "clicks-value", "--file", "breaking.avsc"),
        ("register", "clicks-value", "--file", "breaking.avsc"))
    assert table(ok(listed)) == [["SUBJECT", "VERSION", "ID", "TYPE"],
                                 ["address-value", "1", str(ids["address-value"]), "JSON"],
                                 ["clicks-value", "2", str(v2_id), "AVRO"],
                                 ["orders-value", "1", str(ids["orders-value"]), "PROTOBUF"],
                                 ["person-value", "1", str(ids["person-value"]), "JSON"]]
    head, schema = ok(show).split("{", 1)
    assert head.splitlines() == ["Subject: clicks-value", "Version: 2", f"Id: {v2_id}",
                                 "Type: AVRO", "References: none"]
    assert json.loads("{" + schema) == json.loads(V2)
    assert '\n  "fields": [\n' in schema  # pretty-printed
    assert ok(person).splitlines()[:5] == [
        "Subject: person-value", "Version: 1", f"Id: {ids['person-value']}", "Type: JSON",
        "References: address.json=address-value:1"]
    assert ok(compatible) == "Compatible with clicks-value (BACKWARD)\n"
    assert incompatible.returncode == 1, incompatible
    reasons = incompatible.stdout.splitlines()
    assert reasons[0] == "Incompatible with clicks-value (BACKWARD):"
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in reasons[1]
    assert "  {oldSchemaVersion: 2}" in reasons
    assert failed(refused, 1).startswith(
        'Error: registry error 409: Schema being registered is incompatible with an earlier '
        'schema for subject "clicks-value", details: [{errorType:'
        "'READER_FIELD_MISSING_DEFAULT_VALUE'")


def test_config_and_deletes(url: str, files: Path) -> None:
    gone, inherited = run_all(url, files, ("register", "gone-value", "-f", "v1.avsc"),
                              ("config", "gone-value"))
    gone_id = registered(gone, "gone-value", 1)
    assert ok(inherited) == ("Compatibility level (gone-value): BACKWARD, the global level (the "
                             "subject has none of its own)\n")
    set_full, too_early = run_all(url, files, ("config", "gone-value", "--set", "full"),
                                  ("delete", "gone-value", "--version", "1", "--permanent"))
    assert ok(set_full) == "Compatibility level (gone-value): FULL\n"
    assert get(f"{url}/config/gone-value") == (200, {"compatibilityLevel": "FULL"})
    assert failed(too_early, 1) == ("Error: registry error 40407: Subject 'gone-value' Version 1 "
                                    "was not deleted first before being permanently deleted")
    assert ok(run(url, files, ("delete", "gone-value", "--version", "1"))) == \
        "Soft-deleted gone-value: version 1\n"
    listed, sideways = run_all(url, files, ("list", "--deleted", "--prefix", "gone"),
                               ("config", "--set", "sideways"))
    assert table(ok(listed)) == [["SUBJECT", "VERSION", "ID", "TYPE", "DELETED"],
                                 ["gone-value", "1", str(gone_id), "AVRO", "yes"]]
    assert get(f"{url}/subjects?subjectPrefix=gone") == (200, [])
    assert failed(sideways, 1).startswith("Error: registry error 42203: Invalid compatibility "
                                          "level.")
    assert ok(run(url, files, ("delete", "gone-value", "--permanent"))) == \
        "Permanently deleted gone-value: version 1\n"
    assert get(f"{url}/subjects?subjectPrefix=gone&deleted=true") == (200, [])


def test_errors_are_one_line(url: str, files: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{closed.getsockname()[1]}"
    in_url = url.replace("://", f"://{USER}@")
    unknown, bad_type, unreachable, bad_url, anonymous, from_url = run_all(
        url, files, ("show", "no-such-subject", "--version", "1"),
        ("register", "s", "--file", "v1.avsc", "--type", "xml"),
        ("list", "--registry-url", nowhere), ("list", "--registry-url", "localhost:8081"),
        ("list", "--user", "ops:wrong"),
        ("list", "--prefix", "no-such", "--registry-url", in_url, "--no-user"))
    assert failed(unknown, 1) == "Error: registry error 40401: Subject 'no-such-subject' not found."
    assert failed(bad_type, 2) == ("Error: unknown schema type 'XML' (choose from AVRO, JSON, "
                                  "PROTOBUF)")
    assert failed(unreachable, 3) == (f"Error: cannot reach the schema registry at {nowhere}: "
                                      "Connection refused")
    assert failed(bad_url, 2) == ("Error: invalid --registry-url 'localhost:8081': expected "
                                  "http://HOST:PORT")
    assert failed(anonymous, 1) == "Error: registry error 401: Unauthorized"
    assert table(ok(from_url)) == [["SUBJECT", "VERSION", "ID", "TYPE"]]  # credentials in the URL
