"""`strom schemas ...`: the subjects and schemas of a schema registry, over Confluent Schema
Registry's REST API (Strom's registry, `schema.registry.listeners`, or Confluent's own).

Each command is a few HTTP calls with the standard library's client, with HTTP basic
credentials (`--user`, or in the URL) and the CA certificates of an https registry (`--ca-file`)
when given. A registry error is one line with Confluent's error code and message (exit 1); a
registry that cannot be reached, or does not answer within `--timeout`, one line and exit 3, as
a broker that cannot be reached. `check` prints the registry's reasons when a schema is
incompatible and exits 1.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich.table import Table

from strom.cli.common import (
    EXIT_ERROR,
    EXIT_UNREACHABLE,
    CliError,
    UsageError,
    handle_errors,
    out,
    print_table,
)

app = typer.Typer(help="List, show, register and check schemas in a schema registry.",
                  no_args_is_help=True)

DEFAULT_REGISTRY_URL = "http://localhost:8081"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
SUBJECT_LEVEL_NOT_CONFIGURED = 40408  # Confluent's code: the subject has no level of its own

RegistryUrlOpt = Annotated[
    str,
    typer.Option("--registry-url", envvar="STROM_SCHEMA_REGISTRY_URL",
                 help="The schema registry, http(s)://HOST:PORT.", rich_help_panel="Connection"),
]
UserOpt = Annotated[
    str | None,
    typer.Option("--user", envvar="STROM_SCHEMA_REGISTRY_USER", show_default=False,
                 help="USER:PASSWORD for HTTP basic authentication (also in the URL, "
                      "http://USER:PASSWORD@HOST:PORT).", rich_help_panel="Connection"),
]
CaFileOpt = Annotated[
    Path | None,
    typer.Option("--ca-file", envvar="STROM_SCHEMA_REGISTRY_CA", dir_okay=False,
                 show_default=False, help="PEM CA certificates to trust for an https registry "
                                          "(default: the system's).",
                 rich_help_panel="Connection"),
]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="Seconds to wait for the registry's answer.",
                 rich_help_panel="Connection"),
]
FileOpt = Annotated[
    Path, typer.Option("--file", "-f", dir_okay=False, help="The schema's text (.avsc, .json, .proto).")
]
TypeOpt = Annotated[
    str | None,
    typer.Option("--type", "-t", help="AVRO, JSON or PROTOBUF (default: PROTOBUF for a .proto "
                                      "file, else AVRO).", show_default=False),
]
ReferenceOpt = Annotated[
    list[str] | None,
    typer.Option("--reference", "-r",
                 help="A reference the schema makes, NAME=SUBJECT:VERSION (VERSION a number or "
                      "latest; repeatable).", show_default=False),
]
NormalizeOpt = Annotated[
    bool, typer.Option("--normalize", help="Normalize the schema first (the registry's ?normalize=true).")
]


# ---------------------------------------------------------------------------------------------
# The HTTP client
# ---------------------------------------------------------------------------------------------


class RegistryError(CliError):
    """An error the registry answered, with Confluent's error code."""

    def __init__(self, code: object, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class RegistryClient:
    """Confluent's REST API at `url`; every failure ends as a CliError."""

    url: str  # without credentials: it is shown in messages
    timeout: float
    authorization: str | None = None  # the Authorization header's value
    tls: ssl.SSLContext | None = None

    @classmethod
    def at(cls, url: str, timeout: float, user: str | None = None,
           ca_file: Path | None = None) -> RegistryClient:
        url = url.strip().rstrip("/")
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            shown = url.split("@", 1)[-1] if "@" in url else url
            raise UsageError(f"invalid --registry-url {shown!r}: expected http://HOST:PORT")
        if parts.username is not None:  # credentials in the URL, as Confluent's clients take
            if user is None:
                user = urllib.parse.unquote(parts.username) + ":" + \
                    urllib.parse.unquote(parts.password or "")
            url = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
        authorization = None
        if user is not None:
            if ":" not in user:
                raise UsageError("--user takes USER:PASSWORD")
            authorization = "Basic " + base64.b64encode(user.encode()).decode("ascii")
        tls = None
        if ca_file is not None:
            try:
                tls = ssl.create_default_context(cafile=str(ca_file))
            except FileNotFoundError:
                raise CliError(f"No such file or directory: {ca_file}") from None
            except ssl.SSLError as e:
                raise CliError(f"cannot read the CA certificates in {ca_file}: "
                               f"{e.reason or e}") from None
        return cls(url, timeout, authorization, tls)

    def call(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        """The JSON answer of `method path?query` (the flags of `query` that are True as
        `name=true`, those that are False or None left out)."""
        params = {k: ("true" if v is True else str(v)) for k, v in query.items()
                  if v is not None and v is not False}
        url = self.url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        if self.authorization is not None:
            headers["Authorization"] = self.authorization
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout,
                                        context=self.tls) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            raise self._error(e.code, e.reason, e.read()) from None
        except TimeoutError:
            raise self._timed_out() from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise self._timed_out() from None
            reason = e.reason.strerror if isinstance(e.reason, OSError) and e.reason.strerror \
                and not isinstance(e.reason, ssl.SSLError) else e.reason
            raise CliError(f"cannot reach the schema registry at {self.url}: {reason}",
                           EXIT_UNREACHABLE) from None
        except (ConnectionError, OSError) as e:  # the connection dropped mid-answer
            raise CliError(f"cannot reach the schema registry at {self.url}: "
                           f"{e.strerror or e}", EXIT_UNREACHABLE) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise CliError(f"the schema registry at {self.url} answered {method} {path} with "
                           "something that is not JSON") from None

    def _timed_out(self) -> CliError:
        return CliError(f"timed out after {self.timeout:g}s waiting for the schema registry at "
                        f"{self.url}", EXIT_UNREACHABLE)

    def _error(self, status: int, reason: str, raw: bytes) -> CliError:
        """Confluent's error body as one line: its code and message."""
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "message" in doc:
            code = doc.get("error_code", status)
            message = " ".join(str(doc["message"]).split())
            return RegistryError(code, f"registry error {code}: {message}")
        return CliError(f"the schema registry at {self.url} answered HTTP {status} {reason}")


P = ParamSpec("P")
R = TypeVar("R")


def _answers(func: Callable[P, R]) -> Callable[P, R]:
    """An answer that is JSON but not shaped as Confluent's API says (another server on that
    port) ends as one line too, not a traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise CliError("the registry's answer is not Confluent Schema Registry's API "
                           f"({type(e).__name__}: {e})") from None

    return wrapper


def _subject_path(subject: str) -> str:
    return "/subjects/" + urllib.parse.quote(subject, safe="")


def _version_text(version: str) -> str:
    return urllib.parse.quote(version.strip(), safe="")


def _type_of(schema: dict[str, Any]) -> str:
    return str(schema.get("schemaType") or "AVRO")  # Confluent leaves out AVRO's type


def _reference_text(ref: dict[str, Any]) -> str:
    return f"{ref.get('name')}={ref.get('subject')}:{ref.get('version')}"


def _new_schema(registry: RegistryClient, file: Path, schema_type: str | None,
                references: list[str] | None) -> dict[str, Any]:
    """The body of a register, lookup or compatibility call."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CliError(f"{file} is not a UTF-8 text file") from None
    if schema_type is None:
        schema_type = "PROTOBUF" if file.suffix.lower() == ".proto" else "AVRO"
    schema_type = schema_type.upper()
    if schema_type not in SCHEMA_TYPES:
        raise UsageError(f"unknown schema type {schema_type!r} (choose from "
                         f"{', '.join(SCHEMA_TYPES)})")
    body: dict[str, Any] = {"schema": text}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    refs = [_parse_reference(registry, r) for r in references or []]
    if refs:
        body["references"] = refs
    return body


def _parse_reference(registry: RegistryClient, text: str) -> dict[str, Any]:
    name, eq, target = text.partition("=")
    subject, colon, version = target.rpartition(":")
    if not eq or not name.strip() or not colon or not subject:
        raise UsageError(f"invalid --reference {text!r}: expected NAME=SUBJECT:VERSION")
    version = version.strip()
    if version == "latest":
        found = registry.call("GET", f"{_subject_path(subject)}/versions/latest")
        return {"name": name.strip(), "subject": subject, "version": int(found["version"])}
    if not version.isdigit() or int(version) < 1:
        raise UsageError(f"invalid --reference {text!r}: the version is a number from 1, or "
                         "latest")
    return {"name": name.strip(), "subject": subject, "version": int(version)}


# ---------------------------------------------------------------------------------------------
# The commands
# ---------------------------------------------------------------------------------------------


@app.command("list")
@handle_errors
@_answers
def list_(
    deleted: Annotated[bool, typer.Option("--deleted", help="Also soft-deleted subjects and versions.")] = False,
    prefix: Annotated[str, typer.Option("--prefix", help="Only subjects whose name starts so.")] = "",
    registry_url: RegistryUrlOpt = DEFAULT_REGISTRY_URL,
    user: UserOpt = None,
    ca_file: CaFileOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """List the subjects: each one's latest version, its schema id and type."""
    registry = RegistryClient.at(registry_url, timeout, user, ca_file)
    latest = registry.call("GET", "/schemas", subjectPrefix=prefix or None, deleted=deleted,
                           latestOnly=True)
    live: set[tuple[str, int]] = set()
    if deleted:  # which of those are soft-deleted: the ones the live listing lacks
        live = {(s["subject"], s["version"]) for s in registry.call(
            "GET", "/schemas", subjectPrefix=prefix or None, latestOnly=True)}
    table = Table(box=None, pad_edge=False)
    for column in ("SUBJECT", "VERSION", "ID", "TYPE", *(("DELETED",) if deleted else ())):
        table.add_column(column)
    for s in sorted(latest, key=lambda s: s["subject"]):
        row = [s["subject"], str(s["version"]), str(s["id"]), _type_of(s)]
        if deleted:
            row.append("" if (s["subject"], s["version"]) in live else "yes")
        table.add_row(*row)
    print_table(table)


@app.command("show")
@handle_errors
@_answers
def show(
    subject: Annotated[str, typer.Argument(help="The subject.")],
    version: Annotated[str, typer.Option("--version", "-v", help="A version number, or latest.")] = "latest",
    registry_url: RegistryUrlOpt = DEFAULT_REGISTRY_URL,
    user: UserOpt = None,
    ca_file: CaFileOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Show a version of a subject: id, type, references and schema.

    The schema text is pretty-printed for Avro and JSON Schema."""
    registry = RegistryClient.at(registry_url, timeout, user, ca_file)
    found = registry.call("GET", f"{_subject_path(subject)}/versions/{_version_text(version)}")
    refs = found.get("references") or []
    for label, value in (("Subject", found.get("subject", subject)),
                         ("Version", found["version"]), ("Id", found["id"]),
                         ("Type", _type_of(found)),
                         ("References", ", ".join(map(_reference_text, refs)) or "none")):
        out.print(f"{label}: {value}", markup=False)
    text = str(found["schema"])
    if _type_of(found) in ("AVRO", "JSON"):
        with contextlib.suppress(ValueError):  # if not JSON: shown as the registry holds it
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    out.print(text.rstrip("\n"), markup=False)


@app.command("versions")
@handle_errors
@_answers
def versions(
    subject: Annotated[str, typer.Argument(help="The subject.")],
    deleted: Annotated[bool, typer.Option("--deleted", help="Also soft-deleted versions.")] = False,
    registry_url: RegistryUrlOpt = DEFAULT_REGISTRY_URL,
    user: UserOpt = None,
    ca_file: CaFileOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """List a subject's versions, one per line."""
    registry = RegistryClient.at(registry_url, timeout, user, ca_file)
    found = registry.call("GET", f"{_subject_path(subject)}/versions", deleted=deleted)
    for v in found if isinstance(found, list) else found["versions"]:  # (a KeyError if not)
        out.print(str(int(v)), markup=False)


@app.command("register")
@handle_errors
@_answers
def register(
    subject: Annotated[str, typer.Argument(help="The subject (for a topic's values: TOPIC-value).")],
    file: FileOpt,
    schema_type: TypeOpt = None,
    reference: ReferenceOpt = None,
    normalize: NormalizeOpt = False,
    registry_url: RegistryUrlOpt = DEFAULT_REGISTRY_URL,
    user: UserOpt = None,
    ca_file: CaFileOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Register a schema under a subject; prints its version and id.

    The schema must be compatible with the subject's earlier versions, as the subject's
    compatibility level says. A schema the subject already has keeps its version and id."""
    registry = RegistryClient.at(registry_url, timeout, user, ca_file)
    body = _new_schema(registry, file, schema_type, reference)
    path = _subject_path(subject)
    found = registry.call("POST", f"{path}/versions", body, normalize=normalize)
    if "version" not in found:  # Confluent's own registry answers with the id alone
        found = registry.call("POST", path, body, normalize=normalize)
    out.print(f"Registered {subject}: version {found['version']}, id {found['id']}",
              markup=False)


@app.command("check")
@handle_errors
@_answers
def check(
    subject: Annotated[str, typer.Argument(help="The subject.")],
    file: FileOpt,
    schema_type: TypeOpt = None,
    reference: ReferenceOpt = None,
    normalize: NormalizeOpt = False,
    version: Annotated[str, typer.Option(
        "--version", "-v", help="Check against this version only (default latest: the "
                                "versions the subject's level names).")] = "latest",
    registry_url: RegistryUrlOpt = DEFAULT_REGISTRY_URL,
    user: UserOpt = None,
    ca_file: CaFileOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Check a schema's compatibility with a subject (exit code 1 if incompatible).

    The registry's reasons are printed when it is incompatible."""
    registry = RegistryClient.at(registry_url, timeout, user, ca_file)
    body = _new_schema(registry, file, schema_type, reference)
    answer = registry.call(
        "POST", f"/compatibility{_subject_path(subject)}/versions/{_version_text(version)}",
        body, normalize=normalize, verbose=True)
    level = registry.call("GET", f"/config/{urllib.parse.quote(subject, safe='')}",
                          defaultToGlobal=True)["compatibilityLevel"]
    if answer["is_compatible"]:
        out.print(f"Compatible with {subject} ({level})", markup=False)
        return
    out.print(f"Incompatible with {subject} ({level}):", markup=False)
    for message in answer.get("messages") or []:
        out.print(f"  {message}", markup=False)
    raise typer.Exit(EXIT_ERROR)


@app.command("delete")
@handle_errors
@_answers
def delete(
    subject: Annotated[str, typer.Argument(help="The subject.")],
    version: Annotated[str | None, typer.Option(
        "--version", "-v", help="Delete this version only (a number, or latest).",
        show_default=False)] = None,
    permanent: Annotated[bool, typer.Option(
        "--permanent", help="Remove for good what an earlier delete soft-deleted.")] = False,
    registry_url: RegistryUrlOpt = DEFAULT_REGISTRY_URL,
    user: UserOpt = None,
    ca_file: CaFileOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Delete a subject, or one of its versions.

    A first delete is a soft one: the versions stay readable with --deleted and their ids
    still resolve. Deleting again with --permanent removes them for good."""
    registry = RegistryClient.at(registry_url, timeout, user, ca_file)
    path = _subject_path(subject)
    if version is not None:
        gone = [registry.call("DELETE", f"{path}/versions/{_version_text(version)}",
                              permanent=permanent)]
    else:
        gone = registry.call("DELETE", path, permanent=permanent)
    how = "Permanently deleted" if permanent else "Soft-deleted"
    listed = ", ".join(str(v) for v in gone)
    out.print(f"{how} {subject}: version{'s' if len(gone) != 1 else ''} {listed}", markup=False)


@app.command("config")
@handle_errors
@_answers
def config(
    subject: Annotated[str | None, typer.Argument(
        help="The subject (default: the registry's global level).", show_default=False)] = None,
    set_level: Annotated[str | None, typer.Option(
        "--set", help="Set the level: NONE, BACKWARD, FORWARD, FULL or a _TRANSITIVE form.",
        show_default=False)] = None,
    registry_url: RegistryUrlOpt = DEFAULT_REGISTRY_URL,
    user: UserOpt = None,
    ca_file: CaFileOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Show or set the compatibility level, of a subject or the global one."""
    registry = RegistryClient.at(registry_url, timeout, user, ca_file)
    path = "/config" + (f"/{urllib.parse.quote(subject, safe='')}" if subject is not None else "")
    whose = f"{subject}" if subject is not None else "global"
    if set_level is not None:
        answer = registry.call("PUT", path, {"compatibility": set_level.strip().upper()})
        out.print(f"Compatibility level ({whose}): {answer['compatibility']}", markup=False)
        return
    if subject is None:
        level = registry.call("GET", path)["compatibilityLevel"]
        out.print(f"Compatibility level (global): {level}", markup=False)
        return
    try:
        level = registry.call("GET", path)["compatibilityLevel"]
    except RegistryError as e:
        if e.code != SUBJECT_LEVEL_NOT_CONFIGURED:
            raise
        level = registry.call("GET", "/config")["compatibilityLevel"]
        out.print(f"Compatibility level ({whose}): {level}, the global level (the subject has "
                  "none of its own)", markup=False)
        return
    out.print(f"Compatibility level ({whose}): {level}", markup=False)
