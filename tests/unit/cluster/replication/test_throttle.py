"""Which replicas a broker throttles (Kafka's *.replication.throttled.replicas) and when."""

import uuid

import pytest

from strom.cluster.image import MetadataImage, PartitionState, TopicState
from strom.cluster.replication.throttle import (
    FOLLOWER,
    LEADER,
    UNLIMITED,
    ReplicationThrottle,
    parse_throttled_replicas,
)


@pytest.mark.parametrize(("value", "broker", "expected"), [
    ("*", 1, None),
    ("0:1,1:2,2:1", 1, frozenset({0, 2})),
    ("0:1, 1:2", 2, frozenset({1})),
    ("0:1", 3, frozenset()),
    ("", 1, frozenset()),
])
def test_parse(value, broker, expected) -> None:
    assert parse_throttled_replicas(value, broker) == expected


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def image_with(configs: dict[str, str], isr: list[int]) -> MetadataImage:
    image = MetadataImage("c")
    topic = TopicState("t", uuid.uuid4(), configs=configs)
    topic.partitions[0] = PartitionState(0, [1, 2], isr, 1)
    topic.partitions[1] = PartitionState(1, [1, 2], [1], 1)
    image.topics["t"] = topic
    return image


def test_only_out_of_sync_listed_replicas_are_throttled() -> None:
    image = image_with({"leader.replication.throttled.replicas": "0:1"}, isr=[1])
    rate = {"value": 1000}
    throttle = ReplicationThrottle(LEADER, 1, image, lambda: rate["value"], clock=Clock())
    assert throttle.throttled("t", 0, 2)  # listed for broker 1, replica 2 out of the ISR
    assert not throttle.throttled("t", 1, 2), "partition 1 is not listed"
    assert not throttle.throttled("other", 0, 2)
    image.topics["t"].partitions[0] = PartitionState(0, [1, 2], [1, 2], 1)
    image.version += 1
    assert not throttle.throttled("t", 0, 2), "an in-sync replica is never held back"


def test_unlimited_rate_throttles_nothing_and_the_rate_is_read_again_on_change() -> None:
    image = image_with({"follower.replication.throttled.replicas": "*"}, isr=[1])
    rate = {"value": UNLIMITED}
    clock = Clock()
    throttle = ReplicationThrottle(FOLLOWER, 2, image, lambda: rate["value"], clock=clock)
    assert not throttle.throttled("t", 0, 2)
    rate["value"] = 1000
    image.version += 1  # a dynamic config change bumps the image
    assert throttle.throttled("t", 0, 2)
    throttle.record(5_000)  # over the padded 10 s window: 500/s
    assert not throttle.exceeded()
    throttle.record(10_000)  # 1,500/s
    assert throttle.exceeded()
    assert throttle.byte_rate() == pytest.approx(1500)
