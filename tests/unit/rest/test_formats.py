"""Embedded formats (strom.rest.formats) against an in-memory registry: how a v3 produce
request's key/value object picks its schema, the wire format written, the JSON form read back,
and Confluent's error codes."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import threading
from types import SimpleNamespace
from typing import Any

import fastavro
import pytest

from strom.registry.formats.avro import AVRO
from strom.rest.errors import RestError
from strom.rest.formats import Encoded, Formats, formats_of
from strom.rest.formats._registry import RegistryCallError

USER = json.dumps({"type": "record", "name": "User", "namespace": "app", "fields": [
    {"name": "name", "type": "string"},
    {"name": "age", "type": ["null", "int"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "scores", "type": {"type": "map", "values": "double"}, "default": {}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]},
     "default": "A"},
    {"name": "raw", "type": "bytes", "default": ""},
    {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 2}, "default": "ab"},
    {"name": "choice", "type": ["null", "int", "long", "string"], "default": None},
]})
PERSON_JSON = json.dumps({"title": "Person", "type": "object",
                          "properties": {"name": {"type": "string"},
                                         "age": {"type": "integer", "minimum": 0}},
                          "required": ["name"]})
PROTO = """syntax = "proto3";
package shop;

message Order {
  string id = 1;
  int64 total = 2;
  repeated Line lines = 3;
  message Line { string sku = 1; int32 qty = 2; }
}
message Refund { string order_id = 1; }
"""


class FakeRegistry:
    """Confluent's registry API, in memory: ids by content, versions by subject."""

    def __init__(self) -> None:
        self.ids: dict[int, dict[str, Any]] = {}
        self.subjects: dict[str, list[int]] = {}
        self.calls: list[tuple[str, str]] = []
        self.denied: set[str] = set()
        self.lock = threading.Lock()

    def add(self, subject: str, text: str, schema_type: str = "AVRO",
            references: list[dict[str, Any]] | None = None) -> int:
        body = {"schema": text, "schemaType": schema_type, "references": references or []}
        sid = next((i for i, b in self.ids.items() if b == body), None)
        if sid is None:
            sid = len(self.ids) + 1
            self.ids[sid] = body
        versions = self.subjects.setdefault(subject, [])
        if sid not in versions:
            versions.append(sid)
        return sid

    def answer(self, subject: str, index: int) -> dict[str, Any]:
        sid = self.subjects[subject][index]
        out = {"subject": subject, "version": index + 1, "id": sid,
               "schema": self.ids[sid]["schema"]}
        if self.ids[sid]["schemaType"] != "AVRO":
            out["schemaType"] = self.ids[sid]["schemaType"]
        if self.ids[sid]["references"]:
            out["references"] = self.ids[sid]["references"]
        return out

    def __call__(self, method: str, path: str, body: Any) -> Any:
        with self.lock:
            self.calls.append((method, path))
        from urllib.parse import unquote

        parts = [unquote(p) for p in path.strip("/").split("/")]
        if len(parts) > 1 and parts[1] in self.denied:
            raise RegistryCallError(403, 40301, f"User is denied operation on {parts[1]}")
        if parts[:2] == ["schemas", "ids"]:
            found = self.ids.get(int(parts[2]))
            if found is None:
                raise RegistryCallError(404, 40403, "Schema not found")
            return {k: v for k, v in found.items() if v}
        subject = parts[1]
        if method == "GET":  # /subjects/{s}/versions/{v}
            versions = self.subjects.get(subject)
            if not versions:
                raise RegistryCallError(404, 40401, f"Subject '{subject}' not found.")
            index = len(versions) - 1 if parts[3] in ("latest", "-1") else int(parts[3]) - 1
            if not 0 <= index < len(versions):
                raise RegistryCallError(404, 40402, "Version not found.")
            return self.answer(subject, index)
        if len(parts) == 3:  # register
            sid = self.add(subject, body["schema"], body.get("schemaType", "AVRO"),
                           body.get("references"))
            return {"id": sid}
        versions = self.subjects.get(subject)  # lookup
        if not versions:
            raise RegistryCallError(404, 40401, f"Subject '{subject}' not found.")
        wanted = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"),
                  "references": body.get("references") or []}
        for index, sid in enumerate(versions):
            if self.ids[sid] == wanted:
                return self.answer(subject, index)
        raise RegistryCallError(404, 40403, "Schema not found")


