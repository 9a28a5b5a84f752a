"""The registry's records (Confluent's `_schemas` keys and values) applied to its state."""

from __future__ import annotations

from strom.registry.state import (
    Reference,
    RegistryState,
    SchemaVersion,
    config_key,
    decode,
    encode,
    mode_key,
    schema_key,
    schema_value,
)


def version(subject: str, n: int, sid: int, text: str = '"string"', **kw: object) -> SchemaVersion:
    return SchemaVersion(subject, n, sid, f"guid-{sid}", str(kw.pop("schema_type", "AVRO")),
                         text, **kw)  # type: ignore[arg-type]


def put(state: RegistryState, v: SchemaVersion) -> None:
    state.apply(schema_key(v.subject, v.version), schema_value(v))


def test_keys_and_values_are_confluents() -> None:
    assert encode(schema_key("s", 3)) == b'{"keytype":"SCHEMA","subject":"s","version":3,"magic":1}'
    assert encode(config_key(None)) == b'{"keytype":"CONFIG","subject":null,"magic":0}'
    assert encode(mode_key("s")) == b'{"keytype":"MODE","subject":"s","magic":0}'
    value = schema_value(version("s", 1, 7))
    assert value == {"subject": "s", "version": 1, "id": 7, "guid": "guid-7", "references": [],
                     "schema": '"string"', "deleted": False}  # AVRO: no schemaType
    json_value = schema_value(version("s", 1, 7, schema_type="JSON"))
    assert json_value["schemaType"] == "JSON"
    assert decode(encode(value)) == value
    assert decode(None) is None


def test_versions_ids_guids_and_tombstones() -> None:
    state = RegistryState()
    put(state, version("a", 1, 1))
    put(state, version("a", 2, 2, '"int"'))
    put(state, version("b", 1, 1))
    assert [v.version for v in state.live_versions("a")] == [1, 2]
    assert state.ids[1].schema == '"string"' and state.guids["guid-2"] == 2
    assert state.max_id == 2
    assert [(v.subject, v.version) for v in state.usages(1)] == [("a", 1), ("b", 1)]
    # a soft delete keeps the version, a tombstone removes it
    put(state, version("a", 2, 2, '"int"', deleted=True))
    assert [v.version for v in state.live_versions("a")] == [1]
    assert [v.version for v in state.live_versions("a", deleted=True)] == [1, 2]
    state.apply(schema_key("a", 2), None)
    state.apply(schema_key("a", 1), None)
    assert not state.subject_exists("a", deleted=True) and "a" not in state.subjects
    assert state.ids[2].schema == '"int"'  # an id keeps meaning what it meant


def test_config_and_mode_fall_back_to_global_then_defaults() -> None:
    state = RegistryState()
    assert (state.compatibility("s"), state.mode("s")) == ("BACKWARD", "READWRITE")
    state.apply(config_key(None), {"compatibilityLevel": "FULL"})
    state.apply(mode_key(None), {"mode": "READONLY"})
    assert (state.compatibility("s"), state.mode("s")) == ("FULL", "READONLY")
    state.apply(config_key("s"), {"compatibilityLevel": "NONE"})
    state.apply(mode_key("s"), {"mode": "READWRITE"})
    assert (state.compatibility("s"), state.mode("s")) == ("NONE", "READWRITE")
    state.apply(config_key("s"), None)
    state.apply(mode_key("s"), None)
    assert (state.compatibility("s"), state.mode("s")) == ("FULL", "READONLY")


def test_references_delete_subject_and_clear_subject_records() -> None:
    state = RegistryState()
    put(state, version("base", 1, 1))
    ref = Reference("base.avsc", "base", 1)
    put(state, version("user", 1, 2, '"x"', references=(ref,)))
    assert state.referenced_by("base", 1) == [2]
    assert state.ids[2].references == (ref,)
    state.apply({"keytype": "DELETE_SUBJECT", "subject": "user", "magic": 0},
                {"subject": "user", "version": 1})
    assert not state.live_versions("user") and state.referenced_by("base", 1) == []
    state.apply({"keytype": "CLEAR_SUBJECT", "subject": "user", "magic": 0}, {"subject": "user"})
    assert "user" not in state.subjects
    state.apply({"keytype": "NOOP", "magic": 0}, None)  # changes nothing
    state.apply({"keytype": "SOMETHING_NEWER", "magic": 0}, {"x": 1})
    assert list(state.subjects) == ["base"]
