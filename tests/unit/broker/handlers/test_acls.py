"""ACLs through the wire: CreateAcls/DescribeAcls/DeleteAcls, and the authorization checks of
each API, as User:alice without ACLs (refused with Kafka's error code) and with the ACL the API
needs (no longer refused). User:admin is the super user that sets things up."""

from __future__ import annotations

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from strom.security.principal import KafkaPrincipal

Op, Res = AclOperation, ResourceType
LITERAL, PREFIXED, MATCH, ANY = (PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH,
                                 PatternType.ANY)
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # 29
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED  # 30
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # 31
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # 53
AUTHORIZATION_ERRORS = {TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED}
GROUP_KEY, TRANSACTION_KEY = 0, 1
TOPIC_CONFIG, BROKER_CONFIG = 2, 4

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACLS_ON = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}
pytestmark = pytest.mark.broker_config(**ACLS_ON)
no_authorizer = pytest.mark.broker_config()  # the closest marker wins: the default broker


def _as(h, user: str) -> None:
    h.conn.session.principal = KafkaPrincipal.user(user)


def _alice_may(h, op: AclOperation, rtype: ResourceType, name: str, *,
               pattern: PatternType = LITERAL, permission: AclPermission = ALLOW) -> None:
    """An ACL for User:alice from any host, written straight to the controller."""
    binding = AclBinding(rtype, name, pattern, "User:alice", "*", op, permission)
    h.loop.run_until_complete(h.broker.controller.alter_acls([binding], []))
    assert binding in h.broker.image.acls


@pytest.fixture
def h(broker_harness):
    """The broker with ACLs on; requests come from User:admin until a test says otherwise."""
    _as(broker_harness, "admin")
    assert broker_harness.broker.authorizer is not None
    return broker_harness


@pytest.fixture
def with_t(h):
    """Topic t (one partition, one record) made by admin; requests then come from alice."""
    h.create_topic("t")
    assert h.produce("t", 0, h.batch(b"a")).error_code == 0
    _as(h, "alice")
    return h


# -- CreateAcls / DescribeAcls / DeleteAcls -------------------------------------------------------


def _creation(rtype: ResourceType, name: str, op: AclOperation, *, principal: str = "User:alice",
              pattern: PatternType = LITERAL, permission: AclPermission = ALLOW,
              host: str = "*") -> dict:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": host, "operation": op, "permission_type": permission}


def _create(h, *creations: dict) -> list[tuple[int, str | None]]:
    r = h.request(ApiKey.CREATE_ACLS, 3, {"creations": list(creations)})
    return [(c.error_code, c.error_message) for c in r.results]


def _filter(rtype: ResourceType = Res.ANY, name: str | None = None, pattern: PatternType = ANY,
            principal: str | None = None, host: str | None = None, op: AclOperation = Op.ANY,
            permission: AclPermission = AclPermission.ANY) -> dict:
    return {"resource_type_filter": rtype, "resource_name_filter": name,
            "pattern_type_filter": pattern, "principal_filter": principal, "host_filter": host,
            "operation": op, "permission_type": permission}


def _describe(h, **f):
    return h.request(ApiKey.DESCRIBE_ACLS, 3, _filter(**f))


def _resources(r) -> dict[tuple[int, str, int], list[tuple[str, str, int, int]]]:
    assert r.error_code == 0, r.error_message
    return {(x.resource_type, x.resource_name, x.pattern_type): sorted(
        (a.principal, a.host, a.operation, a.permission_type) for a in x.acls)
        for x in r.resources}


def _delete(h, *filters: dict):
    return h.request(ApiKey.DELETE_ACLS, 3, {"filters": list(filters)}).filter_results


ACL_T_READ = _creation(Res.TOPIC, "t", Op.READ)
ACL_T_WRITE_BOB = _creation(Res.TOPIC, "t", Op.WRITE, principal="User:bob", host="10.0.0.1")
ACL_P_DENY = _creation(Res.TOPIC, "p-", Op.ALL, pattern=PREFIXED, permission=DENY)
ACL_GROUP = _creation(Res.GROUP, "g", Op.READ)


