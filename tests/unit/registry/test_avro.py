"""Avro schemas: parsing (and its errors), canonical and normalized text, references, and the
schema resolution rules behind compatibility, with Confluent's error types and wording."""

from __future__ import annotations

import json
from typing import Any

import pytest

from strom.registry.formats.avro import AVRO, AvroSchema
from strom.registry.formats.base import InvalidSchemaError


def parse(schema: Any, references: dict[str, str] | None = None) -> AvroSchema:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return AVRO.parse(text, references or {})


def record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, ftype: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": ftype, **extra}


def problems(reader: Any, writer: Any) -> list[tuple[str, str]]:
    """The (error type, path) of each reason `reader` (a schema as Python data, a bare string
    being a type name) cannot read what `writer` wrote."""
    return [(i.error_type, i.path)
            for i in parse(json.dumps(reader)).can_read(parse(json.dumps(writer)))]


# -- canonical text ----------------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "canonical"), [
    ('"int"', '"int"'),
    ({"type": "int"}, '"int"'),
    ({"type": "long", "logicalType": "timestamp-millis"},
     '{"type":"long","logicalType":"timestamp-millis"}'),
    (' [ "null" , "string" ] ', '["null","string"]'),
    ({"fields": [{"type": "int", "name": "a"}], "name": "R", "type": "record"},
     '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'),
    (record(f("a", "int"), name="ns.R"),
     '{"type":"record","name":"R","namespace":"ns","fields":[{"name":"a","type":"int"}]}'),
    (record(f("e", {"type": "enum", "name": "E", "namespace": "ns", "symbols": ["A"]}),
            namespace="ns"),
     '{"type":"record","name":"R","namespace":"ns","fields":[{"name":"e","type":'
     '{"type":"enum","name":"E","symbols":["A"]}}]}'),
    (record(f("e", {"type": "fixed", "name": "F", "namespace": "other", "size": 2}),
            namespace="ns"),
     '{"type":"record","name":"R","namespace":"ns","fields":[{"name":"e","type":'
     '{"type":"fixed","name":"F","namespace":"other","size":2}}]}'),
    (record(f("e", {"type": "fixed", "name": "F", "namespace": "", "size": 2}), namespace="ns"),
     '{"type":"record","name":"R","namespace":"ns","fields":[{"name":"e","type":'
     '{"type":"fixed","name":"F","namespace":"","size":2}}]}'),
    (record(f("a", {"type": "enum", "name": "E", "symbols": ["X"]}), f("b", "E")),
     '{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"E",'
     '"symbols":["X"]}},{"name":"b","type":"E"}]}'),
    (record(f("a", "double", default=1e10), f("b", "float", default=0.5, order="ascending"),
            f("c", "int", order="descending", aliases=["z"], doc="d", custom=1)),
     '{"type":"record","name":"R","fields":[{"name":"a","type":"double","default":1.0E10},'
     '{"name":"b","type":"float","default":0.5},{"name":"c","type":"int","doc":"d",'
     '"order":"descending","aliases":["z"],"custom":1}]}'),
    ({"type": "error", "name": "Oops", "fields": [], "doc": "é"},
     '{"type":"error","name":"Oops","doc":"é","fields":[]}'),
    ({"aliases": ["Old", "x.Older"], "type": "record", "name": "R", "namespace": "ns",
      "fields": [], "z": 1, "a": 2},
     '{"type":"record","name":"R","namespace":"ns","fields":[],"z":1,"a":2,'
     '"aliases":["Old","x.Older"]}'),
    ({"type": "array", "items": {"type": "map", "values": "bytes"}},
     '{"type":"array","items":{"type":"map","values":"bytes"}}'),
])
def test_canonical_is_java_tostring(schema: Any, canonical: str) -> None:
    assert parse(schema).canonical() == canonical


def test_canonical_of_confluent_example() -> None:
    text = ('{"type":"record","name":"myrecord","doc":"hi\\"there",'
            '"fields":[{"type":"string","name":"f1","doc":"bye\\"now"}]}')
    assert parse(text).canonical() == ('{"type":"record","name":"myrecord","doc":"hi\\"there",'
                                       '"fields":[{"name":"f1","type":"string",'
                                       '"doc":"bye\\"now"}]}')


def test_recursive_record_refers_to_itself_by_name() -> None:
    schema = parse(record(f("next", ["null", "R"]), name="R"))
    assert schema.canonical() == ('{"type":"record","name":"R","fields":[{"name":"next",'
                                  '"type":["null","R"]}]}')
    assert schema.name == "R"


