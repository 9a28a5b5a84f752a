from pathlib import Path

import pytest

from strom.config.broker import BrokerConfig, parse_listener, read_properties
from strom.config.defs import ConfigError, ConfigSource
from strom.config.topic import validate_topic_configs


def test_properties_file_with_comments_and_continuations(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# comment\n! other\nlog.dirs=/a,\\\n  /b\nnum.partitions : 3\nempty=\n")
    assert read_properties(path) == {"log.dirs": "/a,/b", "num.partitions": "3", "empty": ""}


def test_static_overrides_and_defaults() -> None:
    config = BrokerConfig.load(None, {"num.partitions": "6", "log.dirs": "/x,/y"})
    assert config.get("num.partitions") == 6
    assert config.source_of("num.partitions")[1] == ConfigSource.STATIC_BROKER_CONFIG
    assert config.source_of("message.max.bytes") == (1048588, ConfigSource.DEFAULT_CONFIG)
    assert [str(d) for d in config.log_dirs] == ["/x", "/y"]


def test_retention_synonyms_follow_kafka_precedence() -> None:
    default = BrokerConfig.load(None, {})
    assert default.topic_default("retention.ms").value == 168 * 3_600_000
    assert default.topic_default("retention.ms").synonym == "log.retention.hours"
    minutes = BrokerConfig.load(None, {"log.retention.minutes": "5", "log.retention.hours": "1"})
    assert minutes.topic_default("retention.ms").value == 300_000
    ms = BrokerConfig.load(None, {"log.retention.ms": "1234", "log.retention.minutes": "5"})
    assert ms.topic_default("retention.ms").value == 1234


def test_dynamic_layers_win_over_static() -> None:
    config = BrokerConfig.load(None, {"message.max.bytes": "100"})
    config.dynamic_default = {"message.max.bytes": 200}
    assert config.source_of("message.max.bytes") == (200, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    config.dynamic_broker = {"message.max.bytes": 300}
    assert config.topic_default("max.message.bytes").value == 300


@pytest.mark.parametrize(
    ("name", "value"),
    [("retention.ms", "abc"), ("cleanup.policy", "shred"), ("segment.bytes", "1"),
     ("min.cleanable.dirty.ratio", "2"), ("no.such.config", "1"), ("compression.type", "brotli")],
)
def test_invalid_topic_configs_are_rejected(name: str, value: str) -> None:
    with pytest.raises(ConfigError):
        validate_topic_configs({name: value})


def test_valid_topic_configs_parse() -> None:
    parsed = validate_topic_configs({"cleanup.policy": "compact,delete", "retention.ms": "-1"})
    assert parsed == {"cleanup.policy": ["compact", "delete"], "retention.ms": -1}


def test_listener_parsing() -> None:
    assert parse_listener("PLAINTEXT://:9092") == ("PLAINTEXT", "", 9092)
    assert parse_listener("plaintext://[::1]:9093") == ("PLAINTEXT", "::1", 9093)
    with pytest.raises(ConfigError):
        parse_listener("localhost:9092")


def test_bad_broker_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, {"num.partitions": "zero"})
