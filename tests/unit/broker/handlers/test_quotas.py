"""DescribeClientQuotas and AlterClientQuotas through the router: Kafka's checks and answers."""

from __future__ import annotations

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from strom.security.principal import KafkaPrincipal

EXACT, DEFAULT, ANY = 0, 1, 2
INVALID = ErrorCode.INVALID_REQUEST


def op(key: str, value: float | None) -> dict:
    return {"key": key, "value": 0.0 if value is None else value, "remove": value is None}


def entry(entity: dict, **ops: float | None) -> dict:
    return {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
            "ops": [op(k, v) for k, v in ops.items()]}


def alter(h, *entries: dict, validate_only: bool = False, version: int = 1) -> list:
    r = h.request(ApiKey.ALTER_CLIENT_QUOTAS, version,
                  {"entries": list(entries), "validate_only": validate_only})
    return [({e.entity_type: e.entity_name for e in x.entity}, x.error_code, x.error_message)
            for x in r.entries]


def describe(h, *components: tuple[str, int, str | None], strict: bool = False,
             version: int = 1):
    return h.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict})


def described(h, *components, strict: bool = False) -> dict:
    r = describe(h, *components, strict=strict)
    assert (r.error_code, r.error_message) == (0, "")
    return {tuple(sorted((e.entity_type, e.entity_name) for e in x.entity)):
            {v.key: v.value for v in x.values} for x in r.entries}


ALICE = (("user", "alice"),)
ALICE_APP = (("client-id", "app"), ("user", "alice"))
APP = (("client-id", "app"),)
DEFAULT_USER = (("user", None),)


@pytest.fixture
def h(broker_harness):
    """alice, alice's app, the app client id and the default user, each with quotas."""
    assert alter(broker_harness,
                 entry({"user": "alice"}, producer_byte_rate=1024),
                 entry({"user": "alice", "client-id": "app"}, consumer_byte_rate=2048,
                       request_percentage=12.5),
                 entry({"client-id": "app"}, controller_mutation_rate=10),
                 entry({"user": None}, producer_byte_rate=500)) == [
        ({"user": "alice"}, 0, None),
        ({"user": "alice", "client-id": "app"}, 0, None),
        ({"client-id": "app"}, 0, None),
        ({"user": None}, 0, None)]
    return broker_harness


def test_alter_stores_in_the_image_and_describe_shows_all(h) -> None:
    assert h.broker.image.client_quotas == {
        ALICE: {"producer_byte_rate": 1024.0},
        ALICE_APP: {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
        APP: {"controller_mutation_rate": 10.0},
        DEFAULT_USER: {"producer_byte_rate": 500.0}}
    assert described(h) == h.broker.image.client_quotas


@pytest.mark.parametrize(("components", "strict", "expected"), [
    ([("user", EXACT, "alice")], False, [ALICE, ALICE_APP]),
    ([("user", EXACT, "alice")], True, [ALICE]),
    ([("user", DEFAULT, None)], False, [DEFAULT_USER]),
    ([("user", ANY, None)], False, [ALICE, ALICE_APP, DEFAULT_USER]),
    ([("user", ANY, None)], True, [ALICE, DEFAULT_USER]),
    ([("client-id", EXACT, "app")], False, [ALICE_APP, APP]),
    ([("client-id", EXACT, "app")], True, [APP]),
    ([("user", EXACT, "alice"), ("client-id", ANY, None)], True, [ALICE_APP]),
    ([("user", EXACT, "bob")], False, []),
    ([("client-id", DEFAULT, None)], False, []),
    ([("ip", ANY, None)], False, []),
    ([], True, []),
])
def test_describe_filters(h, components, strict, expected) -> None:
    assert set(described(h, *components, strict=strict)) == set(expected)


def test_describe_v0_too(h) -> None:
    r = describe(h, ("user", EXACT, "alice"), strict=True, version=0)
    assert [[(e.entity_type, e.entity_name) for e in x.entity] for x in r.entries] == [
        [("user", "alice")]]


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("", ANY, None)], INVALID, "Invalid empty entity type."),
    ([("user", ANY, None), ("user", EXACT, "a")], INVALID,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", ANY, None)], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", EXACT, None)], INVALID,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", DEFAULT, "x")], INVALID,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", ANY, "x")], INVALID,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], INVALID, "Unknown match type 7"),
    ([("ip", ANY, None), ("user", ANY, None)], INVALID,
     "Invalid entity filter component combination. IP filter component should not be used "
     "with user or clientId filter component."),
])
def test_bad_filters_fail_the_request(h, components, code, message) -> None:
    r = describe(h, *components)
    assert (r.error_code, r.error_message, r.entries) == (code, message, None)


def test_remove_and_change(h) -> None:
    assert alter(h, entry({"user": "alice"}, producer_byte_rate=None, consumer_byte_rate=99),
                 entry({"client-id": "app"}, controller_mutation_rate=None)) == [
        ({"user": "alice"}, 0, None), ({"client-id": "app"}, 0, None)]
    quotas = h.broker.image.client_quotas
    assert quotas[ALICE] == {"consumer_byte_rate": 99.0}
    assert APP not in quotas  # its last quota removed: the entity is gone


def test_removing_what_is_not_there_is_fine_even_an_unknown_key(h) -> None:
    version = h.broker.image.version
    assert alter(h, entry({"user": "bob"}, producer_byte_rate=None, nonsense=None)) == [
        ({"user": "bob"}, 0, None)]
    assert h.broker.image.version == version  # nothing written


