"""Client quotas against a real broker: `strom configs` alter/describe/delete, a restart keeps
them, and Kafka 4.4's error codes for bad input, checked on the wire with a hand-written codec
(independent of Strom's: DescribeClientQuotas and AlterClientQuotas v0, and v1's compact form).

The expected codes and messages are what a Kafka 4.4 broker answered to the same requests
(compat/run_broker.py kafka), except for ip entities, which Strom refuses on purpose.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest

from .test_cli import one_error_line, strom
from .wire import Conn, Reader, array, i8, string, uvarint
from .wire_flex import _str, _tags

pytestmark = pytest.mark.timeout(180)

DESCRIBE, ALTER = 48, 49
NONE, INVALID_REQUEST, UNSUPPORTED_VERSION = 0, 42, 35
EXACT, DEFAULT, ANY = 0, 1, 2
IP_REFUSED = ("Strom does not enforce connection_creation_rate: quotas of ip entities are not "
              "supported")

Entity = Sequence[tuple[str, str | None]]
Op = tuple[str, float, bool]


# --------------------------------------------------------------------------- the codec


def f64(v: float) -> bytes:
    return struct.pack(">d", v)


def read_f64(r: Reader) -> float:
    return struct.unpack(">d", r.raw(8))[0]


def alter_v0_body(entries: Sequence[tuple[Entity, Sequence[Op]]], validate_only: bool) -> bytes:
    return array([
        array([string(t) + string(n) for t, n in entity])
        + array([string(k) + f64(v) + i8(int(remove)) for k, v, remove in ops])
        for entity, ops in entries]) + i8(int(validate_only))


def parse_alter_v0(body: bytes) -> list[tuple[int, str | None, list[tuple[str, str | None]]]]:
    r = Reader(body)
    r.i32()  # throttle
    return r.array(lambda r: (r.i16(), r.string(),
                              r.array(lambda r: (r.string(), r.string()))))


def describe_v0_body(components: Sequence[tuple[str, int, str | None]], strict: bool) -> bytes:
    return array([string(t) + i8(m) + string(n) for t, m, n in components]) + i8(int(strict))


def parse_describe_v0(body: bytes):
    r = Reader(body)
    r.i32()
    code, message = r.i16(), r.string()
    entries = r.array(lambda r: (
        tuple(r.array(lambda r: (r.string(), r.string()))),
        dict(r.array(lambda r: (r.string(), read_f64(r))))))
    return code, message, entries


def cstr(s: str | None) -> bytes:
    return b"\x00" if s is None else uvarint(len(s.encode()) + 1) + s.encode()


def carray(items: Sequence[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def alter_v1_body(entries: Sequence[tuple[Entity, Sequence[Op]]], validate_only: bool) -> bytes:
    return carray([
        carray([cstr(t) + cstr(n) + b"\x00" for t, n in entity])
        + carray([cstr(k) + f64(v) + i8(int(remove)) + b"\x00" for k, v, remove in ops])
        + b"\x00" for entity, ops in entries]) + i8(int(validate_only)) + b"\x00"


def parse_alter_v1(body: bytes):
    r = Reader(body)
    r.i32()
    out = []
    for _ in range(r.uvarint() - 1):
        code, message = r.i16(), _str(r)
        entity = []
        for _ in range(r.uvarint() - 1):
            entity.append((_str(r), _str(r)))
            _tags(r)
        _tags(r)
        out.append((code, message, entity))
    return out


def alter(bs: str, *entries: tuple[Entity, Sequence[Op]], validate_only: bool = False):
    with Conn(bs) as c:
        return parse_alter_v0(c.request(ALTER, 0, alter_v0_body(entries, validate_only)))


def describe(bs: str, *components: tuple[str, int, str | None], strict: bool = False):
    with Conn(bs) as c:
        return parse_describe_v0(c.request(DESCRIBE, 0, describe_v0_body(components, strict)))


def setting(key: str, value: float) -> Op:
    return (key, value, False)


def removal(key: str) -> Op:
    return (key, 0.0, True)


# --------------------------------------------------------------------------- the CLI


def quota_rows(text: str) -> list[list[str]]:
    """The table's rows below its header line."""
    lines = [line.split() for line in text.splitlines()[1:] if line.strip()]
    return lines[1:] if lines and lines[0][-2:] == ["Quota", "Value"] else lines


