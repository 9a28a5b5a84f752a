"""Compatibility levels: which versions a new schema is checked against, in which direction,
and Confluent's messages for the failures."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from strom.registry.compatibility import (
    LEVELS,
    CompatibilityLevel,
    check_compatibility,
    find_incompatibilities,
)
from strom.registry.formats.avro import AVRO
from strom.registry.formats.base import Incompatibility
from strom.registry.formats.json_schema import JSON


@dataclass
class Fake:
    """A schema that reads exactly the schemas named in `reads` (and itself)."""

    name: str
    reads: set[str] = field(default_factory=set)
    schema_type: str = "AVRO"

    def canonical(self) -> str:
        return self.name

    def normalized(self) -> str:
        return self.name

    def fingerprint(self) -> str:
        return self.name

    def can_read(self, writer: Any) -> list[Incompatibility]:
        if writer.name == self.name or writer.name in self.reads:
            return []
        return [Incompatibility("TYPE_MISMATCH", f"{self.name} cannot read {writer.name}", "/")]


def reasons(level: str, new: Fake, *old: Fake) -> list[tuple[int, str, str]]:
    previous = [(i + 1, schema) for i, schema in enumerate(old)]
    return [(item.version, item.reader, item.incompatibility.description)
            for item in find_incompatibilities(level, new, previous)]


def test_levels() -> None:
    expected = {"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                "FULL", "FULL_TRANSITIVE"}
    assert expected == LEVELS
    assert CompatibilityLevel.parse("full_transitive") is CompatibilityLevel.FULL_TRANSITIVE
    with pytest.raises(ValueError):
        CompatibilityLevel.parse("SIDEWAYS")


def test_nothing_to_check_against() -> None:
    assert reasons("FULL_TRANSITIVE", Fake("b")) == []


def test_none_checks_nothing() -> None:
    assert reasons("NONE", Fake("b"), Fake("a")) == []


def test_backward_means_the_new_schema_reads_the_latest() -> None:
    assert reasons("BACKWARD", Fake("b", {"a"}), Fake("a")) == []
    assert reasons("BACKWARD", Fake("b"), Fake("a")) == [(1, "new", "b cannot read a")]


def test_forward_means_the_latest_reads_the_new_schema() -> None:
    assert reasons("FORWARD", Fake("b"), Fake("a", {"b"})) == []
    assert reasons("FORWARD", Fake("b", {"a"}), Fake("a")) == [(1, "old", "a cannot read b")]


def test_full_means_both_old_first() -> None:
    assert reasons("FULL", Fake("b", {"a"}), Fake("a", {"b"})) == []
    assert reasons("FULL", Fake("b"), Fake("a")) == [(1, "old", "a cannot read b"),
                                                     (1, "new", "b cannot read a")]


@pytest.mark.parametrize("level", ["BACKWARD", "FORWARD", "FULL"])
def test_non_transitive_levels_check_the_latest_only(level: str) -> None:
    new = Fake("c", {"b"})
    older = Fake("a")
    latest = Fake("b", {"c"})
    assert reasons(level, new, older, latest) == []


@pytest.mark.parametrize(("level", "expected"), [
    ("BACKWARD_TRANSITIVE", [(1, "new", "c cannot read a")]),
    ("FORWARD_TRANSITIVE", [(1, "old", "a cannot read c")]),
    ("FULL_TRANSITIVE", [(1, "old", "a cannot read c"), (1, "new", "c cannot read a")]),
])
def test_transitive_levels_check_every_version(level: str,
                                               expected: list[tuple[int, str, str]]) -> None:
    assert reasons(level, Fake("c", {"b"}), Fake("a"), Fake("b", {"c"})) == expected


def test_transitive_reports_the_newest_failing_version_only() -> None:
    new = Fake("d")
    assert reasons("BACKWARD_TRANSITIVE", new, Fake("a"), Fake("b"), Fake("c")) == [
        (3, "new", "d cannot read c")]
    assert reasons("BACKWARD_TRANSITIVE", Fake("d", {"c", "b"}), Fake("a"), Fake("b"),
                   Fake("c")) == [(1, "new", "d cannot read a")]


def test_a_different_schema_type_is_incompatible() -> None:
    found = find_incompatibilities("BACKWARD", Fake("b", schema_type="JSON"), [(4, Fake("a"))])
    assert [(i.version, i.render()) for i in found] == [
        (4, "Incompatible because of different schema type")]


def test_levels_are_case_insensitive() -> None:
    assert reasons("backward", Fake("b"), Fake("a")) == [(1, "new", "b cannot read a")]


# -- with real schemas, Confluent's messages ---------------------------------------------------


def avro(schema: Any) -> Any:
    return AVRO.parse(json.dumps(schema), {})


V1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
V2 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                {"name": "b", "type": "string"}]}
V2_DEFAULT = {"type": "record", "name": "R", "fields": [
    {"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}]}


def test_messages_for_an_incompatible_avro_schema() -> None:
    assert check_compatibility("BACKWARD", avro(V2), [(1, avro(V1))]) == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path "
        "'/fields/1' in the new schema has no default value and is missing in the old schema', "
        "additionalInfo:'b'}",
        "{oldSchemaVersion: 1}",
        "{oldSchema: '{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\","
        "\"type\":\"int\"}]}'}",
        "{validateFields: 'false', compatibility: 'BACKWARD'}",
    ]


@pytest.mark.parametrize(("level", "new", "old", "compatible"), [
    ("BACKWARD", V2_DEFAULT, V1, True),
    ("BACKWARD", V1, V2, True),  # dropping a field: the new reader ignores it
    ("FORWARD", V1, V2, False),  # ...but the old reader needs it
    ("FORWARD", V2, V1, True),
    ("FULL", V2_DEFAULT, V1, True),
    ("FULL", V2, V1, False),
    ("NONE", {"type": "string"}, V1, True),
])
def test_avro_levels(level: str, new: Any, old: Any, compatible: bool) -> None:
    assert (check_compatibility(level, avro(new), [(1, avro(old))]) == []) is compatible


def test_forward_failure_names_the_old_schema_as_reader() -> None:
    [item] = find_incompatibilities("FORWARD", avro(V1), [(7, avro(V2))])
    assert item.version == 7
    assert "in the old schema has no default value and is missing in the new schema" in \
        item.render()


def test_json_schema_messages() -> None:
    old = JSON.parse('{"type":"string"}', {})
    new = JSON.parse('{"type":"integer"}', {})
    assert check_compatibility("FULL", new, [(2, old)]) == [
        '{errorType:"TYPE_CHANGED", description:"A type at path \'#/\' is different between '
        'the old schema and the new schema\'}',
        '{errorType:"TYPE_CHANGED", description:"A type at path \'#/\' is different between '
        'the new schema and the old schema\'}',
        "{oldSchemaVersion: 2}",
        "{oldSchema: '{\"type\":\"string\"}'}",
        "{validateFields: 'false', compatibility: 'FULL'}",
    ]


def test_a_long_old_schema_is_cut_in_the_messages() -> None:
    fields = [{"name": f"field_{i}", "type": "string"} for i in range(600)]
    old = avro({"type": "record", "name": "R", "fields": fields})
    messages = check_compatibility("BACKWARD", avro("int"), [(1, old)])
    assert messages[2].startswith("{oldSchema: <truncated> '{\"type\":\"record\"")
    assert messages[2].endswith("...'}")
    assert len(messages[2]) == len("{oldSchema: <truncated> '") + 10 * 1024 + len("...'}")


def test_full_names_the_old_version_only_when_the_new_schema_cannot_read_it() -> None:
    # The new V1 reads V2's data (it ignores b), but V2 cannot read V1's (b has no default):
    # only the old schema fails as a reader, and Confluent then names no version.
    messages = check_compatibility("FULL", avro(V1), [(3, avro(V2))])
    assert messages == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path "
        "'/fields/1' in the old schema has no default value and is missing in the new schema', "
        "additionalInfo:'b'}",
        "{validateFields: 'false', compatibility: 'FULL'}",
    ]
    forward = check_compatibility("FORWARD", avro(V1), [(3, avro(V2))])
    assert forward[1:3] == ["{oldSchemaVersion: 3}", "{oldSchema: '" + avro(V2).canonical()
                            + "'}"]
