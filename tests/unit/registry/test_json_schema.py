"""JSON Schemas: parsing (and its errors), canonical and normalized text, $ref and references,
and Confluent's JSON Schema compatibility rules with their Difference types."""

from __future__ import annotations

import json
from typing import Any

import pytest

from strom.registry.formats.base import InvalidSchemaError
from strom.registry.formats.json_schema import JSON, JsonSchema


def parse(schema: Any, references: dict[str, str] | None = None) -> JsonSchema:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return JSON.parse(text, references or {})


def problems(writer: Any, reader: Any, references: dict[str, str] | None = None,
             writer_references: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """The (error type, path) of each reason `reader` cannot read what `writer` wrote."""
    old = parse(writer, writer_references if writer_references is not None else references)
    return [(i.error_type, i.path) for i in parse(reader, references).can_read(old)]


def obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **extra}


STR, INT, NUM = {"type": "string"}, {"type": "integer"}, {"type": "number"}

# -- canonical and normalized text -------------------------------------------------------------


@pytest.mark.parametrize(("text", "canonical", "normalized"), [
    ('{ "type" : "string" }', '{"type":"string"}', '{"type":"string"}'),
    ('{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}',
     '{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}',
     '{"properties":{"a":{"type":"string"},"b":{"type":"integer"}},"type":"object"}'),
    ('{"type":"number","maximum":1.50,"minimum":1e5,"multipleOf":12345678901234567890}',
     '{"type":"number","maximum":1.50,"minimum":1E+5,"multipleOf":12345678901234567890}',
     '{"maximum":1.50,"minimum":1E+5,"multipleOf":12345678901234567890,"type":"number"}'),
    ('{"description":"café \\u00e9 \\n"}', '{"description":"café é \\n"}',
     '{"description":"café é \\n"}'),
    ("true", "true", "true"),
])
def test_canonical_keeps_key_order_and_normalized_sorts(text: str, canonical: str,
                                                        normalized: str) -> None:
    schema = parse(text)
    assert schema.canonical() == canonical
    assert schema.normalized() == normalized


def test_normalization_is_stable_and_idempotent() -> None:
    a = parse('{"type":"object","required":["x"],"properties":{"x":{"enum":[2,1],'
              '"title":"t"}}}')
    b = parse('{"properties":{"x":{"title":"t","enum":[2,1]}},"required":["x"],'
              '"type":"object"}')
    assert a.canonical() != b.canonical()
    assert a.normalized() == b.normalized()
    again = parse(a.normalized())
    assert again.canonical() == a.normalized()
    assert again.normalized() == a.normalized()


def test_fingerprint_follows_canonical_text_and_references() -> None:
    assert parse('{"type": "string"}').fingerprint() == parse('{"type":"string"}').fingerprint()
    assert parse(STR).fingerprint() != parse(INT).fingerprint()
    refs = {"other.json": '{"type":"string"}'}
    assert parse(STR, refs).fingerprint() != parse(STR).fingerprint()


# -- invalid schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "details"), [
    ("nope", "Invalid JSON schema: Expecting value: line 1 column 1 (char 0)"),
    ('{"type":"string"', "Invalid JSON schema: Expecting ',' delimiter: line 1 column 17 "
                         "(char 16)"),
    ("[1]", "Invalid JSON schema: expected an object or boolean at the root, found ARRAY"),
    ('"string"', "Invalid JSON schema: expected an object or boolean at the root, found "
                 "STRING"),
    ("null", "Invalid JSON schema: expected an object or boolean at the root, found NULL"),
    ('{"type":"strin"}', "Invalid JSON: 'strin' is not valid under any of the given schemas "
                         "at #/type"),
    ('{"type":"string","minLength":"5"}', "Invalid JSON: '5' is not of type 'integer' at "
                                          "#/minLength"),
    ('{"properties":{"a":{"type":1}}}', "Invalid JSON: 1 is not valid under any of the given "
                                        "schemas at #/properties/a/type"),
    ('{"$schema":"http://json-schema.org/draft-04/schema#","required":[]}',
     "Invalid JSON: [] should be non-empty at #/required"),
    ('{"pattern":"("}', "Invalid JSON: '(' is not a 'regex' at #/pattern"),
    ('{"$ref":"#/definitions/Missing"}', "Unresolved $ref '#/definitions/Missing'"),
    ('{"properties":{"a":{"$ref":"#/properties/b"}}}', "Unresolved $ref '#/properties/b'"),
    ('{"$ref":"https://example.com/remote.json"}',
     "Unresolved $ref 'https://example.com/remote.json': no reference of that name (remote "
     "references are not fetched)"),
    ('{"$ref":"#nowhere"}', "Unresolved $ref '#nowhere'"),
])
def test_invalid_schema_messages(text: str, details: str) -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        parse(text)
    assert caught.value.details == details
    assert str(caught.value) == f"Invalid schema of type JSON, details: {details}"