def test_validate_only_changes_nothing(h) -> None:
    before = {e: dict(q) for e, q in h.broker.image.client_quotas.items()}
    assert alter(h, entry({"user": "carol"}, producer_byte_rate=1),
                 entry({"user": "alice"}, producer_byte_rate=None), validate_only=True) == [
        ({"user": "carol"}, 0, None), ({"user": "alice"}, 0, None)]
    assert h.broker.image.client_quotas == before


@pytest.mark.parametrize(("ent", "ops", "message"), [
    ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
    ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
    ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
    ({"user": "bob"}, {"bogus": 1}, "Invalid configuration key bogus"),
    ({"user": "bob"}, {"connection_creation_rate": 1},
     "Invalid configuration key connection_creation_rate"),
    ({"user": "bob"}, {"producer_byte_rate": 0}, "Quota producer_byte_rate must be greater than 0"),
    ({"user": "bob"}, {"request_percentage": -5},
     "Quota request_percentage must be greater than 0"),
    ({"user": "bob"}, {"request_percentage": float("nan")},
     "Quota request_percentage must be a finite number"),
    ({"user": "bob"}, {"producer_byte_rate": float("-inf")},
     "Quota producer_byte_rate must be a finite number"),
    ({"user": "bob"}, {"bogus": float("nan")}, "Invalid configuration key bogus"),
    ({"user": "bob"}, {"producer_byte_rate": 1.5},
     "producer_byte_rate cannot be a fractional value."),
    ({"user": "bob"}, {"consumer_byte_rate": 1e19},
     "Proposed value for consumer_byte_rate is too large for a LONG."),
    ({"ip": "127.0.0.1"}, {"connection_creation_rate": 5},
     "Strom does not enforce connection_creation_rate: quotas of ip entities are not supported"),
    ({"ip": None}, {"connection_creation_rate": None},
     "Strom does not enforce connection_creation_rate: quotas of ip entities are not supported"),
    ({"ip": "127.0.0.1", "user": "bob"}, {"producer_byte_rate": 1},
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
])
def test_invalid_alterations_are_refused_per_entity(h, ent, ops, message) -> None:
    before = {e: dict(q) for e, q in h.broker.image.client_quotas.items()}
    assert alter(h, entry(ent, **ops), entry({"user": "dave"}, producer_byte_rate=7)) == [
        (ent, INVALID, message), ({"user": "dave"}, 0, None)]
    before[(("user", "dave"),)] = {"producer_byte_rate": 7.0}
    assert h.broker.image.client_quotas == before  # the valid entity is altered, only it


def test_a_duplicate_entity_or_key_is_refused(h) -> None:
    dup_entity = alter(h, entry({"user": "x"}, producer_byte_rate=1),
                       entry({"user": "x"}, consumer_byte_rate=1))
    dup_key = alter(h, {"entity": [{"entity_type": "user", "entity_name": "y"}],
                        "ops": [op("producer_byte_rate", 1), op("producer_byte_rate", 2)]})
    assert dup_entity == [({"user": "x"}, INVALID,
                           "Ignoring duplicate entity ClientQuotaEntity(entries={user=x})")]
    assert dup_key == [({"user": "y"}, INVALID,
                        "Ignoring duplicate entity ClientQuotaEntity(entries={user=y})")]
    assert (("user", "x"),) not in h.broker.image.client_quotas
    assert (("user", "y"),) not in h.broker.image.client_quotas


def test_a_type_named_twice_keeps_its_last_name(broker_harness) -> None:
    """As Kafka (checked against 4.4): the entity is a map."""
    assert alter(broker_harness, {"entity": [{"entity_type": "user", "entity_name": "a"},
                                             {"entity_type": "user", "entity_name": "b"}],
                                  "ops": [op("producer_byte_rate", 1)]}) == [
        ({"user": "b"}, 0, None)]
    assert broker_harness.broker.image.client_quotas == {
        (("user", "b"),): {"producer_byte_rate": 1.0}}


def test_more_than_kafkas_records_per_operation_is_refused(broker_harness) -> None:
    many = [entry({"client-id": f"c{i}"}, producer_byte_rate=1, consumer_byte_rate=1)
            for i in range(5001)]
    results = alter(broker_harness, *many)
    assert len(results) == 5001
    assert {(code, message) for _, code, message in results} == {
        (ErrorCode.POLICY_VIOLATION,
         "Request parameters do not satisfy the configured policy.")}
    assert broker_harness.broker.image.client_quotas == {}
    assert alter(broker_harness, *many[:5000])[0][1] == 0  # 10000 records: allowed


def test_alter_v0(broker_harness) -> None:
    assert alter(broker_harness, entry({"client-id": None}, producer_byte_rate=3), version=0) == [
        ({"client-id": None}, 0, None)]
    assert broker_harness.broker.image.client_quotas == {
        (("client-id", None),): {"producer_byte_rate": 3.0}}


ACLS_ON = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin"}


@pytest.mark.broker_config(**ACLS_ON)
def test_authorization_is_on_the_cluster(broker_harness) -> None:
    h = broker_harness
    h.conn.session.principal = KafkaPrincipal.user("alice")
    assert alter(h, entry({"user": "bob"}, producer_byte_rate=1)) == [
        ({"user": "bob"}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")]
    assert describe(h).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    for operation in (AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS):
        h.loop.run_until_complete(h.broker.controller.alter_acls([AclBinding(
            ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice", "*",
            operation, AclPermission.ALLOW)], []))
    assert alter(h, entry({"user": "bob"}, producer_byte_rate=1)) == [({"user": "bob"}, 0, None)]
    assert described(h) == {(("user", "bob"),): {"producer_byte_rate": 1.0}}
