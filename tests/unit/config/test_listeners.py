"""listeners, advertised.listeners, listener.security.protocol.map and the inter-broker
listener, as Kafka reads them."""

from __future__ import annotations

import pytest

from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.config.listeners import (
    Listener,
    advertised_listeners,
    default_listener,
    inter_broker_listener,
    inter_broker_listener_name,
    listeners,
    protocol_map,
)

NAMED = {"listeners": "CLIENT://:9092,INTERNAL://10.0.0.5:9093,SECURE://[::1]:9094",
         "listener.security.protocol.map":
             "CLIENT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,SECURE:SASL_SSL"}


def config(**overrides: str) -> BrokerConfig:
    return BrokerConfig.load(None, overrides)


def test_default_listener_is_plaintext_9092() -> None:
    assert listeners(config()) == [Listener("PLAINTEXT", "", 9092, "PLAINTEXT")]
    assert default_listener(config()).name == "PLAINTEXT"


def test_default_protocol_map_maps_each_protocol_to_itself() -> None:
    assert protocol_map(config()) == {p: p for p in
                                      ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}


def test_custom_names_mapped_in_the_protocol_map() -> None:
    found = listeners(config(**NAMED))
    assert found == [Listener("CLIENT", "", 9092, "SASL_PLAINTEXT"),
                     Listener("INTERNAL", "10.0.0.5", 9093, "PLAINTEXT"),
                     Listener("SECURE", "::1", 9094, "SASL_SSL")]
    assert [(lst.tls, lst.sasl) for lst in found] == [(False, True), (False, False),
                                                      (True, True)]


def test_listener_names_and_protocols_are_case_insensitive() -> None:
    cfg = config(**{"listeners": "client://:9092",
                    "listener.security.protocol.map": "Client:ssl"})
    assert listeners(cfg) == [Listener("CLIENT", "", 9092, "SSL")]


def test_a_name_missing_from_the_protocol_map_is_refused() -> None:
    cfg = config(**{"listeners": "PLAINTEXT://:9092,TRACE://:9093"})
    with pytest.raises(ConfigError) as info:
        listeners(cfg)
    assert str(info.value) == ("No security protocol defined for listener TRACE (listeners: "
                               "TRACE://:9093; add TRACE to listener.security.protocol.map)")


def test_a_name_missing_from_the_protocol_map_has_kafkas_text() -> None:
    with pytest.raises(ConfigError, match="No security protocol defined for listener TRACE"):
        listeners(config(**{"listeners": "PLAINTEXT://:9092,TRACE://:9093"}))


def test_an_invalid_protocol_map_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^Invalid value CLIENT:TLS for configuration "
                                          r"listener\.security\.protocol\.map"):
        listeners(config(**{"listeners": "CLIENT://:9092",
                            "listener.security.protocol.map": "CLIENT:TLS"}))
    with pytest.raises(ConfigError, match="'CLIENT' is not LISTENER_NAME:PROTOCOL"):
        protocol_map(config(**{"listener.security.protocol.map": "CLIENT"}))


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^listeners: each listener must have a different name, "
                                          r"PLAINTEXT is listed twice$"):
        listeners(config(**{"listeners": "PLAINTEXT://:9092,plaintext://:9093"}))


def test_duplicate_ports_are_refused_but_port_0_may_repeat() -> None:
    with pytest.raises(ConfigError, match=r"^listeners: each listener must have a different "
                                          r"port$"):
        listeners(config(**{"listeners": "PLAINTEXT://a:9092,SSL://b:9092"}))
    assert len(listeners(config(**{"listeners": "PLAINTEXT://:0,SSL://:0"}))) == 2


def test_a_malformed_listener_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected NAME://host:port"):
        listeners(config(**{"listeners": "PLAINTEXT:9092"}))


def test_advertised_listeners_default_to_the_listeners() -> None:
    cfg = config(**NAMED)
    assert advertised_listeners(cfg) == listeners(cfg)


def test_advertised_listeners_are_resolved_by_name() -> None:
    cfg = config(**NAMED, **{"advertised.listeners":
                             "CLIENT://kafka.example.com:19092,INTERNAL://broker-1:9093"})
    assert advertised_listeners(cfg) == [
        Listener("CLIENT", "kafka.example.com", 19092, "SASL_PLAINTEXT"),
        Listener("INTERNAL", "broker-1", 9093, "PLAINTEXT")]


