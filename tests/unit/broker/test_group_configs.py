"""The broker's GroupConfigs: group config records in the image, resolved and cached per group."""

from __future__ import annotations

from strom.broker.group_configs import MetadataGroupConfigs
from strom.cluster import records as rec
from strom.cluster.image import MetadataImage
from strom.config.broker import BrokerConfig


def test_records_resolve_cache_notify_and_survive_a_snapshot() -> None:
    image = MetadataImage(cluster_id="c")
    configs = MetadataGroupConfigs(BrokerConfig.load(overrides={
        "group.consumer.heartbeat.interval.ms": "6000"}), lambda: image)
    told: list[str | None] = []
    configs.subscribe(told.append)
    assert configs.for_group("g").consumer_heartbeat_interval_ms == 6000

    changes = [rec.apply(image, rec.config_record("group", "g", "consumer.heartbeat.interval.ms",
                                                   "7000"))]
    configs.on_changes([c for c in changes if c is not None])
    assert told == ["g"]
    assert configs.for_group("g").consumer_heartbeat_interval_ms == 7000
    assert configs.for_group("h").consumer_heartbeat_interval_ms == 6000
    assert configs.for_group("g").errors_deadletterqueue_topic_name_prefix == "dlq."

    again = MetadataImage.from_snapshot(image.to_snapshot())
    assert again.group_configs == {"g": {"consumer.heartbeat.interval.ms": "7000"}}

    change = rec.apply(image, rec.config_record("group", "g", "consumer.heartbeat.interval.ms",
                                                None))
    assert change is not None and change.group == "g" and image.group_configs == {}
    configs.on_changes([change, rec.Change("broker_configs")])
    assert told == ["g", None]
    assert configs.for_group("g").consumer_heartbeat_interval_ms == 6000
