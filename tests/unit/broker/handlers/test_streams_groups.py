"""StreamsGroupHeartbeat and StreamsGroupDescribe (KIP-1071) through the broker: the wire
format, internal topics created by the broker, and the ACLs Kafka checks."""

from __future__ import annotations

import uuid

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import (
    AclBinding,
    AclOperation,
    AclPermission,
    KafkaPrincipal,
    PatternType,
    ResourceType,
)

GROUP = "app"
NO_DELAY = {"group.streams.initial.rebalance.delay.ms": 0}
ACLS_ON = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin", **NO_DELAY}
pytestmark = pytest.mark.broker_config(**NO_DELAY)

TOPOLOGY = {"epoch": 0, "subtopologies": [
    {"subtopology_id": "0", "source_topics": ["lines"], "source_topic_regex": [],
     "state_changelog_topics": [], "repartition_sink_topics": ["app-r"],
     "repartition_source_topics": [], "copartition_groups": []},
    {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
     "state_changelog_topics": [{"name": "app-c", "partitions": 0, "replication_factor": 0,
                                 "topic_configs": [{"key": "cleanup.policy",
                                                    "value": "compact"}]}],
     "repartition_sink_topics": [],
     "repartition_source_topics": [{"name": "app-r", "partitions": 0, "replication_factor": 0,
                                    "topic_configs": []}],
     "copartition_groups": []}]}


def _join(h, member: str | None = None):
    return h.request(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, {
        "group_id": GROUP, "member_id": member or str(uuid.uuid4()), "member_epoch": 0,
        "endpoint_information_epoch": -1, "instance_id": None, "rack_id": None,
        "rebalance_timeout": 30000, "topology": TOPOLOGY, "active_tasks": [],
        "standby_tasks": [], "warmup_tasks": [], "process_id": "p", "user_endpoint": None,
        "client_tags": None, "task_offsets": None, "task_end_offsets": None,
        "shutdown_application": False})


def _setup(h) -> None:
    h.create_topic("lines", partitions=3)
    r = h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [GROUP]})
    assert r.coordinators[0].error_code == 0


def test_a_member_joins_and_the_broker_creates_the_internal_topics(broker_harness) -> None:
    h = broker_harness
    _setup(h)
    r = _join(h)
    assert (r.error_code, r.member_epoch, r.status) == (0, 1, [])
    assert sorted((t.subtopology_id, sorted(t.partitions)) for t in r.active_tasks) == [
        ("0", [0, 1, 2]), ("1", [0, 1, 2])]
    changelog = h.broker.image.topics["app-c"]
    assert len(changelog.partitions) == 3 and changelog.configs["cleanup.policy"] == "compact"
    d = h.request(ApiKey.STREAMS_GROUP_DESCRIBE, 0, {"group_ids": [GROUP],
                                                     "include_authorized_operations": True})
    [g] = d.groups
    assert (g.error_code, g.group_state, g.group_epoch) == (0, "Stable", 1)
    assert g.authorized_operations > 0
    assert [m.process_id for m in g.members] == ["p"]


def _as(h, user: str) -> None:
    h.conn.session.principal = KafkaPrincipal.user(user)


def _alice_may(h, op: AclOperation, rtype: ResourceType, name: str,
               pattern: PatternType = PatternType.LITERAL) -> None:
    binding = AclBinding(rtype, name, pattern, "User:alice", "*", op, AclPermission.ALLOW)
    h.loop.run_until_complete(h.broker.controller.alter_acls([binding], []))


@pytest.mark.broker_config(**ACLS_ON)
def test_acls_group_read_topic_describe_and_create(broker_harness) -> None:
    h = broker_harness
    _as(h, "admin")
    _setup(h)
    _as(h, "alice")
    assert _join(h).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    _alice_may(h, AclOperation.READ, ResourceType.GROUP, GROUP)
    r = _join(h)
    assert r.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert r.error_message == "Unauthorized to DESCRIBE on topics app-c, app-r, lines."
    _alice_may(h, AclOperation.DESCRIBE, ResourceType.TOPIC, "app", PatternType.PREFIXED)
    _alice_may(h, AclOperation.DESCRIBE, ResourceType.TOPIC, "lines")
    r = _join(h)
    assert r.error_code == 0 and not r.active_tasks
    [status] = r.status
    assert status.status_code == 3  # MISSING_INTERNAL_TOPICS, and nothing was created
    assert status.status_detail.endswith("Unauthorized to CREATE on topics app-c, app-r.")
    assert "app-c" not in h.broker.image.topics
    _alice_may(h, AclOperation.CREATE, ResourceType.TOPIC, "app", PatternType.PREFIXED)
    r = _join(h, member=r.member_id)
    assert (r.error_code, r.status) == (0, [])
    assert "app-c" in h.broker.image.topics
    assert sum(len(t.partitions) for t in r.active_tasks) == 6
