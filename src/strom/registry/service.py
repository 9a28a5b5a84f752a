"""The registry's operations, as Confluent Schema Registry's REST API defines them.

`Registry` answers reads from its `RegistryState` and makes every change by writing records
through its `Journal`: one writer at a time (ids are allocated here, so a cluster has one
registry writer, the leader of `_schemas`), answered once the records are committed (on the
in-sync replicas) and applied. Schemas are parsed and checked by their format
(`strom.registry.formats`); compatibility follows the subject's level
(`strom.registry.compatibility`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from strom.registry import errors as err
from strom.registry.compatibility import LEVELS, check_compatibility
from strom.registry.formats import FORMATS
from strom.registry.formats.base import InvalidSchemaError, ParsedSchema
from strom.registry.state import (
    GLOBAL,
    Json,
    Reference,
    RegistryState,
    SchemaVersion,
    config_key,
    mode_key,
    schema_key,
    schema_value,
)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
MAX_VERSION = 2**31 - 1
# Confluent's default limit on a schema's text is far above what a record carries; Strom keeps
# one so a hostile body cannot fill the broker's memory through the registry.
DEFAULT_MAX_SCHEMA_BYTES = 1024 * 1024


class Journal(Protocol):
    """Where the registry's records go (the `_schemas` topic)."""

    async def write(self, records: Sequence[tuple[Json, Json | None]]) -> None:
        """Append the records in order, wait until they are committed, and apply them to the
        state; raises RegistryError (store error, timeout, not the writer)."""


@dataclass(frozen=True)
class NewSchema:
    """A register or lookup request's body."""

    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = ()
    metadata: Json | None = None
    rule_set: Json | None = None

    @classmethod
    def from_json(cls, body: object) -> NewSchema:
        if not isinstance(body, dict):
            raise err.bad_request("the request body must be a JSON object")
        schema = body.get("schema")
        if not isinstance(schema, str):
            raise err.invalid_schema("the body has no schema string")
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str) or schema_type.upper() not in FORMATS:
            raise err.RegistryError(422, 42201, f"Invalid schema type {schema_type!r}")
        refs = []
        for r in body.get("references") or []:
            try:
                refs.append(Reference(str(r["name"]), str(r["subject"]), int(r["version"])))
            except (KeyError, TypeError, ValueError):
                raise err.invalid_schema(f"invalid reference {r!r}") from None
        metadata = body.get("metadata")
        rule_set = body.get("ruleSet")
        return cls(schema, schema_type.upper(), tuple(refs),
                   metadata if isinstance(metadata, dict) else None,
                   rule_set if isinstance(rule_set, dict) else None)


def parse_version(raw: str | int) -> int:
    """A version path segment: a number in [1, 2^31-1], "latest" or -1 (both: the newest)."""
    text = str(raw)
    if text == "latest":
        return -1
    try:
        n = int(text)
    except ValueError:
        raise err.invalid_version(raw) from None
    if n == -1 or 1 <= n <= MAX_VERSION:
        return n
    raise err.invalid_version(raw)


def check_subject(subject: str) -> str:
    if not subject or any(ord(c) < 0x20 for c in subject):
        raise err.invalid_subject(subject)
    return subject


