import uuid

from strom.cluster import records as rec
from strom.cluster.image import MetadataImage, PartitionState


def _image_with_topic() -> tuple[MetadataImage, uuid.UUID]:
    image = MetadataImage(cluster_id="c1")
    tid = uuid.uuid4()
    rec.apply(image, rec.topic_record("orders", tid))
    for p in range(3):
        rec.apply(image, rec.partition_record(tid, PartitionState(p, [0], [0], 0)))
    return image, tid


def test_topic_and_partitions_apply() -> None:
    image, tid = _image_with_topic()
    topic = image.topics["orders"]
    assert image.topics_by_id[tid] is topic
    assert sorted(topic.partitions) == [0, 1, 2]


def test_remove_topic_then_recreate_gets_new_identity() -> None:
    image, tid = _image_with_topic()
    change = rec.apply(image, rec.remove_topic_record(tid))
    assert change is not None and change.kind == "topic_deleted"
    assert "orders" not in image.topics and tid not in image.topics_by_id
    new_id = uuid.uuid4()
    rec.apply(image, rec.topic_record("orders", new_id))
    assert image.topics["orders"].topic_id == new_id


def test_configs_set_and_delete() -> None:
    image, _ = _image_with_topic()
    rec.apply(image, rec.config_record("topic", "orders", "retention.ms", "1000"))
    assert image.topics["orders"].configs == {"retention.ms": "1000"}
    rec.apply(image, rec.config_record("topic", "orders", "retention.ms", None))
    assert image.topics["orders"].configs == {}
    rec.apply(image, rec.config_record("broker", "", "message.max.bytes", "10"))
    assert image.broker_configs == {"": {"message.max.bytes": "10"}}


def test_snapshot_round_trip() -> None:
    image, tid = _image_with_topic()
    rec.apply(image, rec.config_record("topic", "orders", "segment.bytes", "1024"))
    rec.apply(image, rec.producer_ids_record(2000))
    copy = MetadataImage.from_snapshot(image.to_snapshot())
    assert copy.to_snapshot() == image.to_snapshot()
    assert copy.topics_by_id[tid].partitions[2].replicas == [0]


def test_unknown_record_types_are_ignored() -> None:
    image, _ = _image_with_topic()
    assert rec.apply(image, {"type": "from-the-future"}) is None
