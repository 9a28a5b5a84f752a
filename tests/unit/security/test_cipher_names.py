"""Kafka's ssl.cipher.suites names mapped to OpenSSL's; a TLS 1.3 name (which Python's ssl
cannot restrict) or an unknown one is refused by name, at config load and when a listener's TLS
context is built."""

from __future__ import annotations

import ssl

import pytest

from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.security.cipher_names import TLS12_SUITES, TLS13_SUITES, openssl_cipher_list


def test_iana_names_map_to_openssl_names() -> None:
    assert openssl_cipher_list(["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
                                "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256",
                                "TLS_RSA_WITH_AES_128_GCM_SHA256"]) == (
        "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:DHE-RSA-AES256-SHA256:"
        "AES128-GCM-SHA256")


def test_the_table_is_openssls_own() -> None:
    """Each OpenSSL name of the table is one this Python's OpenSSL knows, as the IANA name
    says (the table was made from `openssl ciphers -stdname`)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    known = {c["name"]: c for c in ctx.get_ciphers()}
    for iana, name in TLS12_SUITES.items():
        assert name in known, iana
        assert known[name]["protocol"] != "TLSv1.3"
    assert not TLS13_SUITES & set(TLS12_SUITES)
    assert all("anon" not in n and "NULL" not in n for n in TLS12_SUITES)


@pytest.mark.parametrize(("suite", "why"), [
    ("TLS_AES_128_GCM_SHA256", "is a TLS 1.3 suite, which Strom cannot restrict"),
    ("TLS_CHACHA20_POLY1305_SHA256", "is a TLS 1.3 suite"),
    ("TLS_DH_anon_WITH_AES_128_GCM_SHA256", "is not a TLS 1.2 cipher suite Strom knows"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "is not a TLS 1.2 cipher suite Strom knows"),
])
def test_tls13_and_unknown_names_are_refused_by_name(suite: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"^{suite} {why}"):
        openssl_cipher_list(["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", suite])
    with pytest.raises(ConfigError, match=f"^Invalid value .*{suite} for configuration "
                                          f"ssl.cipher.suites: {suite} {why}"):
        BrokerConfig.load(None, {"ssl.cipher.suites":
                                 f"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,{suite}"})


def test_empty_keeps_openssls_defaults() -> None:
    assert BrokerConfig.load(None, {"ssl.cipher.suites": ""}).get("ssl.cipher.suites") == []
