"""Each listener's security built from broker configs: Kafka's listener/mechanism prefixes,
the SASL mechanisms offered, TLS and principal mapping."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509 import load_pem_x509_certificate

from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.config.listeners import Listener, listeners
from strom.security.listeners import (
    AuthenticationError,
    ListenerSettings,
    build_listener_security,
)
from strom.security.principal import ANONYMOUS, KafkaPrincipal
from strom.security.sasl.mechanisms import AuthenticationFailed, ScramExchange

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS = f'{PLAIN_MODULE} required user_alice="alice-secret" user_bob="bob-secret";'
SASL = Listener("CLIENT", "", 9092, "SASL_PLAINTEXT")
SASL_SSL = Listener("SECURE", "", 9093, "SASL_SSL")
TLS = Listener("MTLS", "", 9094, "SSL")
PREFIX = "listener.name.client."


def config(**overrides: str) -> BrokerConfig:
    return BrokerConfig.load(None, overrides)


def no_scram(user: str, mechanism: str) -> None:
    return None


def build(listener: Listener = SASL, **overrides: str) -> Any:
    return build_listener_security(config(**overrides), listener, no_scram)


# -- ListenerSettings -------------------------------------------------------------------------


def test_listener_prefixed_setting_wins_over_the_unprefixed_one() -> None:
    cfg = BrokerConfig.load(None, {"sasl.server.max.receive.size": "1000",
                                   f"{PREFIX}sasl.server.max.receive.size": "2000"})
    settings = ListenerSettings(cfg, SASL)
    assert settings.get("sasl.server.max.receive.size") == 2000  # parsed as the config's type
    other = ListenerSettings(cfg, Listener("OTHER", "", 9095, "SASL_PLAINTEXT"))
    assert other.get("sasl.server.max.receive.size") == 1000
    assert ListenerSettings(config(), SASL).get("sasl.server.max.receive.size") == 524288


def test_mechanism_prefix_wins_over_the_listener_prefix() -> None:
    cfg = config(**{"connections.max.reauth.ms": "1000",
                    f"{PREFIX}connections.max.reauth.ms": "2000",
                    f"{PREFIX}scram-sha-256.connections.max.reauth.ms": "3000"})
    settings = ListenerSettings(cfg, SASL)
    assert settings.get("connections.max.reauth.ms", "SCRAM-SHA-256") == 3000
    assert settings.get("connections.max.reauth.ms", "PLAIN") == 2000
    assert settings.get("connections.max.reauth.ms") == 2000
    assert settings.for_mechanism("SCRAM-SHA-256")("connections.max.reauth.ms") == 3000


def test_the_listener_prefix_is_the_lower_case_listener_name() -> None:
    assert ListenerSettings(config(), Listener("Client", "", 1, "SASL_PLAINTEXT")).prefix == (
        PREFIX)


def test_an_unprefixed_jaas_config_is_ignored() -> None:
    cfg = config(**{"sasl.jaas.config": JAAS})
    assert ListenerSettings(cfg, SASL).get("sasl.jaas.config", "PLAIN") is None


def test_on_sasl_ssl_only_a_listener_prefixed_client_auth_counts() -> None:
    cfg = config(**{"ssl.client.auth": "required"})
    assert ListenerSettings(cfg, SASL_SSL).get("ssl.client.auth") == "none"
    assert ListenerSettings(cfg, TLS).get("ssl.client.auth") == "required"
    prefixed = config(**{"listener.name.secure.ssl.client.auth": "requested"})
    assert ListenerSettings(prefixed, SASL_SSL).get("ssl.client.auth") == "requested"


# -- SASL ---------------------------------------------------------------------------------------


def test_plaintext_listeners_have_no_security() -> None:
    sec = build(Listener("PLAINTEXT", "", 9092, "PLAINTEXT"))
    assert sec.ssl_context is None and sec.sasl is None and sec.principal_mapper is None
    session = sec.new_session("10.0.0.1:1")
    assert session.authenticated and session.principal == ANONYMOUS


def test_gssapi_by_default_is_refused() -> None:
    # Kafka's default sasl.enabled.mechanisms is GSSAPI
    with pytest.raises(ConfigError, match=r"^listener CLIENT: SASL mechanism GSSAPI .* not "
                                          "implemented by Strom; set sasl.enabled.mechanisms"):
        build()


def test_gssapi_among_other_mechanisms_is_refused() -> None:
    with pytest.raises(ConfigError, match="GSSAPI"):
        build(**{"sasl.enabled.mechanisms": "PLAIN,GSSAPI", f"{PREFIX}plain.sasl.jaas.config":
                 JAAS})


@pytest.mark.parametrize("mechanism", ["DIGEST-MD5", "CRAM-MD5", "plain"])
def test_unknown_mechanisms_are_refused(mechanism: str) -> None:
    with pytest.raises(ConfigError, match=f"SASL mechanism {mechanism} is not supported "
                                          r"\(supported: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        build(**{"sasl.enabled.mechanisms": mechanism})


def test_no_mechanism_at_all_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.enabled\.mechanisms is empty"):
        build(**{"sasl.enabled.mechanisms": ""})


def test_plain_without_a_jaas_config_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^listener CLIENT enables SASL mechanism PLAIN but "
                                          r"listener\.name\.client\.plain\.sasl\.jaas\.config "
                                          "is not set"):
        build(**{"sasl.enabled.mechanisms": "PLAIN"})


def test_plain_with_only_an_unprefixed_jaas_config_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"plain\.sasl\.jaas\.config is not set"):
        build(**{"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS})


def test_plain_with_another_login_module_is_refused() -> None:
    with pytest.raises(ConfigError, match=f"PLAIN needs the login module {PLAIN_MODULE}"):
        build(**{"sasl.enabled.mechanisms": "PLAIN", f"{PREFIX}plain.sasl.jaas.config":
                 "org.apache.kafka.common.security.scram.ScramLoginModule required;"})


def test_plain_with_a_broken_jaas_config_names_the_config() -> None:
    with pytest.raises(ConfigError, match=r"^listener\.name\.client\.plain\.sasl\.jaas\.config: "
                                          ".* is not terminated by ';'"):
        build(**{"sasl.enabled.mechanisms": "PLAIN",
                 f"{PREFIX}plain.sasl.jaas.config": JAAS.rstrip(";")})


def test_a_custom_callback_handler_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.server\.callback\.handler\.class for PLAIN"):
        build(**{"sasl.enabled.mechanisms": "PLAIN", f"{PREFIX}plain.sasl.jaas.config": JAAS,
                 f"{PREFIX}plain.sasl.server.callback.handler.class": "com.example.Handler"})


@pytest.mark.parametrize("key", [f"{PREFIX}plain.sasl.jaas.config", f"{PREFIX}sasl.jaas.config"])
def test_plain_users_come_from_the_listeners_jaas_config(key: str) -> None:
    sec = build(**{"sasl.enabled.mechanisms": "PLAIN", key: JAAS})
    assert sec.ssl_context is None
    assert list(sec.sasl.mechanisms) == ["PLAIN"]
    session = sec.new_session("10.0.0.1:1")
    assert not session.authenticated
    assert session.handshake("PLAIN", 1) == (True, ["PLAIN"])
    session.authenticate(b"\0bob\0bob-secret", 2)
    assert session.principal == KafkaPrincipal.user("bob")


def test_the_mechanism_prefixed_jaas_config_wins() -> None:
    sec = build(**{"sasl.enabled.mechanisms": "PLAIN",
                   f"{PREFIX}sasl.jaas.config": f'{PLAIN_MODULE} required user_x="x";',
                   f"{PREFIX}plain.sasl.jaas.config": JAAS})
    sec.sasl.mechanisms["PLAIN"]().evaluate(b"\0alice\0alice-secret")


def test_scram_mechanisms_use_the_credential_lookup() -> None:
    asked: list[tuple[str, str]] = []

    def lookup(user: str, mechanism: str) -> None:
        asked.append((user, mechanism))

    cfg = config(**{"sasl.enabled.mechanisms": "SCRAM-SHA-256, SCRAM-SHA-512"})
    sec = build_listener_security(cfg, SASL, lookup)
    assert list(sec.sasl.mechanisms) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    exchange = sec.sasl.mechanisms["SCRAM-SHA-512"]()
    assert isinstance(exchange, ScramExchange) and exchange.mechanism == "SCRAM-SHA-512"
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        exchange.evaluate(b"n,,n=carol,r=abcdefgh")
    assert asked == [("carol", "SCRAM-SHA-512")]


def test_connections_max_reauth_ms_per_mechanism() -> None:
    sec = build(**{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                   f"{PREFIX}plain.sasl.jaas.config": JAAS,
                   "connections.max.reauth.ms": "60000",
                   f"{PREFIX}scram-sha-256.connections.max.reauth.ms": "5000"})
    assert dict(sec.sasl.max_reauth_ms) == {"PLAIN": 60000, "SCRAM-SHA-256": 5000,
                                            "SCRAM-SHA-512": 60000}
    assert dict(build(**{"sasl.enabled.mechanisms": "SCRAM-SHA-256"}).sasl.max_reauth_ms) == {
        "SCRAM-SHA-256": 0}


def test_max_receive_size_comes_from_the_listener() -> None:
    sec = build(**{"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                   f"{PREFIX}sasl.server.max.receive.size": "4096"})
    assert sec.sasl.max_receive_size == 4096
    assert sec.new_session("p").max_receive_size == 4096


# -- TLS ----------------------------------------------------------------------------------------


CERTS_PY = Path(__file__).resolve().parents[2] / "integration" / "security" / "certs.py"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    name = "strom_unit_test_certs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CERTS_PY)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    ca = sys.modules[name].CertificateAuthority(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("server", server=True, O="Strom Tests", CN="localhost"), ca.issue(
        "client", O="Strom Tests", OU="ServiceUsers", CN="alice")


class FakeSslObject:
    """What a session reads of a TLS connection: the client's certificate."""

    def __init__(self, cert_pem: bytes | None) -> None:
        self.der = (load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
                    if cert_pem else None)

    def getpeercert(self, binary_form: bool = False) -> bytes | None:
        assert binary_form
        return self.der