def test_strom_configs_alter_describe_delete_and_a_restart_keeps_them(make_broker):
    broker = make_broker()
    bs = broker.bootstrap
    alice_app = ["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                 "--entity-name", "app"]
    done = strom(bs, "configs", "alter", *alice_app, "--add-config",
                 "producer_byte_rate=1048576,request_percentage=12.5")
    assert done.stdout.decode().strip() == (
        "Completed updating quotas for user-principal 'alice', client-id 'app'.")
    strom(bs, "configs", "alter", "--entity-type", "users", "--entity-default",
          "--add-config", "consumer_byte_rate=2048")
    strom(bs, "configs", "alter", "--entity-type", "clients", "--entity-name", "my-app",
          "--add-config", "controller_mutation_rate=5")

    out = strom(bs, "configs", "describe", *alice_app).stdout.decode()
    assert out.splitlines()[0] == "Quota configs for user-principal 'alice', client-id 'app':"
    assert quota_rows(out) == [["alice", "app", "producer_byte_rate", "1048576"],
                               ["alice", "app", "request_percentage", "12.5"]]
    users = strom(bs, "configs", "describe", "--entity-type", "users").stdout.decode()
    assert quota_rows(users) == [["<default>", "consumer_byte_rate", "2048"]]  # strict: users only

    strom(bs, "configs", "alter", *alice_app, "--delete-config", "producer_byte_rate")
    assert quota_rows(strom(bs, "configs", "describe", *alice_app).stdout.decode()) == [
        ["alice", "app", "request_percentage", "12.5"]]

    bad = strom(bs, "configs", "alter", "--entity-type", "users", "--entity-name", "bob",
                "--add-config", "producer_byte_rate=1.5", check=False)
    assert bad.returncode == 1
    assert one_error_line(bad) == "Error: producer_byte_rate cannot be a fractional value."

    before = describe(bs)
    assert before[0] == NONE and len(before[2]) == 3
    assert broker.stop() == 0
    broker.restart()
    assert sorted(describe(bs)[2], key=repr) == sorted(before[2], key=repr)
    clients = strom(bs, "configs", "describe", "--entity-type", "clients").stdout.decode()
    assert quota_rows(clients) == [["my-app", "controller_mutation_rate", "5.0"]]


# --------------------------------------------------------------------------- the wire


@pytest.fixture(scope="module")
def bs(make_module_broker) -> str:
    return make_module_broker().bootstrap


@pytest.mark.parametrize(("entity", "ops", "code", "message"), [
    ([], [setting("producer_byte_rate", 1)], INVALID_REQUEST,
     "Invalid empty client quota entity"),
    ([("group", "g")], [setting("producer_byte_rate", 1)], INVALID_REQUEST,
     "Unhandled client quota entity type: group"),
    ([("user", "")], [setting("producer_byte_rate", 1)], INVALID_REQUEST,
     "Empty user not supported"),
    ([("user", "bob")], [setting("bogus", 1)], INVALID_REQUEST,
     "Invalid configuration key bogus"),
    ([("user", "bob")], [setting("connection_creation_rate", 1)], INVALID_REQUEST,
     "Invalid configuration key connection_creation_rate"),
    ([("user", "bob")], [setting("producer_byte_rate", 0)], INVALID_REQUEST,
     "Quota producer_byte_rate must be greater than 0"),
    ([("user", "bob")], [setting("request_percentage", -5)], INVALID_REQUEST,
     "Quota request_percentage must be greater than 0"),
    ([("user", "bob")], [setting("request_percentage", float("nan"))], INVALID_REQUEST,
     "Quota request_percentage must be a finite number"),
    ([("user", "bob")], [setting("producer_byte_rate", float("inf"))], INVALID_REQUEST,
     "Quota producer_byte_rate must be a finite number"),
    ([("user", "bob")], [setting("producer_byte_rate", 1.5)], INVALID_REQUEST,
     "producer_byte_rate cannot be a fractional value."),
    ([("user", "bob")], [setting("consumer_byte_rate", 1e19)], INVALID_REQUEST,
     "Proposed value for consumer_byte_rate is too large for a LONG."),
    ([("ip", "127.0.0.1"), ("user", "bob")], [setting("producer_byte_rate", 1)],
     INVALID_REQUEST,
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([("user", "y")], [setting("producer_byte_rate", 1), setting("producer_byte_rate", 2)],
     INVALID_REQUEST, "Ignoring duplicate entity ClientQuotaEntity(entries={user=y})"),
    # Strom's own refusal: it does not enforce connection_creation_rate (Kafka accepts these)
    ([("ip", "127.0.0.1")], [setting("connection_creation_rate", 5)], INVALID_REQUEST,
     IP_REFUSED),
    ([("ip", None)], [setting("connection_creation_rate", 5)], INVALID_REQUEST, IP_REFUSED),
])
def test_bad_alterations_get_kafkas_errors(bs, entity, ops, code, message):
    [(got_code, got_message, _)] = alter(bs, (entity, ops))
    assert (got_code, got_message) == (code, message)
    [(got_code, got_message, _)] = alter(bs, (entity, ops), validate_only=True)
    assert (got_code, got_message) == (code, message)


def test_one_bad_entity_does_not_stop_the_others(bs):
    results = alter(bs, ([("user", "w1")], [setting("bogus", 1)]),
                    ([("user", "w2")], [setting("producer_byte_rate", 100)]))
    assert [(c, m) for c, m, _ in results] == [
        (INVALID_REQUEST, "Invalid configuration key bogus"), (NONE, None)]
    assert describe(bs, ("user", EXACT, "w1"))[2] == []
    assert describe(bs, ("user", EXACT, "w2"))[2] == [
        ((("user", "w2"),), {"producer_byte_rate": 100.0})]


def test_validate_only_and_removing_what_is_not_there(bs):
    assert alter(bs, ([("user", "v1")], [setting("producer_byte_rate", 1)]),
                 validate_only=True) == [(NONE, None, [("user", "v1")])]
    assert describe(bs, ("user", EXACT, "v1"))[2] == []
    assert alter(bs, ([("user", "v1")], [removal("producer_byte_rate"), removal("nonsense")])
                 ) == [(NONE, None, [("user", "v1")])]


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("", ANY, None)], INVALID_REQUEST, "Invalid empty entity type."),
    ([("user", ANY, None), ("user", EXACT, "a")], INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", ANY, None)], UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", EXACT, None)], INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", DEFAULT, "x")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", ANY, "x")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], INVALID_REQUEST, "Unknown match type 7"),
    ([("ip", ANY, None), ("user", ANY, None)], INVALID_REQUEST,
     "Invalid entity filter component combination. IP filter component should not be used "
     "with user or clientId filter component."),
])
def test_bad_filters_get_kafkas_errors(bs, components, code, message):
    assert describe(bs, *components) == (code, message, None)


