"""Group configs: Kafka 4.4's names, defaults, validation messages, effective values."""

from __future__ import annotations

import pytest

from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError, ConfigSource
from strom.config.group import (
    GROUP_CONFIGS,
    effective_values,
    parse_auto_offset_reset,
    parse_iso_duration_ms,
    resolve,
    validate_group_configs,
)
from strom.coordinator.group.group_configs import EffectiveGroupConfig


def check(configs: dict[str, str], overrides: dict[str, str] | None = None) -> None:
    validate_group_configs(configs, BrokerConfig.load(overrides=overrides).get)


# Each message as Kafka 4.4 answered the same IncrementalAlterConfigs (checked on a Kafka 4.4
# broker with its default configs).
@pytest.mark.parametrize(("name", "value", "message"), [
    ("nope", "1", "Unknown group config name: nope"),
    ("consumer.session.timeout.ms", "10",
     "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ("consumer.heartbeat.interval.ms", "20000",
     "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ("consumer.session.timeout.ms", "abc",
     "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ("share.record.lock.duration.ms", "500", "Invalid value 500 for configuration "
     "share.record.lock.duration.ms: Value must be at least 1000"),
    ("share.record.lock.duration.ms", "99999999",
     "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
    ("share.delivery.count.limit", "20",
     "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
    ("share.partition.max.record.locks", "99999999",
     "share.partition.max.record.locks must be in the range 100 to 4000 inclusive."),
    ("share.heartbeat.interval.ms", "45000",
     "share.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ("consumer.assignment.interval.ms", "999999",
     "consumer.assignment.interval.ms must be in the range 0 to 15000 inclusive."),
    ("share.isolation.level", "READ_COMMITTED", "Invalid value READ_COMMITTED for configuration "
     "share.isolation.level: String must be one of: read_committed, read_uncommitted"),
    ("share.auto.offset.reset", "EARLIEST", "Invalid value EARLIEST for configuration "
     "share.auto.offset.reset: Invalid value `EARLIEST` for configuration share.auto.offset.reset."
     " The value must be either 'earliest', 'latest' or of the format "
     "'by_duration:<PnDTnHnMn.nS>'."),
    ("streams.num.standby.replicas", "5", "streams.num.standby.replicas must be less than or "
     "equal to 2"),
    ("streams.num.warmup.replicas", "30", "streams.num.warmup.replicas must be less than or "
     "equal to 20"),
    ("streams.task.offset.interval.ms", "100",
     "streams.task.offset.interval.ms must be greater than or equal to 15000"),
    ("streams.rack.aware.assignment.tags", "a,a",
     "streams.rack.aware.assignment.tags must not contain duplicate tag keys."),
    ("streams.rack.aware.assignment.tags", "a,,b",
     "Configuration 'streams.rack.aware.assignment.tags' values must not be empty."),
    ("streams.assignor.name", "bogus", "streams.assignor.name 'bogus' is not a registered task "
     "assignor. Registered assignors are: [sticky]."),
    ("errors.deadletterqueue.topic.name", "__x",
     "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    ("share.renew.acknowledge.enable", "yes", "Invalid value yes for configuration "
     "share.renew.acknowledge.enable: Expected value to be either true or false"),
    ("share.redelivery.backoff.multiplier", "0.5", "Invalid value 0.5 for configuration "
     "share.redelivery.backoff.multiplier: Value must be at least 1.0"),
    ("share.redelivery.delay.ms", "-1",
     "Invalid value -1 for configuration share.redelivery.delay.ms: Value must be at least 0"),
    ("share.redelivery.delay.ms", "70000",
     "share.redelivery.max.delay.ms must be greater than or equal to share.redelivery.delay.ms"),
])
def test_refused_with_kafkas_message(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check({name: value})
    assert str(exc.value) == message


@pytest.mark.parametrize(("name", "value"), [
    ("consumer.session.timeout.ms", "50000"), ("share.auto.offset.reset", "by_duration:PT1H"),
    ("share.auto.offset.reset", "by_duration:pt1h"), ("share.auto.offset.reset", "earliest"),
    ("share.auto.offset.reset", "by_duration:-PT0S"), ("share.auto.offset.reset", " latest "),
    ("errors.deadletterqueue.topic.name", "foo"),  # Kafka 4.4 checks the prefix on use only
    ("streams.assignor.name", "sticky"), ("streams.rack.aware.assignment.tags", "a, b ,c"),
    ("share.redelivery.delay.ms", "1000"), ("share.redelivery.backoff.multiplier", "2.5"),
])
def test_accepted(name: str, value: str) -> None:
    check({name: value})


def test_session_must_exceed_heartbeat_with_wider_broker_bounds() -> None:
    broker = {"group.consumer.min.session.timeout.ms": "1000",
              "group.consumer.min.heartbeat.interval.ms": "1000",
              "group.consumer.max.heartbeat.interval.ms": "50000"}
    with pytest.raises(ConfigError, match=r"^consumer\.session\.timeout\.ms must be greater than "
                                          r"consumer\.heartbeat\.interval\.ms$"):
        check({"consumer.heartbeat.interval.ms": "45000"}, broker)
    check({"consumer.session.timeout.ms": "3000", "consumer.heartbeat.interval.ms": "2000"},
          broker)


def test_auto_offset_reset_durations() -> None:
    assert parse_auto_offset_reset("latest") == ("latest", None)
    assert parse_auto_offset_reset("by_duration:P1DT2H3M4.5S") == ("by_duration", 93784500)
    assert parse_auto_offset_reset("by_duration:P-1DT25H") == ("by_duration", 3600000)
    for bad in ("by_duration:", "by_duration:P1Y", "by_duration:PT-1H", "BY_DURATION:PT1H",
                "by_duration:PT"):
        with pytest.raises(ConfigError):
            parse_auto_offset_reset(bad)
    assert parse_iso_duration_ms("PT0.001S") == 1


def test_effective_values_fall_back_to_the_broker_and_clamp_old_overrides() -> None:
    broker = BrokerConfig.load(overrides={"group.consumer.session.timeout.ms": "50000",
                                          "group.consumer.max.session.timeout.ms": "55000"})
    assert effective_values({}, broker.get)["consumer.session.timeout.ms"] == 50000
    values = effective_values({"consumer.session.timeout.ms": "59000",
                               "share.delivery.count.limit": "7"}, broker.get, "g")
    assert values["consumer.session.timeout.ms"] == 55000  # set before the bound was lowered
    assert values["share.delivery.count.limit"] == 7
    assert values["streams.assignor.name"] == "sticky"
    effective = EffectiveGroupConfig.from_values(values)
    assert effective.consumer_session_timeout_ms == 55000
    assert effective.share_delivery_count_limit == 7
    assert effective.streams_rack_aware_assignment_tags == ()


def test_effective_config_defaults_are_kafkas() -> None:
    values = effective_values({}, BrokerConfig().get)
    assert EffectiveGroupConfig.from_values(values) == EffectiveGroupConfig()
    assert set(GROUP_CONFIGS.names()) <= {f.replace("_", ".") for f in
                                          EffectiveGroupConfig.__dataclass_fields__} | {
        "errors.deadletterqueue.topic.name", "errors.deadletterqueue.copy.record.enable"}


def test_redelivery_delay_backs_off_to_its_maximum() -> None:
    config = EffectiveGroupConfig(share_redelivery_delay_ms=1000,
                                  share_redelivery_backoff_multiplier=2.0,
                                  share_redelivery_max_delay_ms=5000)
    assert [config.redelivery_delay_ms(n) for n in (1, 2, 3, 4)] == [1000, 2000, 4000, 5000]
    assert EffectiveGroupConfig().redelivery_delay_ms(3) == 0


def test_describe_sources_and_synonyms_are_kafkas() -> None:
    broker = BrokerConfig.load(overrides={"group.consumer.heartbeat.interval.ms": "6000"})
    get, source_of = broker.get, broker.source_of
    assert resolve("consumer.session.timeout.ms", {"consumer.session.timeout.ms": "50000"}, get,
                   source_of) == (50000, ConfigSource.GROUP_CONFIG, [
        ("consumer.session.timeout.ms", 50000, ConfigSource.GROUP_CONFIG),
        ("group.consumer.session.timeout.ms", 45000, ConfigSource.DEFAULT_CONFIG)])
    assert resolve("consumer.heartbeat.interval.ms", {}, get, source_of)[:2] == (
        6000, ConfigSource.STATIC_BROKER_CONFIG)
    assert resolve("share.auto.offset.reset", {}, get, source_of) == (
        "latest", ConfigSource.DEFAULT_CONFIG,
        [("share.auto.offset.reset", "latest", ConfigSource.DEFAULT_CONFIG)])
    assert resolve("consumer.assignor.offload.enable", {}, get, source_of)[2] == [
        ("group.consumer.assignor.offload.enable", True, ConfigSource.DEFAULT_CONFIG)]