# -- normalization -----------------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "normalized"), [
    ({"type": "string", "z": 1, "a": {"y": 1, "b": 2}},
     '{"type":"string","a":{"b":2,"y":1},"z":1}'),
    ({"type": "bytes", "scale": 2, "precision": 4, "a": 1, "logicalType": "decimal"},
     '{"type":"bytes","logicalType":"decimal","precision":4,"scale":2,"a":1}'),
    ({"type": "bytes", "scale": 0, "precision": 4, "logicalType": "decimal"},
     '{"type":"bytes","logicalType":"decimal","precision":4,"scale":0}'),
    ({"type": "string", "logicalType": "nonsense", "b": 1},
     '{"type":"string","b":1,"logicalType":"nonsense"}'),
    (record(aliases=["Zed", "Alpha"], doc=""),
     '{"type":"record","name":"R","fields":[],"aliases":["Alpha","Zed"]}'),
    (record(f("a", "double", default=1), f("b", ["null", "float"], default=None),
            f("c", "int", aliases=["y", "x"], b=1, a=2)),
     '{"type":"record","name":"R","fields":[{"name":"a","type":"double","default":1.0},'
     '{"name":"b","type":["null","float"],"default":null},{"name":"c","type":"int",'
     '"aliases":["x","y"],"a":2,"b":1}]}'),
])
def test_normalized_sorts_properties_and_aliases(schema: Any, normalized: str) -> None:
    assert parse(schema).normalized() == normalized


def test_normalization_matches_confluents_example() -> None:
    schema = {"connect.name": "some.scope.Envelope", "fields": [
        {"default": None, "name": "before", "type": ["null", {
            "connect.name": "some.scope.Value", "fields": [
                {"name": "created_at", "type": {"connect.name": "io.debezium.time.Timestamp",
                                                "connect.version": 1, "type": "long"}},
                {"name": "normal_long", "type": "long"}],
            "name": "Value", "type": "record"}]},
        {"default": None, "name": "after", "type": ["null", "Value"]}],
        "name": "Envelope", "namespace": "some.scope", "type": "record"}
    expected = ('{"type":"record","name":"Envelope","namespace":"some.scope","fields":['
                '{"name":"before","type":["null",{"type":"record","name":"Value","fields":['
                '{"name":"created_at","type":{"type":"long","connect.name":'
                '"io.debezium.time.Timestamp","connect.version":1}},{"name":"normal_long",'
                '"type":"long"}],"connect.name":"some.scope.Value"}],"default":null},'
                '{"name":"after","type":["null","Value"],"default":null}],'
                '"connect.name":"some.scope.Envelope"}')
    assert parse(schema).canonical() == expected
    assert parse(schema).normalized() == expected


def test_normalization_is_stable_across_spellings() -> None:
    a = {"type": "record", "name": "R", "namespace": "ns", "aliases": ["B", "A"], "x": 1,
         "y": 2, "fields": [f("v", {"type": "int", "q": 1, "p": 2}, default=3)]}
    b = {"y": 2, "fields": [{"default": 3, "type": {"p": 2, "type": "int", "q": 1},
                             "name": "v"}], "x": 1, "aliases": ["A", "B"], "name": "ns.R",
         "type": "record"}
    assert parse(a).canonical() != parse(b).canonical()
    assert parse(a).normalized() == parse(b).normalized()


@pytest.mark.parametrize("schema", [
    record(f("a", {"type": "bytes", "logicalType": "decimal", "scale": 1, "precision": 3}),
           f("b", ["null", {"type": "map", "values": "long", "z": [1, {"b": 1, "a": 0}]}],
             default=None, doc="x", order="ignore"),
           name="a.b.C", aliases=["Q", "P"], doc="", props_z=1),
    {"type": "enum", "name": "E", "symbols": ["B", "A"], "default": "A", "doc": "",
     "aliases": ["y", "x"], "k": True},
    ["null", {"type": "fixed", "name": "F", "size": 16, "logicalType": "uuid", "b": 1,
              "a": 1}],
])
def test_normalization_is_idempotent(schema: Any) -> None:
    once = parse(schema).normalized()
    again = parse(once)
    assert again.canonical() == once
    assert again.normalized() == once


# -- fingerprint -------------------------------------------------------------------------------