@pytest.fixture
def registry() -> FakeRegistry:
    return FakeRegistry()


@pytest.fixture
def formats(registry: FakeRegistry) -> Formats:
    return Formats("http://registry.invalid", transport=registry)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def encode(formats: Formats, spec: Any, topic: str = "t", is_key: bool = False) -> Encoded:
    return run(formats.encode(topic, spec, is_key=is_key))


def error_of(formats: Formats, spec: Any, topic: str = "t") -> RestError:
    with pytest.raises(RestError) as caught:
        encode(formats, spec, topic)
    return caught.value


def header(raw: bytes) -> tuple[int, int]:
    magic, sid = struct.unpack(">bI", raw[:5])
    return magic, sid


# -- plain formats -----------------------------------------------------------------------------


def test_plain_formats_take_no_schema_field(formats: Formats) -> None:
    assert encode(formats, {"type": "STRING", "data": "hi"}) == Encoded(b"hi", "STRING", 2)
    assert encode(formats, {"type": "json", "data": {"a": 1}}).data == b'{"a":1}'
    assert encode(formats, {"type": "BINARY", "data": "AAE="}).data == b"\x00\x01"
    assert encode(formats, None) == Encoded(None, None, 0)
    err = error_of(formats, {"type": "JSON", "data": 1, "schema_id": 1})
    assert (err.status, err.error_code) == (400, 400)
    assert "'type=JSON' cannot be used with 'schema_id'" in err.message
    assert run(formats.decode(b'{"a":1}', "JSON")) == {"a": 1}


@pytest.mark.parametrize(("spec", "words"), [
    ({"type": "XML", "data": 1}, "must be one of"),
    ({"subject": "s", "subject_name_strategy": "TOPIC_NAME", "data": 1}, "Only one of"),
    ({"schema_id": 1, "schema_version": 1, "data": 1}, "Only one of"),
    ({"type": "AVRO", "data": 1}, "needs 'schema'"),
    ({"type": "AVRO", "schema_id": 1, "data": 1}, "cannot be used with 'type=AVRO'"),
    ({"schema": '"int"', "data": 1}, "'schema' needs 'type'"),
    ({"subject_name_strategy": "NAME", "data": 1}, "must be one of"),
    ({"schema_id": "1", "data": 1}, "must be an integer"),
    ({"schema_version": 1, "subject_name_strategy": "RECORD_NAME", "data": 1},
     "Cannot use subject_name_strategy=RECORD_NAME"),
])
def test_fields_that_do_not_fit_together_answer_400(formats: Formats, spec: dict[str, Any],
                                                    words: str) -> None:
    err = error_of(formats, spec)
    assert (err.status, err.error_code) == (400, 400), err.message
    assert words in err.message
    assert "\n" not in err.message


def test_a_schema_without_a_registry_is_a_payload_error() -> None:
    formats = Formats(None)
    for spec in ({"data": {"a": 1}}, {"type": "AVRO", "schema": '"int"', "data": 1},
                 {"schema_id": 1, "data": 1}):
        err = error_of(formats, spec)
        assert (err.status, err.error_code) == (422, 42206)
        assert err.message.startswith("Payload error.")
    assert encode(formats, {"type": "JSON", "data": 1}).data == b"1"


# -- Avro --------------------------------------------------------------------------------------


def test_avro_with_a_schema_text_registers_it_under_the_topic_subject(
        formats: Formats, registry: FakeRegistry) -> None:
    data = {"name": "ada", "age": {"int": 36}, "tags": ["x"], "scores": {"m": 1.5},
            "kind": "B", "raw": "\u00ff\u0000", "tag": "zz", "choice": {"long": 7}}
    out = encode(formats, {"type": "AVRO", "schema": USER, "data": data}, topic="users")
    assert (out.type, out.subject, out.schema_version) == ("AVRO", "users-value", 1)
    assert registry.subjects["users-value"] == [out.schema_id]
    assert out.data is not None and out.size == len(out.data)
    assert header(out.data) == (0, out.schema_id)
    # fastavro reads what was written, with the union branch that was named
    parsed = AVRO.parse(USER, {}).fastavro_schema
    datum: Any = fastavro.schemaless_reader(io.BytesIO(out.data[5:]), parsed, None)
    assert datum["age"] == 36 and datum["raw"] == b"\xff\x00" and datum["tag"] == b"zz"
    assert out.data[5:].endswith(b"\x04\x0e")  # branch 2 (long), then 7
    assert run(formats.decode(out.data, "AVRO")) == data
    # the same text again: found, not registered twice
    again = encode(formats, {"type": "AVRO", "schema": USER, "data": {"name": "b"}},
                   topic="users")
    assert (again.schema_id, again.schema_version) == (out.schema_id, 1)
    assert run(formats.decode(again.data, "avro")) == {
        "name": "b", "age": None, "tags": [], "scores": {}, "kind": "A", "raw": "", "tag": "ab",
        "choice": None}


