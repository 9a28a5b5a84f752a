"""The registry's state: what its records in `_schemas` say, kept in memory.

The records are Confluent Schema Registry's own (JSON keys and values, `keytype` SCHEMA,
CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP), so the topic reads as a Confluent
registry's does. A record is applied the same way whether it was just written or is replayed
after a restart: `RegistryState.apply(key, value)`, where a null value (a tombstone, which
compaction keeps until it removes the key) deletes what the key names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMAS_TOPIC = "_schemas"
DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"
GLOBAL: None = None  # the subject of global config and mode records

Json = dict[str, Any]


@dataclass(frozen=True)
class Reference:
    """A schema's reference: `name` as the schema text refers to it, the referenced schema
    as `subject` at `version`."""

    name: str
    subject: str
    version: int

    def to_json(self) -> Json:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass
class SchemaVersion:
    """One version of one subject."""

    subject: str
    version: int
    id: int
    guid: str
    schema_type: str  # AVRO, JSON or PROTOBUF
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False
    metadata: Json | None = None
    rule_set: Json | None = None

    def to_json(self) -> Json:
        """The answer of GET /subjects/{s}/versions/{v} (Confluent leaves out AVRO's type and
        empty references)."""
        out: Json = {"subject": self.subject, "version": self.version, "id": self.id,
                     "guid": self.guid}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        if self.metadata is not None:
            out["metadata"] = self.metadata
        if self.rule_set is not None:
            out["ruleSet"] = self.rule_set
        out["schema"] = self.schema
        return out


def schema_key(subject: str, version: int) -> Json:
    return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}


def schema_value(v: SchemaVersion) -> Json:
    out: Json = {"subject": v.subject, "version": v.version, "id": v.id, "guid": v.guid}
    if v.schema_type != "AVRO":
        out["schemaType"] = v.schema_type
    out["references"] = [r.to_json() for r in v.references]
    if v.metadata is not None:
        out["metadata"] = v.metadata
    if v.rule_set is not None:
        out["ruleSet"] = v.rule_set
    out["schema"] = v.schema
    out["deleted"] = v.deleted
    return out


def config_key(subject: str | None) -> Json:
    return {"keytype": "CONFIG", "subject": subject, "magic": 0}


def mode_key(subject: str | None) -> Json:
    return {"keytype": "MODE", "subject": subject, "magic": 0}


def encode(doc: Json | None) -> bytes | None:
    return None if doc is None else json.dumps(doc, separators=(",", ":")).encode()


def decode(raw: bytes | None) -> Json | None:
    if raw is None:
        return None
    doc = json.loads(raw)
    return doc if isinstance(doc, dict) else None


@dataclass
class SchemaContent:
    """What an id stands for: the schema text, its type and references (one id per distinct
    content, whichever subjects register it)."""

    id: int
    guid: str
    schema_type: str
    schema: str
    references: tuple[Reference, ...]

    def to_json(self) -> Json:
        """The answer of GET /schemas/ids/{id}."""
        out: Json = {"guid": self.guid}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        out["schema"] = self.schema
        return out


@dataclass
class RegistryState:
    """Every subject's versions, every id's content, configs and modes."""

    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    ids: dict[int, SchemaContent] = field(default_factory=dict)
    guids: dict[str, int] = field(default_factory=dict)
    configs: dict[str | None, Json] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    generation: int = 0  # bumped by every applied record: what was derived from it is stale
    _index: dict[int, frozenset[str]] = field(default_factory=dict, init=False, repr=False,
                                              compare=False)
    _index_generation: int = field(default=-1, init=False, repr=False, compare=False)

    def live_subjects_of(self, sid: int) -> frozenset[str]:
        """The subjects with a live version of id `sid` (cached until the next record)."""
        if self._index_generation != self.generation:
            index: dict[int, set[str]] = {}
            for subject, versions in self.subjects.items():
                for v in versions.values():
                    if not v.deleted:
                        index.setdefault(v.id, set()).add(subject)
            self._index = {k: frozenset(v) for k, v in index.items()}
            self._index_generation = self.generation
        return self._index.get(sid, frozenset())

    # -- applying records ----------------------------------------------------------------------

    def apply(self, key: Json, value: Json | None) -> None:
        self.generation += 1
        kind = key.get("keytype")
        subject = key.get("subject")
        if kind == "SCHEMA" and isinstance(subject, str):
            self._apply_schema(subject, int(key.get("version", 0)), value)
        elif kind == "CONFIG":
            if value is None:
                self.configs.pop(subject, None)
            else:
                self.configs[subject] = value
        elif kind == "MODE":
            if value is None or not value.get("mode"):
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = str(value["mode"])
        elif kind == "DELETE_SUBJECT" and isinstance(subject, str) and value is not None:
            last = int(value.get("version", 0))
            for v in self.subjects.get(subject, {}).values():
                if v.version <= last:
                    v.deleted = True
        elif kind == "CLEAR_SUBJECT" and isinstance(subject, str) and value is not None:
            for v in list(self.subjects.get(subject, {}).values()):
                if v.deleted:
                    self._apply_schema(subject, v.version, None)
        # NOOP and key types of later versions change nothing

    def _apply_schema(self, subject: str, version: int, value: Json | None) -> None:
        versions = self.subjects.setdefault(subject, {})
        if value is None:
            versions.pop(version, None)
            if not versions:
                del self.subjects[subject]
            return
        refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                     for r in value.get("references") or [])
        sid = int(value["id"])
        entry = SchemaVersion(
            subject=subject, version=version, id=sid, guid=str(value.get("guid") or ""),
            schema_type=str(value.get("schemaType") or "AVRO"), schema=str(value["schema"]),
            references=refs, deleted=bool(value.get("deleted", False)),
            metadata=value.get("metadata"), rule_set=value.get("ruleSet"))
        versions[version] = entry
        if sid not in self.ids:
            self.ids[sid] = SchemaContent(sid, entry.guid, entry.schema_type, entry.schema, refs)
            if entry.guid:
                self.guids[entry.guid] = sid
        self.max_id = max(self.max_id, sid)

    # -- reading ---------------------------------------------------------------------------

    def live_versions(self, subject: str, *, deleted: bool = False) -> list[SchemaVersion]:
        """The subject's versions, oldest first (soft-deleted ones only with `deleted`)."""
        versions = self.subjects.get(subject, {})
        return [versions[n] for n in sorted(versions) if deleted or not versions[n].deleted]

    def subject_exists(self, subject: str, *, deleted: bool = False) -> bool:
        return bool(self.live_versions(subject, deleted=deleted))

    def compatibility(self, subject: str | None) -> str:
        """The level in force for a subject: its own, else the global one, else BACKWARD."""
        for scope in ((subject, GLOBAL) if subject is not None else (GLOBAL,)):
            level = (self.configs.get(scope) or {}).get("compatibilityLevel")
            if level:
                return str(level)
        return DEFAULT_COMPATIBILITY

    def mode(self, subject: str | None) -> str:
        for scope in ((subject, GLOBAL) if subject is not None else (GLOBAL,)):
            mode = self.modes.get(scope)
            if mode:
                return mode
        return DEFAULT_MODE

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the live schemas whose references name this subject version."""
        out = set()
        for versions in self.subjects.values():
            for v in versions.values():
                if not v.deleted and any(r.subject == subject and r.version == version
                                         for r in v.references):
                    out.add(v.id)
        return sorted(out)

    def usages(self, sid: int, *, deleted: bool = False) -> list[SchemaVersion]:
        """Every subject version registered with this id."""
        return [v for name in sorted(self.subjects) for n, v in sorted(self.subjects[name].items())
                if v.id == sid and (deleted or not v.deleted)]
