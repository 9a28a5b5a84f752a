"""TLS contexts from Kafka's ssl.* configs: PEM and PKCS12 stores, client authentication,
TLS versions, and errors that name the config at fault."""

from __future__ import annotations

import importlib.util
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509 import load_pem_x509_certificate

from strom.config.defs import ConfigError
from strom.security.tls import (
    TlsConfigError,
    client_context,
    loopback_tls,
    peer_distinguished_name,
    server_context,
)

CERTS_PY = Path(__file__).resolve().parents[2] / "integration" / "security" / "certs.py"


def _certs_module() -> ModuleType:
    name = "strom_unit_test_certs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CERTS_PY)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@dataclass
class Pki:
    ca: Any  # certs.CertificateAuthority
    server: Any  # certs.Issued
    encrypted: Any  # certs.Issued, key encrypted with "key-pass"
    client: Any  # certs.Issued: CN=alice,OU=ServiceUsers,O=Strom Tests
    pkcs12: Path  # the server's key and chain, store password "store-pass"
    dir: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    certs = _certs_module()
    d = tmp_path_factory.mktemp("pki")
    ca = certs.CertificateAuthority(d)
    server = ca.issue("server", server=True, O="Strom Tests", CN="localhost")
    encrypted = ca.issue("encrypted", server=True, password="key-pass", O="Strom Tests",
                         CN="localhost")
    client = ca.issue("client", O="Strom Tests", OU="ServiceUsers", CN="alice")
    key = serialization.load_pem_private_key(server.key.read_bytes(), None)
    cert = load_pem_x509_certificate(server.cert.read_bytes())
    p12 = d / "server.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", key, cert, [ca.cert],
        serialization.BestAvailableEncryption(b"store-pass")))
    return Pki(ca, server, encrypted, client, p12, d)


def getter(**configs: Any) -> Callable[[str], Any]:
    """Config values by their Kafka names, given with '_' for '.' (None when not set)."""
    values = {k.replace("_", "."): v for k, v in configs.items()}
    return values.get


def pem_keystore(pki: Pki, **more: Any) -> Callable[[str], Any]:
    return getter(ssl_keystore_type="PEM", ssl_keystore_location=str(pki.server.both), **more)