def test_avro_fastavro_bytes_decode_as_avro_json(formats: Formats, registry: FakeRegistry
                                                 ) -> None:
    sid = registry.add("t-value", USER)
    parsed = AVRO.parse(USER, {}).fastavro_schema
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, {"name": "n", "age": 3, "tags": [], "scores": {},
                                             "kind": "A", "raw": b"\x01", "tag": b"ok",
                                             "choice": "s"})
    raw = struct.pack(">bI", 0, sid) + buf.getvalue()
    assert run(formats.decode(raw, "AVRO")) == {
        "name": "n", "age": {"int": 3}, "tags": [], "scores": {}, "kind": "A", "raw": "\u0001",
        "tag": "ok", "choice": {"string": "s"}}


@pytest.mark.parametrize(("data", "words"), [
    ({"age": {"int": 1}}, "field name of record app.User is missing"),
    ({"name": 5}, "name: expected a string, got a number"),
    ({"name": "a", "age": 5}, "age: expected a value of the union [null, int]"),
    ({"name": "a", "age": {"int": 1 << 40}}, "out of range for int"),
    ({"name": "a", "kind": "C"}, "kind: expected a symbol of enum app.Kind"),
    ({"name": "a", "tag": "abc"}, "tag: fixed app.Tag holds 2 bytes, got 3"),
    ({"name": "a", "raw": "\u20ac"}, "raw: bytes must be a string of characters"),
    ({"name": "a", "tags": [1]}, "tags[0]: expected a string"),
    ("text", "expected record app.User as a JSON object"),
])
def test_avro_data_that_does_not_fit_answers_400(formats: Formats, data: Any, words: str
                                                 ) -> None:
    err = error_of(formats, {"type": "AVRO", "schema": USER, "data": data})
    assert (err.status, err.error_code) == (400, 400)
    assert words in err.message, err.message
    assert "subject t-value" in err.message


def test_null_data_is_encoded_with_the_schema(formats: Formats) -> None:
    out = encode(formats, {"type": "AVRO", "schema": '["null", "string"]', "data": None})
    assert out.data is not None and out.data[5:] == b"\x00"
    assert run(formats.decode(out.data, "AVRO")) is None
    err = error_of(formats, {"type": "AVRO", "schema": USER, "data": None})
    assert err.status == 400


def test_avro_references_resolve_through_their_subjects(formats: Formats,
                                                       registry: FakeRegistry) -> None:
    addr = json.dumps({"type": "record", "name": "Addr", "namespace": "app",
                       "fields": [{"name": "city", "type": "string"}]})
    registry.add("addr", addr)
    sid = registry.add("t-value", json.dumps({
        "type": "record", "name": "Home", "namespace": "app",
        "fields": [{"name": "at", "type": "Addr"}, {"name": "old", "type": ["null", "Addr"]}]}),
        references=[{"name": "app.Addr", "subject": "addr", "version": 1}])
    data = {"at": {"city": "Oslo"}, "old": {"app.Addr": {"city": "Rome"}}}
    out = encode(formats, {"schema_id": sid, "data": data})
    assert (out.subject, out.schema_version) == ("t-value", 1)
    assert run(formats.decode(out.data, "AVRO")) == data
    short = encode(formats, {"schema_id": sid, "data": {**data, "old": {"Addr": {"city": "R"}}}})
    assert short.data is not None and short.data.endswith(b"\x02\x02R")


def test_a_failed_lookup_is_asked_again(formats: Formats, registry: FakeRegistry) -> None:
    err = error_of(formats, {"data": "x"})
    assert err.error_code == 42207
    registry.add("t-value", '"string"')
    assert encode(formats, {"data": "x"}).subject == "t-value"


def test_an_invalid_schema_text_is_42205(formats: Formats, registry: FakeRegistry) -> None:
    err = error_of(formats, {"type": "AVRO", "schema": '{"type": "record"}', "data": {}})
    assert (err.status, err.error_code) == (422, 42205)
    assert err.message.startswith("Invalid schema: ")
    assert registry.calls == []