def test_create_acls_by_a_principal_without_alter_on_the_cluster_is_refused(h) -> None:
    _as(h, "alice")
    assert _create(h, ACL_T_READ, ACL_GROUP) == [
        (CLUSTER_DENIED, "Cluster authorization failed.")] * 2
    assert not h.broker.image.acls
    # ALTER on the topic is not enough: ACLs are the cluster's
    _alice_may(h, Op.ALTER, Res.TOPIC, "*")
    assert [code for code, _ in _create(h, ACL_T_READ)] == [CLUSTER_DENIED]


def test_alter_on_the_cluster_lets_a_principal_manage_acls(h) -> None:
    _as(h, "alice")
    _alice_may(h, Op.ALTER, Res.CLUSTER, CLUSTER_NAME)
    assert _create(h, ACL_GROUP) == [(0, None)]
    assert (Res.GROUP, "g", LITERAL) in _resources(_describe(h))  # ALTER implies DESCRIBE
    assert [f.error_code for f in _delete(h, _filter(Res.GROUP))] == [0]


def test_admin_creates_acls_and_describe_groups_them_by_resource(h) -> None:
    assert _create(h, ACL_T_READ, ACL_T_WRITE_BOB, ACL_P_DENY, ACL_GROUP) == [(0, None)] * 4
    assert len(h.broker.image.acls) == 4
    assert _resources(_describe(h)) == {
        (Res.TOPIC, "t", LITERAL): [("User:alice", "*", Op.READ, ALLOW),
                                    ("User:bob", "10.0.0.1", Op.WRITE, ALLOW)],
        (Res.TOPIC, "p-", PREFIXED): [("User:alice", "*", Op.ALL, DENY)],
        (Res.GROUP, "g", LITERAL): [("User:alice", "*", Op.READ, ALLOW)],
    }


def test_creating_an_existing_acl_again_keeps_one(h) -> None:
    assert _create(h, ACL_T_READ) == [(0, None)]
    assert _create(h, ACL_T_READ, ACL_T_READ) == [(0, None)] * 2
    assert list(_resources(_describe(h)).values()) == [[("User:alice", "*", Op.READ, ALLOW)]]


def test_invalid_creations_are_invalid_request_and_the_others_are_created(h) -> None:
    results = _create(h, _creation(Res.CLUSTER, "c", Op.ALTER), ACL_T_READ,
                      _creation(Res.TOPIC, "t", Op.READ, principal="alice"),
                      _creation(Res.TOPIC, "t", Op.READ, pattern=MATCH),
                      _creation(Res.TOPIC, "t", Op.READ, host="example.com"),
                      _creation(Res.ANY, "t", Op.READ), _creation(Res.TOPIC, "", Op.READ),
                      _creation(99, "t", Op.READ))
    assert [code for code, _ in results] == [0 if i == 1 else ErrorCode.INVALID_REQUEST
                                             for i in range(8)]
    assert results[0][1] == "The only valid name for the CLUSTER resource is kafka-cluster"
    assert results[5][1] == "Invalid resource type ANY"
    assert results[7][1] == "Invalid resource type UNKNOWN"
    assert list(h.broker.image.acls) == [
        AclBinding(Res.TOPIC, "t", LITERAL, "User:alice", "*", Op.READ, ALLOW)]


def test_describe_acls_filters(h) -> None:
    _create(h, ACL_T_READ, ACL_T_WRITE_BOB, ACL_P_DENY, ACL_GROUP)
    assert set(_resources(_describe(h, rtype=Res.TOPIC, name="p-x", pattern=MATCH))) == {
        (Res.TOPIC, "p-", PREFIXED)}
    assert _resources(_describe(h, principal="User:bob")) == {
        (Res.TOPIC, "t", LITERAL): [("User:bob", "10.0.0.1", Op.WRITE, ALLOW)]}
    assert set(_resources(_describe(h, rtype=Res.GROUP))) == {(Res.GROUP, "g", LITERAL)}
    assert set(_resources(_describe(h, permission=DENY))) == {(Res.TOPIC, "p-", PREFIXED)}
    assert _resources(_describe(h, name="nothing")) == {}


