"""Security settings a real broker must not leave to chance: `ssl.cipher.suites` (global and per
listener) decides which TLS 1.2 clients get through, and a setting Strom would ignore to the
detriment of security stops the start-up with one line naming it."""

from __future__ import annotations

import ssl
import subprocess

import pytest

from ..broker import HOST, STROM_BIN, free_port
from ..wire import Conn

pytestmark = pytest.mark.timeout(90)

T = 30  # seconds for a process
# The test certificates are ECDSA ones (certs.py), so the ECDHE-ECDSA suites apply.
AES128 = ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256")
AES256 = ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384")


@pytest.fixture(autouse=True)
def _strom_only(peer: str | None) -> None:
    if peer:
        pytest.skip("checks Strom's own TLS settings and start-up")


def _tls12_api_versions(port: int, ca: str, openssl_suite: str) -> str:
    """A TLS 1.2 client offering one suite: the suite negotiated, once ApiVersions is answered
    over it (ssl.SSLError when the broker refuses the handshake)."""
    context = ssl.create_default_context(cafile=ca)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(openssl_suite)
    with Conn(f"{HOST}:{port}") as conn:
        conn.sock = context.wrap_socket(conn.sock, server_hostname="localhost")
        error, apis = conn.api_versions_v0()
        assert error == 0 and apis
        return conn.sock.cipher()[0]


def test_cipher_suites_decide_which_tls12_clients_connect(make_broker, certs) -> None:
    """The global list holds on the SSL listener, the listener-prefixed one on OTHER."""
    ca, _other, server, _client, _stranger = certs
    ssl_port, other_port = free_port(), free_port()
    make_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SSL://{HOST}:{ssl_port},"
                     f"OTHER://{HOST}:{other_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,OTHER:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.both),
        "ssl.key.password": "key-pass",
        "ssl.cipher.suites": AES128[0],
        "listener.name.other.ssl.cipher.suites": AES256[0],
    })
    for port, listed, other in ((ssl_port, AES128, AES256), (other_port, AES256, AES128)):
        assert _tls12_api_versions(port, str(ca.path), listed[1]) == listed[1]
        with pytest.raises(ssl.SSLError):
            _tls12_api_versions(port, str(ca.path), other[1])


def _start_refused(tmp_path, *settings: str) -> subprocess.CompletedProcess[str]:
    args = [str(STROM_BIN), "broker", "--override", f"log.dirs={tmp_path / 'data'}"]
    for setting in settings:
        args += ["--override", setting]
    # subprocess.run kills the broker if it outlives the timeout
    result = subprocess.run(args, capture_output=True, text=True, timeout=T,
                            stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert result.returncode != 0
    assert not (tmp_path / "data").exists(), "refused before touching the log directory"
    return result


def test_a_listener_principal_builder_refuses_to_start_with_one_line(tmp_path) -> None:
    result = _start_refused(
        tmp_path, f"listeners=PLAINTEXT://{HOST}:{free_port()},EXTERNAL://{HOST}:{free_port()}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "listener.name.external.principal.builder.class=com.example.CustomPrincipalBuilder")
    assert result.stderr.splitlines() == [
        "strom broker: refusing to start: listener.name.external.principal.builder.class: not "
        "implemented by Strom (Strom builds principals as Kafka's DefaultKafkaPrincipalBuilder); "
        "remove it"]


def test_a_tls13_cipher_suite_refuses_to_start_with_one_line(tmp_path, certs) -> None:
    _ca, _other, server, _client, _stranger = certs
    result = _start_refused(
        tmp_path, f"listeners=PLAINTEXT://{HOST}:{free_port()},SSL://{HOST}:{free_port()}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={server.both}",
        "ssl.key.password=key-pass",
        f"listener.name.ssl.ssl.cipher.suites={AES128[0]},TLS_AES_128_GCM_SHA256")
    [line] = result.stderr.splitlines()
    assert line.startswith("strom broker: listener SSL: Invalid value ")
    assert "TLS_AES_128_GCM_SHA256 is a TLS 1.3 suite, which Strom cannot restrict" in line
