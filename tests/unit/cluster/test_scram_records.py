"""`strom storage format --add-scram`: Kafka's argument syntax and UserScramCredentialRecord
encoding, and the controller's loader reading it back as the user's SCRAM config."""

from __future__ import annotations

import base64

import pytest

from strom.cluster import records as rec
from strom.cluster.image import MetadataImage
from strom.cluster.scram_records import (
    ScramArgumentError,
    parse_add_scram,
    parse_user_scram_credential_record,
    user_scram_credential_record,
)
from strom.controller.loader import decode_value
from strom.security.sasl.mechanisms import credential_from_password, salted_password
from strom.security.scram_store import credentials_of

SALT = base64.b64encode(b"sixteen byte slt").decode()


def test_password_and_salted_password_give_the_same_credential() -> None:
    by_password = parse_add_scram(
        f'SCRAM-SHA-512=[name=alice,password="alice-secret",salt="{SALT}",iterations=8192]')
    salted = base64.b64encode(salted_password("SCRAM-SHA-512", "alice-secret",
                                              b"sixteen byte slt", 8192)).decode()
    by_salted = parse_add_scram(
        f"SCRAM-SHA-512=[name=alice,salt={SALT},saltedpassword={salted},iterations=8192]")
    assert by_password == by_salted
    assert by_password.credential == credential_from_password(
        "SCRAM-SHA-512", "alice-secret", 8192, b"sixteen byte slt")


def test_defaults_a_random_salt_and_4096_iterations() -> None:
    a = parse_add_scram("SCRAM-SHA-256=[name=a,password=p]")
    b = parse_add_scram("SCRAM-SHA-256=[name=a,password=p]")
    assert a.credential.iterations == 4096 and a.credential.salt != b.credential.salt


def test_the_record_round_trips_in_kafkas_encoding() -> None:
    user = parse_add_scram(f"SCRAM-SHA-256=[name=bob,password=x,salt={SALT}]")
    value = user_scram_credential_record(user)
    assert value[:3] == b"\x01\x0b\x00"  # frame version 1, api key 11, version 0
    assert parse_user_scram_credential_record(value) == user
    with pytest.raises(ValueError):
        parse_user_scram_credential_record(value + b"\x00")
    with pytest.raises(ValueError):
        parse_user_scram_credential_record(value[:-6])


def test_the_loader_reads_it_as_the_users_scram_config() -> None:
    user = parse_add_scram(f"SCRAM-SHA-256=[name=bob,password=x,salt={SALT}]")
    record, feature = decode_value(user_scram_credential_record(user))
    assert feature is None and record is not None
    image = MetadataImage(cluster_id="c")
    rec.apply(image, record)
    assert credentials_of(image.user_configs, "bob") == {"SCRAM-SHA-256": user.credential}


@pytest.mark.parametrize(("argument", "message"), [
    ("SCRAM-SHA-256", "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-256'"),
    ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
    ("SCRAM-SHA-256=name=a]", "Expected configuration string to start with ["),
    ("SCRAM-SHA-256=[name=a", "Expected configuration string to end with ]"),
    ("SCRAM-SHA-256=[name]", "No equals sign found in SCRAM component: name"),
    ("SCRAM-SHA-256=[password=b]", "You must supply 'name' to add-scram"),
    ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword'"),
    ("SCRAM-SHA-256=[name=a,saltedpassword=AAAA]", "You must supply 'salt' with 'saltedpassword'"),
    ("SCRAM-SHA-256=[name=a,password=b,salt=%%%]", "Failed to decode given salt: %%%"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=x]", "Failed to parse iterations count"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=20000]", "must be <= 16384"),
    ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "Unknown SCRAM configurations: colour"),
])
def test_bad_arguments_get_kafkas_messages(argument: str, message: str) -> None:
    with pytest.raises(ScramArgumentError, match=None) as caught:
        parse_add_scram(argument)
    assert message in str(caught.value)