def test_describe_acls_needs_describe_on_the_cluster(h) -> None:
    _create(h, ACL_GROUP)
    _as(h, "alice")
    r = _describe(h)
    assert (r.error_code, r.error_message, r.resources) == (
        CLUSTER_DENIED, "Cluster authorization failed.", [])
    _alice_may(h, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
    assert (Res.GROUP, "g", LITERAL) in _resources(_describe(h))


def test_delete_acls_removes_what_the_filters_match_and_reports_it(h) -> None:
    _create(h, ACL_T_READ, ACL_T_WRITE_BOB, ACL_P_DENY, ACL_GROUP)
    results = _delete(h, _filter(Res.TOPIC, "t", LITERAL), _filter(principal="User:carol"),
                      _filter(Res.TOPIC, principal="User:bob"))
    assert [r.error_code for r in results] == [0, 0, 0]
    assert sorted((m.error_code, m.resource_type, m.resource_name, m.pattern_type, m.principal,
                   m.host, m.operation, m.permission_type) for m in results[0].matching_acls) == [
        (0, Res.TOPIC, "t", LITERAL, "User:alice", "*", Op.READ, ALLOW),
        (0, Res.TOPIC, "t", LITERAL, "User:bob", "10.0.0.1", Op.WRITE, ALLOW)]
    assert results[1].matching_acls == []
    # an ACL two filters match is reported by both and deleted once
    assert [(m.principal, m.operation) for m in results[2].matching_acls] == [
        ("User:bob", Op.WRITE)]
    assert set(_resources(_describe(h))) == {(Res.TOPIC, "p-", PREFIXED),
                                             (Res.GROUP, "g", LITERAL)}
    (match,) = _delete(h, _filter(Res.TOPIC, "p-anything", MATCH))
    assert [m.resource_name for m in match.matching_acls] == ["p-"]
    assert set(_resources(_describe(h))) == {(Res.GROUP, "g", LITERAL)}


def test_delete_acls_by_a_principal_without_alter_on_the_cluster_is_refused(h) -> None:
    _create(h, ACL_GROUP)
    _as(h, "alice")
    results = _delete(h, _filter(), _filter(Res.GROUP))
    assert [(r.error_code, r.error_message, r.matching_acls) for r in results] == [
        (CLUSTER_DENIED, "Cluster authorization failed.", [])] * 2
    assert len(h.broker.image.acls) == 1


def test_acls_created_on_the_wire_take_effect_at_once(with_t) -> None:
    h = with_t
    assert _list_offsets(h) == TOPIC_DENIED
    _as(h, "admin")
    assert _create(h, _creation(Res.TOPIC, "t", Op.DESCRIBE)) == [(0, None)]
    _as(h, "alice")
    assert _list_offsets(h) == 0
    _as(h, "admin")
    assert [len(r.matching_acls) for r in _delete(h, _filter(Res.TOPIC, "t"))] == [1]
    _as(h, "alice")
    assert _list_offsets(h) == TOPIC_DENIED


@no_authorizer
def test_without_an_authorizer_the_acl_apis_are_security_disabled(broker_harness) -> None:
    h = broker_harness
    assert h.broker.authorizer is None
    r = _describe(h)
    assert (r.error_code, r.error_message, r.resources) == (
        ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker", [])
    assert [code for code, _ in _create(h, ACL_T_READ, ACL_GROUP)] == [
        ErrorCode.SECURITY_DISABLED] * 2
    assert [r.error_code for r in _delete(h, _filter())] == [ErrorCode.SECURITY_DISABLED]
    assert not h.broker.image.acls


@no_authorizer
def test_without_an_authorizer_everything_is_allowed(broker_harness) -> None:
    h = broker_harness
    _as(h, "alice")
    h.create_topic("t")
    assert h.produce("t", 0, h.batch(b"a")).error_code == 0
    assert _metadata(h, ["t"]).topics[0].error_code == 0
    assert _init_pid(h).error_code == 0


# -- Metadata ----------------------------------------------------------------------------------


def _metadata(h, topics: list[str] | None, *, version: int = 12, allow_auto: bool = True,
              with_ops: bool = False):
    return h.request(ApiKey.METADATA, version, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": allow_auto, "include_topic_authorized_operations": with_ops})


def test_metadata_for_all_topics_shows_only_those_the_principal_may_describe(with_t) -> None:
    h = with_t
    _as(h, "admin")
    h.create_topic("u")
    assert {t.name for t in _metadata(h, None).topics} == {"t", "u"}
    _as(h, "alice")
    assert _metadata(h, None).topics == []
    _alice_may(h, Op.WRITE, Res.TOPIC, "u")  # WRITE implies DESCRIBE
    assert [(t.name, t.error_code) for t in _metadata(h, None).topics] == [("u", 0)]


def test_metadata_for_a_named_topic_the_principal_may_not_describe(with_t) -> None:
    h = with_t
    (t,) = _metadata(h, ["t"]).topics
    assert (t.name, t.error_code, t.partitions) == ("t", TOPIC_DENIED, [])
    # a missing one is answered alike (and not created): its absence is not disclosed
    (m,) = _metadata(h, ["missing"]).topics
    assert (m.name, m.error_code) == ("missing", TOPIC_DENIED)
    assert "missing" not in h.broker.image.topics
    _alice_may(h, Op.DESCRIBE, Res.TOPIC, "t")
    (t,) = _metadata(h, ["t"]).topics
    assert (t.error_code, t.topic_id, len(t.partitions)) == (0, h.topic_id("t"), 1)


def test_metadata_topic_authorized_operations(with_t) -> None:
    h = with_t
    _alice_may(h, Op.READ, Res.TOPIC, "t")
    (t,) = _metadata(h, ["t"], with_ops=True).topics
    assert t.topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_metadata_auto_creates_with_create_on_the_topic(h) -> None:
    _as(h, "alice")
    _alice_may(h, Op.CREATE, Res.TOPIC, "fresh")
    _alice_may(h, Op.DESCRIBE, Res.TOPIC, "fresh")
    (t,) = _metadata(h, ["fresh"]).topics
    assert (t.name, t.error_code) == ("fresh", 0)
    assert "fresh" in h.broker.image.topics


def test_metadata_refuses_auto_creation_without_create(h) -> None:
    _as(h, "alice")
    _alice_may(h, Op.READ, Res.TOPIC, "fresh")  # may describe it, may not create it
    (t,) = _metadata(h, ["fresh"]).topics
    assert "fresh" not in h.broker.image.topics
    assert t.error_code == TOPIC_DENIED


def test_metadata_does_not_auto_create_a_topic_the_principal_may_not_describe(h) -> None:
    _as(h, "alice")
    _alice_may(h, Op.CREATE, Res.CLUSTER, CLUSTER_NAME)
    (t,) = _metadata(h, ["fresh"]).topics
    assert t.error_code == TOPIC_DENIED
    assert "fresh" not in h.broker.image.topics


def test_metadata_without_auto_creation_of_a_missing_topic_the_principal_may_describe(h) -> None:
    _as(h, "alice")
    _alice_may(h, Op.READ, Res.TOPIC, "fresh")
    (t,) = _metadata(h, ["fresh"], allow_auto=False).topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- groups ------------------------------------------------------------------------------------


def _find(h, key: str, key_type: int = GROUP_KEY) -> int:
    r = h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
    return r.coordinators[0].error_code


def _join(h, group: str = "g"):
    return h.request(ApiKey.JOIN_GROUP, 9, {
        "group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00"}], "reason": None})


def _heartbeat(h, group: str = "g") -> int:
    return h.request(ApiKey.HEARTBEAT, 4, {"group_id": group, "generation_id": 1,
                                           "member_id": "m"}).error_code


def _commit(h, group: str = "g", topic: str = "t") -> list[int]:
    r = h.request(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 1},
            {"partition_index": 1, "committed_offset": 1}]}]})
    return [p.error_code for t in r.topics for p in t.partitions]