def test_filters_match_as_kafka(bs):
    assert alter(bs, ([("user", "m")], [setting("producer_byte_rate", 1)]),
                 ([("user", "m"), ("client-id", "c")], [setting("producer_byte_rate", 2)]),
                 ([("user", "m"), ("client-id", None)], [setting("producer_byte_rate", 3)])
                 ) == [(NONE, None, [("user", "m")]),
                       (NONE, None, [("user", "m"), ("client-id", "c")]),
                       (NONE, None, [("user", "m"), ("client-id", None)])]

    def found(*components, strict=False):
        code, message, entries = describe(bs, *components, strict=strict)
        assert (code, message) == (NONE, "")  # Kafka: an empty message, not null
        return {tuple(sorted(entity)): values["producer_byte_rate"]
                for entity, values in entries}

    m, mc, md = (("user", "m"),), (("client-id", "c"), ("user", "m")), (
        ("client-id", None), ("user", "m"))
    assert found(("user", EXACT, "m")) == {m: 1.0, mc: 2.0, md: 3.0}
    assert found(("user", EXACT, "m"), strict=True) == {m: 1.0}
    assert found(("user", EXACT, "m"), ("client-id", DEFAULT, None)) == {md: 3.0}
    assert found(("user", EXACT, "m"), ("client-id", ANY, None), strict=True) == {
        mc: 2.0, md: 3.0}
    assert found(strict=True) == {}


def test_flexible_v1(bs):
    with Conn(bs) as c:
        body = alter_v1_body([([("client-id", "flex")], [setting("consumer_byte_rate", 4096)]),
                              ([("user", "")], [setting("consumer_byte_rate", 1)])], False)
        got = parse_alter_v1(c.recv_response(c.send(ALTER, 1, body, flexible=True),
                                             flexible_header=True))
    assert got == [(NONE, None, [("client-id", "flex")]),
                   (INVALID_REQUEST, "Empty user not supported", [("user", "")])]
    assert describe(bs, ("client-id", EXACT, "flex"))[2] == [
        ((("client-id", "flex"),), {"consumer_byte_rate": 4096.0})]