def test_an_invalid_reference_fails_the_schema() -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        parse({"$ref": "other.json"}, {"other.json": "[]"})
    assert caught.value.details == ("Invalid JSON schema (reference other.json): expected an "
                                    "object or boolean at the root, found ARRAY")


@pytest.mark.parametrize("text", [
    '{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer",'
    '"exclusiveMinimum":true,"minimum":0}',
    '{"$schema":"http://json-schema.org/draft-06/schema#","const":1}',
    '{"$schema":"https://json-schema.org/draft/2019-09/schema","$defs":{"a":{"type":"string"}},'
    '"$ref":"#/$defs/a"}',
    '{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"}],'
    '"items":false}',
    '{"if":{"type":"string"},"then":{"minLength":1},"else":{"type":"integer"}}',
    '{"$defs":{"a":{"$anchor":"here","type":"string"}},"$ref":"#here"}',
    "false",
])
def test_valid_schemas_of_each_draft(text: str) -> None:
    parse(text)


# -- references and $ref -----------------------------------------------------------------------


def test_a_ref_to_a_reference_by_name() -> None:
    refs = {"address.json": json.dumps(obj({"street": STR}))}
    schema = parse(obj({"home": {"$ref": "address.json"}}), refs)
    assert schema.canonical() == ('{"type":"object","properties":{"home":'
                                  '{"$ref":"address.json"}}}')
    assert schema.can_read(schema) == []


def test_a_ref_to_a_reference_with_a_fragment_and_a_root_id() -> None:
    refs = {"defs.json": json.dumps({"definitions": {"Street": STR}})}
    parse({"$id": "https://example.com/schemas/person.json",
           "properties": {"street": {"$ref": "defs.json#/definitions/Street"}}}, refs)
    parse({"properties": {"street": {"$ref": "defs.json#/$defs/Street"}}}, refs)


def test_a_change_inside_a_reference_is_found() -> None:
    person = obj({"home": {"$ref": "address.json"}})
    v1 = {"address.json": json.dumps(obj({"street": STR}))}
    v2 = {"address.json": json.dumps(obj({"street": INT}))}
    assert problems(person, person, v2, v1) == [("TYPE_CHANGED", "#/properties/home/properties/"
                                                                  "street")]


def test_local_definitions_and_recursion() -> None:
    tree = {"definitions": {"Node": obj({"value": STR, "children": {
        "type": "array", "items": {"$ref": "#/definitions/Node"}}})},
        "$ref": "#/definitions/Node"}
    assert problems(tree, tree) == []
    narrowed = json.loads(json.dumps(tree))
    narrowed["definitions"]["Node"]["properties"]["value"] = INT
    assert problems(tree, narrowed) == [("TYPE_CHANGED", "#/properties/value")]


def test_definitions_and_defs_find_each_other() -> None:
    parse({"definitions": {"A": STR}, "properties": {"a": {"$ref": "#/$defs/A"}}})
    parse({"$defs": {"A": STR}, "properties": {"a": {"$ref": "#/definitions/A"}}})