def test_find_coordinator_of_a_group_needs_describe_on_it(h) -> None:
    _as(h, "alice")
    assert _find(h, "g") == GROUP_DENIED
    assert _find(h, "tx", TRANSACTION_KEY) == TXN_DENIED
    _alice_may(h, Op.READ, Res.GROUP, "g")
    assert _find(h, "g") == 0


def test_join_group_and_heartbeat_need_read_on_the_group(h) -> None:
    _find(h, "g")  # admin: the offsets topic exists
    _as(h, "alice")
    joined = _join(h)
    assert joined.error_code == GROUP_DENIED
    assert _heartbeat(h) == GROUP_DENIED
    assert _join(h, "other").error_code == GROUP_DENIED
    _alice_may(h, Op.READ, Res.GROUP, "g")
    assert _join(h).error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert _heartbeat(h) not in AUTHORIZATION_ERRORS
    assert _join(h, "other").error_code == GROUP_DENIED


def test_join_group_with_only_describe_on_the_group_is_refused(h) -> None:
    _find(h, "g")
    _as(h, "alice")
    _alice_may(h, Op.DESCRIBE, Res.GROUP, "g")
    assert _join(h).error_code == GROUP_DENIED


def test_offset_commit_needs_read_on_the_group_then_on_the_topic(h) -> None:
    h.create_topic("t", 2)
    _find(h, "g")
    _as(h, "alice")
    assert _commit(h) == [GROUP_DENIED] * 2
    _alice_may(h, Op.READ, Res.GROUP, "g")
    assert _commit(h) == [TOPIC_DENIED] * 2
    _alice_may(h, Op.READ, Res.TOPIC, "t")
    assert _commit(h) == [0, 0]