class Registry:
    """Confluent's registry operations over a state and a journal."""

    def __init__(self, state: RegistryState, journal: Journal, *,
                 max_schema_bytes: int = DEFAULT_MAX_SCHEMA_BYTES) -> None:
        self.state = state
        self.journal = journal
        self.max_schema_bytes = max_schema_bytes
        self._writing = asyncio.Lock()

    # -- parsing ---------------------------------------------------------------------------

    def _reference_texts(self, refs: Sequence[Reference], seen: set[tuple[str, int]] | None = None
                         ) -> dict[str, str]:
        """Every schema `refs` reach, by reference name (a reference's own references too)."""
        seen = set() if seen is None else seen
        out: dict[str, str] = {}
        for ref in refs:
            if (ref.subject, ref.version) in seen:
                continue
            seen.add((ref.subject, ref.version))
            target = self.state.subjects.get(ref.subject, {}).get(ref.version)
            if target is None:
                raise err.invalid_schema(f"reference {ref.name!r} to subject {ref.subject!r} "
                                         f"version {ref.version} does not exist")
            out.update(self._reference_texts(target.references, seen))
            out[ref.name] = target.schema
        return out

    def parse(self, schema_type: str, text: str, refs: Sequence[Reference]) -> ParsedSchema:
        if len(text.encode()) > self.max_schema_bytes:
            raise err.schema_too_large(self.max_schema_bytes)
        fmt = FORMATS.get(schema_type)
        if fmt is None:
            raise err.RegistryError(422, 42201, f"Invalid schema type {schema_type!r}")
        try:
            return fmt.parse(text, self._reference_texts(refs))
        except InvalidSchemaError as exc:  # its message is Confluent's whole sentence
            raise err.RegistryError(422, 42201, str(exc)) from None

    def _parsed(self, v: SchemaVersion) -> ParsedSchema:
        return self.parse(v.schema_type, v.schema, v.references)

    # -- reads -----------------------------------------------------------------------------

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(s for s in self.state.subjects
                      if s.startswith(prefix) and self.state.subject_exists(s, deleted=deleted))

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        found = self.state.live_versions(subject, deleted=deleted)
        if not found:
            raise err.subject_not_found(subject)
        return [v.version for v in found]

    def version(self, subject: str, version: int, *, deleted: bool = False) -> SchemaVersion:
        if not self.state.subject_exists(subject, deleted=True):
            raise err.subject_not_found(subject)
        live = self.state.live_versions(subject, deleted=deleted)
        if version == -1:
            if not live:
                raise err.subject_not_found(subject)
            return live[-1]
        found = next((v for v in live if v.version == version), None)
        if found is None:
            raise err.version_not_found(version)
        return found

    def schema_by_id(self, sid: int, subject: str | None = None, fmt: str | None = None) -> Json:
        """GET /schemas/ids/{id}; `fmt` "serialized" gives a Protobuf schema as the base64 of
        its compiled file, which confluent-kafka's Protobuf deserializer asks for."""
        content = self.state.ids.get(sid)
        if content is None or not self.state.usages(sid, deleted=True):
            raise err.schema_not_found(f"Schema {sid} not found")
        if subject is not None and not any(v.subject == subject
                                           for v in self.state.usages(sid, deleted=True)):
            raise err.schema_not_found(f"Schema {sid} not found")
        return self.in_format(content.to_json(), content.schema_type, content.schema,
                              content.references, fmt)

    def version_json(self, v: SchemaVersion, fmt: str | None = None) -> Json:
        """GET /subjects/{s}/versions/{v}, with `fmt` as for `schema_by_id`."""
        return self.in_format(v.to_json(), v.schema_type, v.schema, v.references, fmt)

    def in_format(self, out: Json, schema_type: str, schema: str,
                  references: Sequence[Reference], fmt: str | None) -> Json:
        """`out` with its schema in format `fmt`: "serialized" gives a Protobuf schema as the
        base64 of its compiled file (confluent-kafka's Protobuf clients ask for it)."""
        if fmt == "serialized" and schema_type == "PROTOBUF":
            parsed = self.parse(schema_type, schema, references)
            serialized = getattr(parsed, "serialized", None)
            if serialized is not None:
                out["schema"] = serialized()
        return out

    def schema_by_guid(self, guid: str) -> Json:
        sid = self.state.guids.get(guid)
        if sid is None:
            raise err.schema_not_found(f"Schema {guid} not found")
        return self.schema_by_id(sid)

    def id_versions(self, sid: int, *, deleted: bool = False) -> list[Json]:
        if sid not in self.state.ids:
            raise err.schema_not_found(f"Schema {sid} not found")
        return [{"subject": v.subject, "version": v.version}
                for v in self.state.usages(sid, deleted=deleted)]

    def id_subjects(self, sid: int, *, deleted: bool = False) -> list[str]:
        if sid not in self.state.ids:
            raise err.schema_not_found(f"Schema {sid} not found")
        return sorted({v.subject for v in self.state.usages(sid, deleted=deleted)})

    def schemas(self, *, prefix: str = "", deleted: bool = False,
                latest_only: bool = False) -> list[Json]:
        out = []
        for subject in self.subjects(deleted=deleted, prefix=prefix):
            live = self.state.live_versions(subject, deleted=deleted)
            out += [v.to_json() for v in (live[-1:] if latest_only else live)]
        return out

    def referenced_by(self, subject: str, version: int) -> list[int]:
        v = self.version(subject, version, deleted=True)
        return self.state.referenced_by(subject, v.version)

    def lookup(self, subject: str, new: NewSchema, *, normalize: bool = False,
               deleted: bool = False) -> SchemaVersion:
        """POST /subjects/{subject}: the version of this subject holding this schema."""
        if not self.state.subject_exists(subject, deleted=deleted):
            raise err.subject_not_found(subject)
        parsed = self.parse(new.schema_type, new.schema, new.references)
        normalize = normalize or self._normalizes(subject)
        wanted = self._identity(parsed, new.schema_type, new.references, normalize)
        for v in reversed(self.state.live_versions(subject, deleted=deleted)):
            if self._identity(self._parsed(v), v.schema_type, v.references, normalize) == wanted:
                return v
        raise err.schema_not_found("Schema not found")

    @staticmethod
    def _identity(parsed: ParsedSchema, schema_type: str, refs: Sequence[Reference],
                  normalize: bool) -> tuple[str, str, tuple[Reference, ...]]:
        text = parsed.normalized() if normalize else parsed.canonical()
        return schema_type, text, tuple(refs)

    def _normalizes(self, subject: str | None) -> bool:
        for scope in ((subject, GLOBAL) if subject is not None else (GLOBAL,)):
            config = self.state.configs.get(scope) or {}
            if "normalize" in config:
                return bool(config["normalize"])
        return False

    def config(self, subject: str | None, *, default_to_global: bool = False) -> Json:
        if subject is None or default_to_global:
            return {"compatibilityLevel": self.state.compatibility(subject)}
        own = self.state.configs.get(subject)
        if not own or not own.get("compatibilityLevel"):
            raise err.subject_compatibility_not_configured(subject)
        return {"compatibilityLevel": own["compatibilityLevel"]}

    def mode(self, subject: str | None, *, default_to_global: bool = False) -> Json:
        if subject is None or default_to_global:
            return {"mode": self.state.mode(subject)}
        own = self.state.modes.get(subject)
        if own is None:
            raise err.subject_mode_not_configured(subject)
        return {"mode": own}

    # -- compatibility ---------------------------------------------------------------------

    def _incompatibilities(self, subject: str, parsed: ParsedSchema, level: str,
                           against: list[SchemaVersion]) -> list[str]:
        previous = [(v.version, self._parsed(v)) for v in against]
        return check_compatibility(level, parsed, previous)

    def test_compatibility(self, subject: str, version: int, new: NewSchema, *,
                           normalize: bool = False) -> list[str]:
        """POST /compatibility/subjects/{s}/versions/{v}: the reasons it is not (empty: it is);
        version -1 checks against what the subject's level names (all versions when
        transitive), a number against that version."""
        parsed = self.parse(new.schema_type, new.schema, new.references)
        level = self.state.compatibility(subject)
        live = self.state.live_versions(subject)
        if not live:
            if self.state.subject_exists(subject, deleted=True) or version == -1:
                return []
            raise err.subject_not_found(subject)
        if version == -1:
            return self._incompatibilities(subject, parsed, level, live)
        target = self.version(subject, version)
        return self._incompatibilities(subject, parsed, level.replace("_TRANSITIVE", ""),
                                       [target])

    # -- writes ----------------------------------------------------------------------------

    def _writable(self, subject: str | None) -> None:
        mode = self.state.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise err.operation_not_permitted(f"Subject {subject} is in read-only mode")

    async def register(self, subject: str, new: NewSchema, *, normalize: bool = False,
                       wanted_id: int | None = None, wanted_version: int | None = None
                       ) -> SchemaVersion:
        """POST /subjects/{subject}/versions: the version holding this schema, registered
        when the subject does not have it yet (and the subject's level allows it)."""
        check_subject(subject)
        async with self._writing:
            self._writable(subject)
            mode = self.state.mode(subject)
            if (wanted_id is not None or wanted_version is not None) and mode != "IMPORT":
                raise err.operation_not_permitted(
                    f"Subject {subject} is not in import mode: ids and versions cannot be set")
            parsed = self.parse(new.schema_type, new.schema, new.references)
            normalize = normalize or self._normalizes(subject)
            text = parsed.normalized() if normalize else parsed.canonical()
            identity = (new.schema_type, text, new.references)
            live = self.state.live_versions(subject)
            for v in reversed(live):
                if self._identity(self._parsed(v), v.schema_type, v.references,
                                  normalize) == identity and wanted_id in (None, v.id):
                    return v
            if mode != "IMPORT":
                level = self.state.compatibility(subject)
                problems = self._incompatibilities(subject, parsed, level, live)
                if problems:
                    raise err.incompatible(
                        f"Schema being registered is incompatible with an earlier schema for "
                        f"subject \"{subject}\", details: [{', '.join(problems)}]")
            sid, guid = self._id_for(identity, wanted_id)
            everything = self.state.subjects.get(subject, {})
            version = wanted_version if wanted_version is not None else \
                (max(everything) + 1 if everything else 1)
            if version in everything and wanted_version is not None:
                raise err.id_does_not_match(f"Version {version} of subject {subject} exists")
            entry = SchemaVersion(subject, version, sid, guid, new.schema_type, text,
                                  new.references, False, new.metadata, new.rule_set)
            await self.journal.write([(schema_key(subject, version), schema_value(entry))])
            return self.state.subjects[subject][version]

    def _id_for(self, identity: tuple[str, str, tuple[Reference, ...]],
                wanted: int | None) -> tuple[int, str]:
        """The id of this content: the one it already has (under any subject), else a new one
        (in IMPORT mode, the one asked for, if free)."""
        for content in self.state.ids.values():
            if (content.schema_type, content.schema, content.references) == identity:
                if wanted is not None and wanted != content.id:
                    raise err.id_does_not_match(
                        f"Schema already registered with id {content.id} instead of input id "
                        f"{wanted}")
                return content.id, content.guid
        if wanted is not None:
            if wanted in self.state.ids:
                raise err.id_does_not_match(f"Overwrite new schema with id {wanted} is not "
                                            "permitted: the id holds another schema")
            return wanted, str(uuid.uuid4())
        return self.state.max_id + 1, str(uuid.uuid4())

    async def delete_version(self, subject: str, version: int, *,
                             permanent: bool = False) -> int:
        async with self._writing:
            self._writable(subject)
            v = self.version(subject, version, deleted=permanent)
            if version == -1 and permanent:
                raise err.invalid_version("latest")  # Confluent: a permanent delete names it
            users = self.state.referenced_by(subject, v.version)
            if users:
                raise err.reference_exists(
                    f"One or more references exist to the schema {{subject={subject},"
                    f"version={v.version}}} (ids {users})")
            if permanent:
                if not v.deleted:
                    raise err.version_not_soft_deleted(subject, v.version)
                await self.journal.write([(schema_key(subject, v.version), None)])
            else:
                if v.deleted:
                    raise err.version_soft_deleted(subject, v.version)
                gone = SchemaVersion(**{**v.__dict__, "deleted": True})
                await self.journal.write([(schema_key(subject, v.version), schema_value(gone))])
            return v.version

    async def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        async with self._writing:
            self._writable(subject)
            every = self.state.live_versions(subject, deleted=True)
            if not every:
                raise err.subject_not_found(subject)
            live = [v for v in every if not v.deleted]
            for v in every:
                users = self.state.referenced_by(subject, v.version)
                if users and not v.deleted:
                    raise err.reference_exists(
                        f"One or more references exist to the schema {{subject={subject},"
                        f"version={v.version}}} (ids {users})")
            if permanent:
                if live:
                    raise err.subject_not_soft_deleted(subject)
                await self.journal.write(
                    [(schema_key(subject, v.version), None) for v in every]
                    + [(config_key(subject), None), (mode_key(subject), None)])
                return [v.version for v in every]
            if not live:
                raise err.subject_soft_deleted(subject)
            await self.journal.write(
                [(schema_key(subject, v.version),
                  schema_value(SchemaVersion(**{**v.__dict__, "deleted": True}))) for v in live])
            return [v.version for v in live]

    async def set_config(self, subject: str | None, body: object) -> Json:
        if not isinstance(body, dict):
            raise err.bad_request("the request body must be a JSON object")
        level = body.get("compatibility", body.get("compatibilityLevel"))
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise err.invalid_compatibility(level)
        value: Json = {"compatibilityLevel": level.upper()}
        if isinstance(body.get("normalize"), bool):
            value["normalize"] = body["normalize"]
        if subject is not None:
            check_subject(subject)
        async with self._writing:
            await self.journal.write([(config_key(subject), value)])
        out: Json = {"compatibility": level.upper()}
        if "normalize" in value:
            out["normalize"] = value["normalize"]
        return out

    async def delete_config(self, subject: str | None) -> Json:
        previous = {"compatibilityLevel": self.state.compatibility(subject)}
        if subject is not None and subject not in self.state.configs:
            raise err.subject_compatibility_not_configured(subject) \
                if self.state.subject_exists(subject, deleted=True) \
                else err.subject_not_found(subject)
        async with self._writing:
            await self.journal.write([(config_key(subject), None)])
        return previous

    async def set_mode(self, subject: str | None, body: object, *, force: bool = False) -> Json:
        if not isinstance(body, dict) or not isinstance(body.get("mode"), str):
            raise err.invalid_mode(body.get("mode") if isinstance(body, dict) else body)
        mode = str(body["mode"]).upper()
        if mode not in MODES:
            raise err.invalid_mode(mode)
        if mode == "IMPORT" and not force and self._has_schemas(subject):
            raise err.operation_not_permitted(
                "Cannot import since found existing subjects")
        if subject is not None:
            check_subject(subject)
        async with self._writing:
            await self.journal.write([(mode_key(subject), {"mode": mode})])
        return {"mode": mode}

    def _has_schemas(self, subject: str | None) -> bool:
        if subject is None:
            return any(self.state.subject_exists(s) for s in self.state.subjects)
        return self.state.subject_exists(subject)

    async def delete_mode(self, subject: str) -> Json:
        own = self.state.modes.get(subject)
        if own is None:
            raise err.subject_mode_not_configured(subject)
        async with self._writing:
            await self.journal.write([(mode_key(subject), None)])
        return {"mode": own}

    def metadata_version(self, subject: str, wanted: Mapping[str, str], *,
                         deleted: bool = False) -> SchemaVersion:
        """GET /subjects/{s}/metadata: the newest version whose metadata properties hold every
        key=value asked for."""
        live = self.state.live_versions(subject, deleted=deleted)
        if not live:
            raise err.subject_not_found(subject)
        for v in reversed(live):
            props = ((v.metadata or {}).get("properties") or {})
            if all(props.get(k) == val for k, val in wanted.items()):
                return v
        raise err.version_not_found(f"with metadata {dict(wanted)}")