def tls_handshake(server_ctx: ssl.SSLContext,
                  client_ctx: ssl.SSLContext) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """A TLS handshake in memory (no sockets); raises the first side's SSLError."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):
        done = True
        for side, out, peer_in in ((client, c_out, s_in), (server, s_out, c_in)):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                done = False
            data = out.read()
            if data:
                peer_in.write(data)
        if done:
            return server, client
    raise AssertionError("the handshake did not finish")


def trusting_client(pki: Pki, cert: Any = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.path))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


# -- key stores -------------------------------------------------------------------------------


def test_pem_keystore_file(pki: Pki) -> None:
    ctx = server_context(pem_keystore(pki))
    assert ctx.verify_mode is ssl.CERT_NONE
    server, client = tls_handshake(ctx, trusting_client(pki))
    assert client.version() in ("TLSv1.2", "TLSv1.3")
    assert peer_distinguished_name(server) is None  # no client certificate


def test_pem_keystore_type_is_case_insensitive(pki: Pki) -> None:
    server_context(getter(ssl_keystore_type="pem",
                          ssl_keystore_location=str(pki.server.both)))


def test_encrypted_key_with_ssl_key_password(pki: Pki) -> None:
    ctx = server_context(getter(ssl_keystore_type="PEM",
                                ssl_keystore_location=str(pki.encrypted.both),
                                ssl_key_password="key-pass"))
    tls_handshake(ctx, trusting_client(pki))


def test_wrong_key_password(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"^ssl\.keystore\.location: cannot load the "
                                             r"private key .*ssl\.key\.password"):
        server_context(getter(ssl_keystore_type="PEM",
                              ssl_keystore_location=str(pki.encrypted.both),
                              ssl_key_password="not-the-pass"))


def test_inline_pem_key_and_chain(pki: Pki) -> None:
    ctx = server_context(getter(ssl_keystore_type="PEM",
                                ssl_keystore_key=pki.server.key.read_text(),
                                ssl_keystore_certificate_chain=pki.server.cert.read_text()))
    tls_handshake(ctx, trusting_client(pki))


def test_inline_encrypted_key_with_ssl_key_password(pki: Pki) -> None:
    get = getter(ssl_keystore_type="PEM", ssl_keystore_key=pki.encrypted.key.read_text(),
                 ssl_keystore_certificate_chain=pki.encrypted.cert.read_text())
    with pytest.raises(TlsConfigError, match=r"^ssl\.keystore\.key: cannot load"):
        server_context(lambda name: "wrong" if name == "ssl.key.password" else get(name))
    server_context(lambda name: "key-pass" if name == "ssl.key.password" else get(name))


def test_inline_key_needs_the_pem_type_and_a_chain(pki: Pki) -> None:
    key = pki.server.key.read_text()
    with pytest.raises(TlsConfigError, match=r"ssl\.keystore\.key needs ssl\.keystore\.type=PEM"):
        server_context(getter(ssl_keystore_key=key,
                              ssl_keystore_certificate_chain=pki.server.cert.read_text()))
    with pytest.raises(TlsConfigError, match=r"ssl\.keystore\.certificate\.chain"):
        server_context(getter(ssl_keystore_type="PEM", ssl_keystore_key=key))


def test_inline_key_and_location_are_exclusive(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"either ssl\.keystore\.location or ssl\.keystore\.key"):
        server_context(getter(ssl_keystore_type="PEM", ssl_keystore_key=pki.server.key.read_text(),
                              ssl_keystore_certificate_chain=pki.server.cert.read_text(),
                              ssl_keystore_location=str(pki.server.both)))


def test_pkcs12_keystore(pki: Pki) -> None:
    ctx = server_context(getter(ssl_keystore_type="PKCS12",
                                ssl_keystore_location=str(pki.pkcs12),
                                ssl_keystore_password="store-pass"))
    tls_handshake(ctx, trusting_client(pki))


def test_pkcs12_keystore_with_a_wrong_password(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"^ssl\.keystore\.location: cannot read the "
                                             "PKCS12 store"):
        server_context(getter(ssl_keystore_type="PKCS12", ssl_keystore_location=str(pki.pkcs12),
                              ssl_keystore_password="nope"))


@pytest.mark.parametrize("kind", ["JKS", None])  # Kafka's default type is JKS
def test_jks_keystores_are_refused(pki: Pki, kind: str | None) -> None:
    with pytest.raises(TlsConfigError, match=r"^ssl\.keystore\.type=JKS is not supported by "
                                             "Strom: use PEM or PKCS12"):
        server_context(getter(ssl_keystore_type=kind, ssl_keystore_location=str(pki.server.both)))


def test_a_missing_keystore_file(pki: Pki) -> None:
    missing = pki.dir / "missing.pem"
    with pytest.raises(TlsConfigError,
                       match=rf"^ssl\.keystore\.location: {missing} does not exist$"):
        server_context(getter(ssl_keystore_type="PEM", ssl_keystore_location=str(missing)))
    with pytest.raises(TlsConfigError, match=r"^ssl\.keystore\.location=.*missing\.pem"):
        server_context(getter(ssl_keystore_type="PKCS12", ssl_keystore_location=str(missing)))


def test_no_keystore_at_all() -> None:
    with pytest.raises(TlsConfigError, match=r"a TLS listener needs ssl\.keystore\.location"):
        server_context(getter(ssl_keystore_type="PEM"))


def test_a_keystore_without_a_key(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"^ssl\.keystore\.location: cannot load"):
        server_context(getter(ssl_keystore_type="PEM", ssl_keystore_location=str(pki.ca.path)))


def test_tls_config_error_is_a_config_error() -> None:
    assert issubclass(TlsConfigError, ConfigError)


# -- client authentication ----------------------------------------------------------------------


@pytest.mark.parametrize(("auth", "mode"), [
    (None, ssl.CERT_NONE), ("none", ssl.CERT_NONE), ("requested", ssl.CERT_OPTIONAL),
    ("required", ssl.CERT_REQUIRED), ("REQUIRED", ssl.CERT_REQUIRED)])
def test_verify_mode_follows_ssl_client_auth(pki: Pki, auth: str | None, mode: int) -> None:
    ctx = server_context(pem_keystore(pki, ssl_client_auth=auth, ssl_truststore_type="PEM",
                                      ssl_truststore_location=str(pki.ca.path)))
    assert ctx.verify_mode == mode


@pytest.mark.parametrize("auth", ["required", "requested"])
def test_client_auth_needs_a_truststore(pki: Pki, auth: str) -> None:
    with pytest.raises(TlsConfigError, match=rf"^ssl\.client\.auth={auth} needs trusted CA "
                                             r"certificates \(ssl\.truststore\.location"):
        server_context(pem_keystore(pki, ssl_client_auth=auth))


def test_required_client_auth_checks_the_client_certificate(pki: Pki) -> None:
    ctx = server_context(pem_keystore(pki, ssl_client_auth="required",
                                      ssl_truststore_type="PEM",
                                      ssl_truststore_location=str(pki.ca.path)))
    server, _ = tls_handshake(ctx, trusting_client(pki, pki.client))
    assert peer_distinguished_name(server) == "CN=alice,OU=ServiceUsers,O=Strom Tests"
    with pytest.raises(ssl.SSLError):
        server, client = tls_handshake(ctx, trusting_client(pki))  # no client certificate
        client.write(b"x")  # TLS 1.3: the client learns of the refusal after its handshake
        server.read()


def test_inline_truststore_certificates(pki: Pki) -> None:
    ctx = server_context(pem_keystore(pki, ssl_client_auth="requested",
                                      ssl_truststore_certificates=pki.ca.path.read_text()))
    server, _ = tls_handshake(ctx, trusting_client(pki, pki.client))
    assert peer_distinguished_name(server) == "CN=alice,OU=ServiceUsers,O=Strom Tests"
    server, _ = tls_handshake(ctx, trusting_client(pki))  # requested: a client may send none
    assert peer_distinguished_name(server) is None


def test_pkcs12_truststore(pki: Pki, tmp_path: Path) -> None:
    store = tmp_path / "trust.p12"
    store.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [pki.ca.cert], serialization.BestAvailableEncryption(b"tp")))
    ctx = server_context(pem_keystore(pki, ssl_client_auth="required",
                                      ssl_truststore_type="PKCS12",
                                      ssl_truststore_location=str(store),
                                      ssl_truststore_password="tp"))
    server, _ = tls_handshake(ctx, trusting_client(pki, pki.client))
    assert peer_distinguished_name(server) is not None


def test_jks_truststore_is_refused(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"^ssl\.truststore\.type=JKS is not supported"):
        server_context(pem_keystore(pki, ssl_client_auth="required",
                                    ssl_truststore_location=str(pki.ca.path)))


def test_a_missing_truststore_file_is_a_tls_config_error(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match="no such file"):
        server_context(pem_keystore(pki, ssl_truststore_type="PEM",
                                    ssl_truststore_location=str(pki.dir / "nope.pem")))


def test_a_missing_truststore_file_names_the_config(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"ssl\.truststore\.location"):
        server_context(pem_keystore(pki, ssl_truststore_type="PEM",
                                    ssl_truststore_location=str(pki.dir / "nope.pem")))


# -- TLS versions -------------------------------------------------------------------------------


@pytest.mark.parametrize(("enabled", "lowest", "highest"), [
    (None, ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3),
    (["TLSv1.2", "TLSv1.3"], ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3),
    (["TLSv1.3", "TLSv1.2"], ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3),
    (["TLSv1.3"], ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3),
    (["TLSv1.2"], ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2),
])
def test_versions_follow_ssl_enabled_protocols(pki: Pki, enabled: list[str] | None,
                                               lowest: ssl.TLSVersion,
                                               highest: ssl.TLSVersion) -> None:
    ctx = server_context(pem_keystore(pki, ssl_enabled_protocols=enabled))
    assert (ctx.minimum_version, ctx.maximum_version) == (lowest, highest)


def test_a_tls12_only_server_talks_tls12(pki: Pki) -> None:
    ctx = server_context(pem_keystore(pki, ssl_enabled_protocols=["TLSv1.2"]))
    _, client = tls_handshake(ctx, trusting_client(pki))
    assert client.version() == "TLSv1.2"


# -- cipher suites ------------------------------------------------------------------------------


def tls12_client(pki: Pki, ciphers: str) -> ssl.SSLContext:
    ctx = trusting_client(pki)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
    return ctx


def test_cipher_suites_restrict_tls12(pki: Pki) -> None:
    """The test certificates are ECDSA ones: of the two ECDHE-ECDSA GCM suites the client
    offers, the server takes the one listed; offered only the other, the handshake fails."""
    ctx = server_context(pem_keystore(
        pki, ssl_cipher_suites=["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]))
    _, client = tls_handshake(ctx, tls12_client(
        pki, "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256"))
    assert client.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    with pytest.raises(ssl.SSLError):
        tls_handshake(ctx, tls12_client(pki, "ECDHE-ECDSA-AES256-GCM-SHA384"))
    _, tls13 = tls_handshake(ctx, trusting_client(pki))  # TLS 1.3 keeps OpenSSL's suites
    assert tls13.version() == "TLSv1.3"


def test_a_tls13_cipher_suite_is_refused_by_name(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match=r"^ssl\.cipher\.suites: TLS_AES_256_GCM_SHA384 is "
                                             r"a TLS 1\.3 suite"):
        server_context(pem_keystore(pki, ssl_cipher_suites=["TLS_AES_256_GCM_SHA384"]))


# -- the broker's client side ------------------------------------------------------------------


def test_client_context_trusts_the_truststore_and_checks_host_names(pki: Pki) -> None:
    ctx = client_context(getter(ssl_truststore_type="PEM",
                                ssl_truststore_location=str(pki.ca.path),
                                ssl_endpoint_identification_algorithm="https"))
    assert ctx.check_hostname
    assert ctx.verify_mode is ssl.CERT_REQUIRED
    tls_handshake(server_context(pem_keystore(pki)), ctx)
    no_check = client_context(getter(ssl_truststore_type="PEM",
                                     ssl_truststore_location=str(pki.ca.path),
                                     ssl_endpoint_identification_algorithm=""))
    assert not no_check.check_hostname


# -- a process of the broker reaching its own TLS listener --------------------------------------


@pytest.mark.parametrize("stores", ["pem+truststore", "encrypted pem", "pkcs12"])
def test_the_loopback_client_trusts_the_listener_and_presents_its_certificate(
        pki: Pki, stores: str) -> None:
    trust = {"ssl_truststore_type": "PEM", "ssl_truststore_location": str(pki.ca.path)}
    get = {"pem+truststore": pem_keystore(pki, ssl_client_auth="required", **trust),
           "encrypted pem": getter(ssl_keystore_type="PEM",
                                   ssl_keystore_location=str(pki.encrypted.both),
                                   ssl_key_password="key-pass", ssl_client_auth="required",
                                   **trust),
           "pkcs12": getter(ssl_keystore_type="PKCS12", ssl_keystore_location=str(pki.pkcs12),
                            ssl_keystore_password="store-pass", ssl_client_auth="required",
                            **trust)}[stores]
    loopback = loopback_tls(get)
    server, _client = tls_handshake(server_context(get), loopback.context())
    assert peer_distinguished_name(server) == "CN=localhost,O=Strom Tests"
    settings = loopback.librdkafka()
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert "ENCRYPTED" not in settings["ssl.key.pem"]  # librdkafka gets no password to ask


def test_without_a_truststore_the_loopback_client_trusts_the_keystores_certificates(
        pki: Pki) -> None:
    """A PKCS12 store with its chain (the CA's certificate) needs no trust store."""
    get = getter(ssl_keystore_type="PKCS12", ssl_keystore_location=str(pki.pkcs12),
                 ssl_keystore_password="store-pass")
    tls_handshake(server_context(get), loopback_tls(get).context())