def _groups(h) -> list[str]:
    r = h.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    assert r.error_code == 0
    return sorted(g.group_id for g in r.groups)


@pytest.fixture
def two_groups(h):
    """Groups g1 and g2 with committed offsets (admin); requests then come from alice."""
    h.create_topic("t", 2)
    for g in ("g1", "g2"):
        assert _find(h, g) == 0
        assert _commit(h, g) == [0, 0]
    assert _groups(h) == ["g1", "g2"]
    _as(h, "alice")
    return h


def test_list_groups_shows_only_the_groups_the_principal_may_describe(two_groups) -> None:
    h = two_groups
    assert _groups(h) == []
    _alice_may(h, Op.DESCRIBE, Res.GROUP, "g2")
    assert _groups(h) == ["g2"]
    _alice_may(h, Op.READ, Res.GROUP, "g", pattern=PREFIXED)
    assert _groups(h) == ["g1", "g2"]


def test_list_groups_with_describe_on_the_cluster_shows_every_group(two_groups) -> None:
    h = two_groups
    _alice_may(h, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
    assert _groups(h) == ["g1", "g2"]


def test_describe_groups_refuses_the_groups_the_principal_may_not_describe(two_groups) -> None:
    h = two_groups
    _alice_may(h, Op.DESCRIBE, Res.GROUP, "g1")
    r = h.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g1", "g2"],
                                              "include_authorized_operations": True})
    assert [(g.group_id, g.error_code) for g in r.groups] == [("g1", 0), ("g2", GROUP_DENIED)]
    assert r.groups[0].group_state == "Empty"
    assert r.groups[0].authorized_operations == 1 << Op.DESCRIBE


# -- topics and configs ----------------------------------------------------------------------


def _create_topic(h, name: str):
    (t,) = h.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1}],
        "timeout": 5000, "validate_only": False}).topics
    return t


def _delete_topic(h, name: str):
    (t,) = h.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": name, "topic_id": None}],
                                               "timeout_ms": 5000}).responses
    return t


def test_create_topics_needs_create_on_the_topic_or_the_cluster(h) -> None:
    _as(h, "alice")
    t = _create_topic(h, "a")
    assert (t.error_code, t.error_message) == (TOPIC_DENIED, "Authorization failed.")
    assert "a" not in h.broker.image.topics
    _alice_may(h, Op.CREATE, Res.TOPIC, "a")
    t = _create_topic(h, "a")
    assert t.error_code == 0
    assert "a" in h.broker.image.topics
    # no DESCRIBE_CONFIGS on it: created, but its configs are not shown (as Kafka)
    assert t.topic_config_error_code == TOPIC_DENIED
    assert not t.configs
    _alice_may(h, Op.CREATE, Res.CLUSTER, CLUSTER_NAME)
    _alice_may(h, Op.ALTER_CONFIGS, Res.TOPIC, "b")
    t = _create_topic(h, "b")
    assert (t.error_code, t.topic_config_error_code) == (0, 0)
    assert t.configs


