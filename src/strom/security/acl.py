"""ACLs and the authorizer, with the semantics of Kafka's StandardAuthorizer.

An ACL allows or denies a principal (``User:alice``, or ``User:*`` for everyone) an operation on
a resource, from a host (an IP address, or ``*``). A resource pattern is LITERAL (one name, or
``*`` for all) or PREFIXED (every name starting with it). For a request:

- super users (``super.users``) may do everything;
- the ACLs matching the resource are its LITERAL name, the LITERAL ``*`` and the PREFIXED
  patterns the name starts with; if there are none, ``allow.everyone.if.no.acl.found`` decides;
- among those naming the principal (or ``User:*``) and the host (or ``*``), any DENY for the
  operation (or ALL) wins; else an ALLOW for it (or ALL, or an operation implying it: READ,
  WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
- else the request is denied.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from strom.security.principal import KafkaPrincipal

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ,
                                      AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS,
                                              AclOperation.ALTER_CONFIGS}),
}

# The operations each resource type knows (Kafka's authorized_operations bit sets)
OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
                           AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
                           AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


class AclError(ValueError):
    """An ACL that cannot be created; the message is Kafka's."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def to_record(self) -> dict[str, Any]:
        return {"resource_type": int(self.resource_type), "resource_name": self.resource_name,
                "pattern_type": int(self.pattern_type), "principal": self.principal,
                "host": self.host, "operation": int(self.operation),
                "permission": int(self.permission)}

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> AclBinding:
        return cls(ResourceType(r["resource_type"]), r["resource_name"],
                   PatternType(r["pattern_type"]), r["principal"], r["host"],
                   AclOperation(r["operation"]), AclPermission(r["permission"]))

    def validate(self) -> None:
        """Kafka's checks of a new ACL (CreateAcls); raises AclError."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise AclError(f"Invalid resource type {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"Invalid pattern type {self.pattern_type.name}: ACLs are LITERAL or "
                           f"PREFIXED")
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise AclError(f"Invalid operation {self.operation.name}")
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            raise AclError(f"Invalid permission type {self.permission.name}")
        if not self.resource_name:
            raise AclError("Invalid empty resource name")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        try:
            KafkaPrincipal.parse(self.principal)
        except ValueError as e:
            raise AclError(str(e)) from None
        if self.host != WILDCARD:
            try:
                ipaddress.ip_address(self.host)
            except ValueError:
                raise AclError(f"Invalid host {self.host!r}: an IP address or *") from None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls/DeleteAcls filters: ANY (or None for names) matches everything; pattern
    MATCH matches the ACLs that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != AclOperation.ANY and acl.operation != self.operation:
            return False
        return self.permission == AclPermission.ANY or acl.permission == self.permission

    def _matches_pattern(self, acl: AclBinding) -> bool:
        name, kind = self.resource_name, self.pattern_type
        if kind == PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)
        if kind != PatternType.ANY and acl.pattern_type != kind:
            return False
        return name is None or acl.resource_name == name


class _Index:
    """The ACLs by resource type: literal names in a dict, prefixes in a list."""

    def __init__(self, acls: Iterable[AclBinding]) -> None:
        self.literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self.prefixed: dict[ResourceType, list[AclBinding]] = {}
        for acl in acls:
            if acl.pattern_type == PatternType.PREFIXED:
                self.prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                self.literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)

    def matching(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        out = list(self.literal.get((rtype, name), ()))
        if name != WILDCARD:
            out += self.literal.get((rtype, WILDCARD), ())
        out += [a for a in self.prefixed.get(rtype, ()) if name.startswith(a.resource_name)]
        return out


class Authorizer:
    """Decides requests from the ACLs in the cluster metadata (re-indexed when they change)."""

    def __init__(self, acls: Callable[[], Iterable[AclBinding]], version: Callable[[], Any], *,
                 super_users: Iterable[str] = (), allow_if_no_acl: bool = False) -> None:
        self._acls = acls
        self._version = version
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._index: _Index | None = None
        self._indexed_at: Any = object()

    def _current(self) -> _Index:
        version = self._version()
        if self._index is None or version != self._indexed_at:
            self._index = _Index(self._acls())
            self._indexed_at = version
        return self._index

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  rtype: ResourceType, name: str) -> bool:
        who = str(principal)
        if who in self.super_users:
            return True
        acls = self._current().matching(rtype, name)
        if not acls:
            return self.allow_if_no_acl
        principals = (who, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        relevant = [a for a in acls if a.principal in principals and a.host in hosts]
        if any(a.permission == AclPermission.DENY
               and a.operation in (operation, AclOperation.ALL) for a in relevant):
            return False
        allowed_by = _IMPLIED_BY.get(operation, frozenset({operation}))
        return any(a.permission == AclPermission.ALLOW
                   and (a.operation == AclOperation.ALL or a.operation in allowed_by)
                   for a in relevant)

    def allows_some(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                    rtype: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of a type, as Kafka's
        authorizeByResourceType (an idempotent producer needs WRITE on some topic): a name no
        ACL matches would be allowed (the wildcard, allow.everyone.if.no.acl.found), or an ALLOW
        that no DENY overrides (a LITERAL DENY of its name, a PREFIXED DENY covering it, a
        DENY on ``*``)."""
        if self.authorize(principal, host, operation, rtype, "hardcode"):
            return True
        who = str(principal)
        index = self._current()
        acls = [a for (t, _), bucket in index.literal.items() if t == rtype for a in bucket]
        acls += index.prefixed.get(rtype, [])
        mine = [a for a in acls if a.principal in (who, WILDCARD_PRINCIPAL)
                and a.host in (host, WILDCARD) and a.operation in (operation, AclOperation.ALL)]
        denied_names: set[str] = set()
        denied_prefixes: list[str] = []
        for a in mine:
            if a.permission != AclPermission.DENY:
                continue
            if a.pattern_type == PatternType.LITERAL:
                if a.resource_name == WILDCARD:
                    return False
                denied_names.add(a.resource_name)
            else:
                denied_prefixes.append(a.resource_name)
        for a in mine:
            if a.permission != AclPermission.ALLOW:
                continue
            covered = any(a.resource_name.startswith(p) for p in denied_prefixes)
            if a.pattern_type == PatternType.LITERAL:
                covered = covered or a.resource_name in denied_names
            if not covered:
                return True
        return False

    def authorized_operations(self, principal: KafkaPrincipal, host: str, rtype: ResourceType,
                              name: str) -> int:
        """Kafka's bit set of the operations the principal may do on a resource."""
        bits = 0
        for op in OPERATIONS.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << int(op)
        return bits


def parse_super_users(text: str | None) -> list[str]:
    """``super.users``: principals separated by ';' (``User:alice;User:bob``)."""
    out = []
    for entry in (text or "").split(";"):
        entry = entry.strip()
        if entry:
            KafkaPrincipal.parse(entry)  # raises ValueError for a malformed one
            out.append(entry)
    return out
