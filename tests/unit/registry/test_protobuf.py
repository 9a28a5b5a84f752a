"""The Protobuf schema format: parsing, canonical and normalized text, message indexes,
descriptors, and compatibility by Confluent's Protobuf rules."""

from __future__ import annotations

import base64
import io

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, struct_pb2

from strom.registry.formats.base import InvalidSchemaError
from strom.registry.formats.protobuf import (
    ProtobufFormat,
    ProtobufSchema,
    decode_message_indexes,
    encode_message_indexes,
    parse,
)

ORDERS = """\
// Orders, as a team might write them.
syntax = "proto3";

package shop.orders.v1;

import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

option java_package = "com.example.shop.orders";
option go_package = "example.com/shop/orders;orders";
option java_multiple_files = true;

/* An order. */
message Order {
  string id = 1;
  Customer customer = 2;
  repeated LineItem items = 3;
  map<string, string> labels = 4;
  Status status = 5;
  google.protobuf.Timestamp created_at = 6;
  optional string coupon = 7;
  google.protobuf.StringValue note = 8 [deprecated = true];
  oneof payment {
    Card card = 10;
    string invoice_id = 11;
  }
  reserved 9, 15 to 20, 100 to max;
  reserved "legacy_total";

  message LineItem {
    string sku = 1;
    uint32 quantity = 2;
    sint64 price_cents = 3;
  }
  message Card { string last4 = 1; fixed32 expiry = 2; }

  enum Status {
    STATUS_UNSPECIFIED = 0;
    PLACED = 1;
    SHIPPED = 2 [deprecated = true];
  }
}

message Customer {
  string id = 1;
  string email = 2 [json_name = "mail"];
}

service Orders {
  rpc Place (Order) returns (Order);
  rpc Watch (Customer) returns (stream Order) { option deprecated = true; }
}
"""

ORDERS_CANONICAL = """\
syntax = "proto3";
package shop.orders.v1;

import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

option java_package = "com.example.shop.orders";
option go_package = "example.com/shop/orders;orders";
option java_multiple_files = true;

message Order {
  reserved 9, 15 to 20, 100 to max;
  reserved "legacy_total";

  string id = 1;
  Customer customer = 2;
  repeated LineItem items = 3;
  map<string, string> labels = 4;
  Status status = 5;
  google.protobuf.Timestamp created_at = 6;
  optional string coupon = 7;
  google.protobuf.StringValue note = 8 [deprecated = true];

  oneof payment {
    Card card = 10;
    string invoice_id = 11;
  }

  message LineItem {
    string sku = 1;
    uint32 quantity = 2;
    sint64 price_cents = 3;
  }
  message Card {
    string last4 = 1;
    fixed32 expiry = 2;
  }
  enum Status {
    STATUS_UNSPECIFIED = 0;
    PLACED = 1;
    SHIPPED = 2 [deprecated = true];
  }
}
message Customer {
  string id = 1;
  string email = 2 [json_name = "mail"];
}

service Orders {
  rpc Place (Order) returns (Order);
  rpc Watch (Customer) returns (stream Order) {
    option deprecated = true;
  };
}
"""

ORDERS_NORMALIZED = """\
syntax = "proto3";
package shop.orders.v1;

import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

option go_package = "example.com/shop/orders;orders";
option java_multiple_files = true;
option java_package = "com.example.shop.orders";

message Order {
  reserved 9;
  reserved 15 to 20;
  reserved 100 to max;
  reserved "legacy_total";

  string id = 1;
  .shop.orders.v1.Customer customer = 2;
  repeated .shop.orders.v1.Order.LineItem items = 3;
  map<string, string> labels = 4;
  .shop.orders.v1.Order.Status status = 5;
  .google.protobuf.Timestamp created_at = 6;
  optional string coupon = 7;
  .google.protobuf.StringValue note = 8 [deprecated = true];

  oneof payment {
    .shop.orders.v1.Order.Card card = 10;
    string invoice_id = 11;
  }

  message LineItem {
    string sku = 1;
    uint32 quantity = 2;
    sint64 price_cents = 3;
  }
  message Card {
    string last4 = 1;
    fixed32 expiry = 2;
  }
  enum Status {
    STATUS_UNSPECIFIED = 0;
    PLACED = 1;
    SHIPPED = 2 [deprecated = true];
  }
}
message Customer {
  string id = 1;
  string email = 2 [json_name = "mail"];
}

service Orders {
  rpc Place (.shop.orders.v1.Order) returns (.shop.orders.v1.Order);
  rpc Watch (.shop.orders.v1.Customer) returns (stream .shop.orders.v1.Order) {
    option deprecated = true;
  };
}
"""