def test_delete_topics_needs_delete_on_the_topic(with_t) -> None:
    h = with_t
    t = _delete_topic(h, "t")
    assert (t.name, t.error_code) == ("t", TOPIC_DENIED)
    assert "t" in h.broker.image.topics
    _alice_may(h, Op.DELETE, Res.TOPIC, "t")
    assert _delete_topic(h, "t").error_code == 0
    assert "t" not in h.broker.image.topics


def test_delete_topics_by_id_hides_the_name_of_a_topic_the_principal_may_not_describe(
        with_t) -> None:
    h = with_t
    topic_id = h.topic_id("t")
    (t,) = h.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": topic_id}],
                                               "timeout_ms": 5000}).responses
    assert (t.name, t.topic_id, t.error_code) == (None, topic_id, TOPIC_DENIED)


def test_delete_topics_of_a_missing_topic_the_principal_may_not_describe(h) -> None:
    _as(h, "alice")
    assert _delete_topic(h, "missing").error_code == TOPIC_DENIED


def _describe_configs(h, resource_type: int, name: str) -> int:
    r = h.request(ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": resource_type, "resource_name": name,
                       "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    return r.results[0].error_code


def test_describe_configs_needs_describe_configs_on_the_topic_or_the_cluster(with_t) -> None:
    h = with_t
    assert _describe_configs(h, TOPIC_CONFIG, "t") == TOPIC_DENIED
    assert _describe_configs(h, BROKER_CONFIG, "1") == CLUSTER_DENIED
    _alice_may(h, Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    _alice_may(h, Op.ALTER_CONFIGS, Res.CLUSTER, CLUSTER_NAME)  # implies DESCRIBE_CONFIGS
    assert _describe_configs(h, TOPIC_CONFIG, "t") == 0
    assert _describe_configs(h, BROKER_CONFIG, "1") == 0


def test_alter_configs_needs_alter_configs(with_t) -> None:
    h = with_t

    def alter() -> int:
        r = h.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": TOPIC_CONFIG, "resource_name": "t", "configs": [
                {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}],
            "validate_only": False})
        return r.responses[0].error_code

    _alice_may(h, Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    assert alter() == TOPIC_DENIED
    _alice_may(h, Op.ALTER_CONFIGS, Res.TOPIC, "t")
    assert alter() == 0
    assert h.broker.image.topics["t"].configs["retention.ms"] == "1000"


# -- producing, transactions -----------------------------------------------------------------


def _init_pid(h, transactional_id: str | None = None):
    return h.request(ApiKey.INIT_PRODUCER_ID, 5, {
        "transactional_id": transactional_id, "transaction_timeout": 60000,
        "producer_id": -1, "producer_epoch": -1})


def test_init_producer_id_with_a_transactional_id_needs_write_on_it(h) -> None:
    _find(h, "tx", TRANSACTION_KEY)  # admin: the coordinator is ready
    _as(h, "alice")
    assert _init_pid(h, "tx").error_code == TXN_DENIED
    _alice_may(h, Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME)  # not enough for a txn id
    _alice_may(h, Op.DESCRIBE, Res.TRANSACTIONAL_ID, "tx")
    assert _init_pid(h, "tx").error_code == TXN_DENIED
    _alice_may(h, Op.WRITE, Res.TRANSACTIONAL_ID, "tx")
    r = _init_pid(h, "tx")
    assert (r.error_code, r.producer_epoch) == (0, 0)


def test_init_producer_id_without_a_transactional_id_needs_idempotent_write(h) -> None:
    _as(h, "alice")
    assert _init_pid(h).error_code == CLUSTER_DENIED
    _alice_may(h, Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME)
    r = _init_pid(h)
    assert (r.error_code, r.producer_epoch) == (0, 0)
    assert r.producer_id >= 0


@pytest.mark.parametrize("acl", [(Op.WRITE, "t", LITERAL), (Op.ALL, "t-", PREFIXED)],
                         ids=["literal", "prefixed"])
def test_init_producer_id_without_a_transactional_id_with_write_on_some_topic(h, acl) -> None:
    _as(h, "alice")
    op, name, pattern = acl
    _alice_may(h, Op.READ, Res.TOPIC, "*")  # READ on every topic is not enough
    assert _init_pid(h).error_code == CLUSTER_DENIED
    _alice_may(h, op, Res.TOPIC, name, pattern=pattern)
    assert _init_pid(h).error_code == 0


def test_init_producer_id_with_write_on_a_topic_that_is_denied_is_refused(h) -> None:
    _as(h, "alice")
    _alice_may(h, Op.WRITE, Res.TOPIC, "t")
    _alice_may(h, Op.WRITE, Res.TOPIC, "t", permission=DENY)
    assert _init_pid(h).error_code == CLUSTER_DENIED


@pytest.mark.broker_config(**ACLS_ON, **{"allow.everyone.if.no.acl.found": "true"})
def test_init_producer_id_with_allow_if_no_acl_and_acls_on_other_resources(h) -> None:
    _as(h, "alice")
    _alice_may(h, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)  # the cluster has ACLs
    _alice_may(h, Op.WRITE, Res.TOPIC, "secret", permission=DENY)  # and some topic
    assert h.produce("public", 0, h.batch(b"a")).error_code in (
        0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # WRITE on it is allowed (no ACL)
    assert _init_pid(h).error_code == 0


def test_end_txn_needs_write_on_the_transactional_id(h) -> None:
    _find(h, "tx", TRANSACTION_KEY)
    _as(h, "alice")

    def end() -> int:
        return h.request(ApiKey.END_TXN, 3, {"transactional_id": "tx", "producer_id": 1000,
                                             "producer_epoch": 0, "committed": True}).error_code

    assert end() == TXN_DENIED
    _alice_may(h, Op.DESCRIBE, Res.TRANSACTIONAL_ID, "tx")
    assert end() == TXN_DENIED
    _alice_may(h, Op.WRITE, Res.TRANSACTIONAL_ID, "tx")
    assert end() not in AUTHORIZATION_ERRORS


def test_produce_needs_write_on_the_topic(h) -> None:
    h.create_topic("t", 2)
    _as(h, "alice")

    def produce() -> list[int]:
        r = h.request(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": -1,
                                          "timeout": 5000, "topic_data": [{"name": "t",
                                          "partition_data": [
                                              {"index": 0, "records": h.batch(b"a")},
                                              {"index": 1, "records": h.batch(b"b")}]}]})
        return [p.error_code for t in r.responses for p in t.partition_responses]

    assert produce() == [TOPIC_DENIED] * 2
    _alice_may(h, Op.READ, Res.TOPIC, "t")
    assert produce() == [TOPIC_DENIED] * 2
    assert h.broker.partitions.get("t", 0).log_end_offset == 0  # nothing was appended
    _alice_may(h, Op.WRITE, Res.TOPIC, "t")
    assert produce() == [0, 0]


def test_produce_to_a_missing_topic_without_write_is_topic_authorization_failed(h) -> None:
    _as(h, "alice")
    assert h.produce("missing", 0, h.batch(b"a")).error_code == TOPIC_DENIED


def test_produce_with_a_transactional_id_needs_write_on_it(with_t) -> None:
    h = with_t
    _alice_may(h, Op.WRITE, Res.TOPIC, "t")
    batch = h.batch(b"a", producer_id=1000, producer_epoch=0, base_sequence=0,
                    transactional=True)
    assert h.produce("t", 0, batch, transactional_id="tx").error_code == TXN_DENIED


# -- reading -------------------------------------------------------------------------------------


def _fetch(h, topic: str = "t") -> tuple[int, bytes]:
    r = h.request(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    p = r.responses[0].partitions[0]
    return p.error_code, bytes(p.records or b"")


def test_fetch_needs_read_on_the_topic(with_t) -> None:
    h = with_t
    code, records = _fetch(h)
    assert (code, records) == (TOPIC_DENIED, b"")
    _alice_may(h, Op.DESCRIBE, Res.TOPIC, "t")
    assert _fetch(h)[0] == TOPIC_DENIED
    _alice_may(h, Op.READ, Res.TOPIC, "t")
    code, records = _fetch(h)
    assert code == 0
    assert records


def test_fetch_as_a_follower_needs_cluster_action(with_t) -> None:
    h = with_t
    _alice_may(h, Op.READ, Res.TOPIC, "t")
    r = h.request(ApiKey.FETCH, 12, {
        "replica_id": 2, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    assert r.responses[0].partitions[0].error_code == TOPIC_DENIED


def _list_offsets(h, topic: str = "t") -> int:
    r = h.request(ApiKey.LIST_OFFSETS, 8, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return r.topics[0].partitions[0].error_code


def test_list_offsets_needs_describe_on_the_topic(with_t) -> None:
    h = with_t
    assert _list_offsets(h) == TOPIC_DENIED
    assert _list_offsets(h, "missing") == TOPIC_DENIED
    _alice_may(h, Op.DESCRIBE, Res.TOPIC, "t")
    assert _list_offsets(h) == 0


def test_delete_records_needs_delete_on_the_topic(with_t) -> None:
    h = with_t

    def delete() -> tuple[int, int]:
        r = h.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "offset": 1}]}], "timeout_ms": 5000})
        p = r.topics[0].partitions[0]
        return p.error_code, p.low_watermark

    assert delete()[0] == TOPIC_DENIED
    _alice_may(h, Op.READ, Res.TOPIC, "t")
    assert delete()[0] == TOPIC_DENIED
    _alice_may(h, Op.DELETE, Res.TOPIC, "t")
    assert delete() == (0, 1)


