"""A capture of the metadata image is taken cheaply on the event loop and turned into snapshot
data later (in a worker thread): changes after the capture must not leak into it."""

from __future__ import annotations

import uuid

from strom.cluster import records as rec
from strom.cluster.image import MetadataImage, PartitionState, TopicState


def _image() -> MetadataImage:
    image = MetadataImage(cluster_id="c")
    topic = TopicState("t", uuid.UUID(int=5), configs={"retention.ms": "1"})
    topic.partitions[0] = PartitionState(0, [1], [1], 1)
    image.topics["t"] = topic
    image.topics_by_id[topic.topic_id] = topic
    image.broker_configs[""] = {"log.cleaner.threads": "1"}
    return image


def test_a_capture_does_not_see_later_changes() -> None:
    image = _image()
    capture = image.capture()
    before = image.to_snapshot()
    # a new partition, a leader change (a new PartitionState), config changes, a new topic
    rec.apply(image, rec.partition_record(uuid.UUID(int=5), PartitionState(1, [1], [1], 1)))
    rec.apply(image, rec.partition_record(uuid.UUID(int=5),
                                          PartitionState(0, [1], [1], -1, leader_epoch=1)))
    image.topics["t"].configs["retention.ms"] = "2"
    image.broker_configs[""]["log.cleaner.threads"] = "2"
    rec.apply(image, rec.topic_record("u", uuid.UUID(int=6)))
    assert capture.to_snapshot() == before
    assert image.to_snapshot() != before


def test_a_snapshot_round_trips() -> None:
    image = _image()
    again = MetadataImage.from_snapshot(image.capture().to_snapshot())
    assert again.to_snapshot() == image.to_snapshot()
    assert again.topics["t"].partitions[0] == image.topics["t"].partitions[0]
