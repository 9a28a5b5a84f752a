"""Compatibility levels: which earlier versions a new schema is checked against, and how.

BACKWARD: the new schema reads data written with the latest version (consumers upgrade first).
FORWARD: the latest version reads data written with the new schema (producers upgrade first).
FULL: both. The _TRANSITIVE forms check every earlier version instead of the latest alone,
newest first, and stop at the first version that fails, as Confluent does. NONE checks
nothing.

`find_incompatibilities` gives the reasons, each tagged with the version it failed against;
`check_compatibility` gives them as Confluent's messages (its 409 ``details`` list and its
compatibility answer's ``messages``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from strom.registry.formats.base import Incompatibility, ParsedSchema


class CompatibilityLevel(StrEnum):
    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, text: str) -> CompatibilityLevel:
        """A level by name, in any case (Confluent accepts ``backward``); ValueError if none."""
        return cls(text.upper())

    @property
    def transitive(self) -> bool:
        return self.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        """The new schema must read the old versions' data."""
        return self.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        """The old versions must read the new schema's data."""
        return self.startswith(("FORWARD", "FULL"))


LEVELS = frozenset(level.value for level in CompatibilityLevel)
DEFAULT_LEVEL = CompatibilityLevel.BACKWARD
DIFFERENT_SCHEMA_TYPE = "Incompatible because of different schema type"
MAX_SCHEMA_SHOWN = 10 * 1024  # Confluent cuts a longer old schema in its messages


@dataclass(frozen=True)
class VersionIncompatibility:
    """An incompatibility with one earlier version; `reader` and `writer` say which schema
    read which ("new" or "old")."""

    version: int
    incompatibility: Incompatibility
    reader: str
    writer: str

    def render(self) -> str:
        return self.incompatibility.render(self.reader, self.writer)


def _against(new: ParsedSchema, version: int, old: ParsedSchema,
             level: CompatibilityLevel) -> list[VersionIncompatibility]:
    if new.schema_type != old.schema_type:
        return [VersionIncompatibility(version, Incompatibility("", DIFFERENT_SCHEMA_TYPE, ""),
                                       "new", "old")]
    out: list[VersionIncompatibility] = []
    if level.forward:  # Confluent lists the old schema's problems reading new data first
        out += [VersionIncompatibility(version, i, "old", "new") for i in old.can_read(new)]
    if level.backward:
        out += [VersionIncompatibility(version, i, "new", "old") for i in new.can_read(old)]
    return out


def find_incompatibilities(level: str | CompatibilityLevel, new: ParsedSchema,
                           previous: Sequence[tuple[int, ParsedSchema]]
                           ) -> list[VersionIncompatibility]:
    """Why `new` may not follow `previous` (version and schema, oldest first) at `level`;
    empty when it may. Only the newest failing version's reasons are given."""
    level = CompatibilityLevel.parse(level)
    if level is CompatibilityLevel.NONE or not previous:
        return []
    checked = reversed(previous) if level.transitive else [previous[-1]]
    for version, old in checked:
        found = _against(new, version, old, level)
        if found:
            return found
    return []


def check_compatibility(level: str | CompatibilityLevel, new: ParsedSchema,
                        previous: Sequence[tuple[int, ParsedSchema]]) -> list[str]:
    """`find_incompatibilities` as Confluent's messages: each reason rendered, then the old
    version and the old schema, then the level; empty when compatible. (Under FULL, Confluent
    names the old version only when the new schema fails to read it; so does this.)"""
    level = CompatibilityLevel.parse(level)
    found = find_incompatibilities(level, new, previous)
    if not found:
        return []
    messages = [item.render() for item in found]
    version = found[0].version
    if not (level.forward and level.backward) or any(i.reader == "new" for i in found):
        text = dict(previous)[version].canonical()
        messages.append(f"{{oldSchemaVersion: {version}}}")
        messages.append(f"{{oldSchema: '{text}'}}" if len(text) <= MAX_SCHEMA_SHOWN
                        else f"{{oldSchema: <truncated> '{text[:MAX_SCHEMA_SHOWN]}...'}}")
    messages.append(f"{{validateFields: 'false', compatibility: '{level.value}'}}")
    return messages
