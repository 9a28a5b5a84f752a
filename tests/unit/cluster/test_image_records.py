"""`image_records(image)`: the records a KRaft snapshot holds. Applied to an empty image they
must rebuild the same image (everything but the live brokers and controller), whatever records
built it: deletions, removed configs and quotas, reassignments under way."""

from __future__ import annotations

import uuid

from strom.cluster import records as rec
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState
from strom.cluster.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    entity,
)
from strom.security.acl import (
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

CLUSTER = "c-image-records"


def acl(name: str, op: AclOperation = AclOperation.READ) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*", op,
                      AclPermission.ALLOW)


def built_image() -> MetadataImage:
    """An image as a metadata log would leave it: built by records only, with things created
    and then removed again."""
    image = MetadataImage(cluster_id=CLUSTER)

    def apply(*records: dict[str, object]) -> None:
        for r in records:
            rec.apply(image, r)

    orders, payments, gone, first, reborn = (uuid.uuid4() for _ in range(5))
    apply(rec.topic_record("orders", orders),
          *[rec.partition_record(orders, PartitionState(p, [0, 1], [0, 1], 0, 3, 5))
            for p in range(3)],
          rec.config_record("topic", "orders", "retention.ms", "60000"),
          rec.config_record("topic", "orders", "cleanup.policy", "compact"),
          rec.config_record("topic", "orders", "segment.bytes", "1024"),
          rec.config_record("topic", "orders", "segment.bytes", None))
    # a reassignment under way: 2 is catching up, 0 leaves once it has
    apply(rec.topic_record("payments", payments),
          rec.partition_record(payments, PartitionState(0, [0], [0], 0)),
          rec.partition_record(payments, PartitionState(
              0, [2, 1, 0], [0, 1], 1, leader_epoch=4, partition_epoch=7,
              adding_replicas=[2], removing_replicas=[0])))
    # deleted, and a name deleted then created again with a new id
    apply(rec.topic_record("gone", gone), rec.partition_record(gone, PartitionState(0, [0], [0], 0)),
          rec.remove_topic_record(gone))
    apply(rec.topic_record("reborn", first), rec.remove_topic_record(first),
          rec.topic_record("reborn", reborn),
          rec.partition_record(reborn, PartitionState(0, [1], [1], 1)),
          rec.partition_record(reborn, PartitionState(1, [0], [], -1, leader_epoch=2)))
    apply(rec.config_record("broker", "", "log.retention.ms", "1000"),
          rec.config_record("broker", "0", "message.max.bytes", "2048"),
          rec.config_record("broker", "0", "log.cleaner.threads", "2"),
          rec.config_record("user", "alice", "SCRAM-SHA-256", "salted"),
          rec.config_record("user", "bob", "SCRAM-SHA-512", "salted"),
          rec.config_record("user", "bob", "SCRAM-SHA-512", None),  # bob has none left
          rec.config_record("group", "g1", "consumer.session.timeout.ms", "45000"),
          rec.config_record("group", "g2", "share.record.lock.duration.ms", "15000"),
          rec.config_record("group", "g2", "share.record.lock.duration.ms", None))
    apply(rec.acl_record(acl("orders")), rec.acl_record(acl("orders", AclOperation.WRITE)),
          rec.acl_record(acl("payments")), rec.remove_acl_record(acl("payments")))
    apply(rec.client_quota_record(entity(user="alice"), PRODUCER_BYTE_RATE, 1024.0),
          rec.client_quota_record(entity(user="alice"), CONSUMER_BYTE_RATE, 2048.0),
          rec.client_quota_record(entity(user=None, client_id="app"), REQUEST_PERCENTAGE, 50.0),
          rec.client_quota_record(entity(client_id="gone"), PRODUCER_BYTE_RATE, 10.0),
          rec.client_quota_record(entity(client_id="gone"), PRODUCER_BYTE_RATE, None))
    apply(rec.producer_ids_record(1000), rec.producer_ids_record(3000))
    # live state, which image_records leaves out
    apply(rec.broker_record(BrokerInfo(0, "localhost", 9092)), rec.controller_record(0, 4))
    return image


