"""Start-up checks: unimplemented configs are named in a WARN, dangerous ones refused."""

import dataclasses
import logging
import re
from pathlib import Path

import pytest

from strom.config.broker import BROKER_CONFIGS, BrokerConfig
from strom.config.checks import REFUSED_UNIMPLEMENTED, check_startup, listener_base
from strom.config.defs import ConfigError
from strom.config.group import GROUP_CONFIGS
from strom.config.topic import BROKER_SYNONYMS, TOPIC_CONFIGS, validate_topic_configs
from strom.storage.config import LogConfig

ROOT = Path(__file__).resolve().parents[3]
CHECKS = "strom.config.checks"


def check(overrides: dict[str, str]) -> None:
    check_startup(BrokerConfig.load(None, overrides))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == CHECKS and r.levelno == logging.WARNING]


def test_unimplemented_config_is_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=CHECKS):
        check({"log.preallocate": "true", "controlled.shutdown.max.retries": "5",
               "num.partitions": "3"})
    assert warnings(caplog) == [
        "config log.preallocate is accepted but not implemented by Strom; it has no effect",
        "config controlled.shutdown.max.retries is accepted but not implemented by Strom; "
        "it has no effect",
    ]


def test_unknown_names_keep_their_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=CHECKS):
        check({"metric.reporters": "x", "no.such.thing": "1"})
    assert warnings(caplog) == ["config metric.reporters is not used by Strom",
                                "config no.such.thing is not used by Strom"]


def test_shipped_server_properties_start_without_warnings(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=CHECKS):
        check_startup(BrokerConfig.load(ROOT / "config" / "server.properties"))
    assert warnings(caplog) == []


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"listeners": "CLIENT://:9092"},
     "No security protocol defined for listener CLIENT (listeners: CLIENT://:9092; add CLIENT "
     "to listener.security.protocol.map)"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://host:9093"},
     "advertised.listeners listener names must be equal to or a subset of the ones defined in "
     "listeners. Found SSL. The valid options based on the current configuration are PLAINTEXT"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"},
     "each listener must have a different name, PLAINTEXT is listed twice"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "each listener must have a different port"),
    ({"listeners": "SSL://:9093", "zookeeper.connect": "127.0.0.1:2181"},
     "inter.broker.listener.name must be a listener name defined in advertised.listeners. The "
     "valid options based on currently configured listeners are SSL"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    ({"client.quota.callback.class": "x.Y"}, "custom quota callbacks are not supported"),
    ({"remote.log.storage.system.enable": "true"}, "remote.log.storage.system.enable=true"),
    ({"group.consumer.session.timeout.ms": "6000"},
     "group.consumer.min.session.timeout.ms (45000) must be less than or equal to "
     "group.consumer.session.timeout.ms (6000)"),
    ({"group.consumer.heartbeat.interval.ms": "50000", "group.consumer.max.heartbeat.interval.ms":
      "60000"}, "group.consumer.heartbeat.interval.ms (50000) must be less than "
     "group.consumer.session.timeout.ms (45000)"),
])
def test_dangerous_settings_are_refused(overrides: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=r"^refusing to start: ") as info:
        check(overrides)
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_every_refusal_is_in_one_message() -> None:
    with pytest.raises(ConfigError) as info:
        check({"listeners": "X://:9093", "client.quota.callback.class": "y",
               "quota.producer.default": "1"})
    message = str(info.value)
    assert all(name in message for name in ("X://:9093", "client.quota.callback.class",
                                            "quota.producer.default"))


def test_listener_prefixed_security_settings_are_known(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=CHECKS):
        check({"listeners": "PLAINTEXT://:9092,SASL_SSL://:9093",
               "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
               "listener.name.sasl_ssl.plain.sasl.jaas.config": "x",
               "listener.name.sasl_ssl.ssl.keystore.location": "/k",
               "listener.name.other.ssl.keystore.location": "/k",
               "listener.name.sasl_ssl.no.such.config": "1"})
    assert warnings(caplog) == [
        "config listener.name.other.ssl.keystore.location is not used by Strom",
        "config listener.name.sasl_ssl.no.such.config is not used by Strom"]


def test_unprefixed_jaas_config_is_ignored_with_kafkas_warning(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=CHECKS):
        check({"sasl.jaas.config": "x"})
    assert warnings(caplog)[0].startswith(
        "Server config sasl.jaas.config should be prefixed with SASL mechanism name, ignoring "
        "config")


@pytest.mark.parametrize("overrides", [
    {},
    {"listeners": "CLIENT://127.0.0.1:9092", "advertised.listeners": "CLIENT://host:9092",
     "listener.security.protocol.map": "client:plaintext,OTHER:SSL",
     "inter.broker.listener.name": "CLIENT"},
    {"listeners": "PLAINTEXT://:9092,SSL://:9093,SASL_SSL://:9094,SASL_PLAINTEXT://:9095"},
    {"listeners": "INTERNAL://:9092,CLIENT://:9093", "listener.security.protocol.map":
     "INTERNAL:PLAINTEXT,CLIENT:SASL_SSL", "inter.broker.listener.name": "INTERNAL",
     "zookeeper.connect": "127.0.0.1:2181"},
    {"security.inter.broker.protocol": "plaintext", "authorizer.class.name": "",
     "remote.log.storage.system.enable": "false"},
    {"group.consumer.session.timeout.ms": "6000", "group.consumer.heartbeat.interval.ms": "500",
     "group.consumer.min.session.timeout.ms": "1000",
     "group.consumer.min.heartbeat.interval.ms": "100"},
])
def test_plaintext_and_consistent_settings_start(overrides: dict[str, str]) -> None:
    check(overrides)