# -- cluster APIs --------------------------------------------------------------------------------


def _elect(h, version: int = 2):
    return h.request(ApiKey.ELECT_LEADERS, version, {
        "election_type": 0, "timeout": 5000,
        "topic_partitions": [{"topic": "t", "partitions": [0]}]})


def test_elect_leaders_needs_alter_on_the_cluster(with_t) -> None:
    h = with_t
    assert _elect(h).error_code == CLUSTER_DENIED
    _alice_may(h, Op.ALTER, Res.TOPIC, "t")  # the topic's ALTER is not the cluster's
    assert _elect(h).error_code == CLUSTER_DENIED
    _alice_may(h, Op.ALTER, Res.CLUSTER, CLUSTER_NAME)
    r = _elect(h)
    assert r.error_code == 0
    assert [(x.topic, [(p.partition_id, p.error_code) for p in x.partition_result])
            for x in r.replica_election_results] == [
        ("t", [(0, ErrorCode.ELECTION_NOT_NEEDED)])]


@pytest.mark.parametrize("version", [0, 2])
def test_a_refused_elect_leaders_answers_each_named_partition(with_t, version: int) -> None:
    r = _elect(with_t, version)
    assert [(x.topic, [(p.partition_id, p.error_code) for p in x.partition_result])
            for x in r.replica_election_results] == [("t", [(0, CLUSTER_DENIED)])]