def test_an_advertised_listener_that_names_no_listener_is_refused() -> None:
    cfg = config(**{"listeners": "PLAINTEXT://:9092",
                    "advertised.listeners": "PLAINTEXT://h:9092,SSL://host:9093"})
    with pytest.raises(ConfigError) as info:
        advertised_listeners(cfg)
    assert str(info.value) == (
        "advertised.listeners listener names must be equal to or a subset of the ones defined "
        "in listeners. Found SSL. The valid options based on the current configuration are "
        "PLAINTEXT")


def test_an_advertised_listener_that_names_no_listener_has_kafkas_text() -> None:
    cfg = config(**{"listeners": "PLAINTEXT://:9092",
                    "advertised.listeners": "PLAINTEXT://h:9092,SSL://host:9093"})
    with pytest.raises(ConfigError, match=r"advertised\.listeners listener names must be equal "
                                          r"to or a subset of the ones defined in listeners"):
        advertised_listeners(cfg)


def test_an_advertised_name_missing_from_the_protocol_map_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^No security protocol defined for listener TRACE "
                                          r"\(advertised\.listeners: TRACE://h:1"):
        advertised_listeners(config(**{"advertised.listeners": "TRACE://h:1"}))


def test_inter_broker_listener_by_security_inter_broker_protocol() -> None:
    cfg = config(**{"listeners": "PLAINTEXT://:9092,SASL_SSL://:9093",
                    "security.inter.broker.protocol": "sasl_ssl"})
    assert inter_broker_listener_name(cfg) == "SASL_SSL"
    assert inter_broker_listener(cfg) == Listener("SASL_SSL", "", 9093, "SASL_SSL")


def test_inter_broker_listener_defaults_to_plaintext() -> None:
    cfg = config(**{"listeners": "SSL://:9093,PLAINTEXT://:9092"})
    assert inter_broker_listener(cfg) == Listener("PLAINTEXT", "", 9092, "PLAINTEXT")


def test_inter_broker_listener_by_inter_broker_listener_name() -> None:
    cfg = config(**NAMED, **{"inter.broker.listener.name": "internal"})
    assert inter_broker_listener_name(cfg) == "INTERNAL"
    assert inter_broker_listener(cfg) == Listener("INTERNAL", "10.0.0.5", 9093, "PLAINTEXT")


def test_inter_broker_listener_is_the_advertised_one() -> None:
    cfg = config(**NAMED, **{"inter.broker.listener.name": "INTERNAL",
                             "advertised.listeners": "CLIENT://c:9092,INTERNAL://broker-1:9093"})
    assert inter_broker_listener(cfg).host == "broker-1"


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_SSL"])
def test_both_inter_broker_settings_are_refused(protocol: str) -> None:
    # refused even when security.inter.broker.protocol is set to its default value
    cfg = config(**NAMED, **{"inter.broker.listener.name": "INTERNAL",
                             "security.inter.broker.protocol": protocol})
    for fn in (inter_broker_listener_name, inter_broker_listener, default_listener):
        with pytest.raises(ConfigError) as info:
            fn(cfg)
        assert str(info.value) == ("Only one of inter.broker.listener.name and "
                                   "security.inter.broker.protocol should be set.")


def test_an_inter_broker_listener_that_is_not_advertised_is_refused() -> None:
    cfg = config(**NAMED, **{"inter.broker.listener.name": "REPLICATION"})
    with pytest.raises(ConfigError) as info:
        inter_broker_listener(cfg)
    assert str(info.value) == (
        "inter.broker.listener.name must be a listener name defined in advertised.listeners. "
        "The valid options based on currently configured listeners are CLIENT,INTERNAL,SECURE")


def test_default_listener_falls_back_to_the_first_on_a_single_node() -> None:
    # no listener is called PLAINTEXT (security.inter.broker.protocol's default): the first one
    cfg = config(**NAMED)
    with pytest.raises(ConfigError):
        inter_broker_listener(cfg)
    assert default_listener(cfg) == Listener("CLIENT", "", 9092, "SASL_PLAINTEXT")


def test_default_listener_is_the_inter_broker_one_when_it_exists() -> None:
    cfg = config(**NAMED, **{"inter.broker.listener.name": "INTERNAL",
                             "advertised.listeners": "CLIENT://c:9092,INTERNAL://i:9093"})
    assert default_listener(cfg) == Listener("INTERNAL", "i", 9093, "PLAINTEXT")
    plain = config(**{"listeners": "SSL://:9093,PLAINTEXT://:9092"})
    assert default_listener(plain).name == "PLAINTEXT"
