"""SCRAM credentials kept as user configs (Kafka's /config/users text form)."""

from __future__ import annotations

import base64
import logging

import pytest

from strom.security.sasl.mechanisms import ScramCredential, credential_from_password
from strom.security.scram_store import (
    credential_from_config,
    credential_to_config,
    credentials_of,
    lookup_in,
)

CRED = ScramCredential(b"salt-bytes", b"stored" * 6, b"server" * 6, 4096)


def test_config_text_is_kafkas_form() -> None:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    assert credential_to_config(CRED) == (
        f"salt={b64(CRED.salt)},stored_key={b64(CRED.stored_key)},"
        f"server_key={b64(CRED.server_key)},iterations=4096")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip(mechanism: str) -> None:
    cred = credential_from_password(mechanism, "pw", 8192)
    assert credential_from_config(credential_to_config(cred)) == cred


@pytest.mark.parametrize("text", [
    "salt=AAAA,stored_key=AAAA,server_key=AAAA",  # no iterations
    "salt=AAAA,stored_key=AAAA,iterations=4096",  # no server_key
    "salt=!!!!,stored_key=AAAA,server_key=AAAA,iterations=4096",  # not base64
    "",
])
def test_malformed_config_text(text: str) -> None:
    with pytest.raises(ValueError, match="malformed SCRAM credential"):
        credential_from_config(text)


def test_credentials_of_keeps_scram_mechanisms_only_and_skips_malformed(caplog) -> None:
    configs = {"carol": {"SCRAM-SHA-256": credential_to_config(CRED),
                         "SCRAM-SHA-512": "garbage",
                         "producer_byte_rate": "1024"}}
    with caplog.at_level(logging.ERROR, logger="strom.security"):
        assert credentials_of(configs, "carol") == {"SCRAM-SHA-256": CRED}
    assert "ignoring the SCRAM-SHA-512 credential of user carol" in caplog.text
    assert credentials_of(configs, "nobody") == {}


def test_lookup_reads_the_current_configs() -> None:
    configs: dict[str, dict[str, str]] = {}
    lookup = lookup_in(lambda: configs)
    assert lookup("carol", "SCRAM-SHA-256") is None
    configs["carol"] = {"SCRAM-SHA-256": credential_to_config(CRED)}
    assert lookup("carol", "SCRAM-SHA-256") == CRED
    assert lookup("carol", "SCRAM-SHA-512") is None