def test_fingerprint_ignores_whitespace_and_counts_references() -> None:
    assert parse('{"type": "string"}').fingerprint() == parse('"string"').fingerprint()
    assert parse('"string"').fingerprint() != parse('"int"').fingerprint()
    ref = {"o.json": json.dumps({"type": "fixed", "name": "F", "size": 1})}
    assert parse('"string"', ref).fingerprint() != parse('"string"').fingerprint()


# -- invalid schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "details"), [
    ("not json", "Expecting value: line 1 column 1 (char 0)"),
    ("12", "Schema not yet supported: 12"),
    ('"str"', 'Undefined name: "str"'),
    (record(f("field1", "str"), name="myrecord"),
     '"str" is not a defined name. The type of the "field1" field must be a defined name or '
     'a {"type": ...} expression.'),
    ({"name": "R"}, 'No type: {"name":"R"}'),
    ({"type": "foo"}, "Type not supported: foo"),
    ({"type": "record", "fields": []}, 'No name in schema: {"type":"record","fields":[]}'),
    ({"type": "record", "name": "R"}, 'Record has no fields: {"type":"record","name":"R"}'),
    (record({"type": "int"}), 'No field name: {"type":"int"}'),
    (record({"name": "a"}), 'No field type: {"name":"a"}'),
    (record(f("1a", "int")), "Illegal initial character: 1a"),
    (record(f("a-b", "int")), "Illegal character in: a-b"),
    (record(name="1R"), 'Name "1R" is invalid: Illegal initial character: 1R'),
    (record(name="a-b.R"), 'Namespace part "a-b" is invalid: Illegal character in: a-b'),
    (record(name="int"), "Schemas may not be named after primitives: int"),
    (record(f("a", "int"), f("a", "long")),
     "Duplicate field a in record R: a type:LONG pos:1 and a type:INT pos:0."),
    (record(f("a", "string", default=None)), 'Invalid default for field a: null not a "string"'),
    (record(f("a", "int", default=1.5)), 'Invalid default for field a: 1.5 not a "int"'),
    (record(f("a", "int", default=2**31)),
     'Invalid default for field a: 2147483648 not a "int"'),
    (record(f("a", "boolean", default=0)), 'Invalid default for field a: 0 not a "boolean"'),
    (record(f("a", ["null", "int"], default="x")),
     'Invalid default for field a: "x" not a ["null","int"]'),
    (record(f("a", {"type": "array", "items": "int"}, default=["x"])),
     'Invalid default for field a: ["x"] not a {"type":"array","items":"int"}'),
    (record(f("a", record(f("x", "int"), name="S"), default={})),
     'Invalid default for field a: {} not a {"type":"record","name":"S","fields":'
     '[{"name":"x","type":"int"}]}'),
    (record(f("a", "double", default="abc")), 'For input string: "abc"'),
    (record(f("a", "int", order="up")),
     "No enum constant org.apache.avro.Schema.Field.Order.UP"),
    ({"type": "enum", "name": "E"}, 'Enum has no symbols: {"type":"enum","name":"E"}'),
    ({"type": "enum", "name": "E", "symbols": ["A", "A"]}, "Duplicate enum symbol: A"),
    ({"type": "enum", "name": "E", "symbols": ["1"]}, "Illegal initial character: 1"),
    ({"type": "enum", "name": "E", "symbols": ["A"], "default": "Z"},
     "The Enum Default: Z is not in the enum symbol set: [A]"),
    ({"type": "fixed", "name": "F"}, 'Invalid or no size: {"type":"fixed","name":"F"}'),
    ({"type": "fixed", "name": "F", "size": "4"},
     'Invalid or no size: {"type":"fixed","name":"F","size":"4"}'),
    ({"type": "array"}, 'Array has no items type: {"type":"array"}'),
    ({"type": "map"}, 'Map has no values type: {"type":"map"}'),
    (["int", "int"], "Duplicate in union:int"),
    (["null", ["int"]], 'Nested union: ["null",["int"]]'),
    (record(aliases="x"), 'aliases not an array: {"type":"record","name":"R","fields":[],'
                          '"aliases":"x"}'),
    (record(aliases=[1]), "alias not a string: 1"),
    (record(f("a", {"type": "enum", "name": "R2", "symbols": ["A"]}),
            f("b", {"type": "fixed", "name": "R2", "size": 1})), "Can't redefine: R2"),
])
def test_invalid_schema_messages(schema: Any, details: str) -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        parse(schema)
    assert caught.value.details == details
    assert str(caught.value) == f"Invalid schema of type AVRO, details: {details}"