# -- compatibility: types ----------------------------------------------------------------------


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (STR, STR, []),
    (STR, INT, [("TYPE_CHANGED", "#/")]),
    (STR, {}, []),
    (STR, True, []),
    ({}, STR, [("TYPE_CHANGED", "#/")]),
    (False, STR, []),
    (INT, NUM, []),
    (NUM, INT, [("TYPE_NARROWED", "#/")]),
    (STR, {"type": ["string", "null"]}, []),
    ({"type": ["string", "null"]}, STR, [("TYPE_CHANGED", "#/")]),
    ({"type": ["string", "null"]}, {"type": ["string", "null", "integer"]}, []),
    ({"type": ["string", "null", "integer"]}, {"type": ["string", "null"]},
     [("SUM_TYPE_NARROWED", "#/")]),
    ({"type": "boolean"}, {"type": "null"}, [("TYPE_CHANGED", "#/")]),
    (obj({}), {"type": "array"}, [("TYPE_CHANGED", "#/")]),
    ({"type": "string", "connect.type": "bytes"}, {"type": "integer", "connect.type": "bytes"},
     []),
])
def test_types(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(writer, reader) == expected


def test_rendered_json_difference() -> None:
    [item] = parse(INT).can_read(parse(STR))
    assert item.describe("new", "old") == ("A type at path '#/' is different between the new "
                                           "schema and the old schema")
    assert item.render() == ('{errorType:"TYPE_CHANGED", description:"A type at path \'#/\' '
                             'is different between the new schema and the old schema\'}')


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (STR, {"type": "string", "maxLength": 5}, [("MAX_LENGTH_ADDED", "#/maxLength")]),
    ({"type": "string", "maxLength": 5}, STR, []),
    ({"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 9}, []),
    ({"type": "string", "maxLength": 9}, {"type": "string", "maxLength": 5},
     [("MAX_LENGTH_DECREASED", "#/maxLength")]),
    (STR, {"type": "string", "minLength": 1}, [("MIN_LENGTH_ADDED", "#/minLength")]),
    ({"type": "string", "minLength": 1}, {"type": "string", "minLength": 2},
     [("MIN_LENGTH_INCREASED", "#/minLength")]),
    ({"type": "string", "minLength": 2}, {"type": "string", "minLength": 1}, []),
    (STR, {"type": "string", "pattern": "^a"}, [("PATTERN_ADDED", "#/pattern")]),
    ({"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "^b"},
     [("PATTERN_CHANGED", "#/pattern")]),
    ({"type": "string", "pattern": "^a"}, STR, []),
    ({"type": "string", "format": "email"}, STR, []),
])
def test_string_bounds(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(writer, reader) == expected


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (NUM, {"type": "number", "maximum": 10}, [("MAXIMUM_ADDED", "#/maximum")]),
    ({"type": "number", "maximum": 10}, {"type": "number", "maximum": 10.5}, []),
    ({"type": "number", "maximum": 10}, {"type": "number", "maximum": 9.5},
     [("MAXIMUM_DECREASED", "#/maximum")]),
    ({"type": "number", "minimum": 0}, {"type": "number", "minimum": 1},
     [("MINIMUM_INCREASED", "#/minimum")]),
    ({"type": "number", "minimum": 1}, {"type": "number", "minimum": 0}, []),
    ({"type": "number", "minimum": 1}, NUM, []),
    (NUM, {"type": "number", "exclusiveMaximum": 3}, [("EXCLUSIVE_MAXIMUM_ADDED",
                                                     "#/exclusiveMaximum")]),
    ({"type": "number", "exclusiveMaximum": 3}, {"type": "number", "exclusiveMaximum": 2},
     [("EXCLUSIVE_MAXIMUM_DECREASED", "#/exclusiveMaximum")]),
    ({"type": "number", "exclusiveMinimum": 3}, {"type": "number", "exclusiveMinimum": 4},
     [("EXCLUSIVE_MINIMUM_INCREASED", "#/exclusiveMinimum")]),
    ({"type": "number", "exclusiveMinimum": 3}, NUM, []),
    (NUM, {"type": "number", "multipleOf": 2}, [("MULTIPLE_OF_ADDED", "#/multipleOf")]),
    ({"type": "number", "multipleOf": 2}, {"type": "number", "multipleOf": 4},
     [("MULTIPLE_OF_EXPANDED", "#/multipleOf")]),
    ({"type": "number", "multipleOf": 4}, {"type": "number", "multipleOf": 2}, []),
    ({"type": "number", "multipleOf": 0.5}, {"type": "number", "multipleOf": 0.25}, []),
    ({"type": "number", "multipleOf": 2}, {"type": "number", "multipleOf": 3},
     [("MULTIPLE_OF_CHANGED", "#/multipleOf")]),
    ({"type": "integer", "maximum": 5}, {"type": "number", "maximum": 6}, []),
])
def test_number_bounds(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(writer, reader) == expected


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    ({"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, []),
    ({"enum": ["a", "b"]}, {"enum": ["b", "a"]}, []),
    ({"enum": ["a", "b"]}, {"enum": ["a"]}, [("ENUM_ARRAY_NARROWED", "#/enum")]),
    ({"enum": ["a", "b"]}, {"enum": ["a", "c"]}, [("ENUM_ARRAY_CHANGED", "#/enum")]),
    ({"enum": [1, "1"]}, {"enum": [1]}, [("ENUM_ARRAY_NARROWED", "#/enum")]),
    ({"type": "string", "enum": ["a"]}, {"type": "string", "enum": ["a", "b"]}, []),
    # With a type too the schema is an allOf of two parts, matched one to one.
    ({"type": "string", "enum": ["a", "b"]}, {"type": "string", "enum": ["a"]},
     [("COMBINED_TYPE_SUBSCHEMAS_CHANGED", "#/")]),
    ({"const": "a"}, {"const": "a"}, []),
    ({"const": "a"}, {"const": "b"}, [("ENUM_ARRAY_CHANGED", "#/const")]),
    ({"const": "a"}, {"enum": ["a"]}, [("TYPE_CHANGED", "#/")]),
])
def test_enums_and_consts(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(writer, reader) == expected


# -- compatibility: objects --------------------------------------------------------------------

CLOSED = {"additionalProperties": False}
PARTIAL = {"additionalProperties": STR}


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    # An open content model (the default): properties may go, not come.
    (obj({"a": STR}), obj({"a": STR, "b": INT}),
     [("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "#/properties/b")]),
    (obj({"a": STR}), obj({"a": STR, "b": INT}, required=["b"]),
     [("REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "#/properties/b")]),
    (obj({"a": STR}), obj({"a": STR, "b": {"type": "integer", "default": 0}}, required=["b"]),
     [("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL", "#/properties/b")]),
    (obj({"a": STR}), obj({"a": STR, "b": {}}), []),
    (obj({"a": STR, "b": INT}), obj({"a": STR}), []),
    # A closed one: properties may come, not go.
    (obj({"a": STR}, **CLOSED), obj({"a": STR, "b": INT}, **CLOSED), []),
    (obj({"a": STR}, **CLOSED), obj({"a": STR, "b": INT}, required=["b"], **CLOSED),
     [("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "#/properties/b")]),
    (obj({"a": STR}, **CLOSED),
     obj({"a": STR, "b": {"type": "integer", "default": 1}}, required=["b"], **CLOSED), []),
    (obj({"a": STR, "b": INT}, **CLOSED), obj({"a": STR}, **CLOSED),
     [("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "#/properties/b")]),
    (obj({"a": STR, "b": False}, **CLOSED), obj({"a": STR}, **CLOSED), []),
    # A partially open one: what its schema covers may come and go.
    (obj({"a": STR}, **PARTIAL), obj({"a": STR, "b": STR}, **PARTIAL), []),
    (obj({"a": STR}, **PARTIAL), obj({"a": STR, "b": INT}, **PARTIAL),
     [("TYPE_CHANGED", "#/properties/b"),
      ("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "#/properties/b")]),
    (obj({"a": STR, "b": STR}, **PARTIAL), obj({"a": STR}, **PARTIAL), []),
    (obj({"a": STR, "b": INT}, **PARTIAL), obj({"a": STR}, **PARTIAL),
     [("TYPE_CHANGED", "#/properties/b"),
      ("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "#/properties/b")]),
    (obj({"a": STR}, patternProperties={"^x_": INT}),
     obj({"a": STR, "x_n": INT}, patternProperties={"^x_": INT}), []),
    (obj({"a": STR}, patternProperties={"^x_": INT}),
     obj({"a": STR, "y": INT}, patternProperties={"^x_": INT}), []),
    # required
    (obj({"a": STR}), obj({"a": STR}, required=["a"]), [("REQUIRED_ATTRIBUTE_ADDED",
                                                     "#/required/a")]),
    (obj({"a": STR}), obj({"a": {"type": "string", "default": ""}}, required=["a"]), []),
    (obj({"a": STR}, required=["a"]), obj({"a": STR}), []),
    # additionalProperties itself
    (obj({"a": STR}), obj({"a": STR}, **CLOSED),
     [("ADDITIONAL_PROPERTIES_REMOVED", "#/additionalProperties")]),
    (obj({"a": STR}, **CLOSED), obj({"a": STR}), []),
    (obj({"a": STR}), obj({"a": STR}, **PARTIAL),
     [("ADDITIONAL_PROPERTIES_NARROWED", "#/additionalProperties")]),
    (obj({"a": STR}, **PARTIAL), obj({"a": STR}), []),
    (obj({"a": STR}, **PARTIAL), obj({"a": STR}, additionalProperties=INT),
     [("TYPE_CHANGED", "#/additionalProperties")]),
    # nested, and the other object keywords
    (obj({"a": obj({"x": STR})}), obj({"a": obj({"x": INT})}),
     [("TYPE_CHANGED", "#/properties/a/properties/x")]),
    (obj({}), obj({}, maxProperties=3), [("MAX_PROPERTIES_ADDED", "#/maxProperties")]),
    (obj({}, maxProperties=3), obj({}, maxProperties=5), []),
    (obj({}, minProperties=1), obj({}, minProperties=2),
     [("MIN_PROPERTIES_INCREASED", "#/minProperties")]),
    (obj({"a": STR}), obj({"a": STR}, dependencies={"a": ["b"]}),
     [("DEPENDENCY_ARRAY_ADDED", "#/dependencies/a")]),
    (obj({"a": STR}, dependencies={"a": ["b"]}), obj({"a": STR}, dependencies={"a": ["b", "c"]}),
     [("DEPENDENCY_ARRAY_EXTENDED", "#/dependencies/a")]),
    (obj({"a": STR}, dependencies={"a": ["b", "c"]}), obj({"a": STR}, dependencies={"a": ["b"]}),
     []),
    (obj({"a": STR}), obj({"a": STR}, dependencies={"a": obj({"b": STR})}),
     [("DEPENDENCY_SCHEMA_ADDED", "#/dependencies/a")]),
    (obj({"a": STR}, dependencies={"a": obj({"b": STR})}), obj({"a": STR}), []),
    ({"properties": {"a": STR}}, {"properties": {"a": INT}}, [("TYPE_CHANGED", "#/properties/a")]),
])
def test_objects(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(writer, reader) == expected


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    ({"$schema": "https://json-schema.org/draft/2020-12/schema", **obj({"a": STR}),
      "unevaluatedProperties": False},
     {"$schema": "https://json-schema.org/draft/2020-12/schema", **obj({"a": STR, "b": INT}),
      "unevaluatedProperties": False}, []),
    ({"$schema": "https://json-schema.org/draft/2020-12/schema", **obj({"a": STR})},
     {"$schema": "https://json-schema.org/draft/2020-12/schema", **obj({"a": STR}),
      "unevaluatedProperties": False},
     [("UNEVALUATED_PROPERTIES_REMOVED", "#/unevaluatedProperties")]),
    ({**obj({"a": STR}), "unevaluatedProperties": False},
     {**obj({"a": STR, "b": INT}), "unevaluatedProperties": False},
     [("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "#/properties/b")]),
])
def test_unevaluated_properties_in_modern_drafts_only(writer: Any, reader: Any,
                                                      expected: list[tuple[str, str]]) -> None:
    assert problems(writer, reader) == expected


def test_property_added_to_open_model_message() -> None:
    [item] = parse(obj({"a": STR, "b": INT})).can_read(parse(obj({"a": STR})))
    assert item.describe("new", "old") == ("The new schema has an open content model and has "
                                           "a property or item at path '#/properties/b' which "
                                           "is missing in the old schema")


# -- compatibility: arrays ---------------------------------------------------------------------


def arr(**extra: Any) -> dict[str, Any]:
    return {"type": "array", **extra}


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (arr(items=STR), arr(items=STR), []),
    (arr(items=STR), arr(items=INT), [("TYPE_CHANGED", "#/items")]),
    (arr(items=INT), arr(items=NUM), []),
    (arr(), arr(items=STR), [("SCHEMA_ADDED", "#/items")]),
    (arr(items=STR), arr(), []),
    (arr(items=obj({"a": STR}, **CLOSED)), arr(items=obj({}, **CLOSED)),
     [("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "#/items/properties/a")]),
    (arr(), arr(maxItems=3), [("MAX_ITEMS_ADDED", "#/maxItems")]),
    (arr(maxItems=3), arr(maxItems=2), [("MAX_ITEMS_DECREASED", "#/maxItems")]),
    (arr(minItems=1), arr(minItems=2), [("MIN_ITEMS_INCREASED", "#/minItems")]),
    (arr(minItems=2), arr(), []),
    (arr(), arr(uniqueItems=True), [("UNIQUE_ITEMS_ADDED", "#/uniqueItems")]),
    (arr(uniqueItems=True), arr(), []),
    # tuples: the same content models as objects
    (arr(items=[STR]), arr(items=[STR, INT]), [("ITEM_ADDED_TO_OPEN_CONTENT_MODEL", "#/items/1")]),
    (arr(items=[STR]), arr(items=[STR, {}]), []),
    (arr(items=[STR, INT]), arr(items=[STR]), []),
    (arr(items=[STR], additionalItems=False), arr(items=[STR, INT], additionalItems=False), []),
    (arr(items=[STR, INT], additionalItems=False), arr(items=[STR], additionalItems=False),
     [("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", "#/items/1")]),
    (arr(items=[STR, INT], additionalItems=INT), arr(items=[STR], additionalItems=INT), []),
    (arr(items=[STR]), arr(items=[STR], additionalItems=False),
     [("ADDITIONAL_ITEMS_REMOVED", "#/additionalItems")]),
    (arr(items=[STR]), arr(items=[INT]), [("TYPE_CHANGED", "#/items/0")]),
])
def test_arrays(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(writer, reader) == expected


# -- compatibility: combined schemas and not ---------------------------------------------------


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    ({"oneOf": [STR, INT]}, {"oneOf": [STR, INT, {"type": "boolean"}]}, []),
    ({"oneOf": [STR, INT]}, {"oneOf": [STR]}, [("SUM_TYPE_NARROWED", "#/")]),
    ({"anyOf": [STR, INT]}, {"anyOf": [INT, STR]}, []),
    ({"allOf": [obj({"a": STR}), {"required": ["a"]}]}, {"allOf": [obj({"a": STR})]}, []),
    ({"allOf": [obj({"a": STR})]}, {"allOf": [obj({"a": STR}), {"required": ["a"]}]},
     [("PRODUCT_TYPE_EXTENDED", "#/")]),
    ({"oneOf": [STR, INT]}, {"anyOf": [STR, INT]}, []),
    ({"anyOf": [STR, INT]}, {"oneOf": [STR, INT]}, [("COMBINED_TYPE_CHANGED", "#/")]),
    ({"oneOf": [STR, INT]}, {"oneOf": [STR, {"type": "boolean"}]},
     [("COMBINED_TYPE_SUBSCHEMAS_CHANGED", "#/")]),
    ({"oneOf": [STR, obj({"a": STR})]}, {"oneOf": [STR, obj({"a": INT})]},
     [("COMBINED_TYPE_SUBSCHEMAS_CHANGED", "#/")]),
    (STR, {"oneOf": [STR, INT]}, []),
    (STR, {"anyOf": [INT, {"type": "boolean"}]}, [("TYPE_CHANGED", "#/")]),
    ({"allOf": [STR, {"maxLength": 5}]}, STR, []),
    ({"oneOf": [STR]}, STR, []),
    ({"oneOf": [STR, INT]}, STR, [("TYPE_CHANGED", "#/")]),
    ({"not": STR}, {"not": {"type": ["string", "integer"]}}, [("NOT_TYPE_EXTENDED", "#/not")]),
    ({"not": {"type": ["string", "integer"]}}, {"not": STR}, []),
])
def test_combined_and_not(writer: Any, reader: Any, expected: list[tuple[str, str]]) -> None:
    assert problems(writer, reader) == expected


def test_same_schema_is_always_compatible() -> None:
    big = obj({"a": {"oneOf": [STR, INT, obj({"x": arr(items=[STR, INT])})]},
               "b": {"allOf": [{"$ref": "#/definitions/D"}, {"required": ["c"]}]}},
              definitions={"D": obj({"c": {"enum": [1, 2]}})}, additionalProperties=False)
    assert problems(big, big) == []


def test_a_circular_ref_is_invalid() -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        parse({"$ref": "#"})
    assert caught.value.details == "Circular $ref '#'"


def test_a_schema_nested_too_deeply_is_invalid_not_a_crash() -> None:
    text = "{}"
    for _ in range(5000):
        text = f'{{"items":{text}}}'
    with pytest.raises(InvalidSchemaError) as caught:
        parse(text)
    assert caught.value.details == "the schema nests too deeply"


def test_braces_in_a_path_are_kept_in_the_description() -> None:
    writer = obj({"{reader}": STR})
    [item] = parse(obj({"{reader}": INT})).can_read(parse(writer))
    assert item.path == "#/properties/{reader}"
    assert item.describe("new", "old") == ("A type at path '#/properties/{reader}' is "
                                           "different between the new schema and the old "
                                           "schema")