def test_alter_partition_reassignments_needs_alter_on_the_cluster(with_t) -> None:
    h = with_t

    def alter():
        return h.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 5000, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]})

    r = alter()
    assert (r.error_code, r.responses) == (CLUSTER_DENIED, [])
    _alice_may(h, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
    assert alter().error_code == CLUSTER_DENIED
    _alice_may(h, Op.ALTER, Res.CLUSTER, CLUSTER_NAME)
    r = alter()
    assert r.error_code == 0
    assert [p.error_code for t in r.responses for p in t.partitions] == [0]


def test_describe_log_dirs_needs_describe_on_the_cluster(with_t) -> None:
    h = with_t

    def describe():
        return h.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})

    r = describe()
    assert (r.error_code, r.results) == (CLUSTER_DENIED, [])
    _alice_may(h, Op.READ, Res.TOPIC, "t")
    assert describe().error_code == CLUSTER_DENIED
    _alice_may(h, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
    r = describe()
    assert r.error_code == 0
    assert r.results
    assert all(x.error_code == 0 for x in r.results)


def test_describe_cluster_authorized_operations(h) -> None:
    def ops() -> int:
        return h.request(ApiKey.DESCRIBE_CLUSTER, 1, {
            "include_cluster_authorized_operations": True,
            "endpoint_type": 1}).cluster_authorized_operations

    _as(h, "alice")
    assert ops() == 0
    _alice_may(h, Op.ALTER, Res.CLUSTER, CLUSTER_NAME)
    assert ops() == (1 << Op.ALTER) | (1 << Op.DESCRIBE)