def test_defaults_that_are_valid() -> None:
    parse(record(f("a", ["null", "int"], default=None), f("b", ["int", "null"], default=None),
                 f("c", "float", default=1), f("d", "double", default="1.5"),
                 f("e", {"type": "enum", "name": "E", "symbols": ["A"]}, default="A"),
                 f("g", {"type": "map", "values": "long"}, default={"k": 2**40}),
                 f("h", record(f("x", "int"), f("y", "int", default=0), name="S"),
                   default={"x": 1}),
                 f("i", "bytes", default="\u00ff"), f("j", "null", default=None)))


# -- references --------------------------------------------------------------------------------

ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme",
           "fields": [f("street", "string")]}
COUNTRY = {"type": "enum", "name": "Country", "namespace": "com.acme", "symbols": ["NL", "FR"]}


def test_a_schema_uses_a_referenced_named_type_by_name() -> None:
    refs = {"address.avsc": json.dumps(ADDRESS)}
    schema = parse(record(f("home", "com.acme.Address"), f("work", ["null", "com.acme.Address"],
                                                          default=None),
                          name="com.acme.Person"), refs)
    assert schema.canonical() == ('{"type":"record","name":"Person","namespace":"com.acme",'
                                  '"fields":[{"name":"home","type":"Address"},{"name":"work",'
                                  '"type":["null","Address"],"default":null}]}')
    assert schema.normalized() == schema.canonical()
    assert schema.references == refs


def test_a_reference_missing_is_an_undefined_name() -> None:
    with pytest.raises(InvalidSchemaError, match=r'"com\.acme\.Address" is not a defined name'):
        parse(record(f("home", "com.acme.Address")))


def test_references_may_depend_on_each_other_in_any_order() -> None:
    with_country = dict(ADDRESS, fields=[f("street", "string"), f("country", "Country")])
    refs = {"address.avsc": json.dumps(with_country), "country.avsc": json.dumps(COUNTRY)}
    schema = parse(record(f("a", "com.acme.Address"), f("c", "com.acme.Country")), refs)
    assert schema.canonical() == ('{"type":"record","name":"R","fields":[{"name":"a","type":'
                                  '"com.acme.Address"},{"name":"c","type":"com.acme.Country"}]}')


def test_a_referenced_type_may_be_repeated_identically_but_not_changed() -> None:
    refs = {"country.avsc": json.dumps(COUNTRY)}
    parse(record(f("c", COUNTRY)), refs)
    changed = dict(COUNTRY, symbols=["NL"])
    with pytest.raises(InvalidSchemaError, match=r"Can't redefine: com\.acme\.Country"):
        parse(record(f("c", changed)), refs)


def test_an_invalid_reference_fails_the_schema() -> None:
    with pytest.raises(InvalidSchemaError, match="Invalid or no size"):
        parse('"string"', {"bad.avsc": '{"type":"fixed","name":"F"}'})


def test_fastavro_reads_the_schema_with_its_references() -> None:
    from io import BytesIO

    import fastavro

    refs = {"address.avsc": json.dumps(ADDRESS)}
    schema = parse(record(f("home", "com.acme.Address"), f("n", "long"), name="com.acme.P"),
                   refs)
    out = BytesIO()
    datum = {"home": {"street": "Main"}, "n": 7}
    fastavro.schemaless_writer(out, schema.fastavro_schema, datum)
    out.seek(0)
    assert fastavro.schemaless_reader(out, schema.fastavro_schema, None) == datum


# -- compatibility: the resolution rules -------------------------------------------------------