def test_schema_id_takes_the_subject_from_the_strategy(formats: Formats,
                                                       registry: FakeRegistry) -> None:
    registry.add("t-value", '"string"')
    sid = registry.add("app.User", USER)
    registry.add("t-app.User", USER)
    out = encode(formats, {"schema_id": sid, "subject_name_strategy": "RECORD_NAME",
                           "data": {"name": "x"}})
    assert (out.type, out.subject, out.schema_id, out.schema_version) == (
        "AVRO", "app.User", sid, 1)
    out = encode(formats, {"schema_id": sid, "subject_name_strategy": "TOPIC_RECORD_NAME",
                           "data": {"name": "x"}})
    assert out.subject == "t-app.User"
    err = error_of(formats, {"schema_id": sid, "data": {"name": "x"}})  # not under t-value
    assert (err.status, err.error_code) == (422, 42207)
    assert err.message.startswith("Error serializing message. Error when fetching schema "
                                  "version. subject = t-value")
    err = error_of(formats, {"schema_id": 99, "data": 1})
    assert (err.status, err.error_code) == (422, 42207)
    assert "schemaId = 99" in err.message and "Schema not found" in err.message


def test_schema_version_and_latest(formats: Formats, registry: FakeRegistry) -> None:
    first = registry.add("t-value", '"string"')
    second = registry.add("t-value", '"int"')
    out = encode(formats, {"schema_version": 1, "data": "s"})
    assert (out.schema_id, out.schema_version, out.data) == (first, 1, b"\0\0\0\0\1\2s")
    out = encode(formats, {"data": 5})  # data alone: the latest version of t-value
    assert (out.type, out.schema_id, out.schema_version, out.subject) == (
        "AVRO", second, 2, "t-value")
    key = registry.add("t-key", '"long"')
    out = run(formats.encode("t", {"data": 1}, is_key=True))
    assert (out.subject, out.schema_id) == ("t-key", key)
    err = error_of(formats, {"schema_version": 7, "data": 1})
    assert (err.status, err.error_code) == (400, 400)
    assert err.message.startswith("Schema does not exist for subject: t-value, version: 7")
    err = error_of(formats, {"data": 1}, topic="other")
    assert (err.status, err.error_code) == (422, 42207)
    assert "latest schema version. subject = other-value" in err.message


def test_a_denied_subject_answers_403(formats: Formats, registry: FakeRegistry) -> None:
    registry.add("t-value", '"int"')
    registry.denied.add("t-value")
    err = error_of(formats, {"data": 1})
    assert (err.status, err.error_code) == (403, 40301)


def test_concurrent_requests_ask_the_registry_once(formats: Formats,
                                                   registry: FakeRegistry) -> None:
    sid = registry.add("t-value", USER)

    async def many() -> list[Encoded]:
        return await asyncio.gather(*(formats.encode("t", {"schema_id": sid,
                                                           "data": {"name": str(i)}},
                                                     is_key=False) for i in range(50)))

    outs = run(many())
    assert {o.schema_id for o in outs} == {sid}
    assert registry.calls.count(("GET", f"/schemas/ids/{sid}")) == 1
    assert registry.calls.count(("POST", "/subjects/t-value")) == 1


# -- JSON Schema -------------------------------------------------------------------------------


def test_jsonschema_validates_and_writes_compact_json(formats: Formats) -> None:
    spec = {"type": "JSONSCHEMA", "schema": PERSON_JSON, "data": {"name": "é", "age": 3}}
    out = encode(formats, spec, topic="p")
    assert out.type == "JSONSCHEMA" and out.subject == "p-value"
    assert out.data is not None and out.data[5:] == '{"name":"é","age":3}'.encode()
    assert run(formats.decode(out.data, "JSONSCHEMA")) == {"name": "é", "age": 3}
    err = error_of(formats, {**spec, "data": {"name": "x", "age": -1}})
    assert (err.status, err.error_code) == (400, 400)
    assert "#/age: -1 is less than the minimum of 0" in err.message
    err = error_of(formats, {**spec, "data": {"age": 1}})
    assert "'name' is a required property" in err.message
    out = encode(formats, {"type": "JSONSCHEMA", "schema": PERSON_JSON,
                           "subject_name_strategy": "RECORD_NAME", "data": {"name": "x"}})
    assert out.subject == "Person"


