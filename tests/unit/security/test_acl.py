"""ACLs and the authorizer (strom.security.acl): Kafka's StandardAuthorizer semantics, ACL
validation, filters and super.users."""

from __future__ import annotations

import pytest

from strom.security.acl import (
    CLUSTER_NAME,
    OPERATIONS,
    AclBinding,
    AclError,
    AclFilter,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourceType,
    parse_super_users,
)
from strom.security.principal import KafkaPrincipal

Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, AclPermission
ALICE, BOB = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"
LITERAL, PREFIXED = Pat.LITERAL, Pat.PREFIXED
ALLOW, DENY = Perm.ALLOW, Perm.DENY


def acl(name: str = "t", op: AclOperation = Op.READ, perm: AclPermission = ALLOW, *,
        principal: str = "User:alice", host: str = "*", pattern: PatternType = LITERAL,
        rtype: ResourceType = Res.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


class Acls:
    """The ACLs an authorizer reads, with the version it re-indexes on."""

    def __init__(self, *acls: AclBinding) -> None:
        self.acls = list(acls)
        self.version = 0
        self.reads = 0

    def read(self) -> list[AclBinding]:
        self.reads += 1
        return list(self.acls)

    def add(self, *acls: AclBinding) -> None:
        self.acls += acls
        self.version += 1


def authorizer(*acls: AclBinding, super_users: tuple[str, ...] = (),
               allow_if_no_acl: bool = False) -> Authorizer:
    store = Acls(*acls)
    return Authorizer(store.read, lambda: store.version, super_users=super_users,
                      allow_if_no_acl=allow_if_no_acl)


def may(a: Authorizer, op: AclOperation = Op.READ, name: str = "t", *,
        who: KafkaPrincipal = ALICE, host: str = HOST, rtype: ResourceType = Res.TOPIC) -> bool:
    return a.authorize(who, host, op, rtype, name)


# -- resource patterns ----------------------------------------------------------------------


def test_a_literal_acl_applies_to_its_name_only() -> None:
    a = authorizer(acl("t"))
    assert may(a, name="t")
    assert not may(a, name="t2")
    assert not may(a, name="u")


def test_the_literal_wildcard_applies_to_every_name() -> None:
    a = authorizer(acl("*"))
    assert may(a, name="t")
    assert may(a, name="anything")


def test_a_prefixed_acl_applies_to_names_starting_with_it() -> None:
    a = authorizer(acl("orders-", pattern=PREFIXED))
    assert may(a, name="orders-eu")
    assert may(a, name="orders-")
    assert not may(a, name="orders")
    assert not may(a, name="x-orders-eu")


def test_an_acl_applies_to_its_resource_type_only() -> None:
    a = authorizer(acl("t", rtype=Res.GROUP))
    assert may(a, name="t", rtype=Res.GROUP)
    assert not may(a, name="t", rtype=Res.TOPIC)


# -- permissions and operations ---------------------------------------------------------------


@pytest.mark.parametrize("deny", [
    acl("t", perm=DENY),
    acl("*", perm=DENY),
    acl("t", pattern=PREFIXED, perm=DENY),
    acl("t", Op.ALL, DENY),
    acl("t", perm=DENY, principal="User:*"),
], ids=["literal", "wildcard", "prefixed", "deny-all", "everyone"])
def test_a_deny_beats_an_allow(deny: AclBinding) -> None:
    assert may(authorizer(acl("t")))
    assert not may(authorizer(acl("t"), deny))
    assert not may(authorizer(deny, acl("t")))  # whatever the order


def test_a_deny_of_another_operation_leaves_the_allow() -> None:
    assert may(authorizer(acl("t", Op.READ), acl("t", Op.WRITE, DENY)))


def test_all_allows_every_operation() -> None:
    a = authorizer(acl("t", Op.ALL))
    for op in OPERATIONS[Res.TOPIC]:
        assert may(a, op), op


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_read_write_delete_and_alter_imply_describe(op: AclOperation) -> None:
    a = authorizer(acl("t", op))
    assert may(a, Op.DESCRIBE)
    assert not may(a, Op.DESCRIBE_CONFIGS)


@pytest.mark.parametrize("op", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
def test_other_operations_do_not_imply_describe(op: AclOperation) -> None:
    assert not may(authorizer(acl("t", op)), Op.DESCRIBE)


def test_describe_implies_nothing_else() -> None:
    a = authorizer(acl("t", Op.DESCRIBE))
    assert may(a, Op.DESCRIBE)
    assert not any(may(a, op) for op in OPERATIONS[Res.TOPIC] if op != Op.DESCRIBE)


def test_a_denied_read_does_not_deny_describe() -> None:
    a = authorizer(acl("t", Op.DESCRIBE), acl("t", Op.READ, DENY))
    assert may(a, Op.DESCRIBE)
    assert not may(a, Op.READ)
    # nor does a denied read take away the describe another allow implies
    assert may(authorizer(acl("t", Op.WRITE), acl("t", Op.READ, DENY)), Op.DESCRIBE)


def test_a_denied_describe_denies_describe_whatever_implies_it() -> None:
    a = authorizer(acl("t", Op.READ), acl("t", Op.DESCRIBE, DENY))
    assert not may(a, Op.DESCRIBE)
    assert may(a, Op.READ)


def test_alter_configs_implies_describe_configs() -> None:
    a = authorizer(acl("t", Op.ALTER_CONFIGS))
    assert may(a, Op.DESCRIBE_CONFIGS)
    assert not may(a, Op.ALTER)
    assert not may(authorizer(acl("t", Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS)


# -- principals and hosts ------------------------------------------------------------------


def test_an_acl_applies_to_its_principal_only() -> None:
    a = authorizer(acl("t"))
    assert may(a, who=ALICE)
    assert not may(a, who=BOB)


def test_user_star_applies_to_every_user() -> None:
    a = authorizer(acl("t", principal="User:*"))
    assert may(a, who=ALICE)
    assert may(a, who=BOB)


def test_a_host_acl_applies_from_that_host_only() -> None:
    a = authorizer(acl("t", host=HOST))
    assert may(a, host=HOST)
    assert not may(a, host=OTHER_HOST)
    b = authorizer(acl("t", host="*"))
    assert may(b, host=HOST)
    assert may(b, host=OTHER_HOST)


def test_a_deny_from_another_host_leaves_the_allow() -> None:
    a = authorizer(acl("t"), acl("t", perm=DENY, host=OTHER_HOST))
    assert may(a, host=HOST)
    assert not may(a, host=OTHER_HOST)


# -- no ACLs, super users ------------------------------------------------------------------


@pytest.mark.parametrize("allow_if_no_acl", [False, True])
def test_without_acls_for_the_resource_allow_if_no_acl_decides(allow_if_no_acl: bool) -> None:
    a = authorizer(acl("other"), acl("t", rtype=Res.GROUP), allow_if_no_acl=allow_if_no_acl)
    assert may(a, name="t") is allow_if_no_acl
    assert may(authorizer(allow_if_no_acl=allow_if_no_acl)) is allow_if_no_acl


def test_acls_for_the_resource_but_not_the_principal_deny() -> None:
    a = authorizer(acl("t", principal="User:bob"), allow_if_no_acl=True)
    assert may(a, who=BOB)
    assert not may(a, who=ALICE)
    # an ACL from another host, or for another operation, counts as an ACL of the resource
    assert not may(authorizer(acl("t", host=OTHER_HOST), allow_if_no_acl=True))
    assert not may(authorizer(acl("t", Op.WRITE), allow_if_no_acl=True), Op.READ)


def test_super_users_may_do_everything_even_when_denied() -> None:
    a = authorizer(acl("*", Op.ALL, DENY, principal="User:*"), super_users=("User:alice",))
    assert may(a, Op.DELETE, who=ALICE)
    assert may(a, Op.ALTER, CLUSTER_NAME, rtype=Res.CLUSTER, who=ALICE)
    assert not may(a, who=BOB)
    assert a.allows_some(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert a.authorized_operations(ALICE, HOST, Res.GROUP, "g") == sum(
        1 << op for op in OPERATIONS[Res.GROUP])


# -- the index -------------------------------------------------------------------------------


def test_the_acls_are_reindexed_when_the_version_changes() -> None:
    store = Acls()
    a = Authorizer(store.read, lambda: store.version)
    assert not may(a)
    store.acls.append(acl("t"))  # the same version: the index is kept
    assert not may(a)
    assert store.reads == 1
    store.version += 1
    assert may(a)
    assert store.reads == 2
    store.add(acl("t", perm=DENY))
    assert not may(a)
    store.acls.clear()
    store.version += 1
    assert not may(a)  # no ACLs at all now: allow_if_no_acl (False)


def test_the_index_is_read_once_per_version() -> None:
    store = Acls(acl("t"), acl("p-", pattern=PREFIXED))
    a = Authorizer(store.read, lambda: store.version)
    for name in ("t", "p-1", "u", "t"):
        may(a, name=name)
    a.authorized_operations(ALICE, HOST, Res.TOPIC, "t")
    a.allows_some(ALICE, HOST, Op.READ, Res.TOPIC)
    assert store.reads == 1


# -- authorized_operations and allows_some -----------------------------------------------------


def test_authorized_operations_is_a_bit_set_of_operation_codes() -> None:
    a = authorizer(acl("t", Op.READ), acl("t", Op.ALTER_CONFIGS))
    bits = a.authorized_operations(ALICE, HOST, Res.TOPIC, "t")
    assert bits == (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11)  # READ DESCRIBE D_CONFIGS A_CONFIGS
    assert a.authorized_operations(BOB, HOST, Res.TOPIC, "t") == 0


def test_authorized_operations_with_all_has_every_operation_of_the_type() -> None:
    a = authorizer(acl("t", Op.ALL), acl(CLUSTER_NAME, Op.ALL, rtype=Res.CLUSTER))
    assert a.authorized_operations(ALICE, HOST, Res.TOPIC, "t") == 3576  # as Kafka's topics
    cluster = a.authorized_operations(ALICE, HOST, Res.CLUSTER, CLUSTER_NAME)
    assert cluster == sum(1 << op for op in OPERATIONS[Res.CLUSTER])
    assert not cluster & (1 << Op.READ)  # READ is no cluster operation


def test_authorized_operations_leaves_out_denied_operations() -> None:
    a = authorizer(acl("t", Op.ALL), acl("t", Op.WRITE, DENY))
    assert a.authorized_operations(ALICE, HOST, Res.TOPIC, "t") == 3576 & ~(1 << Op.WRITE)


def test_allows_some_finds_an_allow_on_any_resource_of_the_type() -> None:
    a = authorizer(acl("t", Op.WRITE))
    assert a.allows_some(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert not a.allows_some(BOB, HOST, Op.WRITE, Res.TOPIC)
    assert not a.allows_some(ALICE, HOST, Op.READ, Res.TOPIC)
    assert not a.allows_some(ALICE, HOST, Op.WRITE, Res.GROUP)
    assert authorizer(acl("p-", Op.ALL, pattern=PREFIXED)).allows_some(
        ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert authorizer(acl("t", Op.WRITE, principal="User:*")).allows_some(
        BOB, HOST, Op.WRITE, Res.TOPIC)
    assert not authorizer(acl("t", Op.WRITE, host=OTHER_HOST)).allows_some(
        ALICE, HOST, Op.WRITE, Res.TOPIC)


def test_allows_some_is_overridden_by_a_deny_on_the_same_pattern_or_the_wildcard() -> None:
    allow = acl("t", Op.WRITE)
    assert not authorizer(allow, acl("t", Op.WRITE, DENY)).allows_some(
        ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert not authorizer(allow, acl("*", Op.ALL, DENY)).allows_some(
        ALICE, HOST, Op.WRITE, Res.TOPIC)
    # a deny of another topic leaves the allow of this one
    assert authorizer(allow, acl("u", Op.WRITE, DENY)).allows_some(
        ALICE, HOST, Op.WRITE, Res.TOPIC)
    # one allow the denies leave is enough
    assert authorizer(allow, acl("t", Op.WRITE, DENY), acl("u", Op.WRITE)).allows_some(
        ALICE, HOST, Op.WRITE, Res.TOPIC)


@pytest.mark.parametrize("allow_if_no_acl", [False, True])
def test_allows_some_without_acls_of_the_type_follows_allow_if_no_acl(
        allow_if_no_acl: bool) -> None:
    a = authorizer(acl("g", Op.WRITE, rtype=Res.GROUP), allow_if_no_acl=allow_if_no_acl)
    assert a.allows_some(ALICE, HOST, Op.WRITE, Res.TOPIC) is allow_if_no_acl


@pytest.mark.parametrize("allowed", [acl("orders-eu", Op.WRITE),
                                     acl("orders-eu", Op.WRITE, pattern=PREFIXED)],
                         ids=["literal", "prefixed"])
def test_allows_some_refuses_an_allow_a_prefixed_deny_dominates(allowed: AclBinding) -> None:
    # Kafka (Authorizer.authorizeByResourceType): an allowed pattern starting with a PREFIXED
    # deny's name is dominated by it: no topic it names may be written
    a = authorizer(allowed, acl("orders-", Op.WRITE, DENY, pattern=PREFIXED))
    assert may(a, Op.WRITE, "orders-eu") is False  # the authorizer itself agrees
    assert a.allows_some(ALICE, HOST, Op.WRITE, Res.TOPIC) is False


def test_allows_some_with_allow_if_no_acl_allows_beside_acls_of_other_resources() -> None:
    # every topic without an ACL may be written by anyone: an idempotent producer may write
    a = authorizer(acl("secret", Op.WRITE, DENY, principal="User:bob"), allow_if_no_acl=True)
    assert may(a, Op.WRITE, "public")
    assert a.allows_some(ALICE, HOST, Op.WRITE, Res.TOPIC)


# -- AclBinding ----------------------------------------------------------------------------


def test_a_binding_round_trips_through_its_record() -> None:
    b = acl("orders-", Op.IDEMPOTENT_WRITE, DENY, principal="User:*", host="::1",
            pattern=PREFIXED, rtype=Res.CLUSTER)
    record = b.to_record()
    assert record == {"resource_type": 4, "resource_name": "orders-", "pattern_type": 4,
                      "principal": "User:*", "host": "::1", "operation": 12, "permission": 2}
    assert AclBinding.from_record(record) == b


@pytest.mark.parametrize("binding", [
    acl("t"),
    acl("p-", Op.ALL, DENY, pattern=PREFIXED, principal="User:*", host="10.0.0.1"),
    acl(CLUSTER_NAME, Op.ALTER, rtype=Res.CLUSTER, host="::1"),
    acl("tx", Op.WRITE, rtype=Res.TRANSACTIONAL_ID, principal="User:CN=a,O=b"),
])
def test_valid_bindings_pass(binding: AclBinding) -> None:
    binding.validate()


@pytest.mark.parametrize(("binding", "message"), [
    (acl("t", rtype=Res.ANY), "Invalid resource type ANY"),
    (acl("t", rtype=Res.UNKNOWN), "Invalid resource type UNKNOWN"),
    (acl("t", pattern=Pat.MATCH), "Invalid pattern type MATCH"),
    (acl("t", pattern=Pat.ANY), "Invalid pattern type ANY"),
    (acl("t", Op.ANY), "Invalid operation ANY"),
    (acl("t", Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl("t", perm=Perm.ANY), "Invalid permission type ANY"),
    (acl(""), "Invalid empty resource name"),
    (acl("my-cluster", Op.ALTER, rtype=Res.CLUSTER),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl("t", principal="alice"), "Type:name"),
    (acl("t", principal="User:"), "Type:name"),
    (acl("t", host="localhost"), "Invalid host 'localhost'"),
    (acl("t", host="10.0.0.300"), "Invalid host"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_invalid_bindings_are_refused_with_kafkas_message(binding: AclBinding,
                                                          message: str) -> None:
    with pytest.raises(AclError, match=message):
        binding.validate()


# -- AclFilter -----------------------------------------------------------------------------


LIT_T = acl("t")
LIT_STAR = acl("*")
PRE_T = acl("t", pattern=PREFIXED)
PRE_TO = acl("to", pattern=PREFIXED)
LIT_OTHER = acl("other")
GROUP_T = acl("t", rtype=Res.GROUP)
ALL_ACLS = [LIT_T, LIT_STAR, PRE_T, PRE_TO, LIT_OTHER, GROUP_T]


def _matching(f: AclFilter) -> list[AclBinding]:
    return [a for a in ALL_ACLS if f.matches(a)]


def test_the_default_filter_matches_everything() -> None:
    assert _matching(AclFilter()) == ALL_ACLS


def test_a_match_filter_matches_the_acls_that_apply_to_the_resource() -> None:
    f = AclFilter(Res.TOPIC, "topic", Pat.MATCH)
    assert _matching(f) == [LIT_STAR, PRE_T, PRE_TO]
    assert _matching(AclFilter(Res.TOPIC, "t", Pat.MATCH)) == [LIT_T, LIT_STAR, PRE_T]
    assert _matching(AclFilter(Res.TOPIC, None, Pat.MATCH)) == [
        LIT_T, LIT_STAR, PRE_T, PRE_TO, LIT_OTHER]


def test_an_any_pattern_filter_matches_the_name_exactly_in_every_pattern() -> None:
    assert _matching(AclFilter(Res.ANY, "t", Pat.ANY)) == [LIT_T, PRE_T, GROUP_T]
    assert _matching(AclFilter(Res.TOPIC, "*")) == [LIT_STAR]


def test_literal_and_prefixed_filters_match_that_pattern_type_only() -> None:
    assert _matching(AclFilter(Res.TOPIC, "t", Pat.LITERAL)) == [LIT_T]
    assert _matching(AclFilter(Res.TOPIC, "t", Pat.PREFIXED)) == [PRE_T]
    assert _matching(AclFilter(Res.ANY, None, Pat.PREFIXED)) == [PRE_T, PRE_TO]
    # a literal filter for "topic" does not match the wildcard, as MATCH does
    assert _matching(AclFilter(Res.TOPIC, "topic", Pat.LITERAL)) == []


def test_filters_on_the_entry() -> None:
    read, write = acl("t", Op.READ), acl("t", Op.WRITE, DENY, principal="User:bob",
                                         host="10.0.0.1")
    both = [read, write]
    assert [a for a in both if AclFilter(principal="User:bob").matches(a)] == [write]
    assert [a for a in both if AclFilter(host="10.0.0.1").matches(a)] == [write]
    assert [a for a in both if AclFilter(host="*").matches(a)] == [read]
    assert [a for a in both if AclFilter(operation=Op.READ).matches(a)] == [read]
    assert [a for a in both if AclFilter(permission=DENY).matches(a)] == [write]
    assert [a for a in both if AclFilter(permission=ALLOW, principal="User:bob").matches(a)] == []


# -- super.users -----------------------------------------------------------------------------


def test_parse_super_users() -> None:
    assert parse_super_users("User:alice;User:bob") == ["User:alice", "User:bob"]
    assert parse_super_users(" User:alice ; ;User:CN=x,O=y ") == ["User:alice", "User:CN=x,O=y"]
    assert parse_super_users("") == []
    assert parse_super_users(None) == []


@pytest.mark.parametrize("text", ["alice", "User:alice;bob", "User:"])
def test_parse_super_users_refuses_a_malformed_principal(text: str) -> None:
    with pytest.raises(ValueError, match="Type:name"):
        parse_super_users(text)