@pytest.mark.parametrize(("writer", "reader"), [
    ("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
    ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string"),
    ("null", "null"), ("boolean", "boolean"),
])
def test_numeric_and_string_promotions_are_readable(writer: str, reader: str) -> None:
    assert problems(reader, writer) == []


@pytest.mark.parametrize(("writer", "reader"), [
    ("long", "int"), ("float", "long"), ("double", "float"), ("float", "int"),
    ("string", "int"), ("int", "string"), ("boolean", "int"), ("null", "string"),
    ("int", "bytes"),
])
def test_other_primitive_changes_are_type_mismatches(writer: str, reader: str) -> None:
    assert problems(reader, writer) == [("TYPE_MISMATCH", "/")]


def test_type_mismatch_message() -> None:
    [item] = parse('"int"').can_read(parse('"string"'))
    assert item.additional_info == "reader type: INT not compatible with writer type: STRING"
    assert item.render() == ("{errorType:'TYPE_MISMATCH', description:'The type (path '/') of "
                             "a field in the new schema does not match with the old schema', "
                             "additionalInfo:'reader type: INT not compatible with writer "
                             "type: STRING'}")
    assert item.render("old", "new").startswith(
        "{errorType:'TYPE_MISMATCH', description:'The type (path '/') of a field in the old "
        "schema does not match with the new schema'")


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (record(f("a", "int")), record(f("a", "int"), f("b", "int", default=0)), []),
    (record(f("a", "int")), record(f("a", "int"), f("b", "int")),
     [("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/1")]),
    (record(f("a", "int"), f("b", "int")), record(f("a", "int")), []),
    (record(f("old", "int")), record(f("new", "int", aliases=["old"])), []),
    (record(f("a", "int")), record(f("a", "long")), []),
    (record(f("a", "long")), record(f("a", "int")), [("TYPE_MISMATCH", "/fields/0/type")]),
    (record(f("a", "int"), name="A"), record(f("a", "int"), name="B"),
     [("NAME_MISMATCH", "/name")]),
    (record(f("a", "int"), name="A"), record(f("a", "int"), name="B", aliases=["A"]), []),
    (record(f("a", "int"), name="x.R"), record(f("a", "int"), name="y.R"), []),
    (record(f("n", record(f("x", "int"), name="In"))),
     record(f("n", record(f("x", "int"), f("y", "string"), name="In"))),
     [("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/0/type/fields/1")]),
    (record(f("a", "int")), record(f("a", "int"), f("b", "int"), f("c", "int")),
     [("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/1"),
      ("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/2")]),
])
def test_records(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(reader, writer) == expected


def test_missing_default_message() -> None:
    [item] = parse(record(f("a", "int"), f("b", "int"))).can_read(parse(record(f("a", "int"))))
    assert item.additional_info == "b"
    assert item.describe("new", "old") == ("The field 'b' at path '/fields/1' in the new schema "
                                           "has no default value and is missing in the old "
                                           "schema")


def enum(*symbols: str, name: str = "E", **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": list(symbols), **extra}


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (enum("A", "B"), enum("A", "B", "C"), []),
    (enum("A", "B", "C"), enum("A", "B"), [("MISSING_ENUM_SYMBOLS", "/symbols")]),
    (enum("A", "B", "C"), enum("A", "B", default="A"), []),
    (enum("A"), enum("A", name="F"), [("NAME_MISMATCH", "/name")]),
    (enum("A"), enum("A", name="F", aliases=["E"]), []),
    (record(f("e", enum("A", "B"))), record(f("e", enum("A"))),
     [("MISSING_ENUM_SYMBOLS", "/fields/0/type/symbols")]),
])
def test_enums(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(reader, writer) == expected


def test_missing_symbols_are_listed_sorted() -> None:
    [item] = parse(enum("A")).can_read(parse(enum("A", "D", "C")))
    assert item.additional_info == "[C, D]"
    assert "The new schema is missing enum symbols '[C, D]' at path '/symbols' in the old " \
           "schema" in item.render()


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (["null", "int"], ["null", "int", "string"], []),
    (["null", "int", "string"], ["null", "int"], [("MISSING_UNION_BRANCH", "/2")]),
    (["null", "int"], ["null", "long"], []),
    ("int", ["null", "int"], []),
    ("int", ["null", "double"], []),
    ("string", ["null", "int"], [("MISSING_UNION_BRANCH", "/")]),
    (["int", "long"], "long", []),
    (["int", "string"], "long", [("TYPE_MISMATCH", "/1")]),
    (["null", "string"], "string", [("TYPE_MISMATCH", "/0")]),
    (record(f("u", ["null", "int", "string"])), record(f("u", ["null", "int"])),
     [("MISSING_UNION_BRANCH", "/fields/0/type/2")]),
    ([record(f("a", "int"), name="A"), record(f("b", "int"), name="B")],
     [record(f("a", "int"), name="A"), record(f("b", "int"), name="B")], []),
])
def test_unions(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(reader, writer) == expected


def test_missing_union_branch_message() -> None:
    [item] = parse(["null", "int"]).can_read(parse(["null", "string"]))
    assert item.additional_info == "reader union lacking writer type: STRING"
    assert item.path == "/1"


def fixed(size: int, name: str = "F", **extra: Any) -> dict[str, Any]:
    return {"type": "fixed", "name": name, "size": size, **extra}


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (fixed(4), fixed(4), []),
    (fixed(4), fixed(8), [("FIXED_SIZE_MISMATCH", "/size")]),
    (fixed(4), fixed(4, name="G"), [("NAME_MISMATCH", "/name")]),
    (fixed(4), fixed(4, name="G", aliases=["F"]), []),
    (fixed(4), "bytes", [("TYPE_MISMATCH", "/")]),
])
def test_fixed(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(reader, writer) == expected


def test_fixed_size_message() -> None:
    [item] = parse(fixed(8)).can_read(parse(fixed(4)))
    assert item.additional_info == "expected: 4, found: 8"


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, []),
    ({"type": "array", "items": "long"}, {"type": "array", "items": "int"},
     [("TYPE_MISMATCH", "/items")]),
    ({"type": "map", "values": "int"}, {"type": "map", "values": "double"}, []),
    ({"type": "map", "values": "string"}, {"type": "map", "values": "int"},
     [("TYPE_MISMATCH", "/values")]),
    ({"type": "array", "items": "int"}, {"type": "map", "values": "int"},
     [("TYPE_MISMATCH", "/")]),
    ({"type": "map", "values": {"type": "array", "items": enum("A", "B")}},
     {"type": "map", "values": {"type": "array", "items": enum("A")}},
     [("MISSING_ENUM_SYMBOLS", "/values/items/symbols")]),
])
def test_arrays_and_maps(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(reader, writer) == expected


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    ({"type": "long", "logicalType": "timestamp-millis"}, "long", []),
    ("long", {"type": "long", "logicalType": "timestamp-micros"}, []),
    ({"type": "int", "logicalType": "date"}, "long", []),
    ({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
     {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 1}, []),
    ({"type": "string", "logicalType": "uuid"}, "int", [("TYPE_MISMATCH", "/")]),
])
def test_logical_types_are_their_underlying_types(writer: Any, reader: Any,
                                                  expected: list[tuple[str, str]]) -> None:
    assert problems(reader, writer) == expected