def rebuilt(image: MetadataImage) -> MetadataImage:
    fresh = MetadataImage(cluster_id=image.cluster_id)
    for r in rec.image_records(image):
        rec.apply(fresh, r)
    return fresh


def test_the_records_rebuild_the_same_image() -> None:
    image = built_image()
    copy = rebuilt(image)
    assert copy.to_snapshot() == image.to_snapshot()
    # what the snapshot comparison rests on, spelled out
    assert list(copy.topics) == ["orders", "payments", "reborn"]
    assert copy.topics["orders"].configs == {"retention.ms": "60000", "cleanup.policy": "compact"}
    moving = copy.topics["payments"].partitions[0]
    assert moving == image.topics["payments"].partitions[0]
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == \
        ([2, 1, 0], [2], [0])
    assert copy.user_configs == {"alice": {"SCRAM-SHA-256": "salted"}}
    assert copy.group_configs == {"g1": {"consumer.session.timeout.ms": "45000"}}
    assert copy.broker_configs == image.broker_configs
    assert list(copy.acls) == [acl("orders"), acl("orders", AclOperation.WRITE)]
    assert copy.client_quotas == image.client_quotas and entity(client_id="gone") not in \
        copy.client_quotas
    assert copy.next_producer_id == 3000


def test_topics_are_found_by_id_as_by_name() -> None:
    image = built_image()
    copy = rebuilt(image)
    assert set(copy.topics_by_id) == set(image.topics_by_id)
    for name, topic in copy.topics.items():
        assert copy.topics_by_id[topic.topic_id] is topic
        assert topic.topic_id == image.topics[name].topic_id
        assert topic.partitions == image.topics[name].partitions


def test_deleted_topics_and_live_state_are_left_out() -> None:
    image = built_image()
    records = rec.image_records(image)
    kinds = {r["type"] for r in records}
    assert kinds <= {"producer_ids", "config", "acl", "client_quota", "topic", "partition"}
    assert "gone" not in {r.get("name") for r in records}
    copy = rebuilt(image)
    assert copy.brokers == {} and copy.controller_id == -1  # registered again after a restart


def test_records_of_a_rebuilt_image_are_the_same_records() -> None:
    image = built_image()
    assert rec.image_records(rebuilt(image)) == rec.image_records(image)


def test_an_empty_image_needs_only_its_producer_id() -> None:
    image = MetadataImage(cluster_id=CLUSTER)
    assert rec.image_records(image) == [rec.producer_ids_record(0)]
    assert rebuilt(image).to_snapshot() == image.to_snapshot()


def test_a_topic_without_partitions_or_configs_survives() -> None:
    image = MetadataImage(cluster_id=CLUSTER)
    rec.apply(image, rec.topic_record("bare", uuid.uuid4()))
    assert rebuilt(image).to_snapshot() == image.to_snapshot()


def test_a_move_from_zookeeper_keeps_its_state_and_the_brokers_known_from_zookeeper() -> None:
    """While a move from ZooKeeper lasts, a broker still in ZooKeeper mode is known from the
    mirrored ZooKeeper registration only: a snapshot keeps it, or a broker loading the snapshot
    would not know where that broker's partitions are led."""
    image = built_image()
    rec.apply(image, rec.zk_migration_record(rec.ZK_MIGRATING))
    rec.apply(image, rec.broker_record(BrokerInfo(7, "127.0.0.1", 9097)))
    copy = rebuilt(image)
    assert copy.zk_migration == rec.ZK_MIGRATING and 7 in copy.brokers
    assert set(copy.brokers) == set(image.brokers) - set(image.registrations)
    rec.apply(image, rec.zk_migration_record(rec.ZK_FINALIZED))
    copy = rebuilt(image)
    assert copy.zk_migration == rec.ZK_FINALIZED and copy.brokers == {}