def test_jsonschema_references_resolve_by_name(formats: Formats, registry: FakeRegistry
                                               ) -> None:
    registry.add("address", json.dumps({"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"]}), "JSON")
    sid = registry.add("t-value", json.dumps({"type": "object", "properties": {
        "home": {"$ref": "address.json"}}}), "JSON",
        [{"name": "address.json", "subject": "address", "version": 1}])
    out = encode(formats, {"schema_id": sid, "data": {"home": {"city": "Oslo"}}})
    assert out.type == "JSONSCHEMA"
    err = error_of(formats, {"schema_id": sid, "data": {"home": {}}})
    assert "#/home: 'city' is a required property" in err.message


# -- Protobuf ----------------------------------------------------------------------------------


def test_protobuf_first_message_round_trips(formats: Formats, registry: FakeRegistry) -> None:
    spec = {"type": "PROTOBUF", "schema": PROTO,
            "data": {"id": "o1", "total": "12", "lines": [{"sku": "a", "qty": 2}]}}
    out = encode(formats, spec, topic="orders")
    assert out.type == "PROTOBUF" and out.subject == "orders-value"
    assert out.data is not None and out.data[5] == 0  # message indexes [0]
    assert out.schema_id is not None
    assert registry.ids[out.schema_id]["schemaType"] == "PROTOBUF"
    assert run(formats.decode(out.data, "PROTOBUF")) == {
        "id": "o1", "total": "12", "lines": [{"sku": "a", "qty": 2}]}
    empty = encode(formats, {**spec, "data": {}}, topic="orders")
    assert run(formats.decode(empty.data, "PROTOBUF")) == {"id": "", "total": "0", "lines": []}
    err = error_of(formats, {**spec, "data": {"nope": 1}})
    assert (err.status, err.error_code) == (400, 400)
    assert "shop.Order" in err.message and "nope" in err.message
    named = encode(formats, {**spec, "subject_name_strategy": "RECORD_NAME"})
    assert named.subject == "shop.Order"


def test_protobuf_decode_follows_the_message_indexes(formats: Formats,
                                                     registry: FakeRegistry) -> None:
    from strom.rest.formats._codecs import ProtobufCodec

    sid = registry.add("t-value", PROTO, "PROTOBUF")
    codec = ProtobufCodec(PROTO, {})
    refund = codec._class("shop.Refund")(order_id="o9").SerializeToString()
    raw = struct.pack(">bI", 0, sid) + b"\x02\x02" + refund  # indexes [1]
    assert run(formats.decode(raw, "PROTOBUF")) == {"orderId": "o9"}


# -- decode errors -----------------------------------------------------------------------------


def test_decode_errors(formats: Formats, registry: FakeRegistry) -> None:
    sid = registry.add("t-value", '"int"')
    for raw, fmt, words in [(b"plain", "AVRO", "wire format"),
                            (struct.pack(">bI", 0, 42) + b"\0", "AVRO", "schema 42"),
                            (struct.pack(">bI", 0, sid) + b"\2", "PROTOBUF", "is AVRO"),
                            (struct.pack(">bI", 0, sid) + b"\x80", "AVRO", "ends before")]:
        with pytest.raises(RestError) as caught:
            run(formats.decode(raw, fmt))
        assert (caught.value.status, caught.value.error_code) == (500, 50002)
        assert words in caught.value.message
    assert run(formats.decode(None, "AVRO")) is None


# -- one Formats per user ----------------------------------------------------------------------


def test_formats_of_keeps_one_formats_per_user_and_password() -> None:
    passwords = {"ada": "pw"}
    pool = SimpleNamespace(password_of=passwords.get)
    ctx = SimpleNamespace(settings=SimpleNamespace(handoff=SimpleNamespace(
        registry_url="http://127.0.0.1:1")), pool=pool,
        user=lambda request: request)
    first = formats_of(ctx, "ada")  # type: ignore[arg-type]
    assert first.auth == ("ada", "pw")
    assert formats_of(ctx, "ada") is first  # type: ignore[arg-type]
    anonymous = formats_of(ctx, None)  # type: ignore[arg-type]
    assert anonymous is not first and anonymous.auth is None
    passwords["ada"] = "new"
    renewed = formats_of(ctx, "ada")  # type: ignore[arg-type]
    assert renewed is not first and renewed.auth == ("ada", "new")