def test_malformed_protocol_map_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"listener\.security\.protocol\.map"):
        check({"listener.security.protocol.map": "PLAINTEXT:TLS"})


def test_topic_configs_without_effect_are_accepted_but_tiered_storage_is_refused() -> None:
    accepted = {"preallocate": "true", "message.downconversion.enable": "false",
                "remote.storage.enable": "false", "local.retention.ms": "-2",
                "leader.replication.throttled.replicas": "*"}
    assert validate_topic_configs(accepted)["preallocate"] is True
    with pytest.raises(ConfigError, match="Tiered Storage functionality is disabled"):
        validate_topic_configs({"remote.storage.enable": "true"})


def _quoted_in_source(name: str) -> bool:
    """Whether code outside the config definitions reads `name` by its literal."""
    defs = {"broker.py", "topic.py", "defs.py"}
    for path in (ROOT / "src" / "strom").rglob("*.py"):
        if path.parent.name == "config" and path.name in defs:
            continue
        if f'"{name}"' in path.read_text():
            return True
    return False


# Broker configs read without their literal name elsewhere, and why.
_READ_INDIRECTLY = {
    "log.dir": "BrokerConfig.log_dirs",
    "log.dirs": "BrokerConfig.log_dirs",
    **{f"controller.quorum.{name}": "QuorumConfig.from_config (prefix + name)" for name in (
        "election.timeout.ms", "fetch.timeout.ms", "election.backoff.max.ms",
        "append.linger.ms", "request.timeout.ms", "retry.backoff.ms", "fetch.max.bytes",
        "fetch.snapshot.max.bytes")},
}


def test_configs_marked_implemented_are_read_somewhere() -> None:
    """The `implemented` flag stays honest: a config nobody reads must say so."""
    log_fields = {f.name.replace("_", ".") for f in dataclasses.fields(LogConfig)}
    implemented_topic = {n for n in TOPIC_CONFIGS.names() if TOPIC_CONFIGS[n].implemented}
    via_topic = {s for topic in implemented_topic for s in BROKER_SYNONYMS.get(topic, ())}
    unread = [n for n in BROKER_CONFIGS.names()
              if BROKER_CONFIGS[n].implemented and n not in via_topic and n not in _READ_INDIRECTLY
              and not _quoted_in_source(n)]
    unread += [n for n in implemented_topic if n not in log_fields and not _quoted_in_source(n)]
    assert unread == []


def test_configs_docs_list_every_config_without_effect() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split("## Configs Strom accepts but does not act on", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z0-9.]+)`", section, re.M))
    expected = {d.name for d in BROKER_CONFIGS.unimplemented()}
    expected |= {d.name for d in TOPIC_CONFIGS.unimplemented()}
    expected |= {d.name for d in GROUP_CONFIGS.unimplemented()}
    assert listed == expected


LISTENERS = {"listeners": "PLAINTEXT://:9092,EXTERNAL://:9093",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_SSL"}


@pytest.mark.parametrize("name", [
    "principal.builder.class",
    "listener.name.external.principal.builder.class",
    "sasl.login.class",
    "listener.name.external.sasl.login.callback.handler.class",
    "listener.name.external.oauthbearer.sasl.login.callback.handler.class",
])
def test_ignored_settings_that_would_weaken_security_are_refused(name: str) -> None:
    """Another principal builder or login than the operator configured must not go unnoticed,
    unprefixed or for one listener (and mechanism)."""
    with pytest.raises(ConfigError) as info:
        check({**LISTENERS, name: "com.example.Custom"})
    assert str(info.value).startswith(f"refusing to start: {name}: not implemented by Strom (")


def test_kafkas_default_principal_builder_and_empty_values_start() -> None:
    check({**LISTENERS, "listener.name.external.principal.builder.class":
           "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
           "sasl.login.class": ""})


def test_listener_prefixed_settings_have_their_configs_status(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=CHECKS):
        check({**LISTENERS, "ssl.keymanager.algorithm": "SunX509",
               "listener.name.external.ssl.keymanager.algorithm": "SunX509",
               "listener.name.external.plain.sasl.kerberos.service.name": "kafka",
               "listener.name.external.ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
               "listener.name.external.ssl.engine.factory.class": "com.example.Engine",
               "listener.name.external.max.connections": "10"})
    no_effect = "is accepted but not implemented by Strom; it has no effect"
    assert warnings(caplog) == [
        f"config ssl.keymanager.algorithm {no_effect}",
        f"config listener.name.external.ssl.keymanager.algorithm {no_effect}",
        f"config listener.name.external.plain.sasl.kerberos.service.name {no_effect}",
        "config listener.name.external.ssl.engine.factory.class is not used by Strom",
        "config listener.name.external.max.connections is not used by Strom",
    ]


def test_refused_unimplemented_configs_are_unimplemented_listener_configs() -> None:
    for name in REFUSED_UNIMPLEMENTED:
        assert not BROKER_CONFIGS[name].implemented
        assert listener_base(f"listener.name.x.{name}", {"x"}) == name