def tls_overrides(pki: Any, prefix: str = "listener.name.mtls.", **more: str) -> dict[str, str]:
    _, server, _ = pki
    return {f"{prefix}ssl.keystore.type": "PEM",
            f"{prefix}ssl.keystore.location": str(server.both), **more}


def test_tls_listener_maps_the_client_certificate(pki: Any) -> None:
    _, _, client = pki
    sec = build(TLS, **tls_overrides(pki, **{
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT"}))
    assert sec.ssl_context is not None and sec.sasl is None
    session = sec.new_session("10.0.0.1:1", FakeSslObject(client.cert.read_bytes()))
    assert session.authenticated
    assert session.principal == KafkaPrincipal.user("alice")
    # no client certificate: User:ANONYMOUS, as Kafka
    assert sec.new_session("10.0.0.1:2", FakeSslObject(None)).principal == ANONYMOUS


def test_tls_listener_default_mapping_keeps_the_distinguished_name(pki: Any) -> None:
    _, _, client = pki
    sec = build(TLS, **tls_overrides(pki))
    session = sec.new_session("p", FakeSslObject(client.cert.read_bytes()))
    assert str(session.principal) == "User:CN=alice,OU=ServiceUsers,O=Strom Tests"


def test_no_matching_mapping_rule_fails_the_connection(pki: Any) -> None:
    _, _, client = pki
    sec = build(TLS, **tls_overrides(pki, **{
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=Admins.*$/$1/"}))
    with pytest.raises(AuthenticationError, match=re.escape(
            "Failed to map name for 'CN=alice,OU=ServiceUsers,O=Strom Tests' based on SSL "
            "principal mapping rules.")):
        sec.new_session("p", FakeSslObject(client.cert.read_bytes()))


def test_sasl_ssl_sessions_authenticate_with_sasl_not_the_certificate(pki: Any) -> None:
    _, _, client = pki
    sec = build(SASL_SSL, **tls_overrides(pki, "listener.name.secure.", **{
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.secure.plain.sasl.jaas.config": JAAS}))
    assert sec.ssl_context is not None and sec.sasl is not None
    session = sec.new_session("p", FakeSslObject(client.cert.read_bytes()))
    assert session.principal == ANONYMOUS
    assert not session.authenticated


def test_an_invalid_mapping_rule_is_a_config_error(pki: Any) -> None:
    with pytest.raises(ConfigError, match=r"^listener MTLS: ssl\.principal\.mapping\.rules: "
                                          "Invalid rule: "):
        build(TLS, **tls_overrides(pki, **{"ssl.principal.mapping.rules": "RULE:x/y"}))


def test_a_mapping_rule_with_an_invalid_regex_is_a_config_error(pki: Any) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.principal\.mapping\.rules"):
        build(TLS, **tls_overrides(pki, **{"ssl.principal.mapping.rules": "RULE:^CN=(x$/$1/"}))


def test_tls_errors_name_the_listener(pki: Any) -> None:
    with pytest.raises(ConfigError, match=r"^listener MTLS: ssl\.keystore\.type=JKS is not "
                                          "supported"):
        build(TLS, **{"ssl.keystore.location": "/nonexistent.jks"})


def test_listeners_from_the_config_build(pki: Any) -> None:
    cfg = config(**{"listeners": "CLIENT://:9092,MTLS://:9094",
                    "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,MTLS:SSL",
                    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                    **tls_overrides(pki)})
    built = {lst.name: build_listener_security(cfg, lst, no_scram) for lst in listeners(cfg)}
    assert built["CLIENT"].sasl is not None and built["CLIENT"].ssl_context is None
    assert built["MTLS"].ssl_context is not None and built["MTLS"].sasl is None