def test_recursive_types_terminate() -> None:
    node = record(f("v", "int"), f("next", ["null", "Node"], default=None), name="Node")
    grown = record(f("v", "int"), f("next", ["null", "Node"], default=None), f("w", "int"),
                   name="Node")
    assert problems(node, node) == []
    assert problems(grown, node) == [("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/2")]


def test_compatibility_through_references() -> None:
    v1 = {"address.avsc": json.dumps(ADDRESS)}
    v2 = {"address.avsc": json.dumps(dict(ADDRESS, fields=[f("street", "string"),
                                                            f("zip", "string")]))}
    person = record(f("home", "com.acme.Address"), name="com.acme.Person")
    [item] = parse(person, v2).can_read(parse(person, v1))
    assert (item.error_type, item.path) == ("READER_FIELD_MISSING_DEFAULT_VALUE",
                                           "/fields/0/type/fields/1")
    assert parse(person, v1).can_read(parse(person, v2)) == []


def test_a_different_schema_type_is_incompatible() -> None:
    from strom.registry.formats.json_schema import JSON

    [item] = parse('"string"').can_read(JSON.parse('{"type":"string"}', {}))
    assert item.render() == "Incompatible because of different schema type"


def test_a_nested_type_of_a_reference_is_written_out_as_java_does() -> None:
    # Java knows a reference's own (top-level) name only, so a type nested in it is written
    # in full where the schema first uses it; the text parses again with the references.
    outer = {"type": "record", "name": "Outer", "fields": [f("inner", record(name="Inner"))]}
    refs = {"outer.avsc": json.dumps(outer)}
    schema = parse(record(f("o", "Outer"), f("i", "Inner")), refs)
    assert schema.canonical() == ('{"type":"record","name":"R","fields":[{"name":"o","type":'
                                  '"Outer"},{"name":"i","type":{"type":"record","name":"Inner",'
                                  '"fields":[]}}]}')
    assert parse(schema.canonical(), refs).canonical() == schema.canonical()


def test_a_schema_nested_too_deeply_is_invalid_not_a_crash() -> None:
    text = '"int"'
    for _ in range(5000):
        text = f'{{"type":"array","items":{text}}}'
    with pytest.raises(InvalidSchemaError) as caught:
        parse(text)
    assert caught.value.details == "the schema nests too deeply"