LEGACY_PROTO2 = """\
syntax = "proto2";
package legacy;

message Account {
  required int64 id = 1;
  optional string name = 2 [default = "anonymous"];
  optional Kind kind = 3 [default = PERSONAL];
  repeated int32 scores = 4 [packed = true];
  optional bytes blob = 5;
  optional group Address = 6 {
    optional string city = 1;
  }
  extensions 100 to 199;

  enum Kind {
    option allow_alias = true;
    PERSONAL = 1;
    PRIVATE = 1;
    BUSINESS = 2;
  }
}

extend Account {
  optional string nickname = 100;
}
"""


def p(text: str, references: dict[str, str] | None = None) -> ProtobufSchema:
    return parse(text, references or {})


def b64(fd: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.b64encode(fd.SerializeToString()).decode()


# -- parsing and canonical text -------------------------------------------------------------


def test_canonical_text_of_a_real_world_proto3_file() -> None:
    schema = p(ORDERS)
    assert schema.schema_type == "PROTOBUF"
    assert schema.canonical() == ORDERS_CANONICAL
    assert p(schema.canonical()).canonical() == ORDERS_CANONICAL  # a fixed point


def test_normalized_text_qualifies_names_and_sorts() -> None:
    schema = p(ORDERS)
    assert schema.normalized() == ORDERS_NORMALIZED
    assert p(ORDERS_NORMALIZED).normalized() == ORDERS_NORMALIZED  # normalizing twice


def test_proto2_round_trip_keeps_labels_defaults_groups_and_extensions() -> None:
    text = p(LEGACY_PROTO2).canonical()
    assert 'optional string name = 2 [default = "anonymous"];' in text
    assert "optional Kind kind = 3 [default = PERSONAL];" in text
    assert "required int64 id = 1;" in text
    assert "optional group Address = 6 {\n    optional string city = 1;\n  }" in text
    assert "extensions 100 to 199;" in text
    assert "extend Account {\n  optional string nickname = 100;\n}" in text
    assert "    option allow_alias = true;\n    PERSONAL = 1;\n" in text
    assert p(text).canonical() == text
    normalized = p(LEGACY_PROTO2).normalized()
    assert not normalized.startswith("syntax")  # proto2 is the default, left out
    assert "extend .legacy.Account {" in normalized
    assert "optional .legacy.Account.Kind kind = 3 [default = PERSONAL];" in normalized


def test_file_without_syntax_is_proto2() -> None:
    schema = p("message A { optional int32 a = 1; }")
    assert schema.canonical() == "\nmessage A {\n  optional int32 a = 1;\n}\n"


def test_comments_whitespace_and_quotes_do_not_change_the_canonical_text() -> None:
    a = p('syntax="proto3";message A{string a=1;/* c */int32 b=2;}// end')
    b = p("syntax = 'proto3';\n\n// doc\nmessage A {\n  string a = 1;\n  int32 b = 2;\n}\n")
    assert a.canonical() == b.canonical()
    assert a.fingerprint() == b.fingerprint()


def test_option_values_in_text_format() -> None:
    schema = p(
        """syntax = "proto3";
        import "google/protobuf/descriptor.proto";
        message Rules { int32 min = 1; repeated string tags = 2; Rules nested = 3; }
        extend google.protobuf.FieldOptions { Rules rules = 50000; }
        message M {
          string a = 1 [(rules) = {min: 1 tags: "x" tags: ["y", "z"] nested { min: 2 }}];
          string b = 2 [(rules).min = 0x10, (rules).tags = "it's"];
        }"""
    )
    canonical = schema.canonical()
    assert (
        '  string a = 1 [(rules) = {\n    min: 1,\n    tags: [\n      "x",\n      "y",\n'
        '      "z"\n    ],\n    nested: {\n      min: 2\n    }\n  }];\n'
    ) in canonical
    assert "  string b = 2 [\n    (rules).min = 0x10,\n    (rules).tags = \"it\\'s\"\n  ];" in (
        canonical
    )
    normalized = schema.normalized()
    # Custom options of a singular extension merge into one map, qualified, keys sorted.
    assert (
        '  string b = 2 [(rules) = {\n    min: 16,\n    tags: "it\\\'s"\n  }];\n'
    ) in normalized
    assert p(normalized).normalized() == normalized


def test_normalization_folds_map_entries_sorts_and_dedups() -> None:
    a = p(
        """syntax = "proto3";
        package n;
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/any.proto";
        option java_package = "x";
        option deprecated = false;
        message M {
          reserved 8, 3 to 4;
          int32 z = 9;
          map<int64, M> children = 2;
          oneof second { string s = 7; }
          oneof first { int32 f = 5; }
          int32 a = 1;
          enum E { option allow_alias = true; Z = 0; B = 1; A = 1; }
        }"""
    )
    assert a.normalized() == (
        'syntax = "proto3";\npackage n;\n\n'
        'import "google/protobuf/any.proto";\nimport "google/protobuf/timestamp.proto";\n\n'
        'option deprecated = false;\noption java_package = "x";\n\n'
        "message M {\n  reserved 3 to 4;\n  reserved 8;\n\n"
        "  int32 a = 1;\n  map<int64, .n.M> children = 2;\n  int32 z = 9;\n\n"
        "  oneof first {\n    int32 f = 5;\n  }\n  oneof second {\n    string s = 7;\n  }\n\n"
        "  enum E {\n    option allow_alias = true;\n    Z = 0;\n    A = 1;\n    B = 1;\n  }\n}\n"
    )


def test_number_normalization() -> None:
    from strom.registry.formats._protobuf.printer import normalize_number

    cases = {"0x10": "16", "010": "8", "-2.0": "-2", "10f": "10", "1.23f": "1.23",
             "1.23456": "1.235", "1e3": "1000", "inf": "inf", "-nan": "-nan", "7": "7"}  # fmt: skip
    assert {k: normalize_number(k) for k in cases} == cases


def test_imports_resolve_through_references() -> None:
    common = 'syntax = "proto3";\npackage common;\nimport "base.proto";\nmessage Money { base.Units u = 1; }\n'
    base = 'syntax = "proto3";\npackage base;\nmessage Units { int64 n = 1; }\n'
    schema = p(
        'syntax = "proto3";\nimport "common.proto";\nmessage Price { common.Money amount = 1; }',
        {"base.proto": base, "common.proto": common},
    )
    assert ".common.Money amount = 1;" in schema.normalized()
    with pytest.raises(InvalidSchemaError, match=r"import 'base\.proto'"):
        p('syntax = "proto3";\nimport "common.proto";\nmessage P {}', {"common.proto": common})


def test_well_known_imports_need_no_reference() -> None:
    schema = p(
        'syntax = "proto3";\n'
        'import "google/protobuf/timestamp.proto";\nimport "google/protobuf/struct.proto";\n'
        'import "google/type/money.proto";\nimport "confluent/type/decimal.proto";\n'
        "message M { google.protobuf.Timestamp at = 1; google.protobuf.Struct s = 2;\n"
        "  google.type.Money price = 3; confluent.type.Decimal d = 4; }"
    )
    assert ".google.protobuf.Timestamp at = 1;" in schema.normalized()


def test_a_reference_may_be_a_serialized_descriptor() -> None:
    dep = p('syntax = "proto3";\npackage dep;\nmessage D { string s = 1; }')
    schema = p(
        'syntax = "proto3";\nimport "dep.proto";\nmessage M { dep.D d = 1; }',
        {"dep.proto": dep.serialized()},
    )
    assert ".dep.D d = 1;" in schema.normalized()


INVALID = [
    ("", "Empty schema"),
    ('syntax = "proto3"\nmessage A {}', "line 2, column 1: expected ';'"),
    ('syntax = "proto4";', "unknown syntax 'proto4'"),
    ('package a;\nsyntax = "proto3";', "'syntax' must be the first statement"),
    ('edition = "2023";', "editions are not supported"),
    ('syntax = "proto3"; message A { string s = 1 }', "expected ';'"),
    ('syntax = "proto3"; message A { string s = "x"; }', "expected the number of field 's'"),
    ('syntax = "proto3"; message A { string s = 1;', "not closed"),
    ('syntax = "proto3"; message A { string s = 1 [default = "x"]; }', "not allowed in proto3"),
    ('syntax = "proto3"; message A { required int32 a = 1; }', "'required' is not allowed"),
    ("message A { int32 a = 1; }", "proto2 fields need one"),
    ('syntax = "proto3"; message A { int32 a = 1; int32 b = 1; }', "already used by field 'a'"),
    ('syntax = "proto3"; message A { int32 a = 1; string a = 2; }', "used twice"),
    ('syntax = "proto3"; message A { int32 a = 0; }', "out of range"),
    ('syntax = "proto3"; message A { int32 a = 19000; }', "reserved for the protobuf"),
    ('syntax = "proto3"; message A { int32 a = 536870912; }', "out of range"),
    ('syntax = "proto3"; message A { reserved 2; int32 a = 2; }', "is reserved"),
    ('syntax = "proto3"; message A { reserved "a"; int32 a = 2; }', "is reserved"),
    ('syntax = "proto3"; message A { Missing m = 1; }', "unknown type 'Missing'"),
    ('syntax = "proto3"; message A { map<float, string> m = 1; }', "cannot be a map key"),
    ('syntax = "proto3"; message A { repeated map<string, string> m = 1; }', "cannot have a label"),
    ('syntax = "proto3"; message A { oneof o { optional int32 a = 1; } }', "cannot have a label"),
    ('syntax = "proto3"; message A {} message A {}', "already defined"),
    ('syntax = "proto3"; enum E { A = 1; }', "first value must be zero"),
    ('syntax = "proto3"; enum E { A = 0; B = 0; }', "allow_alias"),
    ('syntax = "proto3"; service S { rpc R (Nope) returns (Nope); }', "unknown message type"),
    ('syntax = "proto3"; extend Nope { int32 x = 100; }', "unknown message type 'Nope'"),
    ('syntax = "proto3"; import "nope.proto"; message A {}', "import 'nope.proto'"),
    ('syntax = "proto3"; message A { string s = 1; } /* open', "unterminated comment"),
    ('syntax = "proto3"; option x = "open;', "unterminated string"),
    ("message A { optional group g = 1 {} }", "capital letter"),
    ("syntax = 'proto3'; " + "message A { " * 150 + "}" * 150, "nested more than 100"),
    ("QUJDRA==", "expected"),  # base64, but not of a file descriptor
    # What the protobuf runtime refuses when the schema is compiled:
    (
        "message A { optional E e = 1 [default = NOPE]; enum E { X = 1; } }",
        "Invalid default 'NOPE'",
    ),
    ("message A { optional bool b = 1 [default = 1]; }", "Invalid default '1'"),
    ('syntax = "proto3"; message A {} service A { rpc R (A) returns (A); }', "duplicate symbol"),
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_schemas_are_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidSchemaError) as info:
        ProtobufFormat().parse(text, {})
    assert message in info.value.details
    assert str(info.value).startswith("Invalid schema of type PROTOBUF, details: ")


def test_a_bad_reference_is_named() -> None:
    with pytest.raises(InvalidSchemaError, match=r"reference 'r\.proto'"):
        p('syntax = "proto3"; import "r.proto"; message A {}', {"r.proto": "message {"})


# -- descriptors (Confluent's serializers register and read these) -------------------------


def test_serialized_descriptor_is_accepted_by_a_client_pool() -> None:
    dep = p('syntax = "proto3";\npackage dep;\nmessage D { string s = 1; }')
    schema = p(ORDERS.replace("Customer customer = 2;", "dep.D customer = 2;").replace(
        'import "google/protobuf/wrappers.proto";',
        'import "google/protobuf/wrappers.proto";\nimport "dep.proto";',
    ), {"dep.proto": dep.canonical()})
    pool = descriptor_pool.DescriptorPool()
    from google.protobuf import timestamp_pb2, wrappers_pb2

    for module in (timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    for name, s in (("dep.proto", dep), ("orders.proto", schema)):
        fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(s.serialized()))
        fd.name = name
        pool.Add(fd)
    order_type = pool.FindMessageTypeByName("shop.orders.v1.Order")
    assert order_type.fields_by_name["labels"].message_type.GetOptions().map_entry
    assert [o.name for o in order_type.oneofs] == ["payment", "_coupon"]
    cls = message_factory.GetMessageClass(order_type)
    msg = cls(id="o-1", labels={"a": "b"}, card={"last4": "1234"}, coupon="X")
    msg.customer.s = "c"
    data = msg.SerializeToString()
    assert cls.FromString(data) == msg
    schema.check_payload(data, schema.message_indexes("shop.orders.v1.Order"))


def test_descriptor_registration_matches_text_registration_when_normalized() -> None:
    schema = p(ORDERS)
    from_descriptor = p(schema.serialized())
    assert from_descriptor.canonical() != schema.canonical()  # map entries spelled out
    assert "    option map_entry = true;\n" in from_descriptor.canonical()
    assert from_descriptor.normalized() == schema.normalized()
    assert not from_descriptor.can_read(schema) and not schema.can_read(from_descriptor)


def test_descriptor_of_a_runtime_file_as_a_python_client_registers_it() -> None:
    fd = descriptor_pb2.FileDescriptorProto.FromString(struct_pb2.DESCRIPTOR.serialized_pb)
    schema = p(b64(fd))
    canonical = schema.canonical()
    assert canonical.startswith('syntax = "proto3";\npackage google.protobuf;\n')
    assert (
        '  repeated .google.protobuf.Struct.FieldsEntry fields = 1 [json_name = "fields"];\n'
    ) in canonical
    assert "message FieldsEntry {\n    option map_entry = true;\n  \n" in canonical
    # A map entry is a nested message for the message indexes, as in the client's descriptor.
    assert schema.message_names()[:2] == [
        "google.protobuf.Struct",
        "google.protobuf.Struct.FieldsEntry",
    ]
    assert schema.message_indexes("google.protobuf.ListValue") == [2]
    assert p(canonical).canonical() == canonical


def test_confluent_python_client_round_trip() -> None:
    """What confluent-kafka-python's ProtobufSerializer registers (the base64 of its compiled
    file) and reads back (`?format=serialized`), and the message indexes it writes."""
    from confluent_kafka.schema_registry._sync.protobuf import ProtobufSerializer
    from confluent_kafka.schema_registry.common import protobuf as client

    source = p(ORDERS)
    client_pool = descriptor_pool.DescriptorPool()
    client._init_pool(client_pool)
    client_pool.Add(source.file_descriptor("shop/orders.proto"))
    file = client_pool.FindFileByName("shop/orders.proto")
    registered = p(client._schema_to_str(file))  # what the serializer sends
    assert registered.normalized() == source.normalized()
    for name in [*registered.message_names(), "shop.orders.v1.Order.LabelsEntry"]:
        descriptor = client_pool.FindMessageTypeByName(name)
        indexes = client._create_index_array(descriptor)
        assert registered.message_indexes(name) == indexes, name
        written = io.BytesIO()
        ProtobufSerializer._encode_varints(written, indexes)
        assert written.getvalue() == encode_message_indexes(indexes)
    # The deserializer's side: the schema as ?format=serialized returns it.
    reader_pool = descriptor_pool.DescriptorPool()
    client._init_pool(reader_pool)
    reader_pool.Add(client._str_to_proto("default", registered.serialized()))
    writer_cls = message_factory.GetMessageClass(
        client_pool.FindMessageTypeByName("shop.orders.v1.Order")
    )
    reader_cls = message_factory.GetMessageClass(
        reader_pool.FindMessageTypeByName("shop.orders.v1.Order")
    )
    data = writer_cls(id="o-9", labels={"k": "v"}, invoice_id="inv").SerializeToString()
    assert reader_cls.FromString(data).labels["k"] == "v"
    registered.check_payload(data, [0])


def test_check_payload_refuses_what_is_not_the_message() -> None:
    schema = p(LEGACY_PROTO2)
    schema.check_payload(b"\x08\x01", [0])  # id = 1
    with pytest.raises(ValueError, match="required fields missing: id"):
        schema.check_payload(b"\x12\x01a", [0])  # only name
    with pytest.raises(ValueError, match=r"not a valid legacy\.Account"):
        schema.check_payload(b"\x12\x05a", [0])  # truncated string
    with pytest.raises(ValueError, match="invalid message indexes"):
        schema.check_payload(b"", [3])


# -- message indexes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("indexes", "data"),
    [
        ([0], b"\x00"),
        ([], b"\x00"),
        ([1], b"\x02\x02"),
        ([0, 0], b"\x04\x00\x00"),
        ([2, 70], b"\x04\x04\x8c\x01"),
    ],
)
def test_message_index_encoding(indexes: list[int], data: bytes) -> None:
    assert encode_message_indexes(indexes) == data
    assert decode_message_indexes(b"\x00\x00\x00\x00\x07" + data + b"payload", 5) == (
        indexes or [0],
        5 + len(data),
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "unexpected end"),
        (b"\x04\x02\x82", "unexpected end"),
        (b"\x03\x00", "bad count -2"),
        (b"\x02\x01", "negative index"),
        (b"\xff\xff\xff\xff\xff\x01", "too long"),
        (b"\x7e", "bad count 63"),
    ],
)
def test_message_index_decoding_refuses_garbage(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_message_indexes(data)


def test_message_indexes_and_names() -> None:
    schema = p(ORDERS)
    assert schema.message_names() == [
        "shop.orders.v1.Order",
        "shop.orders.v1.Order.LineItem",
        "shop.orders.v1.Order.Card",
        "shop.orders.v1.Customer",
    ]
    for i, name in enumerate(schema.message_names()):
        indexes = schema.message_indexes(name)
        assert schema.message_name(indexes) == name, i
    assert schema.message_indexes("shop.orders.v1.Order.Card") == [0, 1]
    assert schema.message_indexes("Customer") == [1]  # relative to the package too
    assert schema.message_name([]) == schema.message_name([0]) == "shop.orders.v1.Order"
    assert schema.name() == "shop.orders.v1.Order"
    with pytest.raises(ValueError, match="no message"):
        schema.message_indexes("shop.orders.v1.Order.Status")  # an enum
    with pytest.raises(ValueError, match="invalid message indexes"):
        schema.message_name([0, 5])


def test_message_indexes_skip_enums_and_follow_a_public_import_wrapper() -> None:
    inner = 'syntax = "proto3";\npackage in;\nenum E { Z = 0; }\nmessage A {}\nmessage B {}\n'
    assert p(inner).message_indexes("in.B") == [1]
    wrapper = p('syntax = "proto3";\nimport public "inner.proto";\n', {"inner.proto": inner})
    assert wrapper.message_name([1]) == "in.B"
    assert wrapper.name() == "in.A"


# -- compatibility --------------------------------------------------------------------------


def diff(writer: str, reader: str, refs_w: dict[str, str] | None = None,
         refs_r: dict[str, str] | None = None) -> list[str]:  # fmt: skip
    """Every difference, as 'TYPE path', for `reader` reading what `writer` wrote."""
    return [f"{d.type} {d.path}" for d in p(reader, refs_r).differences(p(writer, refs_w))]


def incompatible(writer: str, reader: str, refs_w: dict[str, str] | None = None,
                 refs_r: dict[str, str] | None = None) -> list[str]:  # fmt: skip
    return [f"{i.error_type} {i.path}" for i in p(reader, refs_r).can_read(p(writer, refs_w))]


P3 = 'syntax = "proto3";\n'
P2 = 'syntax = "proto2";\n'


def test_identical_schemas_have_no_differences() -> None:
    assert diff(ORDERS, ORDERS) == []
    assert incompatible(LEGACY_PROTO2, LEGACY_PROTO2) == []


def test_package_changed() -> None:
    assert incompatible(P3 + "package a;", P3 + "package b;") == ["PACKAGE_CHANGED #/"]
    assert incompatible(P3 + "package a;", P3 + "package a; message M {}") == []


def test_message_removed_added_and_moved() -> None:
    two = P3 + "message A { int32 x = 1; } message B { int32 y = 1; }"
    assert incompatible(two, P3 + "message A { int32 x = 1; }") == ["MESSAGE_REMOVED #/B"]
    assert diff(P3 + "message A { int32 x = 1; }", two) == ["MESSAGE_ADDED #/B"]
    swapped = P3 + "message B { int32 y = 1; } message A { int32 x = 1; }"
    assert diff(two, swapped) == ["MESSAGE_MOVED #/A", "MESSAGE_MOVED #/B"]
    assert incompatible(two, swapped) == []
    nested = P3 + "message A { message N {} }"
    assert incompatible(nested, P3 + "message A {}") == ["MESSAGE_REMOVED #/A/N"]


def test_field_added_removed_renamed_are_compatible() -> None:
    w = P3 + "message M { int32 a = 1; string b = 2; }"
    r = P3 + "message M { int32 renamed = 1; bool c = 3; }"
    assert diff(w, r) == ["FIELD_NAME_CHANGED #/M/1", "FIELD_REMOVED #/M/2", "FIELD_ADDED #/M/3"]
    assert incompatible(w, r) == []


def test_field_kind_changed() -> None:
    w = P3 + "message M { int32 a = 1; map<string, int32> m = 2; } message O {}"
    r = P3 + "message M { O a = 1; int32 m = 2; } message O {}"
    assert incompatible(w, r) == ["FIELD_KIND_CHANGED #/M/1", "FIELD_KIND_CHANGED #/M/2"]
    assert incompatible(w, w) == []


SCALARS_THAT_READ_EACH_OTHER = [
    ("int32", "int64"), ("int32", "uint32"), ("uint64", "int32"), ("int64", "bool"),
    ("sint32", "sint64"), ("fixed32", "sfixed32"), ("sfixed64", "fixed64"),
    ("string", "bytes"), ("bytes", "string"), ("int32", "E"), ("E", "uint64"),
]  # fmt: skip
SCALARS_THAT_DO_NOT = [
    ("int32", "sint32"), ("sint64", "int64"), ("fixed32", "fixed64"), ("fixed32", "int32"),
    ("float", "double"), ("double", "fixed64"), ("string", "int32"), ("bool", "sint32"),
    ("E", "sint32"), ("bytes", "sfixed32"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new"), SCALARS_THAT_READ_EACH_OTHER)
def test_scalar_kinds_that_are_wire_compatible(old: str, new: str) -> None:
    enum = "enum E { Z = 0; }\n"
    assert incompatible(P3 + enum + f"message M {{ {old} f = 1; }}",
                        P3 + enum + f"message M {{ {new} f = 1; }}") == []  # fmt: skip


@pytest.mark.parametrize(("old", "new"), SCALARS_THAT_DO_NOT)
def test_scalar_kinds_that_are_not(old: str, new: str) -> None:
    enum = "enum E { Z = 0; }\n"
    assert incompatible(P3 + enum + f"message M {{ {old} f = 1; }}",
                        P3 + enum + f"message M {{ {new} f = 1; }}") == [
        "FIELD_SCALAR_KIND_CHANGED #/M/1"
    ]


def test_field_named_type_changed_for_local_types() -> None:
    w = P3 + "message M { A f = 1; } message A {} message B {}"
    r = P3 + "message M { B f = 1; } message A {} message B {}"
    assert incompatible(w, r) == ["FIELD_NAMED_TYPE_CHANGED #/M/1"]
    # Spelled differently, the same type.
    assert diff(P3 + "package p; message M { A f = 1; } message A {}",
                P3 + "package p; message M { .p.A f = 1; } message A {}") == []  # fmt: skip


def test_imported_types_are_compared_through_their_definition() -> None:
    dep_v1 = P3 + "package dep;\nmessage Home { int32 id = 1; bool on = 2; }"
    dep_v2 = P3 + "package dep;\nmessage Home { string id = 1; bool on = 2; }"
    dep_v3 = P3 + "package dep;\nmessage Home { int64 id = 1; bool on = 2; string x = 3; }"
    user = P3 + 'import "dep.proto";\nmessage M { dep.Home h = 1; }'
    assert incompatible(user, user, {"dep.proto": dep_v1}, {"dep.proto": dep_v2}) == [
        "FIELD_SCALAR_KIND_CHANGED #/Home/1",
        "FIELD_NAMED_TYPE_CHANGED #/M/1",
    ]
    assert diff(user, user, {"dep.proto": dep_v1}, {"dep.proto": dep_v3}) == [
        "FIELD_ADDED #/Home/3"
    ]
    # The same local name under another package still reads.
    moved = dep_v1.replace("package dep;", "package dep2;")
    user2 = user.replace("dep.Home", "dep2.Home").replace("dep.proto", "dep2.proto")
    assert incompatible(user, user2, {"dep.proto": dep_v1}, {"dep2.proto": moved}) == []


def test_recursive_imported_types_terminate() -> None:
    dep = P3 + "package t;\nmessage Node { Node left = 1; Node right = 2; int32 v = 3; }"
    dep2 = dep.replace("int32 v", "string v")
    user = P3 + 'import "t.proto";\nmessage Tree { t.Node root = 1; }'
    assert incompatible(user, user, {"t.proto": dep}, {"t.proto": dep2}) == [
        "FIELD_SCALAR_KIND_CHANGED #/Node/3",
        "FIELD_NAMED_TYPE_CHANGED #/Tree/1",
    ]


def test_field_label_changes() -> None:
    w = P2 + "message M { optional int32 n = 1; optional string s = 2; optional bytes b = 3; }"
    r = P2 + "message M { repeated int32 n = 1; repeated string s = 2; repeated bytes b = 3; }"
    assert diff(w, r) == [
        "FIELD_NUMERIC_LABEL_CHANGED #/M/1",
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED #/M/2",
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED #/M/3",
    ]
    assert incompatible(w, r) == ["FIELD_NUMERIC_LABEL_CHANGED #/M/1"]
    # Confluent compares labels only when both are written: proto3's implicit presence is none.
    assert incompatible(P3 + "message M { int32 n = 1; }",
                        P3 + "message M { repeated int32 n = 1; }") == []  # fmt: skip
    assert incompatible(P3 + "message M { optional int32 n = 1; }",
                        P3 + "message M { repeated int32 n = 1; }") == [
        "FIELD_NUMERIC_LABEL_CHANGED #/M/1"
    ]


def test_required_fields_may_be_neither_added_nor_removed() -> None:
    base = P2 + "message M { optional int32 a = 1; }"
    with_required = P2 + "message M { optional int32 a = 1; required int32 b = 2; }"
    with_optional = P2 + "message M { optional int32 a = 1; optional int32 b = 2; }"
    assert incompatible(base, with_required) == ["REQUIRED_FIELD_ADDED #/M/2"]
    assert incompatible(with_required, base) == ["REQUIRED_FIELD_REMOVED #/M/2"]
    assert incompatible(base, with_optional) == []
    assert incompatible(with_optional, base) == []


def test_oneof_field_removed_unless_the_whole_oneof_goes() -> None:
    w = P3 + "message M { oneof o { int32 a = 1; string b = 2; } }"
    assert incompatible(w, P3 + "message M { oneof o { int32 a = 1; } }") == [
        "ONEOF_FIELD_REMOVED #/M/o/2"
    ]
    assert diff(w, P3 + "message M { }") == ["ONEOF_REMOVED #/M/o"]
    assert diff(P3 + "message M { oneof o { int32 a = 1; } }", w) == ["ONEOF_FIELD_ADDED #/M/o/2"]


def test_fields_moved_into_a_oneof() -> None:
    two = P3 + "message M { int32 a = 1; string b = 2; }"
    assert incompatible(two, P3 + "message M { oneof o { int32 a = 1; string b = 2; } }") == [
        "MULTIPLE_FIELDS_MOVED_TO_ONEOF #/M/o"
    ]
    # One field into a new oneof of its own: still independent of the rest.
    assert incompatible(two, P3 + "message M { string b = 2; oneof o { int32 a = 1; } }") == []
    existing = P3 + "message M { int32 a = 1; oneof o { string b = 2; } }"
    assert incompatible(existing, P3 + "message M { oneof o { int32 a = 1; string b = 2; } }") == [
        "FIELD_MOVED_TO_EXISTING_ONEOF #/M/o"
    ]
    # Out of a oneof is fine.
    assert diff(P3 + "message M { oneof o { int32 a = 1; string b = 2; } }", two) == [
        "ONEOF_REMOVED #/M/o",
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/M/1",
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/M/2",
    ]


def test_enum_changes_are_compatible_as_in_confluent() -> None:
    w = P3 + "enum E { Z = 0; A = 1; B = 2; } message M { E e = 1; }"
    r = P3 + "enum E { Z = 0; A2 = 1; C = 3; } message M { E e = 1; }"
    assert diff(w, r) == [
        "ENUM_CONST_CHANGED #/E/1",
        "ENUM_CONST_REMOVED #/E/2",
        "ENUM_CONST_ADDED #/E/3",
    ]
    assert incompatible(w, r) == []
    assert diff(w, P3 + "message M { int32 e = 1; }") == ["ENUM_REMOVED #/E"]


def test_syntax_change_is_not_a_difference_in_confluent() -> None:
    # Confluent has no SYNTAX_VERSION_CHANGED: only what the fields say is compared.
    assert incompatible(P2 + "message M { optional int32 a = 1; }",
                        P3 + "message M { int32 a = 1; }") == []  # fmt: skip


def test_maps_compare_by_key_and_value() -> None:
    w = P3 + "message M { map<string, int32> m = 1; }"
    assert incompatible(w, P3 + "message M { map<string, int64> m = 1; }") == []
    assert incompatible(w, P3 + "message M { map<int32, int32> m = 1; }") == [
        "FIELD_SCALAR_KIND_CHANGED #/M/1"
    ]
    # A map entry message spelled out (as a descriptor has it) is the same map.
    spelled = p(w).serialized()
    assert diff(w, spelled) == [] and diff(spelled, w) == []


def test_incompatibility_renders_as_confluent_lists_it() -> None:
    [issue] = p(P3 + "message M { string f = 1; }").can_read(p(P3 + "message M { int32 f = 1; }"))
    assert issue.error_type == "FIELD_SCALAR_KIND_CHANGED"
    assert issue.path == "#/M/1"
    assert issue.render() == (
        '{errorType:"FIELD_SCALAR_KIND_CHANGED", description:"The scalar field at \'#/M/1\' in '
        "the new schema has a type that cannot read its values written with the old schema\"}"
    )


def test_a_schema_of_another_type_cannot_be_read() -> None:
    class Other:
        schema_type = "AVRO"

    [issue] = p(P3).can_read(Other())  # type: ignore[arg-type]
    assert issue.render() == "Incompatible because of different schema type"


def test_fingerprint_covers_text_and_references() -> None:
    dep = P3 + "package d; message D {}"
    user = P3 + 'import "d.proto"; message M { d.D d = 1; }'
    a, b = p(user, {"d.proto": dep}), p(user, {"d.proto": dep + "\n"})
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == p(user, {"d.proto": dep}).fingerprint()
